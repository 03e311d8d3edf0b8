//! A whole stack from one file, with real processes: dependencies (start
//! order, waiting, held by a failed one-shot, shutdown order,
//! `on_dependency_restart`), schedules with each `overlap`, `trigger`, and
//! live edits of `depends_on`.

use std::time::Duration;

use crate::common::{Supervised, app_status, free_port, save, status_json, timestamp_ms};
use serde_json::Value;

/// db listens on `port` after 1 s (ready by a tcp probe) ← migrate (a
/// one-shot running `migration`) ← api (2 instances on a shared socket),
/// worker.
fn stack(port: u16, migration: &str, extra_api: &str) -> String {
    format!(
        r#"
apps:
  api:
    command: sleep 1000
    instances: 2
    listen: 127.0.0.1:0
    ready: none
    depends_on:
      migrate: completed
      db: ready
{extra_api}
  worker:
    command: sleep 1000
    ready: none
    depends_on: {{migrate: completed}}
  migrate:
    command: {migration}
    restart: never
    ready: none
    depends_on: [db]
  db:
    command: >-
      python3 -c "import socket, time; time.sleep(1);
      s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
      s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(1000)"
    ready: {{tcp: "127.0.0.1:{port}"}}
"#
    )
}

fn first(s: &Supervised, name: &str, app: &str) -> f64 {
    s.events
        .iter()
        .find(|e| e["event"] == name && e["app"] == app)
        .map(timestamp_ms)
        .unwrap_or_else(|| panic!("no {name} of {app}\n{}", s.dump()))
}

fn last(s: &Supervised, name: &str, app: &str) -> f64 {
    s.events
        .iter()
        .filter(|e| e["event"] == name && e["app"] == app)
        .map(timestamp_ms)
        .next_back()
        .unwrap_or_else(|| panic!("no {name} of {app}\n{}", s.dump()))
}

fn worker_states(status: &Value, app: &str) -> Vec<String> {
    app_status(status, app)["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| w["state"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_stack_starts_in_dependency_order_and_stops_in_reverse() {
    let port = free_port();
    let mut s = Supervised::start(&stack(port, "sleep 0.3", ""));
    s.wait_event("spawned", "db");
    // db is not ready for a second: everything else waits, and says so.
    let status = status_json(&s);
    assert_eq!(
        app_status(&status, "api")["waiting"],
        "waiting for migrate (completed), db (ready)",
        "{status}"
    );
    assert_eq!(
        worker_states(&status, "migrate"),
        ["waiting for db (ready)"],
        "{status}"
    );
    let table =
        String::from_utf8_lossy(&crate::common::run_client(&s, &["status"]).stdout).into_owned();
    assert!(table.contains("waiting for db (ready)"), "{table}");
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    let db_ready = first(&s, "ready", "db");
    let migrate_started = first(&s, "spawned", "migrate");
    let migrate_done = first(&s, "exited", "migrate");
    assert!(db_ready <= migrate_started, "{}", s.dump());
    for app in ["api", "worker"] {
        assert!(migrate_done <= first(&s, "spawned", app), "{}", s.dump());
    }
    assert_eq!(s.count("spawned", "api"), 2);
    // Shutdown: api and worker stop fully before db gets its signal.
    s.signal(libc::SIGTERM);
    assert!(
        s.wait_exit(Duration::from_secs(15)).success(),
        "{}",
        s.dump()
    );
    let db_stopping = first(&s, "stopping", "db");
    for app in ["api", "worker"] {
        assert!(last(&s, "stopped", app) <= db_stopping, "{}", s.dump());
    }
}

#[test]
fn a_failing_migration_holds_the_stack_until_it_is_fixed_in_the_file() {
    let port = free_port();
    let mut s = Supervised::start(&stack(port, "sh -c 'echo migration failed; exit 1'", ""));
    s.wait_line("migration failed");
    let held = s.wait_event("dependency_failed", "api");
    assert_eq!(held["dependency"], "migrate", "{held}");
    let status = status_json(&s);
    for app in ["api", "worker"] {
        assert_eq!(
            app_status(&status, app)["waiting"],
            "held: migrate exited with code 1",
            "{status}"
        );
        assert_eq!(app_status(&status, app)["running"], 0, "{status}");
    }
    // Held (status says so, not waiting for anything to come): nothing of
    // theirs was started, by anything done before the barrier.
    s.barrier();
    assert_eq!(
        s.count("spawned", "api") + s.count("spawned", "worker"),
        0,
        "{}",
        s.dump()
    );
    save(&s, &stack(port, "sh -c 'echo migrated'", ""));
    s.wait_line("migrated");
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    assert_eq!(s.count("spawned", "api"), 2);
    assert_eq!(s.count("spawned", "worker"), 1);
}

#[test]
fn on_dependency_restart_replaces_only_the_apps_that_ask_for_it() {
    let yaml = r#"
apps:
  db:
    command: sleep 1000
    instances: 2
    ready: {delay: 300ms}
  follows:
    command: sleep 1000
    ready: none
    depends_on: [db]
    on_dependency_restart: restart
  keeps:
    command: sleep 1000
    ready: none
    depends_on: [db]
"#;
    let mut s = Supervised::start(yaml);
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    let (follows, keeps) = (s.running_pids("follows"), s.running_pids("keeps"));
    for pid in s.running_pids("db") {
        // SAFETY: a worker this test's supervisor started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    let restarted = s.wait_event("dependency_restarted", "follows");
    assert_eq!(restarted["dependency"], "db", "{restarted}");
    s.wait_count("spawned", "follows", 2);
    assert!(first(&s, "ready", "db") < last(&s, "spawned", "follows"));
    let replaced = s.until(Duration::from_secs(10), |s| {
        let now = s.running_pids("follows");
        now.len() == 1 && now != follows
    });
    assert!(replaced, "{}", s.dump());
    assert_eq!(s.running_pids("keeps"), keeps, "{}", s.dump());
    assert_eq!(s.count("dependency_restarted", "keeps"), 0);
}

/// Three jobs every second, each running 2.5 s, one per `overlap`.
const JOBS: &str = r#"
apps:
  skip:
    command: sh -c 'echo skip; sleep 2.5'
    schedule: {every: 1s}
    overlap: skip
  queue:
    command: sh -c 'echo queue; sleep 2.5'
    schedule: {every: 1s}
    overlap: queue
  replace:
    command: sh -c 'echo replace; sleep 2.5'
    schedule: {every: 1s}
    overlap: replace
"#;

#[test]
fn every_second_a_job_of_two_and_a_half_seconds_in_each_overlap_mode() {
    let mut s = Supervised::start(JOBS);
    // The schedules count from the first apply.
    let start = timestamp_ms(&s.wait_for("the first apply", |e| {
        e["event"] == "applied" && e["file_version"] == 1
    }));
    // Runs started within 5.5 s: ticks at 1, 2, 3, 4, 5 s. The tick of 6 s
    // (replace runs on every tick) comes after every earlier tick of every
    // app has been handled: the window is closed.
    for _ in 0..6 {
        s.wait_for("a tick of replace", |e| {
            e["event"] == "run_due" && e["app"] == "replace" && e["why"] == "schedule"
        });
    }
    let started_by = |app: &str| {
        s.events
            .iter()
            .filter(|e| e["event"] == "spawned" && e["app"] == app)
            .filter(|e| timestamp_ms(e) - start < 5500.0)
            .count()
    };
    // skip: 1 s and 4 s (2, 3 and 5 are skipped).
    assert_eq!(started_by("skip"), 2, "{}", s.dump());
    // queue: 1 s, then 3.5 s (the tick of 2 s, queued); 6 s after.
    assert_eq!(started_by("queue"), 2, "{}", s.dump());
    assert!(s.count("run_queued", "queue") >= 2, "{}", s.dump());
    // replace: every tick.
    assert_eq!(started_by("replace"), 5, "{}", s.dump());
    assert!(s.count("run_skipped", "skip") >= 3, "{}", s.dump());
    let status = status_json(&s);
    let skip = &app_status(&status, "skip")["schedule"];
    assert!(
        skip["next_in_s"].as_f64().is_some_and(|s| s <= 1.0),
        "{status}"
    );
    assert_eq!(skip["last_result"], "exit 0", "{status}");
    assert!(
        skip["last_took_s"]
            .as_f64()
            .is_some_and(|t| (2.4..4.0).contains(&t)),
        "{status}"
    );
    let table =
        String::from_utf8_lossy(&crate::common::run_client(&s, &["status"]).stdout).into_owned();
    assert!(table.contains("last run exit 0, took 2.5s"), "{table}");
}

#[test]
fn trigger_runs_a_scheduled_job_now_and_overlap_refuses_a_second() {
    let mut s = Supervised::start(
        r#"
apps:
  nightly:
    command: sh -c 'echo cleaning; sleep 2'
    schedule: "0 3 * * *"
    timezone: UTC
"#,
    );
    // Applied: the control socket is bound (`control_listening` comes
    // first) and the schedule is set, so status shows it.
    s.wait_for("the first apply", |e| {
        e["event"] == "applied" && e["file_version"] == 1
    });
    let status = status_json(&s);
    let schedule = &app_status(&status, "nightly")["schedule"];
    assert!(
        schedule["next_run"]
            .as_str()
            .is_some_and(|t| t.ends_with("T03:00:00Z")),
        "{status}"
    );
    assert_eq!(worker_states(&status, "nightly"), ["scheduled"], "{status}");
    let trigger = crate::common::run_client(&s, &["trigger", "nightly"]);
    assert!(trigger.status.success(), "{trigger:?}");
    s.wait_line("cleaning");
    let again = crate::common::run_client(&s, &["trigger", "nightly"]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("a run is going; overlap: skip"),
        "{again:?}"
    );
    s.wait_for("the run's end", |e| {
        e["event"] == "run_ended" && e["app"] == "nightly"
    });
    let web = crate::common::run_client(&s, &["trigger", "nope"]);
    assert!(
        String::from_utf8_lossy(&web.stderr).contains("no app `nope`"),
        "{web:?}"
    );
}

#[test]
fn a_dependency_added_live_restarts_nothing_and_removing_a_needed_app_is_refused() {
    let before = r#"
apps:
  db:
    command: sleep 1000
    ready: none
  api:
    command: sleep 1000
    ready: none
"#;
    let with_dependency = r#"
apps:
  db:
    command: sleep 1000
    ready: none
  api:
    command: sleep 1000
    ready: none
    depends_on: [db]
"#;
    let without_db = r#"
apps:
  api:
    command: sleep 1000
    ready: none
    depends_on: [db]
"#;
    let mut s = Supervised::start(before);
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    let (db, api) = (s.running_pids("db"), s.running_pids("api"));
    save(&s, with_dependency);
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    save(&s, without_db);
    s.wait_for("the refusal", |e| e["event"] == "config_invalid");
    let status = status_json(&s);
    let error = status["config_error"].as_str().unwrap_or_default();
    assert!(error.contains("db"), "{status}");
    assert_eq!(s.running_pids("db"), db);
    assert_eq!(s.running_pids("api"), api);
    assert_eq!(s.count("stopping", "db") + s.count("stopping", "api"), 0);
}
