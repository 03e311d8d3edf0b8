//! What every state of the simulated world must satisfy, what it must come
//! to with healthy processes, and how fast it must shut down.

use std::collections::HashMap;
use std::time::Duration;

use super::{Violation, World};
use crate::core::Phase;
use crate::core::worker::State;
use crate::effects::fake::Life;
use crate::spec::ReloadLimits;
use crate::supervisor::{Event, GROUP_POLL_INTERVAL};

impl World {
    /// Ready workers in wanted slots, per app.
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
        let core = self.supervisor.core();
        let fake = self.supervisor.effects();
        if core.anomalies() > 0 {
            return fail(format!("{} anomalies in the core", core.anomalies()));
        }
        for app in core.apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                let label = format!(
                    "{name}.{} (worker {}, gen {})",
                    worker.slot, worker.id, worker.generation
                );
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
        self.check_rollouts()
    }

    /// Liveness checks, watchdogs and recycling: a check runs exactly for
    /// each ready worker that waits for one (never two at once, never for
    /// a worker that stopped), no check waits past its timeout and no
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
                        .map_or(Duration::ZERO, |h| h.timeout);
                    if now > started + timeout {
                        return Some(format!(
                            "{label}: check #{number} runs {} ms past its timeout",
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
        (running != expected).then(|| {
            format!("liveness checks running {running:?}, but the workers wait for {expected:?}")
        })
    }

    /// `N + max_surge` processes at most during a rollout, and the ready
    /// count kept above `N − max_unavailable` by everything but faults,
    /// commands, edits and shutdown.
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
            let rolling = app.outdated() > 0 && !app.removed && !shutting_down;
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
    /// and nothing runs beyond.
    pub fn converges(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_some() {
            return Ok(());
        }
        self.fake().spawn_failure = None;
        self.fake().plans.clear();
        for _ in 0..40 {
            // What was due before the quiet time (a watchdog not pinged
            // since, a check not answered) may still fail: a fault.
            let broken = self.supervisor.core().broken();
            self.advance(Duration::from_millis(500));
            self.ready_everything();
            self.disruptive |= self.supervisor.core().broken() != broken;
            self.check()?;
        }
        for app in self.supervisor.core().apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                if worker.slot >= app.spec.instances {
                    return Err(Violation(format!(
                        "{name}.{} runs beyond {} instances",
                        worker.slot, app.spec.instances
                    )));
                }
                let settled = matches!(
                    worker.state,
                    State::Ready { .. }
                        | State::Failed
                        | State::Exited
                        | State::Completed { .. }
                        | State::Held
                );
                if !settled {
                    let all = describe_workers(app);
                    return Err(Violation(format!(
                        "{name}.{} is {} after the quiet time; app gen {} halted {} instances {} workers {:?}",
                        worker.slot,
                        worker.state.name(),
                        app.generation,
                        app.rollout_halted,
                        app.spec.instances,
                        all
                    )));
                }
                if worker.generation != app.generation
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
                let count = app.workers.values().filter(|w| w.slot == slot).count();
                if count != 1 {
                    let all = describe_workers(app);
                    return Err(Violation(format!(
                        "{name}.{slot} has {count} workers after the quiet time; gen {} halted {} {:?}",
                        app.generation, app.rollout_halted, all
                    )));
                }
            }
        }
        if self.supervisor.core().apps().count() != self.desired.apps.len() {
            return Err(Violation(
                "apps differ from the file after the quiet time".into(),
            ));
        }
        Ok(())
    }

    /// SIGTERM (if none came yet) and check that everything stops within the
    /// largest `kill_timeout` plus a bound, leaving no process.
    pub fn shuts_down(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_none() {
            self.signal(Event::Terminate);
        }
        let started = self.shutdown_at.unwrap_or_else(|| self.now());
        let longest = self
            .supervisor
            .core()
            .apps()
            .map(|a| a.spec.kill_timeout)
            .chain(self.desired.apps.iter().map(|a| a.kill_timeout))
            .max()
            .unwrap_or_default();
        let bound = longest + 3 * GROUP_POLL_INTERVAL;
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

/// Every worker of `app`, one line each, for a violation's message.
fn describe_workers(app: &crate::core::App) -> Vec<String> {
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
