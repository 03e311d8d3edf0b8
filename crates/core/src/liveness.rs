//! Restarting what is alive but broken: liveness checks, memory limits and
//! the watchdog.
//!
//! Reconcile says when a check is due, when one timed out and when a
//! watchdog deadline passed ([`super::reconcile`]'s `watch`); the answers
//! (a check's result, a memory measurement, a `WATCHDOG=` message) come in
//! as inputs. An instance found broken is *condemned*:
//! - where it can be replaced first — `max_surge` leaves room, readiness is
//!   not a per-slot probe (the broken one would answer it), the app is not
//!   rolling out a new generation, and the restart policy allows another
//!   start — it keeps serving, marked [`Recycle`](super::worker::Recycle),
//!   while reconcile starts its replacement and stops it once the new one is
//!   ready; should the replacement's run fail (it could not bind the slot's
//!   port, say), the broken one stops then, and the replacement restarts
//!   with backoff. The restart counts (backoff, `max_restarts`);
//! - otherwise it is stopped and its run ends as failed, which the restart
//!   policy decides about — and which, for a replacement of a rollout,
//!   halts that rollout as any failed replacement does.
//!
//! A missed watchdog is never replaced first: a wedged process is stopped
//! with `watchdog_signal` (then SIGKILL at `kill_timeout`) and restarted
//! with backoff, as systemd does.

use std::time::{Duration, Instant};

use super::reconcile::StopReason;
use super::worker::{AfterStop, CheckVerdict, Outcome, RestartRules, State, Verdict};
use super::{Action, Core, Event, Instance, MEMORY_ANSWER_LOST, StopHow};
use model::orders::WorkerId;
use model::orders::{CheckOrder, CheckTarget, WatchdogMessage};
use model::spec::{HealthCheck, Readiness};

impl Core {
    /// Whether any app has a memory limit (the measuring timer runs).
    pub(super) fn watches_memory(&self) -> bool {
        self.apps.values().any(|a| a.spec.max_memory.is_some())
    }

    /// Start the due liveness check of worker `id`.
    pub(super) fn check(&mut self, name: &str, id: WorkerId, now: Instant) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let Some(health) = app.spec.health.clone() else {
            return;
        };
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let (Some(pid), slot, generation) = (worker.state.pid(), worker.slot, worker.generation)
        else {
            return;
        };
        let check = match worker.check_started(now, health.every) {
            Ok(check) => check,
            Err(refused) => return self.anomaly(refused.to_string()),
        };
        let target = match &health.check {
            HealthCheck::Probe(probe) => match probe.target(slot) {
                Some(target) => CheckTarget::Probe(target.clone()),
                None => {
                    let detail = format!("no check target for slot {slot}");
                    return self.checked(pid, check, false, detail, now);
                }
            },
            HealthCheck::Exec(argv) => {
                let Some(definition) = app.definitions.get(&generation).cloned() else {
                    let error = format!("{name}: no definition for generation {generation}");
                    return self.anomaly(error);
                };
                CheckTarget::Exec {
                    argv: argv.clone(),
                    definition,
                }
            }
        };
        self.emit(Action::Check(CheckOrder {
            app: name.to_string(),
            slot,
            pid,
            check,
            target,
            timeout: health.timeout,
        }));
    }

    /// The check in flight of worker `id` was not answered in time.
    pub(super) fn check_timed_out(&mut self, name: &str, id: WorkerId, now: Instant) {
        let Some(app) = self.apps.get(name) else {
            return;
        };
        let Some(worker) = app.workers.get(&id) else {
            return;
        };
        let (Some(pid), Some((check, _))) = (worker.state.pid(), worker.health.in_flight) else {
            return;
        };
        let timeout = app
            .spec
            .health
            .as_ref()
            .map_or(Duration::ZERO, crate::reconcile::answer_within);
        self.emit(Action::CancelCheck { pid });
        let detail = format!("no answer within {}", humantime::format_duration(timeout));
        self.checked(pid, check, false, detail, now);
    }

    /// The answer of check `check` of the worker led by `pid`.
    pub(super) fn checked(
        &mut self,
        pid: i32,
        check: u64,
        passed: bool,
        detail: String,
        now: Instant,
    ) {
        let Some((app, id)) = self.by_pid(pid) else {
            return;
        };
        let Some(health) = app.spec.health.clone() else {
            return;
        };
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let verdict = match worker.check_answered(check, passed, detail.clone(), &health) {
            Ok(verdict) => verdict,
            Err(refused) => return self.ignored(refused),
        };
        app.dirty = true;
        let instance = Instance::of(&app.spec.name, worker);
        let name = app.spec.name.clone();
        match verdict {
            CheckVerdict::Passed { recovered: false } => {}
            CheckVerdict::Passed { recovered: true } => {
                self.report(Event::Healthy { instance, pid });
            }
            CheckVerdict::Failed { counted, failures } => self.report(Event::CheckFailed {
                instance,
                pid,
                failures,
                threshold: health.failures,
                counted,
                detail,
            }),
            CheckVerdict::Unhealthy { failures } => {
                self.report(Event::Unhealthy {
                    instance,
                    pid,
                    failures,
                    detail,
                });
                self.condemn(&name, id, Outcome::Unhealthy, now);
            }
        }
    }

    /// When memory is to be measured next, if any app has a limit: at
    /// `memory_due`, but never while a measurement is out (unless its
    /// answer is lost).
    pub(super) fn memory_wake(&self) -> Option<Instant> {
        if !self.watches_memory() {
            return None;
        }
        Some(match self.measuring {
            Some((_, since)) => self.memory_due.max(since + MEMORY_ANSWER_LOST),
            None => self.memory_due,
        })
    }

    /// Time to measure memory: order it for every running instance of an
    /// app with `max_memory`, one measurement at a time.
    pub(super) fn measure_memory(&mut self, now: Instant) {
        if self.memory_wake().is_none_or(|at| now < at) {
            return;
        }
        self.memory_due = now + self.desired.memory_check;
        let pids: Vec<i32> = self
            .apps
            .values()
            .filter(|a| a.spec.max_memory.is_some())
            .flat_map(|a| a.workers.values())
            .filter(|w| w.state.is_running())
            .filter_map(|w| w.state.pid())
            .collect();
        if !pids.is_empty() {
            self.memory_rounds += 1;
            let round = self.memory_rounds;
            self.measuring = Some((round, now));
            self.emit(Action::MeasureMemory { round, pids });
        }
    }

    /// What the instances used: over the limit, a ready one is replaced and
    /// a starting one is stopped as a failed start.
    pub(super) fn memory_measured(&mut self, round: u64, usage: Vec<(i32, u64)>, now: Instant) {
        if self.measuring.map(|(out, _)| out) != Some(round) {
            // The answer of a measurement given up as lost: stale.
            return;
        }
        self.measuring = None;
        // A measurement that took longer than a period: the next one a
        // period from now, not at once.
        if self.memory_due <= now {
            self.memory_due = now + self.desired.memory_check;
        }
        for (pid, bytes) in usage {
            let Some((app, id)) = self.by_pid(pid) else {
                continue;
            };
            let Some(limit) = app.spec.max_memory else {
                continue;
            };
            let Some(worker) = app.workers.get_mut(&id) else {
                continue;
            };
            if bytes <= limit || !worker.state.is_running() {
                continue;
            }
            if worker.recycle.is_some() {
                // Replace-first has a ceiling: past it, the instance stops
                // first (where the cgroup's `memory.max` did not stop it).
                if bytes > model::limits::memory_ceiling(limit) {
                    let name = app.spec.name.clone();
                    let (how, then) = (StopHow::default(), AfterStop::Remove);
                    self.stop(&name, id, StopReason::OverMemoryCeiling, how, then, now);
                }
                continue;
            }
            let instance = Instance::of(&app.spec.name, worker);
            let name = app.spec.name.clone();
            self.report(Event::MemoryExceeded {
                instance,
                pid,
                rss_bytes: bytes,
                limit_bytes: limit,
            });
            self.condemn(&name, id, Outcome::MemoryExceeded, now);
        }
    }

    /// `WATCHDOG=1` or `WATCHDOG=trigger` from the worker led by `leader`.
    pub(super) fn watchdog_message(&mut self, leader: i32, message: WatchdogMessage, now: Instant) {
        let Some((app, id)) = self.by_pid(leader) else {
            return;
        };
        let name = app.spec.name.clone();
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        match message {
            WatchdogMessage::Ping => match worker.watchdog_ping(now) {
                Ok(()) => app.dirty = true,
                Err(refused) => self.ignored(refused),
            },
            WatchdogMessage::Trigger if worker.state.is_running() => {
                self.watchdog_missed(&name, id, true, now);
            }
            WatchdogMessage::Trigger => {}
        }
    }

    /// The watchdog of worker `id` fired: stop it with `watchdog_signal`;
    /// its run ends as failed and the restart policy decides.
    pub(super) fn watchdog_missed(
        &mut self,
        name: &str,
        id: WorkerId,
        triggered: bool,
        now: Instant,
    ) {
        let Some(app) = self.apps.get(name) else {
            return;
        };
        let signal = app.spec.watchdog_signal;
        let Some(worker) = app.workers.get(&id) else {
            return;
        };
        let Some(pid) = worker.state.pid() else {
            return;
        };
        let (period, since) = match (worker.watchdog, worker.state.started()) {
            (Some(w), _) => (w.period, w.last_ping.unwrap_or(w.deadline - w.period)),
            (None, started) => (Duration::ZERO, started.unwrap_or(now)),
        };
        self.broken += 1;
        self.report(Event::WatchdogMissed {
            instance: Instance::of(&app.spec.name, worker),
            pid,
            period,
            silent_for: now.saturating_duration_since(since),
            triggered,
            signal,
        });
        let how = StopHow {
            command: None,
            signal: Some(signal),
        };
        let then = AfterStop::Failed(Outcome::WatchdogMissed);
        self.stop(name, id, StopReason::Watchdog, how, then, now);
    }

    /// Ready worker `id` must go (`outcome` says why): replaced first where
    /// it can be, else stopped as a failed run.
    fn condemn(&mut self, name: &str, id: WorkerId, outcome: Outcome, now: Instant) {
        self.broken += 1;
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let rules = RestartRules::of(&app.spec);
        let generation = app.generation;
        // During a rollout (or after a halted one) nothing replaces one
        // instance on its own: a broken replacement is a failed one.
        let rolling = app.rollout_halted || app.workers.values().any(|w| w.generation < generation);
        // Replacing first needs room (`max_surge`), and a readiness that
        // cannot be given by the broken one: a per-slot probe would be
        // answered by it (the slot's port is its), so it stops first.
        let room = app.spec.reload.max_surge > 0 && !matches!(app.spec.ready, Readiness::Probe(_));
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let Some(pid) = worker.state.pid() else {
            return;
        };
        let verdict =
            if worker.state.is_ready() && worker.generation == generation && !rolling && room {
                match worker.condemn(outcome, now, &rules) {
                    Ok(verdict) => verdict,
                    Err(refused) => return self.ignored(refused),
                }
            } else {
                Verdict::Stop
            };
        match verdict {
            Verdict::Replace { attempt, delay } => {
                app.dirty = true;
                let instance = Instance::of(&app.spec.name, worker);
                self.emit(Action::CancelCheck { pid });
                self.report(Event::Recycling {
                    instance,
                    pid,
                    why: outcome,
                    attempt,
                    delay,
                });
            }
            Verdict::Stop => {
                let reason = match outcome {
                    Outcome::MemoryExceeded => StopReason::OverMemory,
                    _ => StopReason::Unhealthy,
                };
                let then = AfterStop::Failed(outcome);
                self.stop(name, id, reason, StopHow::default(), then, now);
            }
        }
    }
}
#[cfg(test)]
mod tests;

impl Core {
    /// A stall of ours (see [`Input::Stalled`]): the deadlines that judge a
    /// worker — its readiness, its liveness check in flight, its watchdog,
    /// the preload library's report — move by `by`.
    pub(super) fn stalled(&mut self, by: Duration) {
        for app in self.apps.values_mut() {
            let ready_timeout = app.spec.ready_timeout;
            for worker in app.workers.values_mut() {
                if let State::Starting { since, .. } = worker.state {
                    let deadline =
                        (since + ready_timeout).max(worker.ready_extended_to.unwrap_or(since));
                    worker.ready_extended_to = Some(deadline + by);
                }
                if let Some((check, started)) = worker.health.in_flight {
                    worker.health.in_flight = Some((check, started + by));
                }
                if let Some(watchdog) = worker.watchdog.as_mut() {
                    watchdog.deadline += by;
                }
                if let Some(at) = worker.inject_check_at.as_mut() {
                    *at += by;
                }
            }
            app.dirty = true;
        }
        self.report(Event::Stalled { by });
    }
}
