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

/// A port with `count` free ports on 127.0.0.1 from it, each bound once and
/// let go. They are picked below the kernel's ephemeral range, so no
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
        let listeners: Vec<_> = (0..count)
            .map_while(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if listeners.len() == usize::from(count) {
            return base;
        }
    }
    panic!("no {count} free ports in a row below {end}");
}

/// A port free on 127.0.0.1 (see [`free_ports`]).
pub fn free_port() -> u16 {
    free_ports(1)
}
