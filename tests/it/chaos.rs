//! Chaos: 8 instances behind one shared socket, a client loop sending
//! requests, and a killer SIGKILLing random workers (sometimes their whole
//! group, sometimes after SIGSTOP) at ~20 kills/s. Afterwards: the count is
//! restored, no zombies, the supervisor's fds back to their baseline, its
//! memory flat from one storm to the next, and nothing left after shutdown.
//!
//! Bounded for CI (a 4 s storm); `SUPERVISE_CHAOS_SECONDS` makes it longer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;

fn storm_seconds() -> u64 {
    std::env::var("SUPERVISE_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

/// The supervisor's worker leaders (its children, without its helpers).
fn workers(supervisor: i32) -> Vec<i32> {
    let own = binary().canonicalize().unwrap_or_else(|_| binary());
    children_of(supervisor)
        .into_iter()
        // Not the helpers (nor a child between its fork and its exec): they
        // run this build's binary.
        .filter(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|exe| exe != own))
        .filter(|p| process_state(*p).is_some_and(|s| s != 'Z'))
        .collect()
}

#[derive(Default)]
struct Counts {
    ok: AtomicUsize,
    failed: AtomicUsize,
    refused: AtomicUsize,
}

fn one_request(port: u16, counts: &Counts) {
    match TcpStream::connect(("127.0.0.1", port)) {
        Err(e) => {
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                counts.refused.fetch_add(1, Ordering::Relaxed);
            }
            counts.failed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(mut stream) => {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reply = Vec::new();
            let sent = stream.write_all(b"GET / HTTP/1.0\r\n\r\n").is_ok();
            if sent && stream.read_to_end(&mut reply).is_ok() && reply.get(8..13) == Some(b" 200 ")
            {
                counts.ok.fetch_add(1, Ordering::Relaxed);
            } else {
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Kill random workers at ~20/s for `seconds`; returns how many kills.
/// The kills one storm makes at least, however slow the machine.
const KILLS_PER_STORM: usize = 20;
/// The longest a storm goes on for its kills.
const STORM_BOUND: Duration = Duration::from_secs(30);

fn storm(supervisor: i32, seconds: u64, seed: &mut u64) -> usize {
    let mut next = || {
        // xorshift: a reproducible, dependency-free choice of victims.
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let mut kills = 0;
    // On a loaded machine a look at the workers is slow: the storm goes on
    // past its seconds until it made its kills (a count of work, not of
    // time), within a bound.
    while (Instant::now() < end || kills < KILLS_PER_STORM) && started.elapsed() < STORM_BOUND {
        let pids = workers(supervisor);
        if !pids.is_empty() {
            let victim = pids[(next() % pids.len() as u64) as usize];
            // SAFETY: signalling a worker of the supervisor this test started.
            unsafe {
                match next() % 8 {
                    0 => {
                        libc::kill(victim, libc::SIGSTOP);
                        libc::kill(victim, libc::SIGKILL);
                    }
                    1 | 2 => {
                        libc::kill(-victim, libc::SIGKILL);
                    }
                    _ => {
                        libc::kill(victim, libc::SIGKILL);
                    }
                }
            }
            kills += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    kills
}

#[test]
fn chaos_keeps_the_count_and_leaks_nothing() {
    const CONCURRENCY: usize = 4;
    let server = format!("{}/examples/hello/server.py", env!("CARGO_MANIFEST_DIR"));
    let mut s = Supervised::start(&format!(
        "apps:\n  web:\n    command: [python3, \"{server}\"]\n    instances: 8\n    listen: 127.0.0.1:0\n    ready: {{delay: 200ms}}\n    backoff: {{initial: 50ms, max: 500ms}}\n    kill_timeout: 2s\n"
    ));
    let port = listening_port(&mut s);
    s.wait_count("ready", "web", 8);
    let supervisor = s.pid();
    // The count must be back within the backoff bound: the longest delay
    // (backoff.max, 500 ms) plus a start, with a generous margin for CI.
    const RESTORE_BOUND: Duration = Duration::from_secs(5);
    let quiet = |s: &mut Supervised| {
        let storm_over = Instant::now();
        assert!(
            s.until(RESTORE_BOUND, |_| workers(supervisor).len() == 8
                && children_of(supervisor)
                    .iter()
                    .all(|p| process_state(*p) != Some('Z'))),
            "8 workers restored within {RESTORE_BOUND:?}\n{}",
            s.dump()
        );
        println!("count restored {:?} after the storm", storm_over.elapsed());
        // The restored workers' starts settled (their exec-status pipes and
        // readiness timers done with): the supervisor has said that each of
        // the 8 it runs is ready.
        let settled = |s: &Supervised| {
            let running = s.running_pids("web");
            running.len() == 8
                && running.iter().all(|pid| {
                    s.events
                        .iter()
                        .any(|e| e["event"] == "ready" && e["pid"] == *pid)
                })
        };
        assert!(
            s.until(RESTORE_BOUND, settled),
            "the 8 restored workers were not all ready within {RESTORE_BOUND:?}\n{}",
            s.dump()
        );
    };
    let baseline_fds = held_fds(supervisor);

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (counts, stop) = (counts.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    one_request(port, &counts);
                }
            })
        })
        .collect();

    let mut seed = 0x9E37_79B9_7F4A_7C15;
    let mut kills = storm(supervisor, storm_seconds(), &mut seed);
    quiet(&mut s);
    let rss_first = rss_kb(supervisor);
    kills += storm(supervisor, storm_seconds(), &mut seed);
    quiet(&mut s);
    let rss_second = rss_kb(supervisor);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }

    let (ok, failed, refused) = (
        counts.ok.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
        counts.refused.load(Ordering::Relaxed),
    );
    println!(
        "{kills} kills; requests: {ok} ok, {failed} failed, {refused} refused; RSS {rss_first} kB → {rss_second} kB"
    );
    assert!(kills >= 40, "the storm happened: {kills} kills");
    assert!(ok > 0);
    assert_eq!(
        refused, 0,
        "never ECONNREFUSED: the socket outlives every worker"
    );
    assert!(
        failed <= kills * CONCURRENCY,
        "{failed} failed for {kills} kills"
    );

    let zombies = || {
        children_of(supervisor)
            .into_iter()
            .filter(|p| process_state(*p) == Some('Z'))
            .collect::<Vec<_>>()
    };
    // A zombie seen now is reaped within a second (a leaked one would stay).
    let first = zombies();
    let reaped = eventually(Duration::from_secs(1), || {
        let now = zombies();
        first.iter().all(|p| !now.contains(p))
    });
    let lasting: Vec<i32> = first
        .into_iter()
        .filter(|p| zombies().contains(p))
        .collect();
    assert!(reaped, "zombies: {lasting:?}");
    assert!(
        s.until(WAIT, |_| held_fds(supervisor) == baseline_fds),
        "fds {} after the storms, {baseline_fds} before",
        held_fds(supervisor)
    );
    assert!(
        rss_second.abs_diff(rss_first) <= 1024,
        "RSS {rss_first} kB → {rss_second} kB"
    );

    let tree = descendants_of(supervisor);
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success());
    let left: Vec<i32> = tree.into_iter().filter(|p| !is_gone(*p)).collect();
    assert!(left.is_empty(), "orphans after shutdown: {left:?}");
}
