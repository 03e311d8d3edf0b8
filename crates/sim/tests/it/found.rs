//! The failures the seeded schedules found, each fixed, replayed so they
//! stay fixed: minimal traces written out step by step (with the apps as
//! the seed's generator made them), and seeds whose whole schedule is the
//! regression, played again.

use std::time::Duration;

use model::process::{StartError, StartStage};
use model::spec::{Condition, Dependency, OnDependencyRestart, Readiness, RestartPolicy};
use sim::fake::Behaviour;
use sim::{CommandKind, Edit, Step, World, ending_on_its_own, probe};

use crate::play::{check_seed, check_seed_found_before_dependencies, replay};
use crate::schedule::seeded_app;

fn exec_failure() -> Behaviour {
    Behaviour {
        exec_error: Some(StartError {
            stage: StartStage::Exec,
            errno: libc::ENOEXEC,
        }),
        ..Behaviour::default()
    }
}

/// Seed 191: a stopped group's leftovers were SIGKILLed at kill_timeout, but
/// the poll that notices the group is empty was pushed back by every event.
#[test]
fn found_seed_191_a_draining_group_is_noticed_however_busy_the_loop() {
    replay(
        vec![
            seeded_app(
                "app0",
                2,
                Readiness::Delay(Duration::from_millis(210)),
                (3, 0),
                RestartPolicy::Always,
                None,
                853,
            ),
            seeded_app(
                "app1",
                2,
                probe(2),
                (3, 2),
                RestartPolicy::Always,
                Some(1),
                131,
            ),
            seeded_app(
                "app2",
                0,
                Readiness::Delay(Duration::from_millis(672)),
                (1, 0),
                RestartPolicy::Always,
                None,
                145,
            ),
        ],
        vec![
            Step::Plan(Behaviour {
                leftovers: 1,
                leftover_delay: Duration::from_millis(2108),
                ..Behaviour::default()
            }),
            Step::Crash {
                process: 54,
                code: 1,
            },
            Step::Wait(1714),
        ],
    );
}

/// Seed 1769: a failed replacement revived by an unrelated edit started at
/// once, taking a rollout past N + max_surge.
#[test]
fn found_seed_1769_a_revived_worker_waits_for_room_in_a_rollout() {
    replay(
        vec![
            seeded_app(
                "app0",
                4,
                probe(4),
                (0, 1),
                RestartPolicy::Never,
                Some(1),
                1116,
            ),
            seeded_app(
                "app1",
                4,
                Readiness::Immediate,
                (1, 0),
                RestartPolicy::Never,
                None,
                1112,
            ),
            seeded_app(
                "app2",
                3,
                Readiness::Delay(Duration::from_millis(387)),
                (1, 0),
                RestartPolicy::Always,
                Some(2),
                2962,
            ),
        ],
        vec![
            Step::Probe { process: 62 },
            Step::Command {
                kind: CommandKind::Reload,
                app: 57,
                slot: Some(0),
            },
            Step::Plan(exec_failure()),
            Step::Wait(2061),
            Step::Edit(Edit::Add),
            Step::Edit(Edit::KillTimeout {
                app: 40,
                millis: 936,
            }),
        ],
    );
}

/// Seed 5088: a replacement that exited 0 under `restart: on-failure` before
/// taking its slot left the old instance running and the rollout unfinished.
#[test]
fn found_seed_5088_a_replacement_that_ends_before_its_slot_halts_the_rollout() {
    replay(
        vec![
            seeded_app(
                "app0",
                1,
                Readiness::Notify,
                (0, 1),
                RestartPolicy::OnFailure,
                None,
                1480,
            ),
            seeded_app(
                "app1",
                2,
                probe(2),
                (2, 2),
                RestartPolicy::OnFailure,
                Some(1),
                580,
            ),
        ],
        vec![
            Step::Wait(2394),
            Step::Edit(Edit::Remove { app: 14 }),
            Step::Edit(Edit::KillTimeout {
                app: 6,
                millis: 970,
            }),
            Step::Probe { process: 16 },
            Step::Wait(1543),
            Step::Edit(Edit::Env { app: 0, value: 688 }),
            Step::Crash {
                process: 7,
                code: 0,
            },
        ],
    );
}

/// Seed 11297: `stop APP.N` during a halted rollout held both the old and the
/// new worker of the slot: two records for one slot, for good.
#[test]
fn found_seed_11297_a_hold_in_a_halted_rollout_keeps_one_worker_per_slot() {
    replay(
        vec![seeded_app(
            "app0",
            0,
            Readiness::Delay(Duration::from_millis(791)),
            (2, 1),
            RestartPolicy::Never,
            None,
            543,
        )],
        vec![
            Step::Edit(Edit::Scale {
                app: 29,
                instances: 4,
            }),
            Step::Wait(2479),
            Step::Edit(Edit::Env {
                app: 62,
                value: 158,
            }),
            Step::Wait(1108),
            Step::Crash {
                process: 1,
                code: 2,
            },
            Step::Command {
                kind: CommandKind::Stop,
                app: 36,
                slot: Some(3),
            },
        ],
    );
}

/// Seed 32005: a stop in flight kept the kill_timeout it began with after an
/// edit shortened it, so a shutdown outlasted the file's kill_timeout.
#[test]
fn found_seed_32005_a_kill_timeout_edit_reaches_stops_in_flight() {
    replay(
        vec![seeded_app(
            "app0",
            4,
            Readiness::Immediate,
            (0, 1),
            RestartPolicy::Always,
            None,
            2331,
        )],
        vec![
            Step::Plan(Behaviour {
                ignores_stop: true,
                ..Behaviour::default()
            }),
            Step::Crash {
                process: 12,
                code: 1,
            },
            Step::Wait(1896),
            Step::Command {
                kind: CommandKind::Reload,
                app: 14,
                slot: None,
            },
            Step::Edit(Edit::KillTimeout {
                app: 33,
                millis: 1652,
            }),
            Step::Sigterm,
        ],
    );
}

/// Seeds 120197, 1023560 and 1408409, found past the first 100,000 by a
/// hostile run: in a halted rollout, an old worker in backoff beside a held
/// replacement was never restarted nor removed (and counted against
/// `N + max_surge`, so nothing else started), a restart left an old and a new
/// pending worker in one slot for good, and two old generations both kept
/// serving one slot. Replayed whole (their schedules are the regression).
#[test]
fn found_seeds_past_100000_a_halted_rollout_keeps_one_worker_per_slot() {
    for seed in [120_197, 1_023_560, 1_408_409] {
        check_seed_found_before_dependencies(seed);
    }
}

/// What the liveness seeds found while health checks, memory limits and
/// the watchdog were built (each fixed): replacements of unhealthy workers
/// recycled in a loop when a scale-up left slots without a check target
/// (250, 319: the simulation's own edit, fixed there); a check in flight
/// when its worker was condemned was never timed out (7530); a recycled
/// worker served on beside a replacement that gave up (12967); a slot whose
/// old and new workers were both ready counted twice, letting another
/// slot's only worker be stopped below `max_unavailable` (82515); a
/// watchdog due before the quiet time was not counted as a fault (108011:
/// the simulation's bookkeeping); a started held slot left `N + max_surge`
/// full of pending replacements, and nothing could start (179182); a missed
/// watchdog and a retirement of the same worker in one plan (466).
/// Found past the CI seeds (fixed): before an app's pass only its own gate
/// was looked at again, so it started on a dependency met at that moment
/// whose own gate, looked at later in the round, replaced it under
/// `on_dependency_restart: restart` and took an instance down in the same
/// turn (a `started` condition unmet). A dependency's gate is now brought
/// up to date, and the dependency reconciled, before its dependents.
#[test]
fn found_a_dependency_replaced_for_its_own_dependency_acts_before_its_dependents() {
    check_seed(39_022);
}

/// Found past the CI seeds (fixed): a worker of an app's old version that
/// failed at start, unreached by `inject`'s library, while the new version
/// rolled out and had been said `not_injected` already, was said again for
/// the old version — twice for one app, going back in versions.
#[test]
fn found_an_old_version_failing_in_a_rollout_is_not_said_unreached_again() {
    for seed in [9_637, 12_845, 26_965] {
        check_seed(seed);
    }
}

#[test]
fn found_by_the_liveness_seeds() {
    for seed in [250, 319, 466, 7_530, 12_967, 82_515, 108_011, 179_182] {
        check_seed_found_before_dependencies(seed);
    }
}

/// Found by the dependency seeds (fixed): a scheduled app whose definition changes while a run goes
/// (an edit of its `env`, `reload`, or `on_dependency_restart: restart`
/// when what it depends on was replaced) is rolled out like a service: the
/// new generation's process starts at once beside the run's, within
/// `max_surge` — two processes of a scheduled app at once, which the
/// schedule rules forbid (`overlap: replace` waits for the old one to be
/// gone). Seed 254's minimal trace: the job runs (`run_on_start`), an
/// `env` edit of it, and `job.0 g2` is spawned while `job.0 g1` runs.
#[test]
fn found_a_scheduled_app_is_rolled_out_beside_its_run() {
    for seed in [20, 31, 54, 124, 207, 254] {
        check_seed(seed);
    }
}

/// Found by the dependency seeds (fixed): the gates are looked at once per round of a convergence, before
/// any app is reconciled, so an app reconciled after its dependency in the
/// same round starts a process on a gate computed before the dependency's
/// own decisions of that round: when the dependency stops or drops a worker
/// that met the condition there, the dependent starts while the condition
/// is not met, and reports `waiting for` right after. Seed 516's minimal
/// trace: app0 (2 instances, max_surge 0, max_unavailable 1) rolls out, its
/// new instance 0 gets ready, and in that turn app0.1 (old) is stopped and
/// added1.0, which waits for app0 ready, is spawned. Seed 1893 does it at
/// start-up (see [`found_a_completed_one_shot_counts_as_restarted`]);
/// in seed 10189 an edited one-shot's old run completes (which meets
/// `started`) and is replaced by the new definition's in the turn `job`
/// starts on it; in seed 68701 an edited one-shot's new run completes
/// before the old one and is dropped as a failed replacement (the rollout
/// halts: the one-shot never completes with its current definition, and
/// app0, which waits for it `completed`, waits for good) in the turn app0
/// starts on it.
#[test]
fn found_a_dependent_starts_in_the_turn_its_dependency_stops() {
    for seed in [516, 1_893, 10_189, 68_701] {
        check_seed(seed);
    }
}

/// Found by the dependency seeds (fixed): `on_dependency_restart: restart` counts a one-shot that
/// completes (exit 0) as restarted: its processes (by pid) and its
/// completed runs are told apart, so the set that met the condition before
/// and after are disjoint, and every dependent that waits for it `ready` or
/// `started` is replaced (a rolling restart, `dependency_restarted`) when
/// the one-shot merely finished. Nothing of it was replaced.
#[test]
fn found_a_completed_one_shot_counts_as_restarted() {
    let setup = ending_on_its_own(
        seeded_app(
            "setup",
            1,
            Readiness::Immediate,
            (1, 0),
            RestartPolicy::Never,
            None,
            500,
        ),
        Duration::from_millis(500),
        0,
    );
    let mut api = seeded_app(
        "api",
        1,
        Readiness::Immediate,
        (1, 0),
        RestartPolicy::Always,
        None,
        500,
    );
    api.depends_on = vec![Dependency {
        app: "setup".into(),
        condition: Condition::Ready,
    }];
    api.on_dependency_restart = OnDependencyRestart::Restart;
    let mut world = World::new(vec![setup, api]);
    world
        .step(Step::Wait(2000))
        .unwrap_or_else(|v| panic!("{}", v.0));
    assert_eq!(world.slots("setup"), [(0, 1, "completed")]);
    assert_eq!(
        world.slots("api"),
        [(0, 1, "ready")],
        "api was replaced when setup completed"
    );
}

/// Found by the dependency seeds (fixed): the second SIGINT (`kill_all`) stops every running worker with
/// `Worker::stop` directly, not through the core's `stop`, so the liveness
/// checks in flight of the workers it kills are not cancelled and go on
/// running for processes that are gone. Before dependencies no worker
/// still ran at the second SIGINT; now an app that others depend on keeps
/// serving (and being checked) while they stop. Seed 7215's minimal trace:
/// `job` waits for app1 (4 instances with health checks), SIGTERM (app1
/// waits for job to stop), SIGINT: app1's processes are SIGKILLed and its
/// four checks still run.
#[test]
fn found_the_second_sigint_leaves_liveness_checks_running() {
    for seed in [7_215, 15_006, 17_286, 17_343, 31_286] {
        check_seed(seed);
    }
}

/// Found by the dependency seeds (fixed): an app that waits in a shutdown for its dependents to stop
/// still rolls out: with `max_unavailable` its rollout stops old instances
/// to make room for replacements that can never start (nothing starts in a
/// shutdown), so what its dependents use goes away before they are
/// stopped. Seed 155172's minimal trace: `reload` of app0 (5 instances,
/// max_surge 0, max_unavailable 1), app1 waits for app0 (ready), SIGTERM;
/// app0.0's replacement gets ready and app0.1 (old, no replacement) gets
/// SIGTERM while app1 still runs. Seed 30220 gets there through a
/// generation bump in the shutdown itself (a one-shot that completes, see
/// [`found_a_completed_one_shot_counts_as_restarted`]).
#[test]
fn found_a_rollout_goes_on_in_a_shutdown_and_stops_what_dependents_use() {
    for seed in [30_220, 155_172] {
        check_seed(seed);
    }
}

/// Found by the dependency seeds (fixed): the guard against dependency cycles in a shutdown (nothing
/// winds down while apps have workers: wind everything down at once) fires
/// on an acyclic file. Wind-down flags are set app by app in one pass; when
/// an app late in the file loses its last worker in that pass (here a
/// scheduled `job`, stopped by `restart` in the shutdown: its queued run is
/// armed and drops the worker that waited to start), the apps before it
/// were looked at while it still had one, so after the pass no app winds
/// down with workers left, and every app winds down in the same turn —
/// app1 gets SIGTERM in the turn app2, which depends on it, does. Seed
/// 154846's minimal trace: app2 waits for app1 (healthy), job for both;
/// `restart job`, SIGINT.
#[test]
fn found_a_shutdown_takes_an_empty_turn_for_a_cycle_and_stops_everything() {
    check_seed(154_846);
}

/// Found by the dependency seeds (fixed): a one-shot whose rollout halted
/// (its new run failed to start) keeps its old runs; when those end with a
/// failure, nothing will run it again without a change, yet its dependents
/// waited for it for ever instead of being held with the reason. The gate
/// now judges the kept old runs when no run of the new definition is there.
#[test]
fn found_a_halted_one_shot_whose_kept_runs_fail_holds_its_dependents() {
    for seed in [136_612, 158_414] {
        check_seed(seed);
    }
}
