//! What every state of the simulated world must satisfy, what it must come
//! to with healthy processes, and how fast it must shut down.

use std::collections::HashMap;
use std::time::Duration;

use model::Signal;

use super::dependencies::{
    Standing, core_gate, dependents, describe, expected_gate, longest_chain, serves, standing,
};
use super::{Violation, World};
use crate::fake::Life;
use effects::Effects;
use model::orders::WorkerId;
use model::spec::{ReloadLimits, When};
use supervise::supervisor::{GROUP_POLL_INTERVAL, News};
use supervise_core::worker::{AfterStop, State};
use supervise_core::{App, Core, Phase};

/// Rounds of 500 ms the quiet time has at least.
const QUIET_ROUNDS: u32 = 40;
/// What one app of a chain of dependencies may take to come up once what
/// it waits for is up: its start and readiness (`ready_timeout` is 3 s in
/// the simulation), or a one-shot's run, and a backoff.
const COME_UP: Duration = Duration::from_secs(5);
/// The last part of the quiet time, within which a scheduled app whose
/// gate is open must run (its `every` is at most 4 s and a run at most 5
/// s, with a backoff of at most 2 s for a retry).
const RUNS_WITHIN: Duration = Duration::from_secs(10);

impl World {
    /// Ready workers in wanted slots, per app.
    pub(super) fn ready_counts(&self) -> HashMap<String, usize> {
        self.supervisor
            .core()
            .apps()
            .map(|a| {
                let ready = a
                    .workers
                    .values()
                    .filter(|w| w.state.is_ready() && w.slot < a.spec.instances)
                    .count();
                (a.spec.name.clone(), ready)
            })
            .collect()
    }

    /// The invariants of every state.
    pub fn check(&mut self) -> Result<(), Violation> {
        let fail = |what: String| Err(Violation(what));
        if let Some(violation) = &self.witnessed {
            return Err(violation.clone());
        }
        let core = self.supervisor.core();
        if core.anomalies() > 0 {
            return fail(format!("{} anomalies in the core", core.anomalies()));
        }
        if let Some(violation) = self.autoscale_violation() {
            return Err(violation);
        }
        let core = self.supervisor.core();
        let fake = self.supervisor.effects();
        if let Some(violation) = cron_violation(core, fake.wall_clock()) {
            return fail(violation);
        }
        for app in core.apps().filter(|a| a.spec.schedule.is_some()) {
            let name = &app.spec.name;
            let live: Vec<i32> = fake
                .processes()
                .filter(|p| p.app == *name && fake.group_exists(p.pid))
                .map(|p| p.pid)
                .collect();
            if live.len() > 1 {
                return fail(format!(
                    "{name} is scheduled but has {} processes: {live:?}",
                    live.len()
                ));
            }
        }
        for app in core.apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                let label = format!(
                    "{name}.{} (worker {}, gen {})",
                    worker.slot, worker.id, worker.generation
                );
                if worker.state == State::Held
                    && worker.slot < app.spec.instances
                    && !app.held.contains(&worker.slot)
                {
                    return fail(format!("{label} is held in a slot nobody holds"));
                }
                match &worker.state {
                    State::Spawning => {
                        return fail(format!("{label} is still spawning after an event"));
                    }
                    State::Starting { pid, .. } | State::Ready { pid, .. } => {
                        let Some(process) = fake.process(*pid) else {
                            return fail(format!("{label}: pid {pid} was never spawned"));
                        };
                        if process.life == Life::Reaped {
                            return fail(format!(
                                "{label} is {} with pid {pid}, which was reaped",
                                worker.state.name()
                            ));
                        }
                        if worker.state.is_ready() && process.is_alive() && !process.runs_program()
                        {
                            return fail(format!(
                                "{label} is ready but pid {pid} never ran the program"
                            ));
                        }
                    }
                    State::Stopping {
                        pid, leader_exit, ..
                    } => {
                        let exists = fake.process(*pid).is_some_and(|p| p.life != Life::Reaped);
                        if leader_exit.is_none() && !exists {
                            return fail(format!(
                                "{label} waits for pid {pid}, which no longer exists"
                            ));
                        }
                        if leader_exit.is_some() && !core.draining_groups().any(|g| g == *pid) {
                            return fail(format!(
                                "{label}: its leader is reaped but nobody watches its group"
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some(violation) = self.liveness_violation() {
            return fail(violation);
        }
        let (core, fake) = (self.supervisor.core(), self.supervisor.effects());
        for process in fake.processes() {
            if process.life != Life::Reaped && core.worker_of(process.pid).is_none() {
                return fail(format!(
                    "pid {} ({}.{}) is {:?} but no worker stands for it",
                    process.pid, process.app, process.slot, process.life
                ));
            }
        }
        if let Some(violation) = self.metrics_violation() {
            return fail(violation);
        }
        self.check_rollouts()
    }

    /// Look at what the supervisor just did, after each event it handled:
    /// - every process it spawned was let start by its dependencies, as the
    ///   simulation works them out from the workers (the spawns of an event
    ///   come after the core settled on it, so its state now is the state
    ///   they were ordered in), and one of a scheduled app had no other
    ///   process of its app beside it when it was spawned;
    /// - during a shutdown, no signal but the SIGKILL that ends a stop went
    ///   to an app while an app that depends on it had a process left (the
    ///   fake says which had one when the signal went), unless a second
    ///   SIGINT asked to kill everything at once;
    /// - each app's gate agrees with its dependencies.
    ///
    /// The first violation is kept for the next [`World::check`].
    pub(super) fn witness(&mut self) {
        let found = self
            .spawn_violation()
            .or_else(|| self.signal_violation())
            .or_else(|| self.gate_violation())
            .or_else(|| self.inject_violation())
            .or_else(|| self.systemd_violation());
        let fake = self.supervisor.effects();
        if let Some(last) = fake.spawned_since(self.unseen_pid).last() {
            self.unseen_pid = last.pid + 1;
        }
        self.unseen_signal = fake.signalled.len();
        if self.witnessed.is_none() {
            self.witnessed = found.map(Violation);
        }
    }

    fn spawn_violation(&self) -> Option<String> {
        let core = self.supervisor.core();
        let fake = self.supervisor.effects();
        let made = fake.spawned_since(self.unseen_pid).count();
        if made > fake.start_room {
            return Some(format!(
                "{made} processes started in one turn, with file descriptors for {}",
                fake.start_room
            ));
        }
        for process in fake.spawned_since(self.unseen_pid) {
            let Some(app) = core.app(&process.app) else {
                return Some(format!(
                    "pid {} was spawned for {}, an app the core does not have",
                    process.pid, process.app
                ));
            };
            let label = format!("{}.{} (pid {})", process.app, process.slot, process.pid);
            if self
                .holds
                .get(&process.app)
                .is_some_and(|held| held.contains(&process.slot))
            {
                return Some(format!(
                    "{label} was spawned for a slot held by `stop` (generation {}): {:?}",
                    process.generation,
                    describe_workers(app)
                ));
            }
            if app.spec.schedule.is_some()
                && let Some(other) = process.beside_at_spawn.first()
            {
                let generation = fake.process(*other).map_or(0, |p| p.generation);
                let age = if generation < process.generation {
                    "an older"
                } else {
                    "the same"
                };
                return Some(format!(
                    "{label} of a scheduled app was spawned beside a process of {age} generation (pid {other}, generation {generation}; its own {})",
                    process.generation
                ));
            }
            for dependency in &app.spec.depends_on {
                let now = standing(core, dependency);
                if now == Standing::Met {
                    continue;
                }
                // The core let it start, its gate is closed now, and the
                // dependency stopped or dropped a worker in this turn: the
                // gate was looked at before the dependency's own decisions.
                let turn = if !app.gate.is_open() && self.lost_a_worker(&dependency.app) {
                    " (its gate closed in the turn that started it, as the dependency stopped or dropped a worker)"
                } else {
                    ""
                };
                return Some(format!(
                    "{label} was spawned while its dependency is {now:?}{turn}: {}",
                    describe(core, dependency)
                ));
            }
        }
        None
    }

    /// The workers of each app that were not stopping, by id: what
    /// [`World::lost_a_worker`] compares with after an event.
    pub(super) fn going_workers(&self) -> HashMap<String, Vec<WorkerId>> {
        let core = self.supervisor.core();
        if core.apps().all(|a| a.spec.depends_on.is_empty()) {
            // Only the dependencies of an app are asked about.
            return HashMap::new();
        }
        core.apps()
            .map(|app| {
                let going = app
                    .workers
                    .values()
                    .filter(|w| !w.state.is_stopping())
                    .map(|w| w.id)
                    .collect();
                (app.spec.name.clone(), going)
            })
            .collect()
    }

    /// A worker of `app` that was not stopping before the event the
    /// supervisor just handled is gone or stopping now.
    fn lost_a_worker(&self, app: &str) -> bool {
        let Some(before) = self.going_before.get(app) else {
            return false;
        };
        let now = self.supervisor.core().app(app);
        before.iter().any(|id| {
            now.and_then(|a| a.workers.get(id))
                .is_none_or(|w| w.state.is_stopping())
        })
    }

    fn signal_violation(&self) -> Option<String> {
        let core = self.supervisor.core();
        if core.phase() != Phase::ShuttingDown || self.killed_all {
            return None;
        }
        let signals = self
            .supervisor
            .effects()
            .signalled
            .get(self.unseen_signal..)?;
        for sent in signals.iter().filter(|s| s.signal != Signal::SIGKILL) {
            let Some(app) = &sent.app else {
                continue;
            };
            let Some(why) = taken_away(core, sent.pgid) else {
                continue;
            };
            if let Some(dependent) =
                dependents(core, app).find(|d| sent.live_apps.contains(&d.spec.name))
            {
                // Dependents and dependencies stopped in one turn, for the
                // shutdown both, after the turn it began in.
                let together = why.is_empty()
                    && !self.shutdown_turn
                    && signals
                        .iter()
                        .any(|other| other.app.as_ref() == Some(&dependent.spec.name));
                let together = if together {
                    " (it was signalled in the same turn: everything wound down at once)"
                } else {
                    ""
                };
                return Some(format!(
                    "{} to {app} (pid {}) during the shutdown{why} while {}, which depends on it, still had a process{together} (its workers now: {:?})",
                    sent.signal.as_str(),
                    sent.pgid,
                    dependent.spec.name,
                    describe_workers(dependent)
                ));
            }
        }
        None
    }

    fn gate_violation(&self) -> Option<String> {
        let core = self.supervisor.core();
        for app in core.apps() {
            let expected = expected_gate(core, app);
            if core_gate(&app.gate) != expected {
                let dependencies: Vec<String> = app
                    .spec
                    .depends_on
                    .iter()
                    .map(|d| describe(core, d))
                    .collect();
                return Some(format!(
                    "{}: the core's gate is {:?}, but its dependencies make it {expected:?}: {dependencies:?}",
                    app.spec.name, app.gate
                ));
            }
        }
        None
    }

    /// Liveness checks, watchdogs and recycling: a check runs exactly for
    /// each ready worker that waits for one (never two at once, never for
    /// a worker that stopped), no check waits past its time to answer and no
    /// watchdog past its deadline unnoticed.
    fn liveness_violation(&self) -> Option<String> {
        let core = self.supervisor.core();
        let now = self.now();
        let mut running: Vec<(i32, u64)> = self.supervisor.effects().checks().collect();
        running.sort();
        let mut expected = Vec::new();
        for app in core.apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                let label = format!("{name}.{} (worker {})", worker.slot, worker.id);
                let State::Ready { pid, .. } = worker.state else {
                    if worker.health.in_flight.is_some() && worker.state.pid().is_some() {
                        return Some(format!(
                            "{label} is {} with a check in flight",
                            worker.state.name()
                        ));
                    }
                    continue;
                };
                if let Some((number, started)) = worker.health.in_flight {
                    expected.push((pid, number));
                    let timeout = app
                        .spec
                        .health
                        .as_ref()
                        .map_or(Duration::ZERO, supervise_core::reconcile::answer_within);
                    if now > started + timeout {
                        return Some(format!(
                            "{label}: check #{number} runs {} ms past its time to answer",
                            (now - started - timeout).as_millis()
                        ));
                    }
                }
                if let Some(watchdog) = worker.watchdog
                    && now > watchdog.deadline
                {
                    return Some(format!(
                        "{label}: its watchdog deadline passed {} ms ago and it still serves",
                        (now - watchdog.deadline).as_millis()
                    ));
                }
            }
        }
        expected.sort();
        if running == expected {
            return None;
        }
        let extra: Vec<&(i32, u64)> = running.iter().filter(|c| !expected.contains(c)).collect();
        let killed = self.killed_all
            && !extra.is_empty()
            && extra.iter().all(|(pid, _)| {
                core.worker_of(*pid)
                    .is_none_or(|(_, w)| w.state.is_stopping())
            });
        Some(if killed {
            format!("liveness checks of workers the second SIGINT killed still run: {extra:?}")
        } else {
            format!("liveness checks running {running:?}, but the workers wait for {expected:?}")
        })
    }

    /// `N + max_surge` processes at most during a rollout, and the ready
    /// count kept above `N − max_unavailable` by everything but faults
    /// (a program's own end among them), commands, edits and shutdown.
    fn check_rollouts(&mut self) -> Result<(), Violation> {
        let shutting_down = self.supervisor.core().phase() == Phase::ShuttingDown;
        let ready_now = self.ready_counts();
        let mut watched = HashMap::new();
        for app in self.supervisor.core().apps() {
            let name = app.spec.name.clone();
            let n = app.spec.instances;
            let processes = app
                .workers
                .values()
                .filter(|w| w.state.pid().is_some() || w.state == State::Spawning)
                .count();
            let ReloadLimits {
                max_surge,
                max_unavailable,
            } = app.spec.reload;
            let entry = match self.rollouts.get(&name) {
                Some(&(generation, instances, checked)) if generation == app.generation => {
                    (generation, instances, checked && instances == n)
                }
                // A new generation: watch it if nothing else is draining.
                _ => (app.generation, n, processes <= n as usize && !app.recreate),
            };
            // A scheduled app's runs come and go on its ticks: it serves no
            // floor (that it never has two processes is checked apart).
            let rolling =
                app.outdated() > 0 && !app.removed && !shutting_down && app.spec.schedule.is_none();
            if rolling && entry.2 {
                if processes > (n + max_surge) as usize {
                    return Err(Violation(format!(
                        "{name}: {processes} processes during a rollout, more than {n} + max_surge {max_surge}"
                    )));
                }
                let floor = (n as usize).saturating_sub(max_unavailable as usize);
                let before = self.ready_before.get(&name).copied().unwrap_or(0);
                let after = ready_now.get(&name).copied().unwrap_or(0);
                if !self.disruptive && before >= floor && after < floor {
                    return Err(Violation(format!(
                        "{name}: ready went from {before} to {after} during a rollout, below {n} - max_unavailable {max_unavailable}, with no fault"
                    )));
                }
            }
            watched.insert(name, entry);
        }
        self.rollouts = watched;
        Ok(())
    }
}

/// A cron schedule's next run is its next match after the wall clock as
/// it is now, whatever the clock did: set back, a schedule that kept its
/// next run of the old time would wait as long as the clock went back;
/// set forward, it would run at once, making up for the skipped time.
fn cron_violation(core: &Core, wall: std::time::SystemTime) -> Option<String> {
    for app in core.apps() {
        let Some(schedule) = &app.spec.schedule else {
            continue;
        };
        let Some(next) = app.runs.as_ref().and_then(|r| r.next_wall) else {
            continue;
        };
        let expected = schedule.when.next_cron_after(wall);
        if expected != Some(next) {
            let at = |t: std::time::SystemTime| {
                let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                format!("{} s after the epoch", since.as_secs_f64())
            };
            return Some(format!(
                "{}: the next cron run is at {}, but the next match after the wall clock's {} is {}",
                app.spec.name,
                at(next),
                at(wall),
                expected.map_or_else(|| "none".to_string(), at)
            ));
        }
    }
    None
}

/// The first wanted slot (`app.slot`) of an app free to start that has no
/// worker whose start is decided.
fn undecided(core: &Core) -> Option<String> {
    core.apps()
        .filter(|app| !app.removed && app.spec.schedule.is_none() && app.gate.is_open())
        .find_map(|app| {
            (0..app.spec.instances)
                .find(|slot| {
                    !app.workers
                        .values()
                        .any(|w| w.slot == *slot && w.start_decided())
                })
                .map(|slot| format!("{}.{slot}", app.spec.name))
        })
}

/// Whether the stop of the worker led by `pgid` takes its instance away
/// during a shutdown: it is to be removed, and no other worker of its slot
/// serves or is about to; then what else is known of it (a stop of an
/// older generation while others of its app run on: a rollout going on). A worker replaced by a ready one
/// (a rollout that goes on while the app waits to wind down), a failed run
/// or a broken one (not ready in time, unhealthy, a missed watchdog, over
/// `max_memory`: faults, like a crash) and a command (`stop`, `restart`)
/// do not count.
fn taken_away(core: &Core, pgid: i32) -> Option<&'static str> {
    let Some((app, worker)) = core.worker_of(pgid) else {
        // Its stop already ended: nothing tells it apart.
        return Some("");
    };
    let removed = matches!(
        worker.state,
        State::Stopping {
            then: AfterStop::Remove,
            ..
        }
    );
    let replaced = app
        .workers
        .values()
        .any(|w| w.slot == worker.slot && w.id != worker.id && w.state.is_running());
    if !removed || replaced || worker.recycle.is_some() {
        return None;
    }
    // A wind-down stops every worker of its app at once.
    let others_run = app.workers.values().any(|w| w.state.is_running());
    Some(if worker.generation < app.generation && others_run {
        " (an old generation: a rollout went on in the shutdown)"
    } else {
        ""
    })
}

/// Every worker of `app`, one line each, for a violation's message.
pub(crate) fn describe_workers(app: &supervise_core::App) -> Vec<String> {
    app.workers
        .values()
        .map(|w| {
            format!(
                "slot {} gen {} {} last {:?}",
                w.slot,
                w.generation,
                w.state.name(),
                w.last_outcome
            )
        })
        .collect()
}

mod outcomes;
mod outward;
