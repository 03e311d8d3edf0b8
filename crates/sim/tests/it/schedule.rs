//! What a seed plays: the apps a seeded schedule starts with and its steps
//! (crashes, exec failures, processes that ignore SIGTERM or drain slowly,
//! children that outlive their leader, readiness news, control commands,
//! edits of the file, valid and invalid, and shutdown at any moment), drawn
//! from generators seeded by it, so that a seed plays the same schedule
//! every time: a seed once found failing stays a regression only while this
//! holds. Odd seeds run with emptied groups announced (cgroup mode), even
//! ones with them polled (the environment mode). Seeds whose second bit is
//! set (2, 3, 6, 7, …) also give their apps liveness checks, memory limits
//! and watchdogs, and mix check answers, memory measurements and watchdog
//! messages into the schedule (drawn from a generator of their own, so the
//! other seeds keep their schedules). Seeds whose third bit is set (4–7,
//! 12–15, …) give their apps dependencies on apps before them in the file
//! (conditions mixed, some with `on_dependency_restart: restart`), often a
//! one-shot first that others wait for `completed` (it ends on its own, and
//! may fail its first runs), and often a scheduled job last (`every` 1–4 s
//! or a cron time every minute, any overlap, `run_on_start` or not; it runs
//! up to 5 s); they mix `trigger` commands and edits of dependencies and of
//! the schedule into the schedule (from a generator of their own too).

use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use model::process::{StartError, StartStage};
use model::spec::{
    AppSpec, Condition, Dependency, HealthCheck, HealthSpec, ListenAddress, ListenSpec,
    MaxRestarts, OnDependencyRestart, Overlap, Readiness, ReloadLimits, RestartPolicy,
    ScheduleSpec, When,
};
use sim::fake::Behaviour;
use sim::{CommandKind, Edit, Step, app, ending_on_its_own, probe};

/// How the supervisor learns that an instance's processes are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Groups {
    /// It looks on a timer (process groups; `--cgroups off`).
    Polled,
    /// `cgroup.events` says so.
    Announced,
}

pub(crate) fn groups_of(seed: u64) -> Groups {
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
pub(crate) fn dependencies_of(seed: u64) -> bool {
    (seed / 4) % 2 == 1
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
pub(crate) fn schedule(seed: u64, dependencies: bool) -> (Vec<AppSpec>, Vec<Step>) {
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
    if autoscaling_of(seed) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x4155_544f_5343_414c);
        add_autoscaling(&mut rng, &mut apps, &mut steps);
    }
    if dependencies {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x4445_5045_4e44_5321);
        add_dependencies(&mut rng, &mut apps, &mut steps);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x434c_4f43_4b53_4554);
        add_clock_steps(&mut rng, &apps, &mut steps);
    }
    (apps, steps)
}

/// Whether seed `seed` has autoscaled apps: one in three.
pub(crate) fn autoscaling_of(seed: u64) -> bool {
    seed % 3 == 1
}

/// An app follows its load, which rises and falls through the schedule
/// (idle, a queue, busy CPUs, both), and edits give apps a range or take
/// it away, from `rng`: a generator of its own, so the other seeds keep
/// their schedules.
fn add_autoscaling(rng: &mut Xoshiro256PlusPlus, apps: &mut [AppSpec], steps: &mut Vec<Step>) {
    if let Some(index) = (0..apps.len()).find(|i| apps[*i].schedule.is_none()) {
        let min = rng.random_range(0..=2);
        sim::autoscale(&mut apps[index], min, min + rng.random_range(1..=4));
    }
    let extra = steps.len() / 4;
    for _ in 0..extra {
        let app = rng.random_range(0..64usize);
        let step = match rng.random_range(0..10) {
            0..7 => Step::Load {
                app,
                queue: [0, 0, 3, 12, 40, 200][rng.random_range(0..6)],
                cpu: [0, 5, 30, 60, 90, 150][rng.random_range(0..6)],
            },
            _ => {
                let min = rng.random_range(0..=2);
                Step::Edit(Edit::Autoscale {
                    app,
                    min,
                    max: if rng.random_bool(0.2) {
                        0
                    } else {
                        min + rng.random_range(1..=4)
                    },
                })
            }
        };
        let at = rng.random_range(0..=steps.len());
        steps.insert(at, step);
    }
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

/// An app as a seed's generator made it.
pub(crate) fn seeded_app(
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
