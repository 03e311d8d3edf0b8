//! `reconcile(desired, observed, now) -> actions`: the supervisor's brain, pure.
//!
//! Level-triggered, like a Kubernetes controller: it looks at the whole state
//! of one app every time and says what to do next, so a missed or duplicated
//! event cannot leave drift. Applying the actions changes the observed state;
//! the caller then reconciles again until no action is left, and sleeps until
//! [`Plan::wake_at`] or the next event.
//!
//! Rules, for an app of `N` instances at generation `G` (the current version of
//! its process definition), with `max_surge` s and `max_unavailable` u:
//! - slots `0..N` each get a worker of generation `G`; workers of slots `>= N`
//!   are stopped, highest slot first;
//! - a worker in backoff is started again when its delay is over; readiness by
//!   delay and `ready_timeout` are decided here (notify and probes arrive as
//!   events);
//! - a stop that outlives `kill_timeout` becomes a SIGKILL;
//! - outdated workers (generation < `G`) are replaced slot by slot: the new one
//!   is created while at most `N + s` workers exist (draining ones included),
//!   and the old one is stopped once its replacement is ready — or earlier, when
//!   at least `N − u` ready workers remain. A replacement that fails halts the
//!   rollout: it is removed, the old workers keep serving, and nothing more is
//!   replaced until the next generation;
//! - with `recreate` (a listen address that overlaps the old one), every
//!   outdated worker is stopped first and the new ones start once all are gone.

use std::time::{Duration, Instant};

use crate::spec::{AppSpec, Readiness};
use crate::worker::{AfterStop, Outcome, State, Worker, WorkerId};

/// The desired state of one app, as reconcile needs it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub spec: &'a AppSpec,
    /// The current generation of the app's process definition.
    pub generation: u64,
    /// The rollout to this generation was halted by a failed replacement.
    pub rollout_halted: bool,
    /// Replace by stopping every outdated worker first and starting the new
    /// ones after (an overlapping listen address cannot be bound by both).
    pub recreate: bool,
}

/// Why a worker is being stopped (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Its slot is above the desired instance count.
    ScaleDown,
    /// Replaced by a worker of the current generation.
    Outdated,
    /// Not ready within `ready_timeout`.
    NotReady,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Add a worker for `slot` at the current generation (it starts on the next pass).
    Create { slot: u32, generation: u64 },
    /// Start the process of a pending worker, or restart one whose backoff is over.
    Start { id: WorkerId },
    /// The worker's readiness delay passed (or readiness is `none`).
    MarkReady { id: WorkerId },
    /// Send the stop signal to the worker's process group.
    Stop {
        id: WorkerId,
        reason: StopReason,
        then: AfterStop,
    },
    /// `kill_timeout` passed: SIGKILL the worker's process group.
    Kill { id: WorkerId },
    /// Forget a worker that has no process.
    Remove { id: WorkerId },
    /// A replacement failed: stop replacing until the next generation.
    HaltRollout { generation: u64, slot: u32 },
}

/// What to do now, and when to look again if nothing happens before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub wake_at: Option<Instant>,
}

impl Plan {
    fn wake(&mut self, at: Instant) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }
}

/// Does the worker (still) stand for a process, now or soon? Counts toward `N + s`.
fn occupies(worker: &Worker) -> bool {
    !matches!(worker.state, State::Failed | State::Exited | State::Held)
}

fn is_running(worker: &Worker) -> bool {
    matches!(worker.state, State::Starting { .. } | State::Ready { .. })
}

fn is_stopping(worker: &Worker) -> bool {
    matches!(worker.state, State::Stopping { .. })
}

/// Decide the next actions for one app.
pub fn reconcile(target: Target<'_>, workers: &[Worker], now: Instant) -> Plan {
    let spec = target.spec;
    let desired = spec.instances;
    let mut plan = Plan::default();

    for worker in workers {
        if let State::Stopping {
            deadline, killed, ..
        } = worker.state
        {
            if killed {
                continue;
            }
            if now >= deadline {
                plan.actions.push(Action::Kill { id: worker.id });
            } else {
                plan.wake(deadline);
            }
        }
    }

    // Above the desired count: stop (highest slot first) or forget.
    let mut surplus: Vec<&Worker> = workers
        .iter()
        .filter(|w| w.slot >= desired && !is_stopping(w))
        .collect();
    surplus.sort_by_key(|w| std::cmp::Reverse(w.slot));
    for worker in surplus {
        plan.actions.push(if is_running(worker) {
            Action::Stop {
                id: worker.id,
                reason: StopReason::ScaleDown,
                then: AfterStop::Remove,
            }
        } else {
            Action::Remove { id: worker.id }
        });
    }

    // The workers that stand for a wanted slot: all but those stopping for good
    // (one stopping after a failed start still holds its slot).
    let live = |w: &&Worker| {
        w.slot < desired
            && !matches!(
                w.state,
                State::Stopping {
                    then: AfterStop::Remove,
                    ..
                }
            )
    };
    let has_outdated = workers
        .iter()
        .filter(live)
        .any(|w| w.generation < target.generation);
    // While any outdated worker exists (draining ones included), creating is
    // bounded by `N + max_surge`.
    let rolling = workers.iter().any(|w| w.generation < target.generation);
    let mut halted = target.rollout_halted;

    // A replacement that failed (crashed, or not ready in time) while old
    // workers still exist halts the rollout.
    if has_outdated
        && !halted
        && let Some(failed) = workers.iter().filter(live).find(|w| {
            w.generation == target.generation && w.last_outcome.is_some_and(|o| o.is_failure())
        })
    {
        plan.actions.push(Action::HaltRollout {
            generation: target.generation,
            slot: failed.slot,
        });
        halted = true;
    }

    // Workers that are or will be processes: running or draining anywhere, plus
    // pending or backing-off ones in wanted slots.
    let mut occupied = workers
        .iter()
        .filter(|w| is_running(w) || is_stopping(w) || (w.slot < desired && occupies(w)))
        .count();
    let mut ready = workers
        .iter()
        .filter(live)
        .filter(|w| matches!(w.state, State::Ready { .. }))
        .count();
    let limit = desired as usize + spec.reload.max_surge as usize;
    let floor = (desired as usize).saturating_sub(spec.reload.max_unavailable as usize);

    for slot in 0..desired {
        let current = workers
            .iter()
            .filter(live)
            .find(|w| w.slot == slot && w.generation == target.generation);
        let outdated: Vec<&Worker> = workers
            .iter()
            .filter(live)
            .filter(|w| w.slot == slot && w.generation < target.generation)
            .collect();

        match current {
            Some(worker) => {
                let replacing = !outdated.is_empty();
                if halted && replacing && worker.last_outcome.is_some_and(|o| o.is_failure()) {
                    // The failed replacement goes; the old worker keeps serving.
                    retire(worker, &mut plan);
                    continue;
                }
                drive(worker, spec, now, &mut plan);
                if matches!(worker.state, State::Ready { .. }) {
                    for old in outdated {
                        ready -= usize::from(retire(old, &mut plan));
                    }
                }
            }
            None if outdated.is_empty() => {
                if target.recreate && rolling {
                    // Old workers are still draining and hold the old socket.
                    continue;
                }
                if occupied < limit || !rolling {
                    plan.actions.push(Action::Create {
                        slot,
                        generation: target.generation,
                    });
                    occupied += 1;
                }
            }
            None if halted => {
                // Old workers keep serving, and restarting with their own
                // definition, until the next generation.
                for old in &outdated {
                    drive(old, spec, now, &mut plan);
                }
            }
            None if target.recreate => {
                for old in &outdated {
                    retire(old, &mut plan);
                }
            }
            None => {
                let serving = outdated.iter().any(|w| is_running(w));
                if !serving {
                    // Nothing of this slot serves: replace it at once.
                    for old in &outdated {
                        plan.actions.push(Action::Remove { id: old.id });
                    }
                    plan.actions.push(Action::Create {
                        slot,
                        generation: target.generation,
                    });
                    continue;
                }
                if occupied < limit {
                    plan.actions.push(Action::Create {
                        slot,
                        generation: target.generation,
                    });
                    occupied += 1;
                } else if let Some(old) = outdated.iter().find(|w| is_running(w)) {
                    // Make room: within max_unavailable, the old one goes first.
                    if !matches!(old.state, State::Ready { .. }) || ready > floor {
                        ready -= usize::from(retire(old, &mut plan));
                    }
                }
            }
        }
    }
    plan
}

/// Stop a worker that has a process; forget one that has none.
/// Returns whether a ready worker was taken away.
fn retire(old: &Worker, plan: &mut Plan) -> bool {
    if is_running(old) {
        plan.actions.push(Action::Stop {
            id: old.id,
            reason: StopReason::Outdated,
            then: AfterStop::Remove,
        });
    } else if !is_stopping(old) {
        plan.actions.push(Action::Remove { id: old.id });
    }
    matches!(old.state, State::Ready { .. })
}

/// Keep one worker moving: start it, restart it after backoff, decide readiness.
fn drive(worker: &Worker, spec: &AppSpec, now: Instant, plan: &mut Plan) {
    match worker.state {
        State::Pending => plan.actions.push(Action::Start { id: worker.id }),
        State::Backoff { until } => {
            if now >= until {
                plan.actions.push(Action::Start { id: worker.id });
            } else {
                plan.wake(until);
            }
        }
        State::Starting { since, .. } => {
            let ready_after = match spec.ready {
                Readiness::Immediate => Some(Duration::ZERO),
                Readiness::Delay(delay) => Some(delay),
                Readiness::Notify | Readiness::Tcp(_) | Readiness::Http(_) => None,
            };
            if let Some(after) = ready_after {
                if now >= since + after {
                    plan.actions.push(Action::MarkReady { id: worker.id });
                    return;
                }
                plan.wake(since + after);
            }
            let timeout = since + spec.ready_timeout;
            if now >= timeout {
                plan.actions.push(Action::Stop {
                    id: worker.id,
                    reason: StopReason::NotReady,
                    then: AfterStop::Failed(Outcome::NotReady),
                });
            } else {
                plan.wake(timeout);
            }
        }
        State::Ready { .. }
        | State::Stopping { .. }
        | State::Failed
        | State::Exited
        | State::Held => {}
    }
}

#[cfg(test)]
mod tests;
