//! `exec` checks: a hung one killed at its timeout, and what a check leaves
//! behind killed with it and never counted as the instance, with cgroups and
//! without (also when the supervisor is SIGKILLed).

use super::*;
use crate::common::held_fds;

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
    let fds = held_fds(s.pid());
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
        eventually(Duration::from_secs(1), || held_fds(s.pid()) <= fds),
        "the supervisor held {fds} fds after 5 checks and {} after 105",
        held_fds(s.pid())
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
