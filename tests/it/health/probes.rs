//! HTTP and TCP liveness probes: an unhealthy instance replaced after
//! exactly its `failures` and only once its replacement is ready, one that
//! recovers left alone, and checks due while hundreds start timed from
//! their real start.

use super::*;

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
