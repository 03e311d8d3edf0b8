//! Scenarios written by hand rather than drawn from a seed: holds against
//! rollouts, a cron job across a set clock, large starts in turns, `inject`
//! warnings, memory ceilings and running out of file descriptors, each
//! played through the world (and its invariants) to a stated outcome.

use std::time::{Duration, Instant};

use model::spec::{
    AppSpec, Desired, ListenAddress, ListenSpec, Overlap, Readiness, RestartPolicy, ScheduleSpec,
    When,
};
use sim::fake::FakeEffects;
use sim::{CommandKind, Edit, Step, World, app, ending_on_its_own};
use supervise::supervisor::{News, Supervisor};
use supervise_core::SPAWNS_PER_TURN;

use crate::play::replay;
use crate::schedule::seeded_app;

/// Issue 28: `stop APP` during a rollout held the four instances, and
/// the slots the rollout had not reached started again at once (their old
/// workers were held, then superseded by new ones); `stop APP.N` the same,
/// and a `reload` started an instance `stop APP.N` held. A hold wins over
/// every rollout, reload and restart until `start` (the world keeps the
/// holds itself and fails any spawn for a held slot).
#[test]
fn issue_28_a_hold_wins_over_rollouts_reloads_and_restarts_until_start() {
    let web = || {
        seeded_app(
            "app0",
            4,
            Readiness::Delay(Duration::from_millis(300)),
            (1, 0),
            RestartPolicy::Always,
            None,
            400,
        )
    };
    let command = |kind, slot| Step::Command { kind, app: 0, slot };
    // The whole app, during a rollout of a new definition, then a reload
    // and a restart while held; `start` at last.
    replay(
        vec![web()],
        vec![
            Step::Wait(1000),
            Step::Edit(Edit::Env { app: 0, value: 1 }),
            Step::Wait(100),
            command(CommandKind::Stop, None),
            Step::Wait(3000),
            command(CommandKind::Reload, None),
            Step::Wait(3000),
            command(CommandKind::Restart, None),
            Step::Wait(3000),
            command(CommandKind::Start, None),
            Step::Wait(3000),
        ],
    );
    // One instance, during a `reload`; then reloads and restarts of the
    // app go past it, and it stays held to the end.
    replay(
        vec![web()],
        vec![
            Step::Wait(1000),
            command(CommandKind::Reload, None),
            Step::Wait(100),
            command(CommandKind::Stop, Some(3)),
            Step::Wait(3000),
            command(CommandKind::Reload, None),
            Step::Wait(3000),
            command(CommandKind::Restart, None),
            Step::Wait(1000),
            command(CommandKind::Restart, Some(3)),
            Step::Crash {
                process: 1,
                code: 1,
            },
            Step::Wait(3000),
        ],
    );
    // A hold of the first slot before a rollout, the slot not reached yet
    // stopped in it, a crash while held, and the file changed (which
    // releases the holds of that app).
    replay(
        vec![web()],
        vec![
            Step::Wait(1000),
            command(CommandKind::Stop, Some(0)),
            Step::Edit(Edit::Env { app: 0, value: 2 }),
            Step::Wait(50),
            command(CommandKind::Stop, Some(2)),
            Step::Crash {
                process: 0,
                code: 1,
            },
            Step::Wait(3000),
            Step::Edit(Edit::Env { app: 0, value: 3 }),
            Step::Wait(3000),
        ],
    );
}

/// A minutely cron job (`run_on_start`, ends after 300 ms), in UTC and in
/// New York (whose daylight saving time begins an hour after the fake
/// clock's start).
fn minutely(timezone: chrono_tz::Tz) -> AppSpec {
    let mut spec = ending_on_its_own(
        app("job", 1, Readiness::Immediate),
        Duration::from_millis(300),
        0,
    );
    spec.restart = RestartPolicy::Never;
    spec.schedule = Some(ScheduleSpec {
        when: When::Cron {
            cron: std::str::FromStr::from_str("* * * * *").expect("a valid cron expression"),
            timezone,
        },
        overlap: Overlap::Skip,
        run_on_start: true,
    });
    spec
}

/// Issue 28: the wall clock set back an hour silenced a `* * * * *` job
/// for an hour (its next run stayed at the old clock's next minute); set
/// forward, it ran at once for the skipped time. After a step the next run
/// is the next match after the new time (the world fails a cron schedule
/// whose next run is anything else), and the job keeps running every
/// minute.
#[test]
fn issue_28_a_cron_job_runs_at_the_next_match_after_the_clock_is_set() {
    for timezone in [chrono_tz::UTC, chrono_tz::America::New_York] {
        for (forward, seconds) in [(false, 3600), (true, 3600), (false, 61), (true, 86_400)] {
            replay(
                vec![minutely(timezone)],
                vec![
                    Step::Wait(20_000),
                    Step::SetClock { forward, seconds },
                    Step::Wait(45_000),
                    Step::SetClock {
                        forward: !forward,
                        seconds: 2,
                    },
                    Step::Wait(70_000),
                ],
            );
        }
    }
    // Runs every minute after the clock went back an hour: 3 of 3 minutes.
    let mut world = World::new(vec![minutely(chrono_tz::UTC)]);
    world.step(Step::Wait(10_000)).expect("no violation");
    world
        .step(Step::SetClock {
            forward: false,
            seconds: 3600,
        })
        .expect("no violation");
    let before = world.supervisor.effects().spawned_since(0).count();
    world.step(Step::Wait(180_000)).expect("no violation");
    let runs = world.supervisor.effects().spawned_since(0).count() - before;
    assert_eq!(runs, 3, "{:#?}", world.history());
}

/// A start of hundreds goes [`SPAWNS_PER_TURN`] per turn of the loop, so
/// a shutdown (or anything else) that arrives meanwhile is handled after
/// one turn, not after the whole batch; and with time the batch completes.
#[test]
fn a_large_start_goes_in_turns_and_a_shutdown_between_them_starts_nothing_more() {
    let spawns = |history: &[String]| history.iter().filter(|h| h.starts_with("spawn ")).count();
    let desired = Desired {
        source: "/sim/ecosystem.yaml".into(),
        apps: vec![app("big", 500, Readiness::Immediate)],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let fake = FakeEffects::new(Instant::now());
    let mut supervisor = Supervisor::new(&desired, "ecosystem.yaml", 1000, fake);
    supervisor.start();
    assert_eq!(spawns(&supervisor.effects().history), SPAWNS_PER_TURN);
    supervisor.handle(News::Timer);
    assert_eq!(spawns(&supervisor.effects().history), 2 * SPAWNS_PER_TURN);
    supervisor.handle(News::Terminate);
    assert_eq!(spawns(&supervisor.effects().history), 2 * SPAWNS_PER_TURN);

    let mut world = World::new(vec![app("big", 500, Readiness::Immediate)]);
    world.converges().unwrap_or_else(|v| panic!("{}", v.0));
    assert_eq!(spawns(world.history()), 500);
    world.shuts_down().unwrap_or_else(|v| panic!("{}", v.0));
}

#[test]
fn an_inject_app_with_a_process_the_library_misses_is_said_once_per_version() {
    let mut spec = app("web", 4, Readiness::Delay(Duration::from_millis(200)));
    spec.process.listen = vec![ListenSpec {
        name: "web".into(),
        address: ListenAddress::Tcp(([127, 0, 0, 1], 7000).into()),
        reuseport: false,
        inject: true,
    }];
    let mut world = World::new(vec![spec]);
    world.advance(supervise_core::INJECT_GRACE + Duration::from_secs(1));
    world.check().expect("the invariants hold");
    let missed = |world: &World| {
        world
            .supervisor
            .effects()
            .processes()
            .filter(|p| p.is_alive() && !p.reached_by_preload())
            .count()
    };
    // Of four processes in a row, the fake makes at least one a static binary.
    assert!(missed(&world) >= 1);
    let app = world.supervisor.core().app("web").expect("web");
    assert_eq!(app.inject_warned(), Some(app.generation));

    // A reload is a new version, looked at anew.
    world.command(model::protocol::Command::Reload { app: "web".into() });
    world.advance(Duration::from_secs(30));
    world.check().expect("the invariants hold");
    let app = world.supervisor.core().app("web").expect("web");
    assert_eq!(app.generation, 2);
    assert_eq!(app.inject_warned(), (missed(&world) > 0).then_some(2));
}

/// An instance over `max_memory` whose replacement is slow to be ready:
/// measured again past its ceiling meanwhile, it stops first.
#[test]
fn an_instance_being_replaced_for_memory_stops_past_its_ceiling() {
    let mut spec = app("web", 1, Readiness::Notify);
    spec.max_memory = Some(1000);
    spec.ready_timeout = Duration::from_secs(600);
    replay(
        vec![spec],
        vec![
            Step::Notify {
                process: 0,
                foreign: false,
            },
            Step::Wait(5000),
            Step::MemoryAnswer {
                over: Some(0),
                past_ceiling: false,
            },
            Step::Wait(5000),
            Step::MemoryAnswer {
                over: Some(0),
                past_ceiling: true,
            },
        ],
    );
}

/// Out of file descriptors, starts wait instead of failing, and come as
/// room is given back, no more per turn than there is room for (the
/// invariants check each turn).
#[test]
fn starts_wait_for_file_descriptors_and_come_as_room_is_given() {
    let apps = vec![app("web", 6, Readiness::Immediate)];
    let steps = [
        Step::FdRoom { starts: 0 },
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 12,
        }),
        Step::Wait(1000),
        Step::FdRoom { starts: 2 },
        Step::Wait(1000),
        Step::FdRoom { starts: usize::MAX },
        Step::Wait(1000),
    ];
    for cgroups in [false, true] {
        let mut world = if cgroups {
            World::with_cgroups(apps.clone())
        } else {
            World::new(apps.clone())
        };
        for (at, step) in steps.iter().enumerate() {
            if let Err(violation) = world.step(step.clone()) {
                panic!("step {at}: {}", violation.0);
            }
            if at <= 2 {
                assert_eq!(
                    world.live().len(),
                    6,
                    "none started without room (step {at})"
                );
            }
        }
        assert_eq!(world.live().len(), 12);
        let failed = world
            .history()
            .iter()
            .filter(|h| h.ends_with("failed"))
            .count();
        assert_eq!(failed, 0, "{:#?}", world.history());
    }
}

/// An autoscaled app through a load step: up on a queue, up again on busy
/// CPUs, a stall in the middle (no step on a gap), down one at a time once
/// idle, never below `min`; a hold and a reload on the way, and an edit
/// that lowers `max` below the count (the invariants check the range and
/// that no step down follows a step up within `down_after`).
#[test]
fn an_autoscaled_app_follows_a_load_step_within_its_range() {
    let mut web = app("web", 1, Readiness::Immediate);
    sim::autoscale(&mut web, 1, 6);
    let mut world = World::new(vec![web]);
    let count = |world: &World| world.supervisor.core().app("web").map(|a| a.spec.instances);
    let steps = [
        Step::Wait(3000),
        Step::Load {
            app: 0,
            queue: 40,
            cpu: 0,
        },
        Step::Wait(1600),
    ];
    for step in steps {
        world.step(step).expect("invariants");
    }
    assert_eq!(count(&world), Some(4), "40 waiting for 1, target 10");
    for step in [
        Step::Load {
            app: 0,
            queue: 0,
            cpu: 150,
        },
        Step::Stall { millis: 5000 },
        Step::Wait(1600),
        Step::Command {
            kind: CommandKind::Stop,
            app: 0,
            slot: Some(1),
        },
        Step::Command {
            kind: CommandKind::Reload,
            app: 0,
            slot: None,
        },
        Step::Wait(1600),
    ] {
        world.step(step).expect("invariants");
    }
    assert_eq!(count(&world), Some(6), "CPU at 150 % each: up to max");
    for step in [
        Step::Load {
            app: 0,
            queue: 0,
            cpu: 5,
        },
        Step::Wait(2500),
    ] {
        world.step(step).expect("invariants");
    }
    assert_eq!(count(&world), Some(6), "not down within down_after");
    for step in [Step::Wait(3000), Step::Wait(3000)] {
        world.step(step).expect("invariants");
    }
    let after_idle = count(&world).unwrap_or(0);
    assert!(
        (4..6).contains(&after_idle),
        "one per down_after: {after_idle}"
    );
    world
        .step(Step::Edit(Edit::Autoscale {
            app: 0,
            min: 1,
            max: 2,
        }))
        .expect("invariants");
    assert_eq!(
        count(&world),
        Some(2),
        "a lower max takes the count down to it"
    );
    for _ in 0..10 {
        world.step(Step::Wait(2000)).expect("invariants");
    }
    assert_eq!(count(&world), Some(1), "never below min");
    world.converges().expect("converges");
    world.shuts_down().expect("shuts down");
}
