//! The watchdog: pings keep a worker, silence restarts it with SIGABRT, and
//! another process cannot feed it through `MAINPID=`.

use super::*;

#[test]
fn the_watchdog_keeps_a_pinging_worker_and_restarts_a_silent_one_with_sigabrt() {
    if !crate::common::has_systemd_notify() {
        println!("skipped: systemd-notify is not installed (apt-get install systemd)");
        return;
    }
    let yaml = r#"
apps:
  pinger:
    command: for i in 1 2 3 4 5 6; do systemd-notify WATCHDOG=1; echo pinged; sleep 0.25; done; echo silent; exec sleep 1000
    shell: true
    ready: none
    watchdog: 1s
    backoff: {initial: 10ms}
"#;
    let mut s = Supervised::start(yaml);
    let first = s.wait_event("spawned", "pinger")["pid"].clone();
    s.wait_line("silent");
    // Kept alive for the 1.5 s it pinged, past its 1 s watchdog.
    assert_eq!(s.count("watchdog_missed", "pinger"), 0);
    let missed = s.wait_event("watchdog_missed", "pinger");
    assert_eq!(missed["pid"], first);
    assert_eq!(missed["signal"], "SIGABRT");
    let last_ping = s
        .events
        .iter()
        .rev()
        .filter(|e| e["line"] == "pinged")
        .map(timestamp_ms)
        .find(|at| *at <= timestamp_ms(&missed))
        .expect("pinged lines");
    let restarted = s.wait_for("the restart", |e| {
        e["event"] == "spawned" && e["pid"] != first
    });
    let after = timestamp_ms(&restarted) - last_ping;
    assert!(
        after <= 1100.0 + 50.0,
        "restarted {after} ms after the last ping (watchdog 1 s + 100 ms; the ping is logged just after it is sent)"
    );
    let stopped = s.wait_for("the stop", |e| e["event"] == "stopped" && e["pid"] == first);
    assert!(stopped["took_ms"].as_u64().unwrap() < 1000, "{stopped}");
}

/// The abstract notify socket process `pid` was given (`NOTIFY_SOCKET=@…`).
fn notify_socket_of(pid: i32) -> std::os::unix::net::SocketAddr {
    use std::os::linux::net::SocketAddrExt;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let name = environ
        .split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"NOTIFY_SOCKET=@"))
        .expect("the worker has a NOTIFY_SOCKET");
    std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap()
}

#[test]
fn a_watchdog_cannot_be_fed_through_mainpid_by_another_process() {
    let yaml = r#"
apps:
  silent:
    command: sleep 1000
    ready: none
    watchdog: 1s
"#;
    let mut s = Supervised::start(yaml);
    let pid = s.wait_event("spawned", "silent")["pid"].as_i64().unwrap() as i32;
    let ready = s.wait_event("ready", "silent");
    let socket = notify_socket_of(pid);
    let outsider = std::os::unix::net::UnixDatagram::unbound().unwrap();
    let started = Instant::now();
    // Pings that name the worker, from outside its group (not its own),
    // every 100 ms until the watchdog is said missed.
    let missed = loop {
        let ping = format!("MAINPID={pid}\nWATCHDOG=1");
        let _ = outsider.send_to_addr(ping.as_bytes(), &socket);
        if let Some(missed) = s.next_within(Duration::from_millis(100), |e| {
            e["event"] == "watchdog_missed" && e["app"] == "silent"
        }) {
            break missed;
        }
        assert!(started.elapsed() < WAIT, "no watchdog_missed\n{}", s.dump());
    };
    assert_eq!(missed["pid"], pid);
    assert_eq!(missed["triggered"], false, "{missed}");
    // Missed at its deadline, 1 s after ready (+1 s), though pinged all along.
    let after_ready = timestamp_ms(&missed) - timestamp_ms(&ready);
    assert!(
        (1000.0..2000.0).contains(&after_ready),
        "missed {after_ready} ms after ready: the silent worker was kept alive by another process's pings"
    );
}
