//! Cluster mode: readiness by notify, rolling replacement within its bounds,
//! a halted rollout, and reloads that lose no request.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

fn hello_server() -> String {
    format!("{}/examples/hello/server.py", env!("CARGO_MANIFEST_DIR"))
}

fn save(dir: &Path, text: &str) {
    let temp = dir.join(".ecosystem.yaml.tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, dir.join("ecosystem.yaml")).unwrap();
}

fn notify_app(extra: &str) -> String {
    format!(
        r#"apps:
  notified:
    shell: true
    command: echo waiting; sleep 0.5; echo notifying $(date +%s%N); systemd-notify --ready --status="warmed up"; echo notified; exec sleep 1000
    ready: notify
{extra}"#
    )
}

#[test]
fn systemd_notify_from_a_shell_script_marks_the_worker_ready() {
    if !has_systemd_notify() {
        println!("skipped: systemd-notify is not installed (apt-get install systemd)");
        return;
    }
    let mut s = Supervised::start(&notify_app(""));
    let ready = s.wait_event("ready", "notified");
    assert_eq!(ready["via"], "notify");
    // Ready once the script notified, not before: the script says when it
    // is about to (the same clock as the log's). The `spawned` event is no
    // bound: it is logged after the process started, later under load.
    let notifying = s.wait_for("the script's time", |e| {
        e["event"] == "output"
            && e["line"]
                .as_str()
                .is_some_and(|l| l.starts_with("notifying "))
    });
    let notified_at = notifying["line"].as_str().unwrap()["notifying ".len()..]
        .parse::<f64>()
        .expect("nanoseconds")
        / 1e6;
    let after = timestamp_ms(&ready) - notified_at;
    assert!(
        after >= 0.0,
        "ready {after}ms after the script notified: before it"
    );
    assert!(after < 1000.0, "ready {after}ms after the script notified");
}

#[test]
#[ignore = "needs root"]
fn systemd_notify_works_for_a_worker_running_as_another_user() {
    require_root();
    assert!(
        has_systemd_notify(),
        "systemd-notify is needed (apt-get install systemd)"
    );
    let mut s = Supervised::start_with(&notify_app("    user: nobody\n    cwd: /\n"), &[], |_| {});
    let ready = s.wait_event("ready", "notified");
    assert_eq!(ready["via"], "notify");
}

#[test]
fn a_worker_that_never_notifies_is_a_failed_start_after_ready_timeout() {
    let mut s = Supervised::start(
        r#"apps:
  silent:
    command: [sleep, "1000"]
    ready: notify
    ready_timeout: 1s
    backoff: {initial: 5s}
"#,
    );
    let spawned = s.wait_event("spawned", "silent");
    let stopping = s.wait_event("stopping", "silent");
    assert_eq!(stopping["reason"], "not ready in time");
    let decided_after = stopping["uptime_ms"].as_u64().unwrap();
    assert!(
        decided_after >= 1000,
        "stopped {decided_after}ms after the start, before ready_timeout"
    );
    let waited = timestamp_ms(&stopping) - timestamp_ms(&spawned);
    assert!(waited < 4000.0, "{waited}ms");
    let stopped = s.wait_event("stopped", "silent");
    assert_eq!(
        stopped["decision"], "restart",
        "counted and backed off: {stopped}"
    );
    assert_eq!(s.count("ready", "silent"), 0);
}

#[test]
fn garbage_on_the_notify_socket_changes_nothing() {
    let mut s = Supervised::start(
        r#"apps:
  steady:
    command: [sleep, "1000"]
    ready: none
"#,
    );
    s.wait_event("ready", "steady");
    let pids = s.running_pids("steady");
    // The socket name is not printed; find it in /proc/net/unix by our pid's key.
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let name = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .find(|n| n.starts_with("@supervise-") && n.ends_with(&format!("-{}", s.pid())))
        .expect("the notify socket is listed")
        .trim_start_matches('@')
        .to_string();
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let client = std::os::unix::net::UnixDatagram::unbound().unwrap();
    for garbage in [
        &b"\xff\xfe\x00"[..],
        b"no equals sign",
        &vec![b'R'; 70_000],
        b"READY=1",
        b"=\n=\n",
    ] {
        let _ = client.send_to_addr(garbage, &address);
    }
    assert!(
        s.next_within(Duration::from_millis(500), |e| e["level"] == "ERROR")
            .is_none()
    );
    assert_eq!(s.running_pids("steady"), pids);
    assert!(s.child.try_wait().unwrap().is_none());
}

/// Follow the event stream and check the rollout bounds after every event.
struct Bounds {
    alive: BTreeSet<i64>,
    ready: BTreeSet<i64>,
    max_alive: usize,
    min_ready: usize,
}

impl Bounds {
    fn apply(&mut self, event: &Value) {
        let pid = event["pid"].as_i64().unwrap_or(0);
        match event["event"].as_str() {
            Some("spawned") => {
                self.alive.insert(pid);
            }
            Some("ready") => {
                self.ready.insert(pid);
            }
            Some("stopping") => {
                self.ready.remove(&pid);
            }
            Some("exited") | Some("stopped") => {
                self.alive.remove(&pid);
                self.ready.remove(&pid);
            }
            _ => {}
        }
        self.max_alive = self.max_alive.max(self.alive.len());
        self.min_ready = self.min_ready.min(self.ready.len());
    }
}

fn rolling_app(env: &str, command: &str) -> String {
    format!(
        r#"apps:
  web:
    command: {command}
    instances: 3
    listen: 127.0.0.1:0
    ready: {{delay: 300ms}}
    reload: {{max_surge: 1, max_unavailable: 0}}
    env: {{VERSION: "{env}"}}
"#
    )
}

#[test]
fn a_rolling_replace_keeps_three_ready_and_at_most_four_alive() {
    let server = format!("[python3, \"{}\"]", hello_server());
    let mut s = Supervised::start(&rolling_app("1", &server));
    s.wait_count("ready", "web", 3);
    let old = s.running_pids("web");
    save(s.dir.path(), &rolling_app("2", &server));
    s.wait_count("stopped", "web", 3);
    let mut bounds = Bounds {
        alive: BTreeSet::new(),
        ready: BTreeSet::new(),
        max_alive: 0,
        min_ready: usize::MAX,
    };
    let mut started = false;
    for event in &s.events {
        bounds.apply(event);
        if !started && bounds.ready.len() == 3 {
            // Bounds hold from the moment all three are first ready.
            started = true;
            bounds.min_ready = 3;
            bounds.max_alive = 3;
        }
    }
    assert!(
        bounds.min_ready >= 3,
        "ready fell to {}\n{}",
        bounds.min_ready,
        s.dump()
    );
    assert!(
        bounds.max_alive <= 4,
        "{} alive at once\n{}",
        bounds.max_alive,
        s.dump()
    );
    let new = s.running_pids("web");
    assert_eq!(new.len(), 3);
    assert!(new.iter().all(|p| !old.contains(p)), "every pid replaced");
    let slots: BTreeSet<u64> = s
        .events
        .iter()
        .filter(|e| e["event"] == "spawned" && e["generation"] == 2)
        .filter_map(|e| e["slot"].as_u64())
        .collect();
    assert_eq!(slots, BTreeSet::from([0, 1, 2]), "slots keep their numbers");
}

/// One request on `stream`; `Ok(Some(body))`, `Ok(None)` if the server closed
/// the connection before answering, `Err` for an I/O error.
fn request(stream: &mut BufReader<TcpStream>) -> std::io::Result<Option<(String, bool)>> {
    stream
        .get_mut()
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")?;
    let mut status = String::new();
    if stream.read_line(&mut status)? == 0 {
        return Ok(None);
    }
    let mut length = 0;
    let mut close = false;
    loop {
        let mut header = String::new();
        stream.read_line(&mut header)?;
        let lower = header.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("connection:") && lower.contains("close") {
            close = true;
        }
        if header == "\r\n" || header.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(status));
    }
    Ok(Some((String::from_utf8_lossy(&body).into_owned(), close)))
}

#[derive(Default, Debug)]
struct Tally {
    ok: usize,
    failed: usize,
    refused: usize,
    retried: usize,
    by_pid: BTreeMap<String, usize>,
}

/// The most requests one load run sends, whatever happens.
const MAX_REQUESTS: usize = 50_000;

/// Send requests until `stop` is set and at least `min` were sent, mixing
/// kept-alive and new connections. A request that fails on a *reused*
/// connection before any response byte is retried once on a new connection
/// (RFC 9112 §9.3.1); every other failure counts.
fn client(port: u16, min: usize, stop: &AtomicBool, done: &AtomicUsize) -> Tally {
    let mut tally = Tally::default();
    let connect = || TcpStream::connect(("127.0.0.1", port)).map(BufReader::new);
    let mut stream: Option<BufReader<TcpStream>> = None;
    let mut reused = false;
    for i in 0..MAX_REQUESTS {
        if i >= min && stop.load(Ordering::Relaxed) {
            break;
        }
        if i % 10 == 0 {
            stream = None;
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            if stream.is_none() {
                match connect() {
                    Ok(s) => {
                        stream = Some(s);
                        reused = false;
                    }
                    Err(e) => {
                        if e.kind() == std::io::ErrorKind::ConnectionRefused {
                            tally.refused += 1;
                        }
                        tally.failed += 1;
                        break;
                    }
                }
            }
            let result = request(stream.as_mut().unwrap());
            match result {
                Ok(Some((body, close))) => {
                    tally.ok += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                    let pid = body
                        .split("pid ")
                        .nth(1)
                        .and_then(|r| r.split(',').next())
                        .unwrap_or("?")
                        .to_string();
                    *tally.by_pid.entry(pid).or_default() += 1;
                    if close {
                        stream = None;
                    } else {
                        reused = true;
                    }
                    break;
                }
                Ok(None) | Err(_) if reused && attempts == 1 => {
                    tally.retried += 1;
                    stream = None;
                }
                _ => {
                    tally.failed += 1;
                    stream = None;
                    break;
                }
            }
        }
    }
    tally
}

#[test]
fn reloads_under_load_lose_no_request() {
    let server = format!("[python3, \"{}\"]", hello_server());
    let app = |version: &str| {
        format!(
            "apps:\n  web:\n    command: {server}\n    instances: 2\n    listen: 127.0.0.1:0\n    ready: {{delay: 300ms}}\n    env: {{VERSION: \"{version}\"}}\n"
        )
    };
    let mut s = Supervised::start(&app("1"));
    let port = listening_port(&mut s);
    s.wait_count("ready", "web", 2);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let load = {
        let (stop, done) = (stop.clone(), done.clone());
        std::thread::spawn(move || client(port, 2000, &stop, &done))
    };
    // Reload twice while the load runs.
    assert!(
        eventually(WAIT, || done.load(Ordering::Relaxed) >= 100),
        "the load is running"
    );
    for (version, stopped) in [("2", 2), ("3", 4)] {
        save(s.dir.path(), &app(version));
        s.wait_count("stopped", "web", stopped);
    }
    stop.store(true, Ordering::Relaxed);
    let tally = load.join().unwrap();
    println!("{tally:?}");
    assert_eq!(tally.refused, 0, "never ECONNREFUSED");
    assert_eq!(tally.failed, 0, "{tally:?}");
    assert!(tally.ok >= 2000);
    assert_eq!(
        tally.by_pid.len(),
        6,
        "served by the 2 original and 4 replacement instances: {tally:?}"
    );
}

#[test]
fn a_replacement_that_crashes_halts_the_rollout_and_the_old_instances_serve() {
    let server = format!("[python3, \"{}\"]", hello_server());
    let mut s = Supervised::start(&rolling_app("1", &server));
    let port = listening_port(&mut s);
    s.wait_count("ready", "web", 3);
    let old = s.running_pids("web");
    save(s.dir.path(), &rolling_app("2", "[sh, -c, \"exit 1\"]"));
    let halted = s.wait_for("the halt", |e| e["event"] == "rollout_halted");
    assert!(
        halted["message"]
            .as_str()
            .unwrap()
            .contains("old instances keep serving")
    );
    let start = Instant::now();
    let mut answered = BTreeSet::new();
    while answered.len() < 3 && start.elapsed() < WAIT {
        let mut stream =
            BufReader::new(TcpStream::connect(("127.0.0.1", port)).expect("never refused"));
        let (body, _) = request(&mut stream).unwrap().expect("an answer");
        let pid: i32 = body
            .split("pid ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(old.contains(&pid), "served by an old instance");
        answered.insert(pid);
    }
    assert_eq!(answered.len(), 3, "all three old instances still serve");
    assert!(old.iter().all(|p| !is_gone(*p)));
}

#[test]
fn reuseport_gives_each_instance_its_own_socket_on_the_one_port() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = Supervised::start(&format!(
        "apps:\n  web:\n    command: [python3, \"{}\"]\n    instances: 2\n    listen: {{address: \"127.0.0.1:{port}\", reuseport: true}}\n    ready: {{delay: 300ms}}\n",
        hello_server()
    ));
    s.wait_count("ready", "web", 2);
    let listening: Vec<u64> = s
        .events
        .iter()
        .filter(|e| e["event"] == "listening")
        .filter_map(|e| e["slot"].as_u64())
        .collect();
    assert_eq!(listening, [0, 1], "one socket per slot");
    let sockets: BTreeSet<String> = s
        .running_pids("web")
        .iter()
        .map(|pid| {
            std::fs::read_link(format!("/proc/{pid}/fd/3"))
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(sockets.len(), 2, "different sockets: {sockets:?}");
    let mut answered = BTreeSet::new();
    let start = Instant::now();
    while answered.len() < 2 && start.elapsed() < WAIT {
        let mut stream =
            BufReader::new(TcpStream::connect(("127.0.0.1", port)).expect("never refused"));
        let (body, _) = request(&mut stream).unwrap().expect("an answer");
        answered.insert(
            body.split("pid ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(answered.len(), 2, "both instances accept on the one port");
}
