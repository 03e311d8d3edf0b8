//! What an app's starts wait for, restored: its schedule (with its next run)
//! and its dependencies (waiting, held).

use super::*;

#[test]
fn schedules_with_their_next_run() {
    let cron = When::Cron {
        cron: croner::Cron::from_str("*/5 * * * *").unwrap(),
        timezone: chrono_tz::Europe::Paris,
    };
    let mut h = Harness::new(vec![
        scheduled("every", When::Every(10 * SEC)),
        scheduled("cron", cron),
    ]);
    let now = h.now;
    h.core.set_wall_clock(
        humantime::parse_rfc3339("2026-03-29T00:58:00Z").unwrap(),
        now,
    );
    wait(&mut h, SEC);
    let pid = pid(&h, "every");
    h.exit(pid, 0);
    let runs = h.core.app("every").unwrap().runs.clone().unwrap();
    assert!(runs.next_at.is_some() && runs.last.is_some());
    // The cron run that was due when the wall clock came queued one
    // behind it; `every`'s ended, and a trigger starts another.
    let cron = h.core.app("cron").unwrap().runs.clone().unwrap();
    assert!(cron.armed && cron.queued == 1 && cron.next_wall.is_some());
    command(
        &mut h,
        Order::Trigger {
            app: "every".into(),
        },
    );
    survives(&mut h, |h| {
        for pid in h.pids("cron") {
            h.exit(pid, 0);
        }
        // Through the next cron time (01:00 UTC) and a few `every` ticks.
        for _ in 0..25 {
            wait(h, 5 * SEC);
            for pid in h.processes.keys().copied().collect::<Vec<_>>() {
                h.exit(pid, 0);
            }
        }
    });
}

fn on(app: &str, condition: Condition) -> Dependency {
    Dependency {
        app: app.into(),
        condition,
    }
}

#[test]
fn dependencies_waiting_and_held() {
    let mut db = AppSpec::with_defaults("db", &["db"], 1);
    db.ready = Readiness::Notify;
    let mut migrate = AppSpec::with_defaults("migrate", &["migrate"], 1);
    migrate.restart = RestartPolicy::Never;
    migrate.ready = Readiness::Immediate;
    let mut api = AppSpec::with_defaults("api", &["api"], 2);
    api.depends_on = vec![on("db", Condition::Ready)];
    api.on_dependency_restart = OnDependencyRestart::Restart;
    let mut worker = AppSpec::with_defaults("worker", &["worker"], 1);
    worker.depends_on = vec![on("migrate", Condition::Completed)];
    let mut h = Harness::new(vec![db, migrate, api, worker]);
    let migration = pid(&h, "migrate");
    h.exit(migration, 1);
    wait(&mut h, 2 * SEC);
    let gate = |h: &Harness, app: &str| h.core.app(app).unwrap().gate.describe();
    assert!(gate(&h, "api").is_some_and(|g| g.starts_with("waiting")));
    assert!(gate(&h, "worker").is_some_and(|g| g.starts_with("held")));
    survives(&mut h, |h| {
        let leader = pid(h, "db");
        let now = h.now;
        let notified = Input::Notified {
            leader,
            uid: 1000,
            ready: true,
            status: None,
            watchdog: None,
            extend_timeout: None,
            injected: false,
        };
        h.core.input(notified, now);
        h.settle();
        wait(h, 3 * SEC);
        command(
            h,
            Order::Restart {
                target: "db".into(),
            },
        );
        crash_and_wait(h);
    });
}
