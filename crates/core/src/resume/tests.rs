//! A core serialized and restored is the same core: the same down to its
//! `Debug`, and fed the same inputs afterwards it decides the same actions.

use std::str::FromStr;
use std::time::Duration;

use super::super::commands::Order;
use super::super::harness::{Harness, check_answer};
use super::super::worker::State;
use super::super::{Action, Core, Input, Phase};
use model::process::Exit;
use model::spec::{
    AppSpec, Condition, Dependency, Desired, HealthCheck, HealthSpec, Identity, ListenAddress,
    ListenSpec, LogFormat, LogSpec, MaxRestarts, OnDependencyRestart, Overlap, Probe, ProbeKind,
    ProbeSpec, Readiness, RestartPolicy, ScheduleSpec, Template, When,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn round_trip(core: &Core) -> Core {
    model::monotonic::set_anchor(std::time::Instant::now(), 1 << 40);
    let json = serde_json::to_vec(core).expect("a core serializes");
    let restored: Core = serde_json::from_slice(&json).expect("and deserializes");
    let again = serde_json::to_vec(&restored).expect("a restored core serializes");
    assert_eq!(
        String::from_utf8_lossy(&json),
        String::from_utf8_lossy(&again),
        "serializing the restored core gives the same text"
    );
    restored
}

/// Serialize `h`'s core and restore it; check that it is the same, then
/// that the two, resumed, decide the same under the inputs of `follow`.
fn survives(h: &mut Harness, follow: impl Fn(&mut Harness)) {
    assert!(h.core.take_actions().is_empty(), "the harness settled");
    // The turn's budget is not kept: a restored core begins a turn.
    h.core.begin_turn(crate::SPAWNS_PER_TURN);
    let restored = round_trip(&h.core);
    assert_eq!(format!("{:?}", h.core), format!("{restored:?}"));
    assert_eq!(restored.spawn_budget, super::super::SPAWNS_PER_TURN);

    let mut twin = h.around(restored);
    h.actions.clear();
    h.checks.clear();
    for side in [&mut *h, &mut twin] {
        let now = side.now;
        side.core.resumed(now);
    }
    assert_eq!(format!("{:?}", h.core), format!("{:?}", twin.core));
    for side in [&mut *h, &mut twin] {
        side.settle();
        follow(side);
    }
    assert!(!h.actions.is_empty(), "the follow-up did something");
    assert_eq!(h.actions, twin.actions);
    assert_eq!(format!("{:?}", h.core), format!("{:?}", twin.core));
    assert_eq!(h.core.anomalies(), 0);
}

/// Time passes through every moment something is due.
fn wait(h: &mut Harness, by: Duration) {
    h.advance(by, 50 * MS);
}

/// The first live pid of `app`.
fn pid(h: &Harness, app: &str) -> i32 {
    h.pids(app)[0]
}

fn command(h: &mut Harness, order: Order) {
    let now = h.now;
    h.core.command(order, now).expect("the command is taken");
    h.settle();
}

fn states(h: &Harness, app: &str) -> Vec<&'static str> {
    h.core
        .app(app)
        .map(|a| a.workers.values().map(|w| w.state.name()).collect())
        .unwrap_or_default()
}

fn web(instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.kill_timeout = 2 * SEC;
    spec
}

/// Crash, wait, crash: what every scenario goes on with.
fn crash_and_wait(h: &mut Harness) {
    wait(h, 3 * SEC);
    if let Some(&pid) = h.processes.keys().next() {
        h.exit(pid, 1);
    }
    wait(h, 40 * SEC);
}

#[test]
fn ready_instances() {
    let mut h = Harness::new(vec![web(3)]);
    wait(&mut h, 2 * SEC);
    assert_eq!(states(&h, "web"), ["ready"; 3]);
    survives(&mut h, crash_and_wait);
}

#[test]
fn starting_instances_then_not_ready_in_time() {
    let mut spec = web(2);
    spec.ready = Readiness::Notify;
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 2 * SEC);
    assert_eq!(states(&h, "web"), ["starting"; 2]);
    survives(&mut h, |h| {
        let leader = pid(h, "web");
        let now = h.now;
        let notified = Input::Notified {
            leader,
            uid: 1000,
            ready: true,
            status: Some("up".into()),
            watchdog: None,
            extend_timeout: None,
            injected: false,
        };
        h.core.input(notified, now);
        h.settle();
        // The other is not ready within `ready_timeout`.
        wait(h, 35 * SEC);
    });
}

#[test]
fn backoff_and_a_failed_worker() {
    let mut spec = web(2);
    spec.max_restarts = Some(MaxRestarts {
        count: 1,
        within: 60 * SEC,
    });
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 2 * SEC);
    let first = pid(&h, "web");
    h.exit(first, 1);
    wait(&mut h, SEC);
    let again = *h.pids("web").last().unwrap();
    h.exit(again, 1);
    assert!(
        states(&h, "web").contains(&"failed"),
        "{:?}",
        states(&h, "web")
    );
    let other = pid(&h, "web");
    h.exit(other, 1);
    assert!(
        states(&h, "web").contains(&"backoff"),
        "{:?}",
        states(&h, "web")
    );
    survives(&mut h, crash_and_wait);
}

#[test]
fn a_stop_with_its_deadline_and_a_held_instance() {
    let mut h = Harness::new(vec![web(2), {
        let mut spec = AppSpec::with_defaults("api", &["api"], 1);
        spec.restart = RestartPolicy::OnFailure;
        spec
    }]);
    wait(&mut h, 2 * SEC);
    command(
        &mut h,
        Order::Hold {
            target: "api".into(),
        },
    );
    assert_eq!(states(&h, "api"), ["stopped (held)"]);
    h.signals_end = false;
    command(
        &mut h,
        Order::Restart {
            target: "web".into(),
        },
    );
    wait(&mut h, SEC);
    assert_eq!(states(&h, "web"), ["stopping"; 2]);
    survives(&mut h, |h| {
        // SIGKILL at the deadline, then the groups empty.
        wait(h, 2 * SEC);
        for pid in h.pids("web") {
            h.end(
                pid,
                Exit::Signal {
                    signal: 9,
                    core: false,
                },
            );
        }
        h.signals_end = true;
        h.settle();
        command(
            h,
            Order::Release {
                target: "api".into(),
            },
        );
        crash_and_wait(h);
    });
}

#[test]
fn a_rolling_reload_in_progress() {
    let mut h = Harness::new(vec![web(3)]);
    wait(&mut h, 2 * SEC);
    command(&mut h, Order::Reload { app: "web".into() });
    wait(&mut h, 1500 * MS);
    let app = h.core.app("web").unwrap();
    assert!(app.outdated() > 0 && app.replaced() > 0);
    assert!(app.definitions.len() == 2);
    survives(&mut h, |h| wait(h, 10 * SEC));
}

#[test]
fn a_halted_rollout() {
    let mut spec = web(2);
    spec.restart = RestartPolicy::Never;
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 2 * SEC);
    command(&mut h, Order::Reload { app: "web".into() });
    // The replacement (the newest pid) fails before it is ready.
    let newest = *h.processes.keys().last().unwrap();
    h.exit(newest, 1);
    wait(&mut h, SEC);
    assert!(h.core.app("web").unwrap().rollout_halted);
    survives(&mut h, |h| {
        command(h, Order::Reload { app: "web".into() });
        wait(h, 10 * SEC);
    });
}

#[test]
fn a_removed_app_draining_and_a_shutdown() {
    let mut h = Harness::new(vec![web(2), AppSpec::with_defaults("old", &["old"], 2)]);
    wait(&mut h, 2 * SEC);
    h.signals_end = false;
    let now = h.now;
    let apply = Input::Apply {
        desired: Desired {
            source: "/srv/ecosystem.yaml".into(),
            apps: vec![web(2)],
            memory_check: model::spec::defaults::MEMORY_CHECK,
            metrics: Some("127.0.0.1:9100".parse().unwrap()),
        },
        trigger: "edit".into(),
    };
    h.core.input(apply, now);
    h.settle();
    // One leader of the removed app is reaped, its group not yet empty.
    let old = pid(&h, "old");
    h.processes.remove(&old);
    let exited = Input::Exited {
        pid: old,
        exit: Exit::Code(0),
        start_error: None,
    };
    h.core.input(exited, now);
    h.settle();
    assert!(h.core.app("old").unwrap().removed);
    assert_eq!(h.core.draining_groups().collect::<Vec<_>>(), [old]);
    survives(&mut h, |h| {
        let now = h.now;
        h.core.input(Input::GroupEmpty { pgid: old }, now);
        h.core.input(Input::Shutdown { why: "SIGTERM" }, now);
        h.settle();
        assert_eq!(h.core.phase(), Phase::ShuttingDown);
        wait(h, 3 * SEC);
    });
}

fn scheduled(name: &str, when: When) -> AppSpec {
    let mut spec = AppSpec::with_defaults(name, &["job"], 1);
    spec.restart = RestartPolicy::Never;
    spec.ready = Readiness::Immediate;
    spec.schedule = Some(ScheduleSpec {
        when,
        overlap: Overlap::Queue,
        run_on_start: true,
    });
    spec
}

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

fn checked(every: Duration) -> AppSpec {
    let mut spec = web(2);
    spec.ready = Readiness::Immediate;
    spec.health = Some(HealthSpec {
        check: HealthCheck::Probe(ProbeSpec {
            kind: ProbeKind::Http,
            written: Template::parse("127.0.0.1:{instance+9000}").unwrap(),
            targets: (0..2)
                .map(|i| Probe::Http {
                    address: ([127, 0, 0, 1], 9000 + i).into(),
                    path: "/health".into(),
                })
                .collect(),
        }),
        every,
        timeout: 2 * SEC,
        failures: 2,
        grace: Duration::ZERO,
    });
    spec
}

/// Answer every check ordered since the last call: `passed`.
fn answer_checks(h: &mut Harness, passed: bool) {
    let now = h.now;
    for order in std::mem::take(&mut h.checks) {
        h.core.input(check_answer(&order, passed), now);
    }
    h.settle();
}

#[test]
fn health_checks_in_flight_are_ordered_again_at_once_and_not_counted() {
    let mut h = Harness::new(vec![checked(SEC)]);
    wait(&mut h, 1100 * MS);
    assert_eq!(h.checks.len(), 2, "a check of each instance is out");
    let in_flight = |h: &Harness| {
        h.core
            .app("web")
            .unwrap()
            .workers
            .values()
            .filter(|w| w.health.in_flight.is_some())
            .count()
    };
    assert_eq!(in_flight(&h), 2);
    // The original, kept, would time the checks out and count failures.
    let json = serde_json::to_vec(&h.core).unwrap();
    let mut restored: Core = serde_json::from_slice(&json).unwrap();
    let now = h.now;
    restored.resumed(now);
    restored.converge(now);
    let orders: Vec<_> = restored
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Check(order) => Some(order),
            _ => None,
        })
        .collect();
    assert_eq!(orders.len(), 2, "both checks are ordered again at once");
    let numbers: Vec<u64> = h.checks.iter().map(|c| c.check).collect();
    assert!(
        orders.iter().all(|o| !numbers.contains(&o.check)),
        "with new numbers"
    );
    let app = restored.app("web").unwrap();
    assert!(app.workers.values().all(|w| w.health.failures == 0));
    assert_eq!(restored.broken(), 0);

    survives(&mut h, |h| {
        answer_checks(h, true);
        wait(h, 1100 * MS);
        answer_checks(h, false);
        wait(h, 1100 * MS);
        answer_checks(h, false);
        wait(h, 5 * SEC);
    });
}

#[test]
fn an_armed_watchdog() {
    let mut spec = web(1);
    spec.ready = Readiness::Immediate;
    spec.process.watchdog = Some(3 * SEC);
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, SEC);
    let worker = h.core.app("web").unwrap().workers.values().next().unwrap();
    assert!(worker.watchdog.is_some());
    survives(&mut h, |h| {
        let leader = pid(h, "web");
        let now = h.now;
        let ping = Input::Notified {
            leader,
            uid: 1000,
            ready: false,
            status: None,
            watchdog: Some(model::orders::WatchdogMessage::Ping),
            extend_timeout: None,
            injected: false,
        };
        h.core.input(ping, now);
        h.settle();
        // Silent past its deadline: stopped with `watchdog_signal`.
        wait(h, 10 * SEC);
    });
}

#[test]
fn a_memory_measurement_out_is_ordered_again_at_once() {
    let mut spec = web(2);
    spec.max_memory = Some(1 << 20);
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 5100 * MS);
    assert!(h.core.measuring.is_some());
    let round = h.core.memory_rounds;
    let mut restored = round_trip(&h.core);
    let now = h.now;
    restored.resumed(now);
    let measure: Vec<_> = restored
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::MeasureMemory { round, pids } => Some((round, pids.len())),
            _ => None,
        })
        .collect();
    assert_eq!(measure, [(round + 1, 2)]);
    // The lost measurement's answer is not taken, the new one's is.
    let usage = |pid| vec![(pid, 2 << 20)];
    let first = pid(&h, "web");
    restored.input(
        Input::MemoryMeasured {
            round,
            usage: usage(first),
        },
        now,
    );
    assert_eq!(restored.broken(), 0);
    restored.input(
        Input::MemoryMeasured {
            round: round + 1,
            usage: usage(first),
        },
        now,
    );
    assert_eq!(restored.broken(), 1);

    survives(&mut h, |h| {
        let round = h.core.memory_rounds;
        let now = h.now;
        let first = pid(h, "web");
        h.core.input(
            Input::MemoryMeasured {
                round,
                usage: usage(first),
            },
            now,
        );
        h.settle();
        wait(h, 12 * SEC);
    });
}

/// Every field of a spec that has one, set: they all come back.
#[test]
fn a_spec_with_everything_set_round_trips() {
    let mut spec = web(2);
    spec.process.program = Some("/usr/bin/server".into());
    spec.process.shell = true;
    spec.process.env = vec![("PORT".into(), Template::parse("{instance+8000}").unwrap())];
    spec.process.listen = vec![
        ListenSpec {
            name: "http".into(),
            address: ListenAddress::Tcp("[::]:8080".parse().unwrap()),
            reuseport: true,
            inject: true,
        },
        ListenSpec {
            name: "admin".into(),
            address: ListenAddress::Unix("/run/web.sock".into()),
            reuseport: false,
            inject: false,
        },
    ];
    spec.process.identity = Some(Identity {
        user: "www".into(),
        uid: 33,
        gid: 33,
        groups: vec![33, 4],
        home: "/var/www".into(),
    });
    spec.instances_from_max = true;
    spec.ready = Readiness::Delay(250 * MS);
    spec.backoff.factor = 1.1;
    spec.stop_signal = model::Signal::SIGQUIT;
    spec.watchdog_signal = model::Signal::SIGUSR2;
    spec.health = Some(HealthSpec {
        check: HealthCheck::Exec(vec![Template::literal("check"), Template::literal("-q")]),
        every: 5 * SEC,
        timeout: SEC,
        failures: 3,
        grace: 10 * SEC,
    });
    spec.log = Some(LogSpec {
        file: "/var/log/web-{instance}.log".into(),
        max_size: 1 << 20,
        keep: 3,
        format: LogFormat::Json,
    });
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, SEC);
    survives(&mut h, crash_and_wait);
    let restored = round_trip(&h.core);
    assert_eq!(restored.desired(), h.core.desired());
    assert_eq!(
        restored.app("web").unwrap().spec,
        h.core.app("web").unwrap().spec
    );
}

#[test]
fn an_unknown_signal_or_timezone_is_refused_with_its_name() {
    let h = Harness::new(vec![scheduled(
        "cron",
        When::Cron {
            cron: croner::Cron::from_str("0 3 * * *").unwrap(),
            timezone: chrono_tz::America::New_York,
        },
    )]);
    let json = serde_json::to_string(&h.core).unwrap();
    assert!(json.contains("\"SIGTERM\"") && json.contains("\"America/New_York\""));
    for (good, bad, word) in [
        ("\"SIGTERM\"", "\"SIGNOPE\"", "SIGNOPE"),
        ("\"America/New_York\"", "\"Mars/Olympus\"", "Mars/Olympus"),
        ("\"0 3 * * *\"", "\"0 3 * *\"", "0 3 * *"),
    ] {
        let broken = json.replacen(good, bad, 1);
        let error = serde_json::from_str::<Core>(&broken)
            .unwrap_err()
            .to_string();
        assert!(error.contains(word), "{error}");
    }
}

#[test]
fn a_worker_spawning_at_the_handover_is_an_anomaly() {
    let h = Harness::new(vec![web(1)]);
    let mut core = round_trip(&h.core);
    let now = h.now;
    // As if the spawn had been ordered and not answered.
    let app = core.apps.get_mut("web").unwrap();
    let worker = app.workers.values_mut().next().unwrap();
    worker.state = State::Spawning;
    core.resumed(now);
    assert_eq!(core.anomalies(), 1);
}
