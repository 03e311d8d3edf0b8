//! The steps of one worker on its own: starting it, judging its
//! readiness, and once ready its liveness checks and watchdog.

use std::time::{Duration, Instant};

use super::{Plan, Step, StopReason};
use crate::CHECK_ANSWER_GRACE;
use crate::worker::{AfterStop, Outcome, State, Worker};
use model::spec::{AppSpec, HealthCheck, HealthSpec, Readiness};

/// A ready worker's watchdog and liveness checks: what is due now, and when
/// to look again. A worker being recycled is not checked any more (its
/// replacement is on its way), but its watchdog still holds.
pub(super) fn watch(worker: &Worker, spec: &AppSpec, checks: bool, now: Instant, plan: &mut Plan) {
    let State::Ready { since: ready, .. } = worker.state else {
        return;
    };
    if let Some(at) = worker.inject_check_at {
        if now >= at {
            plan.steps.push(Step::InjectUnseen { id: worker.id });
        } else {
            plan.wake(at);
        }
    }
    if let Some(watchdog) = worker.watchdog {
        if now >= watchdog.deadline {
            plan.steps.push(Step::WatchdogMissed { id: worker.id });
            return;
        }
        plan.wake(watchdog.deadline);
    }
    let Some(health) = spec
        .health
        .as_ref()
        .filter(|_| checks && worker.recycle.is_none())
    else {
        return;
    };
    let (due, step) = match worker.health.in_flight {
        Some((_, started)) => (
            started + answer_within(health),
            Step::CheckTimedOut { id: worker.id },
        ),
        None => (
            worker.health.next_check.unwrap_or(ready + health.every),
            Step::Check { id: worker.id },
        ),
    };
    if now >= due {
        plan.steps.push(step);
    } else {
        plan.wake(due);
    }
}

/// How long after ordering a liveness check the core waits for its answer.
/// A probe (`tcp`, `http`) is timed by the shell from when it really
/// starts — the loop may be busy spawning when it is due, and a timeout
/// counted from then failed checks that never ran — so the core waits
/// [`CHECK_ANSWER_GRACE`] longer, only for an answer that is lost. An
/// `exec` check's process is started when ordered: its `timeout` holds.
pub fn answer_within(health: &HealthSpec) -> Duration {
    match health.check {
        HealthCheck::Probe(_) => health.timeout + CHECK_ANSWER_GRACE,
        HealthCheck::Exec(_) => health.timeout,
    }
}

/// Keep one worker moving: start it (when `may_start`: a rollout already at
/// `N + max_surge` processes waits), restart it after backoff, decide
/// readiness.
pub(super) fn drive(
    worker: &Worker,
    spec: &AppSpec,
    now: Instant,
    may_start: bool,
    plan: &mut Plan,
) {
    match worker.state {
        State::Pending if may_start => plan.steps.push(Step::Start { id: worker.id }),
        State::Backoff { until } => {
            if now < until {
                plan.wake(until);
            } else if may_start {
                plan.steps.push(Step::Start { id: worker.id });
            }
        }
        State::Starting {
            since,
            exec_confirmed,
            ..
        } => {
            let ready_after = match spec.ready {
                Readiness::Immediate => Some(Duration::ZERO),
                Readiness::Delay(delay) => Some(delay),
                Readiness::Notify | Readiness::Probe(_) => None,
            };
            if let Some(after) = ready_after {
                // Only a process that runs the program can be ready: the
                // exec result (an input) wakes this app again.
                if now >= since + after {
                    if exec_confirmed {
                        plan.steps.push(Step::MarkReady { id: worker.id });
                        return;
                    }
                } else {
                    plan.wake(since + after);
                }
            }
            let timeout =
                (since + spec.ready_timeout).max(worker.ready_extended_to.unwrap_or(since));
            if now >= timeout {
                plan.steps.push(Step::Stop {
                    id: worker.id,
                    reason: StopReason::NotReady,
                    then: AfterStop::Failed(Outcome::NotReady),
                });
            } else {
                plan.wake(timeout);
            }
        }
        State::Pending
        | State::Spawning
        | State::Ready { .. }
        | State::Stopping { .. }
        | State::Failed
        | State::Exited
        | State::Completed { .. }
        | State::Held => {}
    }
}
