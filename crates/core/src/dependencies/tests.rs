//! Dependencies in the core: gates, holds, shutdown order and
//! `on_dependency_restart`, driven through the core's inputs.

use std::time::Duration;

use super::super::harness::Harness;
use super::Gate;
use crate::{Event, Input};
use model::spec::{AppSpec, Condition, Dependency, OnDependencyRestart, Readiness, RestartPolicy};

const STEP: Duration = Duration::from_millis(100);

fn app(name: &str, instances: u32, ready_after: Duration) -> AppSpec {
    let mut spec = AppSpec::with_defaults(name, &[name], instances);
    spec.ready = Readiness::Delay(ready_after);
    spec
}

fn on(app: &str, condition: Condition) -> Dependency {
    Dependency {
        app: app.to_string(),
        condition,
    }
}

fn one_shot(name: &str) -> AppSpec {
    let mut spec = app(name, 1, Duration::ZERO);
    spec.restart = RestartPolicy::Never;
    spec
}

/// db (ready after 1 s) ← migrate (one-shot) ← api, worker.
fn stack() -> Vec<AppSpec> {
    let db = app("db", 1, Duration::from_secs(1));
    let mut migrate = one_shot("migrate");
    migrate.depends_on = vec![on("db", Condition::Ready)];
    let mut api = app("api", 2, Duration::ZERO);
    api.depends_on = vec![
        on("migrate", Condition::Completed),
        on("db", Condition::Ready),
    ];
    let mut worker = app("worker", 1, Duration::ZERO);
    worker.depends_on = vec![on("migrate", Condition::Completed)];
    vec![worker, api, migrate, db]
}

fn first_spawn(h: &Harness, app: &str) -> Option<std::time::Instant> {
    h.spawns.iter().find(|(_, a)| a == app).map(|(t, _)| *t)
}

#[test]
fn a_stack_starts_in_dependency_order_whatever_the_file_order() {
    let mut h = Harness::new(stack());
    assert_eq!(h.pids("db").len(), 1);
    assert!(h.pids("migrate").is_empty() && h.pids("api").is_empty());
    assert_eq!(
        h.core.app("api").unwrap().gate,
        Gate::Waiting(vec!["migrate (completed)".into(), "db (ready)".into()])
    );
    assert_eq!(
        h.core.app("migrate").unwrap().gate.describe().as_deref(),
        Some("waiting for db (ready)")
    );
    h.advance(Duration::from_secs(1), STEP);
    let migrate = h.pids("migrate");
    assert_eq!(migrate.len(), 1, "migrate runs once db is ready");
    assert!(h.pids("api").is_empty());
    h.advance(Duration::from_millis(500), STEP);
    h.exit(migrate[0], 0);
    assert_eq!(h.pids("api").len(), 2);
    assert_eq!(h.pids("worker").len(), 1);
    let (db, migrate, api) = (
        first_spawn(&h, "db").unwrap(),
        first_spawn(&h, "migrate").unwrap(),
        first_spawn(&h, "api").unwrap(),
    );
    assert!(db < migrate && migrate < api);
    assert_eq!(
        h.count(|e| matches!(e, Event::DependenciesMet { app } if app == "api")),
        1
    );
    assert_eq!(h.core.anomalies(), 0);
}

#[test]
fn a_failed_one_shot_holds_its_dependents_until_it_is_fixed_in_the_file() {
    let mut h = Harness::new(stack());
    h.advance(Duration::from_secs(1), STEP);
    let migrate = h.pids("migrate")[0];
    h.exit(migrate, 1);
    assert!(h.pids("api").is_empty() && h.pids("worker").is_empty());
    let gate = h.core.app("api").unwrap().gate.clone();
    assert_eq!(
        gate.describe().as_deref(),
        Some("held: migrate exited with code 1")
    );
    assert_eq!(
        h.count(|e| matches!(e, Event::DependencyFailed { app, .. } if app == "worker")),
        1
    );
    // Time alone changes nothing.
    h.advance(Duration::from_secs(30), Duration::from_secs(1));
    assert!(h.pids("api").is_empty() && h.pids("migrate").is_empty());
    // The migration fixed in the file runs again, and the stack comes up.
    let mut fixed = stack();
    fixed[2].process.argv = vec![model::spec::Template::literal("migrate --fixed")];
    let desired = model::spec::Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: fixed,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let now = h.now;
    h.core.input(
        Input::Apply {
            desired,
            trigger: "test".into(),
        },
        now,
    );
    h.settle();
    let migrate = h.pids("migrate");
    assert_eq!(migrate.len(), 1, "the fixed migration runs");
    h.exit(migrate[0], 0);
    assert_eq!(h.pids("api").len(), 2);
    assert!(h.core.app("api").unwrap().gate.is_open());
}

#[test]
fn shutdown_stops_dependents_first_and_each_app_fully_before_what_it_needs() {
    let mut h = Harness::new(stack());
    h.advance(Duration::from_secs(1), STEP);
    let migrate = h.pids("migrate")[0];
    h.exit(migrate, 0);
    h.advance(Duration::from_secs(1), STEP);
    h.signals_end = false;
    let now = h.now;
    h.core.input(Input::Shutdown { why: "SIGTERM" }, now);
    h.settle();
    let signalled =
        |h: &Harness| -> Vec<String> { h.signals.iter().map(|s| s.0.clone()).collect() };
    assert_eq!(signalled(&h), ["worker", "api", "api"]);
    // db gets its signal only once every api process is gone.
    let api = h.pids("api");
    h.exit(api[0], 0);
    assert!(!signalled(&h).contains(&"db".to_string()));
    h.exit(api[1], 0);
    assert!(
        !signalled(&h).contains(&"db".to_string()),
        "worker still runs"
    );
    let worker = h.pids("worker")[0];
    h.exit(worker, 0);
    assert_eq!(signalled(&h).last().map(String::as_str), Some("db"));
    let db = h.pids("db")[0];
    h.exit(db, 0);
    assert!(h.core.finished());
}

#[test]
fn with_restart_a_dependent_is_replaced_once_every_dependency_instance_was() {
    for policy in [OnDependencyRestart::Restart, OnDependencyRestart::Ignore] {
        let db = app("db", 2, Duration::from_secs(1));
        let mut api = app("api", 2, Duration::ZERO);
        api.depends_on = vec![on("db", Condition::Ready)];
        api.on_dependency_restart = policy;
        let mut h = Harness::new(vec![db, api]);
        h.advance(Duration::from_secs(2), STEP);
        let api_before = h.pids("api");
        assert_eq!(api_before.len(), 2);
        // One db instance restarting is not all of them.
        let db_pids = h.pids("db");
        h.end(db_pids[0], model::process::Exit::Code(1));
        h.settle();
        h.advance(Duration::from_secs(3), STEP);
        assert_eq!(h.pids("api"), api_before, "{policy:?}");
        h.end(db_pids[1], model::process::Exit::Code(1));
        h.settle();
        h.advance(Duration::from_secs(5), STEP);
        let replaced = h.count(|e| matches!(e, Event::DependencyRestarted { .. }));
        match policy {
            OnDependencyRestart::Restart => {
                assert_eq!(replaced, 1);
                let api_after = h.pids("api");
                assert_eq!(api_after.len(), 2);
                assert!(api_after.iter().all(|p| !api_before.contains(p)));
            }
            OnDependencyRestart::Ignore => {
                assert_eq!(replaced, 0);
                assert_eq!(h.pids("api"), api_before);
            }
        }
        assert_eq!(h.core.anomalies(), 0);
    }
}

#[test]
fn a_dependency_of_no_instances_is_met_and_started_needs_the_program_running() {
    let idle = app("idle", 0, Duration::ZERO);
    let slow = app("slow", 1, Duration::from_secs(60));
    let mut api = app("api", 1, Duration::ZERO);
    api.depends_on = vec![on("idle", Condition::Ready), on("slow", Condition::Started)];
    let h = Harness::new(vec![idle, slow, api]);
    // `slow` runs its program (not ready for a minute): started is met.
    assert_eq!(h.pids("api").len(), 1);
}

#[test]
fn a_dependency_that_gives_up_holds_and_running_dependents_keep_running() {
    let mut db = app("db", 1, Duration::ZERO);
    db.max_restarts = Some(model::spec::MaxRestarts {
        count: 1,
        within: Duration::from_secs(60),
    });
    let mut api = app("api", 1, Duration::ZERO);
    api.depends_on = vec![on("db", Condition::Ready)];
    let mut h = Harness::new(vec![db, api]);
    let api_pid = h.pids("api");
    assert_eq!(api_pid.len(), 1);
    for _ in 0..2 {
        let db = h.pids("db")[0];
        h.exit(db, 1);
        h.advance(Duration::from_secs(2), STEP);
    }
    assert!(h.pids("db").is_empty());
    let gate = h.core.app("api").unwrap().gate.clone();
    assert!(
        matches!(gate, Gate::Blocked { ref dependency, .. } if dependency == "db"),
        "{gate:?}"
    );
    assert_eq!(h.pids("api"), api_pid, "what runs keeps running");
    // A crash of api now waits: nothing starts while db is failed.
    h.exit(api_pid[0], 1);
    h.advance(Duration::from_secs(5), STEP);
    assert!(h.pids("api").is_empty());
}

#[test]
fn a_cycle_that_slipped_through_still_shuts_down() {
    let mut h = Harness::new(vec![
        app("a", 1, Duration::ZERO),
        app("b", 1, Duration::ZERO),
    ]);
    assert_eq!((h.pids("a").len(), h.pids("b").len()), (1, 1));
    // An edit that `check` would refuse, applied all the same.
    let mut a = app("a", 1, Duration::ZERO);
    a.depends_on = vec![on("b", Condition::Started)];
    let mut b = app("b", 1, Duration::ZERO);
    b.depends_on = vec![on("a", Condition::Started)];
    let desired = model::spec::Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![a, b],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let now = h.now;
    let trigger = "test".to_string();
    h.core.input(Input::Apply { desired, trigger }, now);
    h.settle();
    h.core.input(Input::Shutdown { why: "SIGTERM" }, now);
    h.settle();
    assert!(h.core.finished());
    assert_eq!(h.signals.len(), 2);
}

#[test]
fn a_one_shot_that_completes_was_not_restarted() {
    let mut setup = one_shot("setup");
    setup.ready = Readiness::Immediate;
    let mut api = app("api", 1, Duration::ZERO);
    api.depends_on = vec![on("setup", Condition::Ready)];
    api.on_dependency_restart = OnDependencyRestart::Restart;
    let mut h = Harness::new(vec![setup, api]);
    let before = h.pids("api");
    assert_eq!(before.len(), 1, "setup is ready while it runs");
    let setup = h.pids("setup")[0];
    h.exit(setup, 0);
    h.advance(Duration::from_secs(2), STEP);
    assert_eq!(
        h.count(|e| matches!(e, Event::DependencyRestarted { .. })),
        0
    );
    assert_eq!(h.pids("api"), before);
}

/// A one-shot still running its first run is edited; the new run ends with
/// an error before it is ready, so the rollout halts and keeps the old run.
/// When that old run fails too, nothing runs the one-shot again without a
/// change: its dependents are held with the reason, not left waiting.
#[test]
fn a_halted_one_shot_whose_kept_run_fails_holds_its_dependents() {
    let mut setup = one_shot("setup");
    setup.ready = Readiness::Delay(Duration::from_secs(1));
    let mut api = app("api", 1, Duration::ZERO);
    api.depends_on = vec![on("setup", Condition::Completed)];
    let mut h = Harness::new(vec![setup.clone(), api.clone()]);
    h.advance(Duration::from_secs(1), STEP);
    let old = h.pids("setup");
    assert_eq!(old.len(), 1, "the first run is under way");
    let mut edited = setup;
    edited.process.argv = vec![model::spec::Template::literal("setup --v2")];
    let desired = model::spec::Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![edited, api],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let now = h.now;
    h.core.input(
        Input::Apply {
            desired,
            trigger: "test".into(),
        },
        now,
    );
    h.settle();
    let new: Vec<i32> = h
        .pids("setup")
        .into_iter()
        .filter(|p| !old.contains(p))
        .collect();
    assert_eq!(new.len(), 1, "the new run starts beside the old one");
    h.exit(new[0], 1);
    assert!(h.core.app("setup").unwrap().rollout_halted);
    assert_eq!(
        h.core.app("api").unwrap().gate.describe().as_deref(),
        Some("waiting for setup (completed)"),
        "the old run may still complete"
    );
    assert_eq!(
        h.count(|e| matches!(e, Event::DependencyFailed { app, .. } if app == "api")),
        0,
        "no hold while the old run went on"
    );
    h.exit(old[0], 1);
    assert_eq!(
        h.core.app("api").unwrap().gate.describe().as_deref(),
        Some("held: setup exited with code 1")
    );
    assert!(h.pids("api").is_empty());
    assert_eq!(
        h.count(|e| matches!(e, Event::DependencyFailed { app, .. } if app == "api")),
        1
    );
}
