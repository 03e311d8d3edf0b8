//! What keeps watch over a worker once it is ready: its liveness checks, its
//! watchdog, and the decision to replace it while it still serves.
//!
//! None of this is a state of its own: a checked, watched or condemned worker
//! is `Ready` (the transition table is unchanged). What is kept here belongs
//! to the current process and is cleared when another one is spawned.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Outcome, Refused, RestartRules, State, Worker};
use model::backoff;
use model::spec::{HealthSpec, RestartPolicy};

/// The most one `EXTEND_TIMEOUT_USEC=` extends a start by (a datagram may
/// say 585,000 years).
pub(crate) const MAX_EXTEND_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The liveness checks of the current process.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// Consecutive failed checks that counted (one success resets it).
    pub failures: u32,
    /// What the last failed check said.
    pub last_failure: Option<String>,
    /// The check in flight: its number and when it started.
    #[serde(with = "model::monotonic::option_pair")]
    pub in_flight: Option<(u64, Instant)>,
    /// Numbers the checks of this worker (across its processes), so a late
    /// answer is told apart.
    pub checks: u64,
    /// When the next check is due; `None`: one `every` after ready.
    #[serde(with = "model::monotonic::option")]
    pub next_check: Option<Instant>,
    /// A check of the current process has been answered.
    pub answered: bool,
}

/// systemd's watchdog over the current process, armed once it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watchdog {
    pub period: Duration,
    /// No `WATCHDOG=1` by then: missed.
    #[serde(with = "model::monotonic::instant")]
    pub deadline: Instant,
    #[serde(with = "model::monotonic::option")]
    pub last_ping: Option<Instant>,
}

/// A worker that still serves while a new one takes its slot (it was
/// unhealthy, or used too much memory). The new one inherits its restart
/// count and starts at `restart_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recycle {
    pub outcome: Outcome,
    #[serde(with = "model::monotonic::instant")]
    pub restart_at: Instant,
}

/// What a check's answer made of the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckVerdict {
    /// It passed; `recovered` when failures had counted before.
    Passed { recovered: bool },
    /// It failed; `counted` unless it started within `grace` of ready.
    Failed { counted: bool, failures: u32 },
    /// It failed `health.failures` times in a row.
    Unhealthy { failures: u32 },
}

/// How a live worker that must go is dealt with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A new worker takes its slot first (restart `attempt`, after `delay`).
    Replace { attempt: u32, delay: Duration },
    /// Stop it and let the restart policy decide (`restart: never`, or
    /// `max_restarts` reached).
    Stop,
}

impl Worker {
    /// The number of the check that starts now (the caller runs it).
    pub(crate) fn check_started(&mut self, now: Instant, every: Duration) -> Result<u64, Refused> {
        if !self.state.is_ready() || self.health.in_flight.is_some() {
            return Err(self.refuse("health check"));
        }
        self.health.checks += 1;
        self.health.in_flight = Some((self.health.checks, now));
        self.health.next_check = Some(now + every);
        Ok(self.health.checks)
    }

    /// The answer of check `number`: passed, or failed saying `detail`.
    pub(crate) fn check_answered(
        &mut self,
        number: u64,
        passed: bool,
        detail: String,
        spec: &HealthSpec,
    ) -> Result<CheckVerdict, Refused> {
        let (State::Ready { since: ready, .. }, Some((running, started))) =
            (&self.state, self.health.in_flight)
        else {
            return Err(self.refuse("health check result"));
        };
        if running != number {
            return Err(self.refuse("late health check result"));
        }
        let ready = *ready;
        self.health.in_flight = None;
        self.health.answered = true;
        if passed {
            let recovered = self.health.failures > 0;
            self.health.failures = 0;
            return Ok(CheckVerdict::Passed { recovered });
        }
        self.health.last_failure = Some(detail);
        let counted = started >= ready + spec.grace;
        if !counted {
            return Ok(CheckVerdict::Failed {
                counted,
                failures: self.health.failures,
            });
        }
        self.health.failures = self.health.failures.saturating_add(1);
        if self.health.failures >= spec.failures {
            return Ok(CheckVerdict::Unhealthy {
                failures: self.health.failures,
            });
        }
        Ok(CheckVerdict::Failed {
            counted,
            failures: self.health.failures,
        })
    }

    /// Ready: arm the watchdog (when the process has one).
    pub(crate) fn arm_watchdog(&mut self, now: Instant, period: Option<Duration>) {
        self.watchdog = period.map(|period| Watchdog {
            period,
            deadline: now + period,
            last_ping: None,
        });
    }

    /// `WATCHDOG=1`: the deadline moves on. Refused unless armed.
    pub(crate) fn watchdog_ping(&mut self, now: Instant) -> Result<(), Refused> {
        let Some(watchdog) = self.watchdog.as_mut().filter(|_| self.state.is_ready()) else {
            return Err(self.refuse("watchdog ping"));
        };
        watchdog.deadline = now + watchdog.period;
        watchdog.last_ping = Some(now);
        Ok(())
    }

    /// `EXTEND_TIMEOUT_USEC=`: while starting, `ready_timeout` ends no
    /// sooner than `now + by`.
    pub(crate) fn extend_start(&mut self, now: Instant, by: Duration) -> Result<(), Refused> {
        if !matches!(self.state, State::Starting { .. }) {
            return Err(self.refuse("extend timeout"));
        }
        let until = now + by.min(MAX_EXTEND_TIMEOUT);
        self.ready_extended_to = Some(self.ready_extended_to.map_or(until, |t| t.max(until)));
        Ok(())
    }

    /// This ready worker must go (`outcome` says why). It counts as a
    /// restart: either a replacement starts first ([`Verdict::Replace`],
    /// the worker is marked [`Recycle`] and keeps serving until then), or
    /// the policy will not restart it and it is to be stopped.
    pub(crate) fn condemn(
        &mut self,
        outcome: Outcome,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<Verdict, Refused> {
        let State::Ready { since: ready, .. } = self.state else {
            return Err(self.refuse("replace"));
        };
        if self.recycle.is_some() {
            return Err(self.refuse("replace again"));
        }
        if rules.restart == RestartPolicy::Never {
            return Ok(Verdict::Stop);
        }
        if now.saturating_duration_since(ready) >= rules.backoff.reset_after {
            self.attempt = 0;
        }
        if let Some(limit) = rules.max_restarts {
            prune(&mut self.recent_restarts, now, limit.within);
            if self.recent_restarts.len() >= limit.count as usize {
                return Ok(Verdict::Stop);
            }
            self.recent_restarts.push_back(now);
        }
        // Memory grown past `max_memory` is not a crash: the replacement
        // starts at once, and the next crash's backoff is not raised by it.
        let (attempt, delay) = if outcome == Outcome::MemoryExceeded {
            (self.attempt, Duration::ZERO)
        } else {
            let attempt = self.attempt.saturating_add(1);
            (attempt, backoff::delay(&rules.backoff, attempt))
        };
        self.attempt = attempt;
        self.restarts = self.restarts.saturating_add(1);
        self.last_outcome = Some(outcome);
        // No more checks: the caller cancels the one in flight.
        self.health.in_flight = None;
        self.recycle = Some(Recycle {
            outcome,
            restart_at: now + delay,
        });
        Ok(Verdict::Replace { attempt, delay })
    }

    /// The worker that takes the slot of `condemned`: it carries on its
    /// restart count and backoff, and waits for its restart time.
    pub(crate) fn replacing(
        id: super::WorkerId,
        generation: u64,
        condemned: &Worker,
        now: Instant,
    ) -> Worker {
        let mut worker = Worker::new(id, condemned.slot, generation);
        worker.attempt = condemned.attempt;
        worker.restarts = condemned.restarts;
        worker.recent_restarts = condemned.recent_restarts.clone();
        if let Some(recycle) = condemned.recycle.filter(|r| r.restart_at > now) {
            worker.state = State::Backoff {
                until: recycle.restart_at,
            };
        }
        worker
    }
}

/// Forget the restarts older than `within`.
pub(super) fn prune(restarts: &mut VecDeque<Instant>, now: Instant, within: Duration) {
    while restarts
        .front()
        .is_some_and(|at| now.saturating_duration_since(*at) >= within)
    {
        restarts.pop_front();
    }
}
