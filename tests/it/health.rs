//! Restarting what is alive but broken, with real processes and sockets:
//! HTTP and exec liveness checks, the memory limit and the watchdog.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Supervised, WAIT, eventually, free_ports, timestamp_ms};
use serde_json::Value;

/// A health endpoint on `PORT + instance`, bound with SO_REUSEPORT (a
/// replacement binds it while the instance it replaces still serves). It
/// counts the checks it gets in `checks-PID`; with `FAIL_AFTER=N` it
/// answers 500 after N checks, with `FAIL_ONCE=N` it fails only check N.
/// Only the first process to start goes bad: it leaves `went-bad` behind.
/// Under `ready: notify` it is ready once it listens.
const HEALTH_SERVER: &str = r#"
import os, socket, sys
port = int(os.environ["BASE_PORT"]) + int(os.environ["SUPERVISE_INSTANCE"])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", port))
s.listen(16)
first = not os.path.exists("went-bad")
if first:
    open("went-bad", "w").close()
fail_after = int(os.environ.get("FAIL_AFTER", "0")) if first else 0
fail_once = int(os.environ.get("FAIL_ONCE", "0")) if first else 0
print("serving", os.getpid(), flush=True)
if "NOTIFY_SOCKET" in os.environ:
    n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    a = os.environ["NOTIFY_SOCKET"]
    n.sendto(b"READY=1", "\0" + a[1:] if a.startswith("@") else a)
checks = 0
while True:
    c, _ = s.accept()
    c.recv(4096)
    checks += 1
    with open(f"checks-{os.getpid()}", "a") as f:
        f.write("x")
    bad = (fail_after and checks > fail_after) or checks == fail_once
    c.sendall(b"HTTP/1.1 500 Broken\r\n\r\n" if bad else b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    c.close()
"#;

fn checks_received(s: &Supervised, pid: i64) -> usize {
    std::fs::read_to_string(s.path(&format!("checks-{pid}")))
        .map(|c| c.len())
        .unwrap_or(0)
}

fn position(s: &Supervised, predicate: impl Fn(&Value) -> bool) -> Option<usize> {
    s.events.iter().position(predicate)
}

#[test]
fn an_unhealthy_instance_is_replaced_after_exactly_its_failures_and_only_once_its_replacement_is_ready()
 {
    let port = free_ports(1);
    let yaml = format!(
        r#"
apps:
  web:
    command: python3 health_server.py
    env: {{BASE_PORT: "{port}", FAIL_AFTER: "2"}}
    ready: notify
    backoff: {{initial: 50ms}}
    health: {{http: "http://127.0.0.1:{{instance+{port}}}/health", every: 200ms, timeout: 1s, failures: 3}}
"#
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("health_server.py"), HEALTH_SERVER).unwrap();
    });
    let first = s.wait_event("spawned", "web")["pid"].as_i64().unwrap();
    let unhealthy = s.wait_event("unhealthy", "web");
    assert_eq!(unhealthy["pid"], first);
    assert_eq!(unhealthy["failures"], 3);
    assert!(
        unhealthy["detail"].as_str().unwrap().contains("HTTP 500"),
        "{unhealthy}"
    );
    // 2 good answers, then exactly 3 bad ones: no check more before the verdict.
    assert_eq!(checks_received(&s, first), 5, "{}", s.dump());
    let stopping = s.wait_for("the old instance stopping", |e| {
        e["event"] == "stopping" && e["pid"] == first
    });
    assert_eq!(
        stopping["reason"],
        "replaced (unhealthy or over max_memory)"
    );
    let replacement = s
        .events
        .iter()
        .rev()
        .find(|e| e["event"] == "spawned" && e["pid"] != first)
        .cloned()
        .expect("a replacement was spawned");
    let new_pid = replacement["pid"].clone();
    let ready = position(&s, |e| e["event"] == "ready" && e["pid"] == new_pid);
    let stop = position(&s, |e| e["event"] == "stopping" && e["pid"] == first);
    assert!(
        ready.is_some() && ready < stop,
        "the replacement is ready before the unhealthy one stops:\n{}",
        s.dump()
    );
    // The replacement counts as a restart and stays healthy: five of its
    // checks judged (checks never overlap: the sixth comes after the
    // fifth's answer), and none was said failed.
    let replacement = new_pid.as_i64().expect("a pid");
    assert!(
        eventually(WAIT, || checks_received(&s, replacement) >= 6),
        "the replacement was checked only {} times\n{}",
        checks_received(&s, replacement),
        s.dump()
    );
    s.barrier();
    let judged = |name: &str| {
        s.events
            .iter()
            .filter(|e| e["event"] == name && e["pid"] == replacement)
            .count()
    };
    assert_eq!(
        (judged("check_failed"), judged("unhealthy")),
        (0, 0),
        "{}",
        s.dump()
    );
    let status = supervise_status(&s);
    let worker = &status["apps"][0]["workers"][0];
    assert_eq!(worker["restarts"], 1, "{status}");
    assert_eq!(worker["health"], "healthy", "{status}");
}

#[test]
fn an_instance_that_fails_one_check_and_recovers_is_not_replaced() {
    let port = free_ports(1);
    let yaml = format!(
        r#"
apps:
  web:
    command: python3 health_server.py
    env: {{BASE_PORT: "{port}", FAIL_ONCE: "2"}}
    ready: notify
    health: {{http: "http://127.0.0.1:{{instance+{port}}}/", every: 150ms, timeout: 1s, failures: 2}}
"#
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("health_server.py"), HEALTH_SERVER).unwrap();
    });
    let pid = s.wait_event("spawned", "web")["pid"]
        .as_i64()
        .expect("a pid");
    let failed = s.wait_event("check_failed", "web");
    assert_eq!(failed["failures"], 1);
    s.wait_event("healthy", "web");
    // Four checks after the one that failed, each judged (checks never
    // overlap: the seventh comes after the sixth's answer), and none failed;
    // a second failure next to the first would have been two in a row.
    assert!(
        eventually(WAIT, || checks_received(&s, pid) >= 7),
        "checked only {} times\n{}",
        checks_received(&s, pid),
        s.dump()
    );
    s.barrier();
    assert_eq!(
        (s.count("unhealthy", "web"), s.count("stopping", "web")),
        (0, 0),
        "{}",
        s.dump()
    );
    assert_eq!(s.count("check_failed", "web"), 1, "{}", s.dump());
    assert_eq!(s.count("spawned", "web"), 1, "{}", s.dump());
}

fn supervise_status(s: &Supervised) -> Value {
    let output = crate::common::run_client(s, &["status", "--json"]);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Open fds of `pid`.
fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_hanging_exec_check_is_killed_at_its_timeout_and_leaves_nothing_behind() {
    let token = format!("hung-check-{}", std::process::id());
    let yaml = format!(
        r#"
apps:
  worker:
    command: sleep 1000
    ready: none
    health: {{exec: "exec python3 -c 'import time; time.sleep(1000)' {token}", every: 50ms, timeout: 50ms, failures: 100000}}
"#
    );
    let mut s = Supervised::start(&yaml);
    s.wait_count("check_failed", "worker", 5);
    let fds = fd_count(s.pid());
    s.wait_count("check_failed", "worker", 55);
    let failed = s.wait_event("check_failed", "worker");
    assert_eq!(failed["detail"], "no answer within 50ms", "{failed}");
    // Each check was killed at its timeout and reaped — also one reaped
    // after the next had started (every = timeout): none of ours left
    // beyond the one running now, no zombie, no fd kept.
    assert!(
        eventually(Duration::from_secs(2), || crate::common::with_argument(
            &token
        )
        .len()
            <= 1),
        "hung checks left: {:?}",
        crate::common::with_argument(&token)
    );
    let zombies: Vec<i32> = crate::common::children_of(s.pid())
        .into_iter()
        .filter(|pid| crate::common::process_state(*pid) == Some('Z'))
        .collect();
    assert!(
        eventually(Duration::from_secs(1), || {
            zombies
                .iter()
                .all(|pid| crate::common::process_state(*pid) != Some('Z'))
        }),
        "zombies: {zombies:?}"
    );
    assert!(
        eventually(Duration::from_secs(1), || fd_count(s.pid()) <= fds),
        "the supervisor held {fds} fds after 5 checks and {} after 105",
        fd_count(s.pid())
    );
    // The worker itself was never touched.
    assert_eq!(s.count("spawned", "worker"), 1);
    assert_eq!(s.count("stopping", "worker"), 0);
    s.signal(libc::SIGTERM);
    s.wait_exit(WAIT);
    assert!(eventually(Duration::from_secs(2), || {
        crate::common::with_argument(&token).is_empty()
    }));
}

/// `examples/hello`'s draining server, leaking `LEAK_MB_PER_S` of memory,
/// and saying (once) when its own RSS passed `LIMIT_BYTES`.
const LEAKING_SERVER: &str = r#"
import os, runpy, sys, threading, time
rate = int(os.environ["LEAK_MB_PER_S"])
limit = int(os.environ["LIMIT_BYTES"])
hoard = []
def leak():
    told = False
    while True:
        hoard.append(b"x" * ((rate << 20) // 20))
        rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        if rss > limit and not told:
            print("over the limit", flush=True)
            told = True
        time.sleep(0.05)
threading.Thread(target=leak, daemon=True).start()
sys.argv = ["server.py"]
runpy.run_path(os.environ["SERVER"], run_name="__main__")
"#;

#[test]
fn a_leaking_server_is_recycled_within_two_memory_checks_without_a_failed_request() {
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello/server.py");
    let yaml = format!(
        r#"
memory_check: 500ms
apps:
  web:
    command: python3 leak.py
    instances: 2
    listen: 127.0.0.1:0
    ready: {{delay: 500ms}}
    backoff: {{initial: 10ms}}
    max_memory: 60MB
    env: {{LEAK_MB_PER_S: "20", LIMIT_BYTES: "60000000", SERVER: "{}"}}
"#,
        server.display()
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("leak.py"), LEAKING_SERVER).unwrap();
    });
    let port = crate::common::listening_port(&mut s);
    s.wait_count("ready", "web", 2);
    // A bounded client loop, one request per connection, while 3 recycles happen.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let client = {
        let (stop, sent, failed) = (stop.clone(), sent.clone(), failed.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                sent.fetch_add(1, Ordering::Relaxed);
                if !get(port) {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    for count in 1..=3 {
        let exceeded = s.wait_for(&format!("memory_exceeded #{count}"), |e| {
            e["event"] == "memory_exceeded"
        });
        assert!(exceeded["rss_bytes"].as_u64().unwrap() > 60_000_000);
        assert_eq!(exceeded["limit_bytes"], 60_000_000);
        // Found within two memory_check periods of passing the limit. The
        // instance says when it passed (its first "over the limit" after its
        // start; an output line has no pid, so: the first of its slot after
        // its `spawned`), which may be logged after `memory_exceeded`: the
        // line goes through the output pipe, and the check can read the
        // memory between the allocation and the instance's own look.
        let (pid, slot) = (exceeded["pid"].clone(), exceeded["slot"].clone());
        let at = timestamp_ms(&exceeded);
        let started = s
            .events
            .iter()
            .position(|e| e["event"] == "spawned" && e["pid"] == pid)
            .expect("the instance's start");
        let said = |s: &Supervised| {
            s.events[started..]
                .iter()
                .find(|e| e["slot"] == slot && e["line"] == "over the limit")
                .cloned()
        };
        assert!(
            s.until(WAIT, |s| said(s).is_some()),
            "no 'over the limit' line of slot {slot} after its start:\n{}",
            s.dump()
        );
        let over = said(&s).expect("the line");
        let late = at - timestamp_ms(&over);
        assert!(
            late <= 1000.0,
            "memory_exceeded came {late} ms after the instance passed its limit"
        );
        s.wait_for(&format!("the recycled one stopped #{count}"), |e| {
            e["event"] == "stopped" && e["pid"] == pid
        });
    }
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(sent > 100, "only {sent} requests were sent");
    assert_eq!(
        failed, 0,
        "{failed} of {sent} requests failed across 3 recycles"
    );
}

/// Its first run (no `leaked` file yet), once ready (after 1 s), grows by
/// 4 MiB every 10 ms, each page touched, up to 1 GiB; every later run only
/// sleeps.
const RUNAWAY: &str = r#"
import os, time
if os.path.exists("leaked"):
    time.sleep(1000)
open("leaked", "w").close()
time.sleep(1.2)
blocks = []
for _ in range(256):
    block = bytearray(4 << 20)
    block[::4096] = b"x" * len(block[::4096])
    blocks.append(block)
    time.sleep(0.01)
time.sleep(1000)
"#;

#[test]
fn an_instance_over_max_memory_stops_at_its_ceiling_and_its_replacement_starts_without_backoff() {
    // The replacement takes 1 s to be ready while the first run grows
    // 400 MiB/s: replace-first alone would let it reach ~400 MiB, and a
    // crash backoff of 5 s would hold the replacement back for ~2 GB.
    let yaml = r#"
memory_check: 100ms
apps:
  runaway:
    command: python3 runaway.py
    ready: {delay: 1s}
    backoff: {initial: 5s}
    max_memory: 40MiB
"#;
    let mut s = Supervised::start_with(yaml, &[], |dir| {
        std::fs::write(dir.join("runaway.py"), RUNAWAY).unwrap();
    });
    let first = s.wait_event("ready", "runaway")["pid"].clone();
    let recycling = s.wait_event("recycling", "runaway");
    assert_eq!(recycling["pid"], first);
    assert_eq!(
        recycling["delay_ms"], 0,
        "a recycle is not a crash: {recycling}"
    );
    let replacement = s.wait_for("the replacement's start", |e| {
        e["event"] == "spawned" && e["pid"] != first
    });
    let waited = timestamp_ms(&replacement) - timestamp_ms(&recycling);
    assert!(
        waited < 1000.0,
        "the replacement started {waited} ms after the recycle"
    );
    // The runaway is gone before its replacement is ready: killed by the
    // kernel at its cgroup's memory.max, or stopped by supervise once
    // measured past the ceiling (without the memory controller).
    let gone = s.wait_for("the runaway's end", |e| {
        (e["event"] == "exited" || e["event"] == "stopping") && e["pid"] == first
    });
    let ready = s.wait_for("the replacement ready", |e| {
        e["event"] == "ready" && e["pid"] == replacement["pid"]
    });
    assert!(
        timestamp_ms(&gone) < timestamp_ms(&ready),
        "the runaway served on until its replacement was ready:\n{}",
        s.dump()
    );
    match gone["event"].as_str() {
        Some("exited") => {
            assert_eq!(gone["signal"], "SIGKILL", "{gone}");
            assert_eq!(gone["decision"], "replaced", "{gone}");
        }
        _ => assert!(
            gone["reason"].as_str().unwrap_or("").contains("ceiling"),
            "{gone}"
        ),
    }
    // One restart, counted once; the runaway's last measured size stayed
    // within reach of the 60 MiB ceiling (a measurement is 100 ms apart,
    // 40 MiB of growth).
    for e in s.events.iter().filter(|e| e["event"] == "memory_exceeded") {
        assert!(e["rss_bytes"].as_u64().unwrap() < 200 << 20, "{e}");
    }
    assert_eq!(s.count("memory_exceeded", "runaway"), 1, "{}", s.dump());
}

#[test]
fn probe_checks_due_while_hundreds_start_are_timed_from_their_real_start() {
    // 400 instances, each checked every 50 ms with a 50 ms timeout while
    // the loop is busy starting the others: a check counted from when it
    // was due, not from when it ran, failed checks that never ran.
    const COUNT: u16 = 400;
    let base = free_ports(COUNT);
    let listeners: Vec<std::net::TcpListener> = (0..COUNT)
        .map(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).expect("a port just free"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Accepted and dropped, so that no backlog fills up.
    let acceptor = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for listener in &listeners {
                listener.set_nonblocking(true).expect("nonblocking");
            }
            while !stop.load(Ordering::Relaxed) {
                for listener in &listeners {
                    while listener.accept().is_ok() {}
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let yaml = format!(
        r#"
apps:
  many:
    command: sleep 1000
    instances: {COUNT}
    ready: none
    health: {{tcp: "127.0.0.1:{{instance+{base}}}", every: 50ms, timeout: 50ms, failures: 3}}
"#
    );
    let mut s = Supervised::start(&yaml);
    // Every instance's first check passed, the last ones' while the loop
    // was still starting instances.
    s.wait_for("all_ready", |e| e["event"] == "all_ready");
    let all_healthy = |status: &Value| {
        let workers = crate::common::app_status(status, "many")["workers"]
            .as_array()
            .cloned();
        workers.is_some_and(|w| {
            w.len() == usize::from(COUNT) && w.iter().all(|w| w["health"] == "healthy")
        })
    };
    assert!(
        eventually(WAIT, || all_healthy(&crate::common::status_json(&s))),
        "not every instance became healthy"
    );
    s.barrier();
    assert_eq!(s.count("check_failed", "many"), 0, "{}", s.dump());
    assert_eq!(s.count("unhealthy", "many"), 0);
    // The checks fail from here on: the ports close.
    stop.store(true, Ordering::Relaxed);
    acceptor.join().unwrap();
}

/// One `GET /` on a new connection: answered 200?
fn get(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200")
}

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

#[test]
fn an_exec_check_is_not_the_instance_what_it_leaves_is_killed_and_not_counted() {
    let token = format!("check-leftover-{}", std::process::id());
    let yaml = format!(
        r#"
memory_check: 100ms
apps:
  worker:
    command: sleep 1000
    ready: none
    max_memory: 40MB
    health: {{exec: "echo run >> runs; setsid python3 -c 'import time; b = bytearray(60 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(1000)' {token} & sleep 0.3; exit 0", every: 100ms, timeout: 1s, failures: 3}}
"#
    );
    let mut s = Supervised::start(&yaml);
    s.wait_count("spawned", "worker", 1);
    // Checks pass and leave a 60 MB daemon behind each time: it is killed
    // with its check, and never counted in the instance's 40 MB. Watched
    // over 8 checks (each writes a line to `runs`).
    let runs = || {
        std::fs::read_to_string(s.path("runs"))
            .map(|r| r.lines().count())
            .unwrap_or(0)
    };
    assert!(
        eventually(WAIT, || runs() >= 8),
        "only {} checks ran",
        runs()
    );
    // At most the running check's daemon (the last one's may be dying).
    assert!(
        eventually(Duration::from_secs(2), || crate::common::with_argument(
            &token
        )
        .len()
            <= 1),
        "leftovers of checks: {:?}",
        crate::common::with_argument(&token)
    );
    assert_eq!(s.count("memory_exceeded", "worker"), 0, "{}", s.dump());
    assert_eq!(s.count("check_failed", "worker"), 0, "{}", s.dump());
    s.signal(libc::SIGTERM);
    s.wait_exit(WAIT);
    assert!(eventually(Duration::from_secs(2), || {
        crate::common::with_argument(&token).is_empty()
    }));
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

/// When process `pid` started, in clock ticks since boot (`None` once it
/// is gone): with the pid, it names one process.
fn started_at(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// A supervisor without cgroups of one sleeping worker whose health is the
/// `exec` check `command`, with `timing` (`every: …, timeout: …`).
fn checked_without_cgroups(command: &str, timing: &str) -> Supervised {
    let yaml = format!(
        "apps:\n  worker:\n    command: sleep 1000\n    ready: none\n    health: {{exec: \"{command}\", {timing}}}\n"
    );
    Supervised::start_with(&yaml, &["--cgroups", "off"], |_| {})
}

#[test]
fn without_cgroups_what_exec_checks_leave_is_killed_too() {
    let token = format!("check-child-{}", std::process::id());
    let mut s = checked_without_cgroups(
        &format!("echo run >> runs; python3 -c 'import time; time.sleep(1000)' {token} & exit 0"),
        "every: 50ms, timeout: 1s",
    );
    s.wait_count("spawned", "worker", 1);
    // 60 checks, each leaving a child that is in execve (python starting)
    // when its check ends: each is killed at that check's end or at one of
    // the next (50 ms apart). Judged by how many checks a child outlives,
    // counted in `runs` (each check adds a line as it starts), not by how
    // many are alive at one moment nor by the clock (both depend on how fast
    // the machine starts python): none may live on through five more checks
    // (a leak would live for the whole test).
    let runs = || std::fs::read_to_string(s.path("runs")).map_or(0, |text| text.lines().count());
    // Each child (by pid and start time) and the run count it was seen at.
    let mut seen = std::collections::BTreeMap::new();
    let mut outlived = 0;
    let started = Instant::now();
    while runs() < 60 {
        assert!(started.elapsed() < WAIT * 2, "only {} checks ran", runs());
        let now = runs();
        for pid in crate::common::with_argument(&token) {
            let Some(start) = started_at(pid) else {
                continue;
            };
            let first = *seen.entry((pid, start)).or_insert(now);
            outlived = outlived.max(now - first);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        outlived < 5,
        "a child of an ended check lived through {outlived} more checks"
    );
    assert_eq!(s.count("check_failed", "worker"), 0, "{}", s.dump());
    s.signal(libc::SIGTERM);
    s.wait_exit(WAIT);
    assert!(eventually(Duration::from_secs(2), || {
        crate::common::with_argument(&token).is_empty()
    }));
}

#[test]
fn without_cgroups_a_running_check_and_what_it_left_die_with_a_killed_supervisor() {
    // A check that runs on (its timeout far away), having left a child in
    // its process group with a cleared environment (no run token): only its
    // group, recorded with the undertaker, tells it is ours.
    let token = format!("check-left-{}", std::process::id());
    let mut s = checked_without_cgroups(
        &format!(
            "env -i perl -e 'sleep 1000' {token}-left & exec perl -e 'sleep 1000' {token}-check"
        ),
        "every: 100ms, timeout: 1m",
    );
    let (left, check) = (format!("{token}-left"), format!("{token}-check"));
    assert!(
        eventually(WAIT, || !crate::common::with_argument(&left).is_empty()
            && !crate::common::with_argument(&check).is_empty()),
        "the check and its child run\n{}",
        s.dump()
    );
    let pids: Vec<i32> = crate::common::with_argument(&left)
        .into_iter()
        .chain(crate::common::with_argument(&check))
        .collect();
    s.signal(libc::SIGKILL);
    s.wait_exit(WAIT);
    let gone = eventually(Duration::from_secs(5), || {
        pids.iter().all(|pid| crate::common::is_gone(*pid))
    });
    let left_alive: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|pid| !crate::common::is_gone(*pid))
        .collect();
    for pid in &left_alive {
        // SAFETY: killing what this test's supervisor left, by its pid.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        gone,
        "left alive after a SIGKILL of supervise: {left_alive:?}"
    );
}
