//! Restarts: the backoff schedule kept to, never early; `max_restarts` and
//! the restart policies; failed starts; no zombie after a crash loop; an
//! event reconciles only its own app.

use super::*;

fn starts(s: &Supervised) -> Vec<u128> {
    std::fs::read_to_string(s.path("starts"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse::<u128>().expect("nanoseconds"))
        .collect()
}

#[test]
fn a_crashing_worker_restarts_on_the_backoff_schedule_never_early() {
    let mut s = Supervised::start(
        r#"
apps:
  crash:
    command: [sh, -c, "date +%s%N >> starts; exit 1"]
    backoff: {initial: 100ms, max: 400ms, factor: 2}
"#,
    );
    s.wait_count("spawned", "crash", 6);
    let decisions: Vec<u64> = s
        .events
        .iter()
        .filter(|e| e["event"] == "exited")
        .map(|e| e["delay_ms"].as_u64().expect("a restart delay"))
        .collect();
    assert_eq!(
        &decisions[..5],
        [100, 200, 400, 400, 400],
        "the logged schedule"
    );
    assert!(
        eventually(WAIT, || starts(&s).len() >= 6),
        "{:?}",
        starts(&s)
    );
    let starts = starts(&s);
    for (i, pair) in starts.windows(2).take(5).enumerate() {
        let gap_ms = (pair[1] - pair[0]) as f64 / 1e6;
        let delay = decisions[i] as f64;
        assert!(
            gap_ms >= delay,
            "restart {} after {gap_ms:.1}ms, before its {delay}ms delay",
            i + 1
        );
        assert!(
            gap_ms <= delay + 1000.0,
            "restart {} after {gap_ms:.1}ms, long after {delay}ms",
            i + 1
        );
    }
}

#[test]
fn max_restarts_gives_up_after_exactly_count_restarts() {
    let mut s = Supervised::start(
        r#"
apps:
  flaky:
    command: [sh, -c, "exit 3"]
    backoff: {initial: 20ms, factor: 1}
    max_restarts: {count: 3, within: 1m}
"#,
    );
    let failed = s.wait_for("the give-up", |e| {
        e["event"] == "exited" && e["decision"] == "failed"
    });
    assert_eq!(failed["code"], 3);
    assert_eq!(
        s.count("spawned", "flaky"),
        4,
        "the first start and exactly 3 restarts"
    );
    // A restart, if one were coming, would come 20 ms after the exit: once
    // that moment has passed (x3), every turn before the barrier's has run.
    let due = timestamp_ms(&failed) + 60.0;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
            * 1000.0
    };
    assert!(eventually(WAIT, || now() >= due));
    s.barrier();
    assert_eq!(
        s.count("spawned", "flaky"),
        4,
        "a failed worker is not restarted\n{}",
        s.dump()
    );
}

#[test]
fn restart_policies_decide_by_exit() {
    let mut s = Supervised::start(
        r#"
apps:
  on-failure-ok:
    command: [sh, -c, "exit 0"]
    restart: on-failure
  never-failing:
    command: [sh, -c, "exit 1"]
    restart: never
  always-ok:
    command: [sh, -c, "exit 0"]
    restart: always
    backoff: {initial: 10ms}
"#,
    );
    for app in ["on-failure-ok", "never-failing"] {
        let exited = s.wait_event("exited", app);
        assert_eq!(exited["decision"], "done", "{app}: {exited}");
    }
    s.wait_count("spawned", "always-ok", 3);
    assert_eq!(s.count("spawned", "on-failure-ok"), 1);
    assert_eq!(s.count("spawned", "never-failing"), 1);
}

#[test]
fn no_zombies_after_200_crash_restarts() {
    let mut s = Supervised::start(
        r#"
apps:
  churn:
    command: [sh, -c, "true & exit 1"]
    backoff: {initial: 1ms, max: 1ms, factor: 1}
    max_restarts: {count: 200, within: 1h}
"#,
    );
    s.wait_for("the give-up", |e| {
        e["event"] == "exited" && e["decision"] == "failed"
    });
    assert_eq!(s.count("spawned", "churn"), 201);
    let zombies = || -> Vec<i32> {
        children_of(s.pid())
            .into_iter()
            .filter(|p| process_state(*p) == Some('Z'))
            .collect()
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
    assert!(reaped, "zombie children of the supervisor: {lasting:?}");
}

#[test]
fn a_missing_program_is_a_failed_start_with_backoff() {
    let mut s = Supervised::start_with(
        r#"
apps:
  missing:
    command: [no-such-program-anywhere]
    backoff: {initial: 50ms, factor: 2}
  not-executable:
    command: [./script.sh]
    backoff: {initial: 50ms, factor: 2}
  healthy:
    command: [sleep, "1000"]
    ready: none
"#,
        &[],
        |dir| std::fs::write(dir.join("script.sh"), "#!/bin/sh\n").unwrap(),
    );
    s.wait_count("start_failed", "missing", 3);
    s.wait_count("start_failed", "not-executable", 2);
    let failures: Vec<&serde_json::Value> = s
        .events
        .iter()
        .filter(|e| e["event"] == "start_failed" && e["app"] == "missing")
        .collect();
    assert_eq!(failures[0]["errno"], libc::ENOENT);
    assert_eq!(failures[0]["delay_ms"], 50);
    assert_eq!(failures[1]["delay_ms"], 100);
    assert!(
        failures[0]["message"]
            .as_str()
            .unwrap()
            .contains("No such file")
    );
    let denied = s
        .events
        .iter()
        .find(|e| e["event"] == "start_failed" && e["app"] == "not-executable")
        .unwrap();
    assert_eq!(denied["errno"], libc::EACCES);
    s.wait_count("ready", "healthy", 1);
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "the supervisor keeps running"
    );
}

#[test]
fn an_event_reconciles_only_its_own_app() {
    let mut s = Supervised::start_with(
        r#"
apps:
  flaky:
    command: [sh, -c, "echo up; sleep 0.3; exit 1"]
    ready: none
    backoff: {initial: 20ms, factor: 1}
  steady-a:
    command: [sleep, "1000"]
    ready: none
  steady-b:
    command: [sleep, "1000"]
    ready: none
"#,
        &["-v"],
        |_| {},
    );
    s.wait_count("ready", "steady-a", 1);
    s.wait_count("ready", "steady-b", 1);
    // From the first crash on, until the 10 s guard pass, only `flaky` has
    // events: it alone may be reconciled.
    s.wait_for("a crash", |e| e["event"] == "exited" && e["app"] == "flaky");
    let from = s.events.len();
    s.wait_count("exited", "flaky", 3);
    let reconciled: Vec<&str> = s.events[from..]
        .iter()
        .filter(|e| e["event"] == "reconciled")
        .filter_map(|e| e["app"].as_str())
        .collect();
    assert!(reconciled.contains(&"flaky"), "{reconciled:?}");
    assert!(
        reconciled.iter().all(|a| *a == "flaky"),
        "only the dirty app: {reconciled:?}"
    );
}
