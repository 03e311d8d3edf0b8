//! What the host offers a test: root, `systemd-notify`, and free ports that
//! nothing else takes meanwhile.

use super::*;

/// Whether `systemd-notify` is installed (`.ci/run` installs it).
pub fn has_systemd_notify() -> bool {
    Command::new("systemd-notify")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Tests marked `#[ignore = "needs root"]` run with `--ignored` (`.ci/run`
/// does when it is root); run without root they fail, they do not pass.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root: run it as root (cargo test -- --ignored)"
    );
}

/// The first port below which nothing picks ports for itself: the kernel
/// takes the local port of every outgoing connection and of every bind to
/// port 0 from `ip_local_port_range` (32768 and up by default).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The lowest port [`free_ports`] hands out (above the usual services).
const FIRST_TEST_PORT: u16 = 20_000;

/// A port with `count` free ports from it, on every address, each bound
/// once and let go. They are picked below the kernel's ephemeral range, so no
/// connection another test makes meanwhile, and no bind to port 0, can take
/// one between this and the bind that needs it; randomly, so the test
/// threads running beside this one do not pick the same.
pub fn free_ports(count: u16) -> u16 {
    use std::hash::{BuildHasher, RandomState};
    let end = ephemeral_start().max(FIRST_TEST_PORT + 1_000);
    let span = u64::from(end - FIRST_TEST_PORT - count);
    for attempt in 0..1_000u64 {
        let random = RandomState::new().hash_one((std::process::id(), attempt));
        let base = FIRST_TEST_PORT + (random % span) as u16;
        // Without SO_REUSEADDR (which std's TcpListener sets), on both
        // wildcards: no socket on any address holds it, not even an earlier
        // test's connection in TIME_WAIT, which a plain bind of the program
        // under test is refused for.
        let free =
            |port| plain_bind_takes(libc::AF_INET, port) && plain_bind_takes(libc::AF_INET6, port);
        if (0..count).all(|i| free(base + i)) {
            return base;
        }
    }
    panic!("no {count} free ports in a row below {end}");
}

/// Whether a socket of `family` without `SO_REUSEADDR` can bind the
/// wildcard address at `port` (closed at once).
fn plain_bind_takes(family: libc::c_int, port: u16) -> bool {
    // SAFETY: a socket of our own, bound to a zeroed sockaddr of its family
    // with the port set, then closed.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let bound = if family == libc::AF_INET6 {
            let mut address: libc::sockaddr_in6 = std::mem::zeroed();
            address.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            address.sin6_port = port.to_be();
            let size = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            libc::bind(fd, (&raw const address).cast(), size)
        } else {
            let mut address: libc::sockaddr_in = std::mem::zeroed();
            address.sin_family = libc::AF_INET as libc::sa_family_t;
            address.sin_port = port.to_be();
            let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            libc::bind(fd, (&raw const address).cast(), size)
        };
        libc::close(fd);
        bound == 0
    }
}

/// A port free on every address (see [`free_ports`]).
pub fn free_port() -> u16 {
    free_ports(1)
}
