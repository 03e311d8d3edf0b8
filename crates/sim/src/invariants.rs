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
        let fake = self.supervisor.effects();
        if core.anomalies() > 0 {
            return fail(format!("{} anomalies in the core", core.anomalies()));
        }
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

    /// `/metrics` counts restarts from the events the core reports: it must
    /// have seen at least the restarts each worker carries (a restart the
    /// core decided without saying so would be missing from
    /// `supervise_instance_restarts_total`, and a count that went down would
    /// break `rate()`).
    fn metrics_violation(&self) -> Option<String> {
        let snapshot = self.supervisor.metrics_snapshot();
        let counted: HashMap<(&str, u32), u64> = snapshot
            .instances
            .iter()
            .map(|i| ((i.app.as_str(), i.slot), i.counts.restarts))
            .collect();
        for app in self.supervisor.core().apps().filter(|a| !a.removed) {
            for worker in app.workers.values() {
                let seen = counted
                    .get(&(app.spec.name.as_str(), worker.slot))
                    .copied()
                    .unwrap_or(0);
                if seen < u64::from(worker.restarts) {
                    return Some(format!(
                        "{}.{}: /metrics counts {seen} restarts, its worker {} carries {}",
                        app.spec.name, worker.slot, worker.id, worker.restarts
                    ));
                }
            }
        }
        None
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

    /// What systemd was told since the last look keeps to `READY=1`
    /// (RELOADING=1 READY=1)*, each reload whole within one event; and when
    /// the start is told, every wanted slot of an app free to start has had
    /// its start decided: a ready or completed worker, or one whose run
    /// ended, or one given up, held or exited (from the workers, not the
    /// core's own account).
    fn systemd_violation(&mut self) -> Option<String> {
        let told = &self.supervisor.effects().systemd;
        let unread: Vec<String> = told[self.told.read.min(told.len())..].to_vec();
        self.told.read = told.len();
        for message in unread {
            match (message.as_str(), self.told.started, self.told.reloading) {
                ("READY=1", false, _) => {
                    self.told.started = true;
                    if let Some(slot) = undecided(self.supervisor.core()) {
                        return Some(format!(
                            "systemd was told READY=1 while {slot} had not had its start"
                        ));
                    }
                }
                ("READY=1", true, true) => self.told.reloading = false,
                ("RELOADING=1", true, false) => self.told.reloading = true,
                ("READY=1" | "RELOADING=1", _, _) => {
                    return Some(format!(
                        "systemd was told {message} out of turn (started {}, reloading {}): {told:?}",
                        self.told.started, self.told.reloading
                    ));
                }
                _ => {}
            }
        }
        self.told
            .reloading
            .then(|| format!("a reload told to systemd was left open: {told:?}"))
    }

    /// An app said to serve without the socket `inject` hands over
    /// (`not_injected`) has, in the version named, a process the library
    /// did not reach that has been up INJECT_GRACE; and an app is said so
    /// at most once per version (a new value is always a later version).
    fn inject_violation(&mut self) -> Option<String> {
        let core = self.supervisor.core();
        let fake = self.supervisor.effects();
        let now = fake.now();
        for app in core.apps() {
            let name = &app.spec.name;
            let warned = app.inject_warned();
            let before = self.inject_warned.get(name).copied().flatten();
            if warned == before {
                continue;
            }
            // None again: the app was removed and added anew.
            let Some(generation) = warned else {
                continue;
            };
            if before.is_some_and(|b| b >= generation) {
                return Some(format!(
                    "{name}: `not_injected` said for generation {generation} after {before:?}"
                ));
            }
            // Unreached for the whole grace, or ended before it was ready.
            let culprit = fake.processes().any(|p| {
                p.app == *name
                    && p.generation == generation
                    && p.injects
                    && !p.injected
                    && (now.saturating_duration_since(p.spawned_at) >= supervise_core::INJECT_GRACE
                        || !p.is_alive())
            });
            if !culprit {
                return Some(format!(
                    "{name}: `not_injected` said for generation {generation}, but no process of it went {:?} without the library's report, nor ended unreached",
                    supervise_core::INJECT_GRACE
                ));
            }
        }
        self.inject_warned = core
            .apps()
            .map(|a| (a.spec.name.clone(), a.inject_warned()))
            .collect();
        None
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

    /// With healthy processes and no more faults, the running system equals
    /// the file: every wanted slot has one ready worker of the current
    /// generation (unless it failed, exited, is held, or its rollout halted),
    /// and nothing runs beyond. Dependencies change what the file asks for:
    /// - an app whose gate is closed (the gate [`World::witness`] holds to
    ///   the dependencies' states: one failed or ended for good, or waits
    ///   itself) starts nothing, so it keeps what ran and the rest waits;
    /// - a scheduled app is not expected to run; but one whose gate is open
    ///   runs on its ticks, and a run it armed never waits while it may
    ///   start.
    ///
    /// The quiet time is long enough for the longest chain of dependencies
    /// to come up one app after the other.
    pub fn converges(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_some() {
            return Ok(());
        }
        self.fake().spawn_failure = None;
        self.fake().plans.clear();
        let round = Duration::from_millis(500);
        let chain = longest_chain(self.supervisor.core(), |_| COME_UP);
        let quiet = (round * QUIET_ROUNDS).max(chain + RUNS_WITHIN);
        let rounds = quiet.div_duration_f64(round).ceil() as u32;
        let watch_from = rounds - RUNS_WITHIN.div_duration_f64(round) as u32;
        let mut watched = Vec::new();
        for round_number in 0..rounds {
            if round_number == watch_from {
                watched = self.scheduled_and_open();
            }
            // What was due before the quiet time (a watchdog not pinged
            // since, a check not answered) may still fail: a fault.
            let broken = self.supervisor.core().broken();
            let began = self.now();
            self.advance(round);
            self.ready_everything();
            self.disruptive |=
                self.supervisor.core().broken() != broken || self.ended_on_their_own(began);
            self.check()?;
        }
        self.scheduled_apps_ran(watched)?;
        for app in self.supervisor.core().apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                if worker.slot >= app.spec.instances {
                    return Err(Violation(format!(
                        "{name}.{} runs beyond {} instances",
                        worker.slot, app.spec.instances
                    )));
                }
            }
            if app.spec.schedule.is_some() {
                armed_run_started(app)?;
                continue;
            }
            let open = app.gate.is_open();
            if !open {
                waits_for_a_reason(self.supervisor.core(), app)?;
            }
            for worker in app.workers.values() {
                let settled = match worker.state {
                    State::Ready { .. }
                    | State::Failed
                    | State::Exited
                    | State::Completed { .. }
                    | State::Held => true,
                    // Waits for its dependencies.
                    State::Pending | State::Backoff { .. } => !open,
                    _ => false,
                };
                if !settled {
                    let all = describe_workers(app);
                    return Err(Violation(format!(
                        "{name}.{} is {} after the quiet time; app gen {} halted {} instances {} gate {:?} workers {:?}",
                        worker.slot,
                        worker.state.name(),
                        app.generation,
                        app.rollout_halted,
                        app.spec.instances,
                        app.gate,
                        all
                    )));
                }
                if open
                    && worker.generation != app.generation
                    && !app.rollout_halted
                    && worker.state.is_ready()
                {
                    return Err(Violation(format!(
                        "{name}.{} still runs generation {} of {}",
                        worker.slot, worker.generation, app.generation
                    )));
                }
            }
            for slot in 0..app.spec.instances {
                let in_slot = || app.workers.values().filter(|w| w.slot == slot);
                let count = in_slot().count();
                let processes = in_slot().filter(|w| w.state.pid().is_some()).count();
                // A closed gate keeps what ran; a replacement may wait beside it.
                let expected = if open {
                    count == 1
                } else {
                    count >= 1 && processes <= 1
                };
                if !expected {
                    let all = describe_workers(app);
                    return Err(Violation(format!(
                        "{name}.{slot} has {count} workers after the quiet time; gen {} halted {} gate {:?} {:?}",
                        app.generation, app.rollout_halted, app.gate, all
                    )));
                }
            }
        }
        if self.supervisor.core().apps().count() != self.desired.apps.len() {
            return Err(Violation(
                "apps differ from the file after the quiet time".into(),
            ));
        }
        if !self.told.started {
            return Err(Violation(
                "every start is decided after the quiet time, and systemd was never told READY=1"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The scheduled apps that must run from now on: one instance, `every`
    /// ticks, the gate open; with whether a process of each lives now.
    fn scheduled_and_open(&self) -> Vec<(String, bool, i32)> {
        let fake = self.supervisor.effects();
        self.supervisor
            .core()
            .apps()
            .filter(|a| must_run(a))
            .map(|a| {
                let name = a.spec.name.clone();
                let lives = fake
                    .processes()
                    .any(|p| p.app == name && fake.group_exists(p.pid));
                (name, lives, self.unseen_pid)
            })
            .collect()
    }

    /// Each app [`World::scheduled_and_open`] watched, and that must still
    /// run, ran: a process of it lived when the watch began, or one was
    /// spawned since.
    fn scheduled_apps_ran(&self, watched: Vec<(String, bool, i32)>) -> Result<(), Violation> {
        let core = self.supervisor.core();
        for (name, lived, since) in watched {
            if !core.app(&name).is_some_and(must_run) || lived {
                continue;
            }
            let spawned = self
                .supervisor
                .effects()
                .spawned_since(since)
                .any(|p| p.app == name);
            if !spawned {
                let runs = core.app(&name).and_then(|a| a.runs.clone());
                return Err(Violation(format!(
                    "{name} is scheduled, its dependencies are met, and it did not run in the last {} s of the quiet time: {runs:?}",
                    RUNS_WITHIN.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// SIGTERM (if none came yet) and check that everything stops within the
    /// `kill_timeout`s of the longest chain of dependencies (each app stops
    /// only once what depends on it is gone; no dependency: the largest
    /// `kill_timeout`) plus a bound per app of the chain, leaving no process.
    pub fn shuts_down(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_none() {
            self.signal(News::Terminate);
        }
        let started = self.shutdown_at.unwrap_or_else(|| self.now());
        let slack = 3 * GROUP_POLL_INTERVAL;
        let desired = &self.desired;
        let bound = longest_chain(self.supervisor.core(), |app| {
            // An edit may have shortened it; the longer one counts.
            let written = desired
                .app(&app.spec.name)
                .map_or(Duration::ZERO, |a| a.kill_timeout);
            app.spec.kill_timeout.max(written) + slack
        })
        .max(slack)
            + self.stalled_in_shutdown;
        let limit = started + bound;
        while !self.supervisor.finished() && self.now() < limit {
            self.advance(Duration::from_millis(10));
            self.check()?;
        }
        if !self.supervisor.finished() {
            return Err(Violation(format!(
                "not finished {} ms after the shutdown began (bound {} ms): {:?}",
                (self.now() - started).as_millis(),
                bound.as_millis(),
                self.supervisor
                    .core()
                    .apps()
                    .map(|a| (a.spec.name.clone(), self.slots(&a.spec.name)))
                    .collect::<Vec<_>>()
            )));
        }
        if let Some(process) = self
            .supervisor
            .effects()
            .processes()
            .find(|p| p.life != Life::Reaped)
        {
            return Err(Violation(format!(
                "pid {} is {:?} after the shutdown",
                process.pid, process.life
            )));
        }
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

/// A scheduled app that must run on its ticks: one instance, an `every`
/// schedule (a cron time may be a minute away), its dependencies met, not
/// held by `stop`.
fn must_run(app: &App) -> bool {
    let every = matches!(
        app.spec.schedule.as_ref().map(|s| &s.when),
        Some(When::Every(_))
    );
    let held = app.workers.values().any(|w| w.state == State::Held);
    every && app.spec.instances == 1 && !app.removed && app.gate.is_open() && !held
}

/// After the quiet time, an app whose gate is closed waits for a reason the
/// rules give: each dependency that does not meet its condition blocks it
/// (gave up, or ended for good), waits itself, or has, in each wanted slot
/// that does not serve, a worker held by `stop` or one that runs (a run
/// not over yet: `completed` waits for it). A slot with none of these will
/// never serve without a change, and nothing says so.
fn waits_for_a_reason(core: &Core, app: &App) -> Result<(), Violation> {
    for dependency in &app.spec.depends_on {
        if standing(core, dependency) != Standing::Unmet {
            continue;
        }
        let Some(other) = core.app(&dependency.app) else {
            continue;
        };
        if !other.gate.is_open() {
            continue;
        }
        let stuck = (0..other.spec.instances).find(|slot| {
            let in_slot = || other.workers.values().filter(|w| w.slot == *slot);
            !in_slot().any(|w| serves(w, dependency.condition, other))
                && !in_slot().any(|w| w.state == State::Held || w.state.is_running())
        });
        if let Some(slot) = stuck {
            let current = other
                .workers
                .values()
                .any(|w| w.slot == slot && w.generation == other.generation);
            let halted = if other.rollout_halted && !current {
                " (its rollout halted: no worker of its current generation, and not held either)"
            } else {
                ""
            };
            return Err(Violation(format!(
                "{} waits for {}, whose instance {slot} will not serve without a change{halted}: {:?}",
                app.spec.name,
                describe(core, dependency),
                describe_workers(other)
            )));
        }
    }
    Ok(())
}

/// A scheduled app's armed run started, unless it may not start yet: its
/// dependencies are not met, or the run it replaces is still stopping.
fn armed_run_started(app: &App) -> Result<(), Violation> {
    let armed = app.runs.as_ref().is_some_and(|r| r.armed);
    let stopping = app.workers.values().any(|w| w.state.is_stopping());
    let waiting = app.workers.values().any(|w| w.state == State::Pending);
    if armed && app.gate.is_open() && !stopping && waiting {
        return Err(Violation(format!(
            "{}: a run is armed and its dependencies are met, but its worker waits: {:?}",
            app.spec.name,
            describe_workers(app)
        )));
    }
    Ok(())
}

/// Every worker of `app`, one line each, for a violation's message.
fn describe_workers(app: &supervise_core::App) -> Vec<String> {
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
