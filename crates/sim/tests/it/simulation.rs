//! The deterministic simulation: the real supervisor loop over a fake
//! process table (`sim`), driven by seeded random schedules
//! of crashes, exec failures, processes that ignore SIGTERM or drain slowly,
//! children that outlive their leader, readiness news, control commands,
//! edits of the file (valid and invalid) and shutdown at any moment. After
//! every step the invariants are checked; at the end the system must converge
//! to the file and shut down in time. Odd seeds run with emptied groups
//! announced (cgroup mode), even ones with them polled (the environment
//! mode); the regressions run in both. Seeds whose second bit is set (2, 3,
//! 6, 7, …) also give their apps liveness checks, memory limits and
//! watchdogs, and mix check answers, memory measurements and watchdog
//! messages into the schedule (drawn from a generator of their own, so the
//! other seeds keep their schedules). Seeds whose third bit is set (4–7,
//! 12–15, …) give their apps dependencies on apps before them in the file
//! (conditions mixed, some with `on_dependency_restart: restart`), often a
//! one-shot first that others wait for `completed` (it ends on its own, and
//! may fail its first runs), and often a scheduled job last (`every` 1–4 s
//! or a cron time every minute, any overlap, `run_on_start` or not; it runs
//! up to 5 s); they mix `trigger` commands and edits of dependencies and of
//! the schedule into the schedule (from a generator of their own too).
//!
//! CI runs [`SEEDS`] fixed seeds. More: `SIM_SEEDS=100000 cargo test --release -p
//! supervise-sim --test it simulation::` (RELIABILITY.md has the figures); `SIM_FIRST=N` starts
//! elsewhere; a failing seed prints itself and a minimal trace, and
//! `SIM_SEED=N` replays it alone (with `SIM_VERBOSE=1`, its minimal trace
//! plays step by step with the supervisor's log); `SIM_KEEP_GOING=1` lists
//! every failing seed of a run instead of stopping at the first.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use model::process::{StartError, StartStage};
use model::spec::Desired;
use model::spec::{
    AppSpec, Condition, Dependency, HealthCheck, HealthSpec, ListenAddress, ListenSpec,
    MaxRestarts, OnDependencyRestart, Overlap, Readiness, ReloadLimits, RestartPolicy,
    ScheduleSpec, When,
};
use sim::fake::{Behaviour, FakeEffects};
use sim::{CommandKind, Edit, Step, Violation, World, app, ending_on_its_own, probe};
use supervise::supervisor::{News, Supervisor};
use supervise_core::SPAWNS_PER_TURN;
use supervise_core::reconcile::{Step as Decide, Target, Workers, reconcile};
use supervise_core::worker::Worker;

/// Seeds CI runs.
const SEEDS: u64 = 2000;

/// How the supervisor learns that an instance's processes are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Groups {
    /// It looks on a timer (process groups; `--cgroups off`).
    Polled,
    /// `cgroup.events` says so.
    Announced,
}

fn groups_of(seed: u64) -> Groups {
    if seed % 2 == 1 {
        Groups::Announced
    } else {
        Groups::Polled
    }
}

/// Whether a seed exercises health checks, memory limits and the watchdog.
fn liveness_of(seed: u64) -> bool {
    (seed / 2) % 2 == 1
}

/// Whether a seed's file has dependencies, a one-shot and a scheduled job.
fn dependencies_of(seed: u64) -> bool {
    (seed / 4) % 2 == 1
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The apps a seed starts with.
fn apps(rng: &mut Xoshiro256PlusPlus) -> Vec<AppSpec> {
    let count = rng.random_range(1..=3);
    (0..count)
        .map(|i| {
            let instances = rng.random_range(0..=5);
            let ready = match rng.random_range(0..4) {
                0 => Readiness::Immediate,
                1 => Readiness::Delay(Duration::from_millis(rng.random_range(50..800))),
                2 => Readiness::Notify,
                _ => probe(instances),
            };
            let mut spec = app(&format!("app{i}"), instances, ready);
            spec.reload = reload_limits(rng);
            spec.restart = match rng.random_range(0..6) {
                0 => RestartPolicy::OnFailure,
                1 => RestartPolicy::Never,
                _ => RestartPolicy::Always,
            };
            if rng.random_bool(0.2) {
                spec.max_restarts = Some(MaxRestarts {
                    count: rng.random_range(1..5),
                    within: Duration::from_secs(5),
                });
            }
            spec.kill_timeout = Duration::from_millis(rng.random_range(100..3000));
            // A quarter of the apps serve a server that binds its port itself
            // (`inject`), read off a number drawn already so that every seed
            // replays its schedule as before.
            if spec.kill_timeout.as_millis().is_multiple_of(4) {
                spec.process.listen = vec![ListenSpec {
                    name: spec.name.clone(),
                    address: ListenAddress::Tcp(([127, 0, 0, 1], 7000 + i as u16).into()),
                    reuseport: false,
                    inject: true,
                }];
            }
            spec
        })
        .collect()
}

fn reload_limits(rng: &mut Xoshiro256PlusPlus) -> ReloadLimits {
    let (max_surge, max_unavailable) = match rng.random_range(0..4) {
        0 => (1, 0),
        1 => (0, 1),
        2 => (2, 1),
        _ => (rng.random_range(1..=3), rng.random_range(0..=2)),
    };
    ReloadLimits {
        max_surge,
        max_unavailable,
    }
}

fn behaviour(rng: &mut Xoshiro256PlusPlus) -> Behaviour {
    let mut behaviour = Behaviour::default();
    match rng.random_range(0..5) {
        0 => {
            behaviour.exec_error = Some(StartError {
                stage: if rng.random_bool(0.3) {
                    StartStage::Chdir
                } else {
                    StartStage::Exec
                },
                errno: libc::ENOEXEC,
            })
        }
        1 => behaviour.ignores_stop = true,
        2 => behaviour.stop_delay = Duration::from_millis(rng.random_range(1..3000)),
        3 => {
            behaviour.leftovers = rng.random_range(1..3);
            behaviour.leftover_delay = Duration::from_millis(rng.random_range(1..4000));
        }
        _ => {}
    }
    behaviour
}

/// Give `apps` liveness checks, memory limits and watchdogs, and mix their
/// news into `steps`, from `rng`.
fn add_liveness(rng: &mut Xoshiro256PlusPlus, apps: &mut [AppSpec], steps: &mut Vec<Step>) {
    for spec in apps.iter_mut() {
        if rng.random_bool(0.6) {
            let every = Duration::from_millis(rng.random_range(700..3000));
            spec.health = Some(HealthSpec {
                check: HealthCheck::Probe(match probe(spec.instances) {
                    Readiness::Probe(probe) => probe,
                    _ => unreachable!("probe() makes a probe"),
                }),
                every,
                // Above the 500 ms the quiet time answers within.
                timeout: Duration::from_millis(rng.random_range(600..=every.as_millis() as u64)),
                failures: rng.random_range(1..=3),
                grace: Duration::from_millis(rng.random_range(0..2000)),
            });
        }
        if rng.random_bool(0.4) {
            spec.max_memory = Some(1 << 20);
        }
        if rng.random_bool(0.4) {
            spec.process.watchdog = Some(Duration::from_millis(rng.random_range(1000..4000)));
        }
    }
    let extra = steps.len() / 3;
    for _ in 0..extra {
        let index = rng.random_range(0..64usize);
        let step = match rng.random_range(0..10) {
            0..4 => Step::CheckAnswer {
                check: index,
                passed: rng.random_bool(0.6),
            },
            4..6 => Step::MemoryAnswer {
                over: rng.random_bool(0.3).then_some(index),
                past_ceiling: rng.random_bool(0.3),
            },
            6..9 => Step::Watchdog {
                process: index,
                trigger: rng.random_bool(0.1),
            },
            _ => Step::ExtendTimeout {
                process: index,
                millis: rng.random_range(100..3000),
            },
        };
        let at = rng.random_range(0..=steps.len());
        steps.insert(at, step);
    }
}

/// A condition `other` can meet (`check` refuses `healthy` without a
/// health check and `completed` of an app that restarts always); a job
/// that ends on its own is mostly waited for to complete.
fn condition_on(rng: &mut Xoshiro256PlusPlus, other: &AppSpec) -> Condition {
    let ends = other.restart != RestartPolicy::Always;
    if ends && rng.random_bool(0.7) {
        return Condition::Completed;
    }
    let mut conditions = vec![Condition::Started, Condition::Ready];
    if other.health.is_some() {
        conditions.push(Condition::Healthy);
    }
    if ends {
        conditions.push(Condition::Completed);
    }
    conditions[rng.random_range(0..conditions.len())]
}

fn overlap(rng: &mut Xoshiro256PlusPlus) -> Overlap {
    match rng.random_range(0..3) {
        0 => Overlap::Skip,
        1 => Overlap::Queue,
        _ => Overlap::Replace,
    }
}

/// A one-shot (`restart: never`, or `on-failure` retrying it) whose
/// program runs up to 2 s and may fail its first runs.
fn one_shot(rng: &mut Xoshiro256PlusPlus) -> AppSpec {
    let ready = match rng.random_range(0..3) {
        0 => Readiness::Immediate,
        1 => Readiness::Delay(Duration::from_millis(rng.random_range(50..800))),
        _ => Readiness::Notify,
    };
    let runs = Duration::from_millis(rng.random_range(100..2000));
    let failing = [0, 0, 1, 2][rng.random_range(0..4)];
    let mut spec = ending_on_its_own(app("setup", rng.random_range(1..=2), ready), runs, failing);
    spec.restart = if rng.random_bool(0.75) {
        RestartPolicy::Never
    } else {
        RestartPolicy::OnFailure
    };
    spec.kill_timeout = Duration::from_millis(rng.random_range(100..3000));
    spec
}

/// A scheduled job (0 or 1 instance, never `restart: always`) whose
/// program runs up to 5 s: longer than its period at times.
fn scheduled_job(rng: &mut Xoshiro256PlusPlus) -> AppSpec {
    let ready = if rng.random_bool(0.7) {
        Readiness::Immediate
    } else {
        Readiness::Delay(Duration::from_millis(rng.random_range(50..500)))
    };
    let instances = u32::from(rng.random_bool(0.9));
    let runs = Duration::from_millis(rng.random_range(200..5000));
    let failing = u32::from(rng.random_bool(0.3));
    let mut spec = ending_on_its_own(app("job", instances, ready), runs, failing);
    spec.restart = if rng.random_bool(0.7) {
        RestartPolicy::Never
    } else {
        RestartPolicy::OnFailure
    };
    spec.reload = reload_limits(rng);
    spec.kill_timeout = Duration::from_millis(rng.random_range(100..3000));
    let when = if rng.random_bool(0.8) {
        When::Every(Duration::from_millis(rng.random_range(1000..4000)))
    } else {
        When::Cron {
            cron: std::str::FromStr::from_str("* * * * *").expect("a valid cron expression"),
            timezone: if rng.random_bool(0.5) {
                chrono_tz::UTC
            } else {
                chrono_tz::America::New_York
            },
        }
    };
    spec.schedule = Some(ScheduleSpec {
        when,
        overlap: overlap(rng),
        run_on_start: rng.random_bool(0.5),
    });
    spec
}

/// Give `apps` dependencies (each on apps before it), maybe a one-shot
/// first and a scheduled job last, and mix triggers and edits of
/// dependencies and schedules into `steps`, from `rng`.
fn add_dependencies(rng: &mut Xoshiro256PlusPlus, apps: &mut Vec<AppSpec>, steps: &mut Vec<Step>) {
    if rng.random_bool(0.6) {
        apps.insert(0, one_shot(rng));
    }
    if rng.random_bool(0.6) {
        apps.push(scheduled_job(rng));
    }
    for index in 1..apps.len() {
        if !rng.random_bool(0.7) {
            continue;
        }
        let mut depends_on = Vec::new();
        for other in &apps[..index] {
            if other.schedule.is_none() && rng.random_bool(0.6) {
                depends_on.push(Dependency {
                    app: other.name.clone(),
                    condition: condition_on(rng, other),
                });
            }
        }
        if !depends_on.is_empty() && rng.random_bool(0.35) {
            apps[index].on_dependency_restart = OnDependencyRestart::Restart;
        }
        apps[index].depends_on = depends_on;
    }
    let extra = steps.len() / 5;
    for _ in 0..extra {
        let index = rng.random_range(0..64usize);
        let step = match rng.random_range(0..10) {
            0..4 => Step::Command {
                kind: CommandKind::Trigger,
                app: index,
                slot: None,
            },
            4..7 => Step::Edit(Edit::Depend {
                app: index,
                on: rng.random_range(0..64),
                condition: [
                    Condition::Started,
                    Condition::Ready,
                    Condition::Healthy,
                    Condition::Completed,
                ][rng.random_range(0..4)],
                replace: rng.random_bool(0.3),
            }),
            7 => Step::Edit(Edit::Independent { app: index }),
            _ => Step::Edit(Edit::Reschedule {
                app: index,
                every_millis: rng.random_range(1000..4000),
                overlap: overlap(rng),
                run_on_start: rng.random_bool(0.5),
            }),
        };
        let at = rng.random_range(0..=steps.len());
        steps.insert(at, step);
    }
}

/// A seed's schedule (the starting apps and the steps), with or without
/// dependencies.
fn schedule(seed: u64, dependencies: bool) -> (Vec<AppSpec>, Vec<Step>) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let apps = apps(&mut rng);
    let count = rng.random_range(10..200);
    let mut steps = Vec::with_capacity(count);
    for _ in 0..count {
        let pick = rng.random_range(0..100);
        let index = rng.random_range(0..64usize);
        let step = match pick {
            0..30 => Step::Wait(rng.random_range(1..2500)),
            30..40 => Step::Crash {
                process: index,
                code: rng.random_range(0..4),
            },
            40..50 => Step::Plan(behaviour(&mut rng)),
            50..52 => {
                if rng.random_bool(0.5) {
                    Step::SpawnsFail
                } else {
                    Step::SpawnsWork
                }
            }
            52..60 => Step::Probe { process: index },
            60..68 => Step::Notify {
                process: index,
                foreign: rng.random_bool(0.1),
            },
            68..76 => Step::Command {
                kind: match rng.random_range(0..4) {
                    0 => CommandKind::Reload,
                    1 => CommandKind::Restart,
                    2 => CommandKind::Stop,
                    _ => CommandKind::Start,
                },
                app: index,
                slot: rng.random_bool(0.5).then(|| rng.random_range(0..6)),
            },
            76..90 => Step::Edit(match rng.random_range(0..6) {
                0 | 1 => Edit::Scale {
                    app: index,
                    instances: rng.random_range(0..=6),
                },
                2 => Edit::Env {
                    app: index,
                    value: rng.random_range(0..1000),
                },
                3 => Edit::KillTimeout {
                    app: index,
                    millis: rng.random_range(100..3000),
                },
                4 => Edit::Add,
                _ => Edit::Remove { app: index },
            }),
            90..93 => Step::InvalidEdit,
            93..95 => Step::Sigint,
            95..97 => Step::Sigterm,
            _ => Step::Wait(rng.random_range(1..50)),
        };
        steps.push(step);
    }
    let mut apps = apps;
    if liveness_of(seed) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x4c49_5645_4e45_5353);
        add_liveness(&mut rng, &mut apps, &mut steps);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5354_414c_4c53_2121);
        add_stalls(&mut rng, &mut steps);
    }
    if dependencies {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x4445_5045_4e44_5321);
        add_dependencies(&mut rng, &mut apps, &mut steps);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x434c_4f43_4b53_4554);
        add_clock_steps(&mut rng, &apps, &mut steps);
    }
    (apps, steps)
}

/// The supervisor stalls a few times (a little past the lateness the loop
/// takes for one, up to 8 s), from `rng`: a generator of its own, so the
/// other seeds keep their schedules.
fn add_stalls(rng: &mut Xoshiro256PlusPlus, steps: &mut Vec<Step>) {
    for _ in 0..rng.random_range(1..=3) {
        let step = Step::Stall {
            millis: rng.random_range(1100..8000),
        };
        let at = rng.random_range(0..=steps.len());
        steps.insert(at, step);
    }
}

/// With a cron job among `apps`, the wall clock is set forward or back a
/// few times (a second past the tolerance, a minute, an hour, a day), from
/// `rng`: a generator of its own, so the other seeds keep their schedules.
fn add_clock_steps(rng: &mut Xoshiro256PlusPlus, apps: &[AppSpec], steps: &mut Vec<Step>) {
    let cron = apps.iter().any(|a| {
        matches!(
            a.schedule.as_ref().map(|s| &s.when),
            Some(When::Cron { .. })
        )
    });
    if !cron {
        return;
    }
    for _ in 0..rng.random_range(1..=3) {
        let seconds = [2, 61, 3600, 86_400][rng.random_range(0..4)];
        let step = Step::SetClock {
            forward: rng.random_bool(0.5),
            seconds,
        };
        let at = rng.random_range(0..=steps.len());
        steps.insert(at, step);
    }
}

/// Play a schedule; the first violation (or panic) and the step it came at.
fn play(apps: &[AppSpec], steps: &[Step], groups: Groups) -> Result<(), (usize, Violation)> {
    play_with(apps, steps, groups, false)
}

/// Play a schedule; `verbose`: print each step and the slots after it.
fn play_with(
    apps: &[AppSpec],
    steps: &[Step],
    groups: Groups,
    verbose: bool,
) -> Result<(), (usize, Violation)> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut world = match groups {
            Groups::Polled => World::new(apps.to_vec()),
            Groups::Announced => World::with_cgroups(apps.to_vec()),
        };
        let with_history = |world: &World, (at, violation): (usize, Violation)| {
            let history = world.history();
            let tail = &history[history.len().saturating_sub(40)..];
            (
                at,
                Violation(format!("{}\n  last effects: {tail:#?}", violation.0)),
            )
        };
        world.check().map_err(|v| with_history(&world, (0, v)))?;
        for (index, step) in steps.iter().enumerate() {
            let result = world.step(step.clone());
            if verbose {
                println!("step {}: {step:?}", index + 1);
                for app in world.supervisor.core().apps() {
                    println!("  {}: {:?}", app.spec.name, world.slots(&app.spec.name));
                }
            }
            result.map_err(|v| with_history(&world, (index + 1, v)))?;
        }
        world
            .converges()
            .map_err(|v| with_history(&world, (steps.len() + 1, v)))?;
        world
            .shuts_down()
            .map_err(|v| with_history(&world, (steps.len() + 2, v)))
    }));
    match outcome {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err((steps.len() + 3, Violation(format!("panic: {message}"))))
        }
    }
}

/// What kind of failure a violation is, for the shrinker to keep: its
/// first words, without their numbers.
fn kind_of(violation: &Violation) -> String {
    violation
        .0
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .take(60)
        .collect()
}

/// Drop steps while the schedule still fails the same way (chunks, then
/// one by one).
fn shrink(
    apps: &[AppSpec],
    mut steps: Vec<Step>,
    groups: Groups,
    failure: &Violation,
) -> Vec<Step> {
    let kind = kind_of(failure);
    let mut budget = 3000;
    let mut chunk = steps.len() / 2;
    while chunk >= 1 && budget > 0 {
        let mut start = 0;
        let mut removed = false;
        while start < steps.len() && budget > 0 {
            budget -= 1;
            let mut candidate = steps.clone();
            let end = (start + chunk).min(candidate.len());
            candidate.drain(start..end);
            let same = play(apps, &candidate, groups)
                .err()
                .is_some_and(|(_, violation)| kind_of(&violation) == kind);
            if same {
                steps = candidate;
                removed = true;
            } else {
                start += chunk;
            }
        }
        if !removed {
            chunk /= 2;
        }
    }
    steps
}

fn check_seed(seed: u64) {
    check_schedule(seed, dependencies_of(seed));
}

/// A seed found before files had dependencies, replayed with the schedule
/// it was found with (the seeds of the third bit have others now).
fn check_seed_found_before_dependencies(seed: u64) {
    check_schedule(seed, false);
}

fn check_schedule(seed: u64, dependencies: bool) {
    let (apps, steps) = schedule(seed, dependencies);
    let groups = groups_of(seed);
    if let Err(failure) = play(&apps, &steps, groups) {
        report(seed, dependencies, &apps, &steps, failure);
    }
}

/// The failure of a seed of a sweep, shrunk and reported.
fn sweep_failed(seed: u64, failure: (usize, Violation)) -> ! {
    let dependencies = dependencies_of(seed);
    let (apps, steps) = schedule(seed, dependencies);
    report(seed, dependencies, &apps, &steps, failure)
}

/// Shrink a failing schedule and panic with the failure and the minimal trace.
fn report(
    seed: u64,
    dependencies: bool,
    apps: &[AppSpec],
    steps: &[Step],
    (at, violation): (usize, Violation),
) -> ! {
    let groups = groups_of(seed);
    let minimal = shrink(apps, steps.to_vec(), groups, &violation);
    let verbose = std::env::var_os("SIM_VERBOSE").is_some();
    if verbose {
        // The supervisor's log, as the minimal trace plays.
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .without_time()
            .try_init();
    }
    let (_, minimal_violation) = play_with(apps, &minimal, groups, verbose)
        .err()
        .unwrap_or((at, violation.clone()));
    panic!(
        "seed {seed} ({groups:?} groups, dependencies {dependencies}) fails at step {at} of {}: {}\n\
         replay: SIM_SEED={seed} cargo test -p supervise-sim --test it\n\
         apps: {:#?}\n\
         minimal trace ({} steps, failing with: {}):\n{:#?}",
        steps.len(),
        violation.0,
        apps.iter()
            .map(|a| (
                (
                    &a.name,
                    a.instances,
                    &a.ready,
                    a.reload,
                    a.restart,
                    a.max_restarts.map(|m| m.count),
                    a.kill_timeout,
                    &a.health,
                    a.max_memory,
                    a.process.watchdog
                ),
                (
                    a.process
                        .argv
                        .iter()
                        .map(|w| w.expand(0))
                        .collect::<Vec<_>>(),
                    &a.depends_on,
                    a.on_dependency_restart,
                    &a.schedule
                )
            ))
            .collect::<Vec<_>>(),
        minimal.len(),
        minimal_violation.0,
        minimal
    );
}

/// `SIM_KEEP_GOING=1`: play every seed (without shrinking) and list each
/// failure's seed, step and first line, to see the classes of failures of a
/// large run at once.
fn survey(first: u64, seeds: u64) {
    let started = Instant::now();
    let mut failed = Vec::new();
    for seed in first..first + seeds {
        let (apps, steps) = schedule(seed, dependencies_of(seed));
        if let Err((at, violation)) = play(&apps, &steps, groups_of(seed)) {
            let what = violation.0.lines().next().unwrap_or_default().to_string();
            println!("seed {seed}: step {at}: {what}");
            failed.push(seed);
        }
    }
    println!(
        "{seeds} seeds from {first}: {} failed ({:.1?})",
        failed.len(),
        started.elapsed()
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

/// The supervisor upgrades itself in the schedules too (one wait in five
/// is preceded by an upgrade: its state written out and read back, what an
/// exec loses lost): every invariant holds across them, with workers
/// crashing, rolling out and shutting down around them.
/// Play `play` for each seed of `seeds` on as many threads as there are
/// cores (each seed is its own world: nothing is shared), each thread
/// taking the next seed not yet played. The outcomes in seed order, up to
/// the lowest seed that failed: a thread stops at a seed past the lowest
/// failure found so far, so that seed is the same as in a run on one
/// thread, however the seeds were shared out.
fn on_every_core<T: Send, F: Send>(
    seeds: std::ops::Range<u64>,
    play: impl Fn(u64) -> Result<T, F> + Sync,
) -> Result<Vec<T>, (u64, F)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let next = AtomicU64::new(seeds.start);
    let lowest_failure = AtomicU64::new(u64::MAX);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut outcomes: Vec<(u64, Result<T, F>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut played = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= seeds.end || seed > lowest_failure.load(Ordering::Relaxed) {
                            return played;
                        }
                        let outcome = play(seed);
                        if outcome.is_err() {
                            lowest_failure.fetch_min(seed, Ordering::Relaxed);
                        }
                        played.push((seed, outcome));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a seed's thread panicked"))
            .collect()
    });
    outcomes.sort_by_key(|(seed, _)| *seed);
    let mut passed = Vec::new();
    for (seed, outcome) in outcomes {
        match outcome {
            Ok(value) => passed.push(value),
            Err(failure) => return Err((seed, failure)),
        }
    }
    Ok(passed)
}

#[test]
fn seeded_schedules_upgrade_the_supervisor_and_keep_every_invariant() {
    let played = on_every_core(1..201, |seed| {
        let (apps, steps) = schedule(seed, dependencies_of(seed));
        let mut world = match groups_of(seed) {
            Groups::Polled => World::new(apps.clone()),
            Groups::Announced => World::with_cgroups(apps.clone()),
        };
        for (index, step) in steps.iter().enumerate() {
            world
                .step(step.clone())
                .map_err(|violation| (index + 1, violation))?;
        }
        Ok(world.upgrades)
    });
    let upgrades: u64 = match played {
        Ok(upgrades) => upgrades.into_iter().sum(),
        Err((seed, failure)) => {
            let dependencies = dependencies_of(seed);
            let (apps, steps) = schedule(seed, dependencies);
            report(seed, dependencies, &apps, &steps, failure)
        }
    };
    assert!(upgrades > 1000, "only {upgrades} upgrades in 200 seeds");
    println!("200 seeds: {upgrades} upgrades, every invariant held");
}

#[test]
fn seeded_schedules_keep_every_invariant() {
    if let Some(seed) = env_number("SIM_SEED") {
        check_seed(seed);
        println!("seed {seed}: ok");
        return;
    }
    let first = env_number("SIM_FIRST").unwrap_or(1);
    let seeds = env_number("SIM_SEEDS").unwrap_or(SEEDS);
    let started = Instant::now();
    if std::env::var_os("SIM_KEEP_GOING").is_some() {
        return survey(first, seeds);
    }
    let played = on_every_core(first..first + seeds, |seed| {
        let (apps, steps) = schedule(seed, dependencies_of(seed));
        play(&apps, &steps, groups_of(seed))
    });
    if let Err((seed, failure)) = played {
        sweep_failed(seed, failure);
    }
    println!(
        "{seeds} seeds from {first}: every invariant held ({:.1?})",
        started.elapsed()
    );
}

#[test]
fn an_app_of_a_thousand_instances_rolls_out_within_its_bounds() {
    let mut spec = app("big", 1000, Readiness::Delay(Duration::from_millis(100)));
    spec.reload = ReloadLimits {
        max_surge: 50,
        max_unavailable: 10,
    };
    let started = Instant::now();
    let mut world = World::new(vec![spec]);
    world
        .step(Step::Wait(100))
        .unwrap_or_else(|v| panic!("{}", v.0));
    let ready = |world: &World, generation: u64| {
        world
            .slots("big")
            .iter()
            .filter(|s| s.1 == generation && s.2 == "ready")
            .count()
    };
    assert_eq!(ready(&world, 1), 1000);
    let up = started.elapsed();
    world
        .step(Step::Edit(Edit::Env { app: 0, value: 2 }))
        .unwrap_or_else(|v| panic!("{}", v.0));
    for _ in 0..2000 {
        if ready(&world, 2) == 1000 && world.slots("big").len() == 1000 {
            break;
        }
        world
            .step(Step::Wait(50))
            .unwrap_or_else(|v| panic!("{}", v.0));
    }
    assert_eq!(ready(&world, 2), 1000);
    world.shuts_down().unwrap_or_else(|v| panic!("{}", v.0));
    println!(
        "1,000 instances in the simulation: started and ready in {up:.1?}, rolled out and shut down in {:.1?} (wall time)",
        started.elapsed() - up
    );
}

#[test]
fn ten_thousand_instances_reconcile_quickly_and_app_by_app() {
    const APPS: usize = 100;
    const PER_APP: u32 = 100;
    let t0 = Instant::now();
    let mut next_id = 1;
    let fleet: Vec<(AppSpec, Workers)> = (0..APPS)
        .map(|a| {
            let mut spec = AppSpec::with_defaults(&format!("app{a}"), &["server"], PER_APP);
            spec.ready = Readiness::Immediate;
            let workers = (0..PER_APP)
                .map(|slot| {
                    let mut worker = Worker::new(next_id, slot, 1);
                    worker.begin_start().unwrap();
                    worker.spawned(10_000 + next_id as i32, t0).unwrap();
                    worker.exec_succeeded().unwrap();
                    worker.ready(t0).unwrap();
                    next_id += 1;
                    (worker.id, worker)
                })
                .collect();
            (spec, workers)
        })
        .collect();
    let target = |spec| Target {
        spec,
        generation: 1,
        rollout_halted: false,
        recreate: false,
        winding_down: false,
        may_start: true,
        holding: false,
        held: &supervise_core::reconcile::NOTHING_HELD,
    };
    for (spec, workers) in &fleet {
        assert!(reconcile(target(spec), workers, t0).steps.is_empty());
    }
    // A crash in app 42 concerns only app 42: reconciling it alone yields the restart.
    let mut crashed = fleet[42].1.clone();
    let rules = supervise_core::worker::RestartRules::of(&fleet[42].0);
    let id = *crashed.keys().nth(7).unwrap();
    crashed
        .get_mut(&id)
        .unwrap()
        .exited(model::process::Exit::Code(1), None, t0, &rules)
        .unwrap();
    let later = t0 + Duration::from_secs(1);
    let plan = reconcile(target(&fleet[42].0), &crashed, later);
    assert_eq!(plan.steps, [Decide::Start { id }]);

    let rounds = 50;
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(reconcile(
            target(&fleet[42].0),
            std::hint::black_box(&crashed),
            later,
        ));
    }
    let one_app = start.elapsed() / rounds;
    let start = Instant::now();
    for _ in 0..rounds {
        for (spec, workers) in &fleet {
            std::hint::black_box(reconcile(
                target(spec),
                std::hint::black_box(workers),
                later,
            ));
        }
    }
    let full_pass = start.elapsed() / rounds;
    println!(
        "reconcile, 100 apps x 100 instances: one app (one event) {one_app:?}; the full pass over 10,000 instances {full_pass:?}"
    );
    assert!(
        one_app * 10 < full_pass,
        "one app {one_app:?} vs all {full_pass:?}"
    );
}

/// An app as a seed's generator made it.
fn seeded_app(
    name: &str,
    instances: u32,
    ready: Readiness,
    (max_surge, max_unavailable): (u32, u32),
    restart: RestartPolicy,
    max_restarts: Option<u32>,
    kill_timeout_ms: u64,
) -> AppSpec {
    let mut spec = app(name, instances, ready);
    spec.reload = ReloadLimits {
        max_surge,
        max_unavailable,
    };
    spec.restart = restart;
    spec.max_restarts = max_restarts.map(|count| MaxRestarts {
        count,
        within: Duration::from_secs(5),
    });
    spec.kill_timeout = Duration::from_millis(kill_timeout_ms);
    spec
}

/// Replay a minimal trace a seed once failed with; it must hold now, with
/// emptied groups polled and announced.
fn replay(apps: Vec<AppSpec>, steps: Vec<Step>) {
    for groups in [Groups::Polled, Groups::Announced] {
        if let Err((at, violation)) = play(&apps, &steps, groups) {
            panic!("{groups:?}: step {at}: {}", violation.0);
        }
    }
}

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
