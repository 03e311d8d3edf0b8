//! The spawner under fire: signals arriving while a spawn waits for its
//! reply, and a spawner that is stopped or killed mid-request. Whatever
//! happens, every worker process is one the supervisor knows (no duplicate,
//! no ghost), and the loop is never stalled for longer than one reply
//! timeout.
//!
//! Each test's workers are `sleep <unique number>`, found in /proc by it.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// A unique `sleep` argument for one test (GNU sleep takes a fraction).
fn mark() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("100000.{}{nanos}", std::process::id())
}

/// Live processes running `sleep <mark>`.
fn workers(mark: &str) -> BTreeSet<i32> {
    with_argument(mark)
}

fn app(mark: &str, instances: u32, value: u32) -> String {
    format!(
        "apps:\n  w:\n    command: [sleep, \"{mark}\"]\n    instances: {instances}\n    ready: none\n    kill_timeout: 1s\n    env: {{V: \"{value}\"}}\n    reload: {{max_surge: 10, max_unavailable: 10}}\n"
    )
}

/// `status --json`, given up after `limit`: the reply and how long it took.
/// Its output is read while it runs (a status of hundreds of workers is
/// more than a pipe holds).
fn status(s: &Supervised, limit: Duration) -> (Option<Value>, Duration) {
    let started = Instant::now();
    let child = Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(["status", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the client runs");
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(limit) {
        Ok(output) => output.ok(),
        Err(_) => {
            // SAFETY: the client this test started, not reaped yet (the
            // reader waits for it).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            None
        }
    };
    reader.join().expect("the reader ends");
    let took = started.elapsed();
    (
        output.and_then(|o| serde_json::from_slice(&o.stdout).ok()),
        took,
    )
}

/// The pids `status` shows for app `w`.
fn shown(status: &Value) -> BTreeSet<i32> {
    status["apps"][0]["workers"]
        .as_array()
        .map(|workers| {
            workers
                .iter()
                .filter_map(|w| w["pid"].as_i64().map(|p| p as i32))
                .collect()
        })
        .unwrap_or_default()
}

/// Eventually, the running `sleep <mark>` processes are exactly the
/// `count` pids `status` shows, every one ready.
fn assert_converges(s: &Supervised, mark: &str, count: usize) {
    let converged = eventually(Duration::from_secs(20), || {
        let Some(status) = status(s, Duration::from_secs(5)).0 else {
            return false;
        };
        let ready = status["apps"][0]["workers"]
            .as_array()
            .is_some_and(|w| w.iter().all(|w| w["ready"] == true));
        let shown = shown(&status);
        ready && shown.len() == count && workers(mark) == shown
    });
    let running = workers(mark);
    let shown = status(s, Duration::from_secs(5))
        .0
        .map(|s| shown(&s))
        .unwrap_or_default();
    assert!(
        converged,
        "{} running, {} shown; running not shown: {:?}; shown not running: {:?}\n{}",
        running.len(),
        shown.len(),
        running.difference(&shown).collect::<Vec<_>>(),
        shown.difference(&running).collect::<Vec<_>>(),
        s.dump()
    );
}

fn spawner_of(s: &Supervised) -> i32 {
    child_with_argument(s.pid(), "__spawner").expect("a spawner")
}

fn edit(s: &Supervised, yaml: &str) {
    let path = s.path("ecosystem.yaml");
    let temp = s.path(".ecosystem.yaml.tmp");
    std::fs::write(&temp, yaml).expect("write");
    std::fs::rename(&temp, &path).expect("rename");
}

fn shut_down(mut s: Supervised, mark: &str) {
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
    assert!(
        eventually(Duration::from_secs(3), || workers(mark).is_empty()),
        "left after shutdown: {:?}",
        workers(mark)
    );
}

#[test]
fn signals_during_spawns_never_duplicate_a_worker() {
    let mark = mark();
    let mut s = Supervised::start(&app(&mark, 30, 0));
    s.wait_count("ready", "w", 30);
    // SIGHUP every millisecond (each one re-reads the file) while three
    // rolling replacements of 30 workers spawn and reap.
    let supervisor = s.pid();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storm = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: signalling the supervisor this test started.
                unsafe {
                    libc::kill(supervisor, libc::SIGHUP);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    for value in 1..=3 {
        edit(&s, &app(&mark, 30, value));
        s.wait_for("the edit applied", |e| {
            e["event"] == "applied" && e["file_version"].as_u64() >= Some(u64::from(value) + 1)
        });
        // The next edit lands mid-rollout, the storm going on: once 15 of
        // the 30 workers of this version have spawned.
        let generation = u64::from(value) + 1;
        s.wait_for_count("half the rollout", 15, |e| {
            e["event"] == "spawned" && e["generation"] == generation
        });
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    storm.join().expect("the storm ends");
    assert_converges(&s, &mark, 30);
    for pid in workers(&mark) {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            environ.split(|b| *b == 0).any(|e| e == b"V=3"),
            "pid {pid} runs an old version"
        );
    }
    shut_down(s, &mark);
}

#[test]
fn a_stopped_spawner_stalls_nothing_and_leaves_no_stray_worker() {
    let mark = mark();
    let mut s = Supervised::start(&app(&mark, 2, 0));
    s.wait_count("ready", "w", 2);
    let spawner = spawner_of(&s);
    // SAFETY: stopping the spawner of the supervisor this test started.
    unsafe {
        libc::kill(spawner, libc::SIGSTOP);
    }
    edit(&s, &app(&mark, 5, 0));
    s.wait_for("the edit applied", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    // The loop waits for the stopped spawner at most its reply timeout (2 s)
    // per spawn, then kills it: status answers meanwhile.
    let (reply, took) = status(&s, Duration::from_secs(10));
    assert!(
        reply.is_some() && took < Duration::from_secs(5),
        "status took {took:?}"
    );
    s.wait_for("a failed start", |e| {
        e["event"] == "start_failed" && e["stage"] == "fork"
    });
    assert!(
        eventually(Duration::from_secs(3), || is_gone(spawner)),
        "the stopped spawner was killed"
    );
    assert_converges(&s, &mark, 5);
    shut_down(s, &mark);
}

#[test]
fn a_killed_spawner_is_replaced_without_a_failed_start() {
    let mark = mark();
    let mut s = Supervised::start(&app(&mark, 2, 0));
    s.wait_count("ready", "w", 2);
    let spawner = spawner_of(&s);
    // SAFETY: killing the spawner of the supervisor this test started.
    unsafe {
        libc::kill(spawner, libc::SIGKILL);
    }
    assert!(
        eventually(WAIT, || is_gone(spawner)),
        "the spawner is reaped"
    );
    edit(&s, &app(&mark, 4, 0));
    assert_converges(&s, &mark, 4);
    assert_eq!(s.count("start_failed", "w"), 0, "{}", s.dump());
    assert_ne!(spawner_of(&s), spawner);
    shut_down(s, &mark);
}

#[test]
fn a_shutdown_during_a_start_of_thousands_is_handled_at_once() {
    let mark = mark();
    let mut s = Supervised::start(&app(&mark, 0, 0));
    s.wait_for("the start", |e| e["event"] == "applied");
    edit(&s, &app(&mark, 3000, 0));
    s.wait_for("the first spawn", |e| e["event"] == "spawned");
    let sent = Instant::now();
    s.signal(libc::SIGTERM);
    s.wait_for("the shutdown", |e| e["event"] == "shutdown");
    let noticed = sent.elapsed();
    let spawned = s.count("spawned", "w");
    assert!(
        spawned < 3000 && noticed < Duration::from_secs(1),
        "SIGTERM handled after {noticed:?}, {spawned} spawned by then"
    );
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
    assert!(
        eventually(Duration::from_secs(5), || workers(&mark).is_empty()),
        "left after shutdown: {}",
        workers(&mark).len()
    );
}

#[test]
fn an_environment_of_hundreds_of_kilobytes_starts() {
    let mark = mark();
    // 50 variables of 4 KiB: 200 KiB, more than a datagram carries.
    let yaml = format!(
        "apps:\n  w:\n    command: [sleep, \"{mark}\"]\n    ready: none\n    env_file: big.env\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        let big: String = (0..50)
            .map(|i| format!("BIG_{i}={}\n", "x".repeat(4096)))
            .collect();
        std::fs::write(dir.join("big.env"), big).expect("big.env");
    });
    let ready = s.wait_event("ready", "w");
    let pid = ready["pid"].as_i64().expect("a pid") as i32;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    assert!(environ.len() > 200 * 1024, "{} bytes", environ.len());
    assert_eq!(s.count("start_failed", "w"), 0, "{}", s.dump());
    shut_down(s, &mark);
}

#[test]
fn a_spawner_killed_with_starts_in_flight_leaves_no_stray_worker() {
    let mark = mark();
    let mut s = Supervised::start(&app(&mark, 0, 0));
    s.wait_for("the start", |e| e["event"] == "applied");
    let spawner = spawner_of(&s);
    edit(&s, &app(&mark, 300, 0));
    // Killed once the starts are going out: several are sent and not
    // answered (the spawner forks one while the next is sent).
    s.wait_for("the first spawn", |e| e["event"] == "spawned");
    // SAFETY: killing the spawner of the supervisor this test started.
    unsafe {
        libc::kill(spawner, libc::SIGKILL);
    }
    // Every process running is one the supervisor shows: what the dead
    // spawner had started and not told is gone, and the rest start.
    assert_converges(&s, &mark, 300);
    assert_ne!(spawner_of(&s), spawner);
    shut_down(s, &mark);
}
