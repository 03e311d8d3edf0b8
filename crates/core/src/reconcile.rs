//! `reconcile(target, workers, now) -> steps`: the supervisor's brain, pure.
//!
//! Level-triggered, like a Kubernetes controller: it looks at the whole state
//! of one app every time and says what to do next, so a missed or duplicated
//! event cannot leave drift. The core applies the steps, which changes the
//! workers; it then reconciles again until no step is left, and sleeps until
//! [`Plan::wake_at`] or the next input.
//!
//! Rules, for an app of `N` instances at generation `G` (the current version of
//! its process definition), with `max_surge` s and `max_unavailable` u:
//! - slots `0..N` each get a worker of generation `G`; workers of slots `>= N`
//!   are stopped, highest slot first;
//! - a worker in backoff is started again when its delay is over; readiness by
//!   delay (and `none`) and `ready_timeout` are decided here, and only once
//!   `exec` succeeded (notify and probes arrive as inputs);
//! - a stop that outlives `kill_timeout` becomes a SIGKILL;
//! - outdated workers (generation < `G`) are replaced slot by slot: the new one
//!   is created while at most `N + s` workers exist (draining ones included),
//!   and the old one is stopped once its replacement is ready — or earlier, when
//!   more than `N − u` slots are served (a slot served by an old and a new
//!   worker counts once). Over `N + s` (a held slot started again), a
//!   replacement that is no process yet makes way, to come back when there is
//!   room. An outdated worker that does not
//!   serve (starting, backing off) is superseded at once: a definition that
//!   changes again mid-rollout stops the replacements in flight and rolls the
//!   newest one out, within the same bounds;
//! - a replacement that fails — crashes, is not ready in time, or ends its
//!   run (even with exit 0) before it took over its slot — halts the
//!   rollout: it is removed, the old workers keep serving (and restarting
//!   with their own definition), and nothing more is replaced until the next
//!   generation;
//! - with `recreate` (a listen address that overlaps the old one), every
//!   outdated worker is stopped first and the new ones start once all are gone;
//! - a worker being recycled (unhealthy, over `max_memory`: the core marks
//!   it) is replaced like an outdated one, within the same bounds, but its
//!   replacement failing halts nothing — the recycled one is stopped then,
//!   and the replacement restarts with backoff;
//! - a ready worker's liveness check is due `health.every` after the last
//!   one started (the first one `every` after ready), and fails when not
//!   answered within `health.timeout`; its watchdog deadline passing is a
//!   step too;
//! - a slot held by `stop` starts nothing, whatever its generation: one
//!   worker stands for it (the current one, else the newest old one; an
//!   empty slot gets one of the current generation, so `status` shows
//!   it), held — stopped first if it runs — and the others go. A rollout,
//!   `reload` or `restart` passes it by, and a failure in it halts no
//!   rollout; it rolls out with the rest once `start` releases it;
//! - while shutting down, every process is stopped and nothing starts; an
//!   app that others depend on holds still until they have stopped: stops
//!   under way go on and a missed watchdog still stops its instance, but
//!   no check runs and nothing starts.
//!
//! One call costs O(N log N) for N workers: they are grouped by slot once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::worker::{AfterStop, Outcome, State, Worker};
use model::orders::WorkerId;
use model::spec::{AppSpec, Readiness};

/// An app's workers, by id (ids grow: oldest first).
pub type Workers = BTreeMap<WorkerId, Worker>;

/// No slot held: the [`Target::held`] of an app nobody stopped.
pub static NOTHING_HELD: BTreeSet<u32> = BTreeSet::new();

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
    /// The supervisor is shutting down (or the app was removed from the file):
    /// stop everything, start nothing.
    pub winding_down: bool,
    /// Processes may start: the app's dependencies are met (and, scheduled,
    /// a run is on). When not, workers wait where they are.
    pub may_start: bool,
    /// Shutting down, but apps that depend on this one still run: it keeps
    /// what it has as it is — no check, no recycle, no start — until it
    /// winds down in its turn. Stops under way go on, and a missed watchdog
    /// still stops its instance.
    pub holding: bool,
    /// The slots `stop` holds until `start`: nothing starts in them.
    pub held: &'a BTreeSet<u32>,
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
    /// The supervisor is shutting down, or the app left the file.
    WindDown,
    /// A command: `restart` or `stop`.
    Command,
    /// Unhealthy or over its memory limit, and its replacement is ready.
    Recycled,
    /// Unhealthy, where it cannot be replaced first (a rollout is on, or
    /// the policy will not restart it).
    Unhealthy,
    /// Over `max_memory`, where it cannot be replaced first.
    OverMemory,
    /// Past its memory ceiling ([`model::limits::memory_ceiling`]) while
    /// its replacement starts: it stops first.
    OverMemoryCeiling,
    /// It missed its watchdog deadline.
    Watchdog,
    /// A scheduled app's next run replaces it (`overlap: replace`).
    NextRun,
    /// Its slot is held by `stop` (a process that started before the hold).
    Held,
}

impl StopReason {
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::ScaleDown => "scale down",
            StopReason::Outdated => "replaced",
            StopReason::NotReady => "not ready in time",
            StopReason::WindDown => "shutdown",
            StopReason::Command => "command",
            StopReason::Recycled => "replaced (unhealthy or over max_memory)",
            StopReason::Unhealthy => "unhealthy",
            StopReason::OverMemory => "over max_memory",
            StopReason::OverMemoryCeiling => {
                "past its memory ceiling (1.5 × max_memory) while being replaced"
            }
            StopReason::Watchdog => "watchdog missed",
            StopReason::NextRun => "replaced by the next run",
            StopReason::Held => "held (stop)",
        }
    }
}

/// One thing to do to an app's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
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
    /// Hold a worker that waits to start, in a slot `stop` holds.
    Hold { id: WorkerId },
    /// A replacement failed: stop replacing until the next generation.
    HaltRollout { generation: u64, slot: u32 },
    /// Run a liveness check of a ready worker.
    Check { id: WorkerId },
    /// A liveness check got no answer within `health.timeout`: it failed.
    CheckTimedOut { id: WorkerId },
    /// A ready worker's watchdog deadline passed.
    WatchdogMissed { id: WorkerId },
    /// A ready worker of an app with `inject` was never said to be handed
    /// its socket.
    InjectUnseen { id: WorkerId },
}

/// What to do now, and when to look again if nothing happens before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub wake_at: Option<Instant>,
}

impl Plan {
    fn wake(&mut self, at: Instant) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }
}

/// A process exists, or is being created.
fn has_process(worker: &Worker) -> bool {
    worker.state.pid().is_some() || worker.state == State::Spawning
}

/// Does the worker (still) stand for a process, now or soon? Counts toward `N + s`.
fn occupies(worker: &Worker) -> bool {
    !matches!(
        worker.state,
        State::Failed | State::Exited | State::Completed { .. } | State::Held
    )
}

/// Stopping for good (not to restart or count a failure in its slot).
fn leaving(worker: &Worker) -> bool {
    matches!(
        worker.state,
        State::Stopping {
            then: AfterStop::Remove,
            ..
        }
    )
}

/// The workers of one wanted slot.
#[derive(Default)]
struct Slot<'a> {
    /// The worker of the current generation (at most one stands for a slot).
    current: Option<&'a Worker>,
    /// Workers of older generations, oldest first.
    outdated: Vec<&'a Worker>,
}

/// Decide the next steps for one app.
pub fn reconcile(target: Target<'_>, workers: &Workers, now: Instant) -> Plan {
    let mut plan = Plan::default();
    for worker in workers.values() {
        if let State::Stopping {
            deadline,
            killed: false,
            ..
        } = worker.state
        {
            if now >= deadline {
                plan.steps.push(Step::Kill { id: worker.id });
            } else {
                plan.wake(deadline);
            }
        }
    }
    if target.winding_down {
        wind_down(workers, &mut plan);
        return plan;
    }
    let before = plan.steps.len();
    for worker in workers.values() {
        watch(worker, target.spec, !target.holding, now, &mut plan);
    }
    if target.holding {
        return plan;
    }
    if plan.steps.len() > before {
        // Checks, their timeouts and missed watchdogs first, alone: what
        // they decide (a stop, a recycle) is seen by the next pass, which
        // then plans the rest without a second step for the same worker.
        return plan;
    }

    let spec = target.spec;
    let desired = spec.instances;
    let generation = target.generation;

    // Above the desired count: stop (highest slot first) or forget.
    let mut surplus: Vec<&Worker> = workers
        .values()
        .filter(|w| w.slot >= desired && !w.state.is_stopping() && w.state != State::Spawning)
        .collect();
    surplus.sort_by_key(|w| std::cmp::Reverse(w.slot));
    for worker in surplus {
        plan.steps.push(if worker.state.is_running() {
            Step::Stop {
                id: worker.id,
                reason: StopReason::ScaleDown,
                then: AfterStop::Remove,
            }
        } else {
            Step::Remove { id: worker.id }
        });
    }

    // The workers that stand for a wanted slot: all but those stopping for
    // good (one stopping after a failed start still holds its slot).
    let mut slots: BTreeMap<u32, Slot<'_>> = BTreeMap::new();
    let mut has_outdated = false;
    for worker in workers.values().filter(|w| w.slot < desired && !leaving(w)) {
        let slot = slots.entry(worker.slot).or_default();
        if worker.generation >= generation && worker.recycle.is_none() {
            slot.current = Some(worker);
        } else {
            // A worker being recycled is replaced like an outdated one, but
            // its replacement failing halts no rollout.
            slot.outdated.push(worker);
            has_outdated |= worker.generation < generation;
        }
    }
    // Slots served now: a slot where an old and a new worker are both ready
    // (for the moment it takes to retire the old one) counts once, so the
    // count never lets another slot's only worker go below the floor.
    let mut ready = slots
        .values()
        .filter(|s| {
            s.current.is_some_and(|w| w.state.is_ready())
                || s.outdated.iter().any(|w| w.state.is_ready())
        })
        .count();
    // A replacement failed: it crashed or was not ready in time, or its run
    // ended (even with exit 0) before it could take over its slot.
    // (A held slot decides nothing about the rollout.)
    let failed_replacement = slots.iter().find_map(|(number, slot)| {
        if target.held.contains(number) {
            return None;
        }
        let current = slot.current?;
        let outcome = current.last_outcome?;
        (outcome.is_failure() || !slot.outdated.is_empty()).then_some(*number)
    });
    // While any outdated worker exists (draining ones included), creating is
    // bounded by `N + max_surge`.
    let rolling = workers
        .values()
        .any(|w| w.generation < generation || w.recycle.is_some());
    let mut halted = target.rollout_halted;

    // A replacement that failed (crashed, or not ready in time) while old
    // workers still exist halts the rollout.
    if has_outdated
        && !halted
        && let Some(slot) = failed_replacement
    {
        plan.steps.push(Step::HaltRollout { generation, slot });
        halted = true;
    }

    // Workers that are or will be processes: running or draining anywhere, plus
    // pending or backing-off ones in wanted slots.
    let mut occupied = workers
        .values()
        .filter(|w| has_process(w) || (w.slot < desired && occupies(w)))
        .count();
    // A scheduled app's run is never cut short by a new definition: its
    // replacement waits (it may not start beside the run) and the run ends
    // on its own, whatever `reload` says.
    let (max_surge, max_unavailable) = match spec.schedule {
        Some(_) => (1, 0),
        None => (spec.reload.max_surge, spec.reload.max_unavailable),
    };
    let limit = desired as usize + max_surge as usize;
    let floor = (desired as usize).saturating_sub(max_unavailable as usize);

    let empty = Slot::default();
    for number in 0..desired {
        let slot = slots.get(&number).unwrap_or(&empty);
        if target.held.contains(&number) {
            hold_slot(number, generation, slot, &mut plan, &mut occupied);
            continue;
        }
        let outdated = &slot.outdated;
        if let Some(worker) = slot.current {
            let replacing = !outdated.is_empty();
            if halted && replacing && worker.last_outcome.is_some() {
                // The failed replacement goes; the old worker keeps serving.
                retire(worker, &mut plan);
                continue;
            }
            if halted && replacing && !worker.state.is_ready() {
                let serving = outdated.iter().any(|old| old.state.is_running());
                if matches!(worker.state, State::Pending) && serving {
                    // Halted: no replacement starts while an old one serves.
                    plan.steps.push(Step::Remove { id: worker.id });
                    occupied = occupied.saturating_sub(1);
                    continue;
                }
                // A held slot keeps nothing running; otherwise the newest
                // old worker that runs keeps serving beside the replacement
                // in flight, and the rest give way.
                let keep = if worker.state == State::Held {
                    None
                } else {
                    newest_running(outdated)
                };
                give_way(outdated, keep, &mut plan, &mut occupied, &mut ready);
            }
            if replacing
                && occupied > limit
                && matches!(worker.state, State::Pending | State::Backoff { .. })
            {
                // Over `N + max_surge` (a held slot was started again, say):
                // a replacement that is no process yet makes way, to be
                // created again when there is room, so that the slots it
                // crowds out can start and the rollout can go on.
                plan.steps.push(Step::Remove { id: worker.id });
                occupied -= 1;
                continue;
            }
            let room = !rolling || occupied <= limit;
            drive(worker, spec, now, target.may_start && room, &mut plan);
            if !halted && worker.last_outcome.is_some() && !worker.state.is_running() {
                // The replacement of a recycled worker failed (gave up, or
                // backs off): the broken one does not serve on beside it —
                // it may hold what the replacement needs, its port say.
                for old in outdated.iter().filter(|w| w.recycle.is_some()) {
                    ready = ready.saturating_sub(usize::from(retire(old, &mut plan)));
                }
            }
            if worker.state.is_ready() {
                // The slot stays served: no change to `ready`.
                for old in outdated {
                    retire(old, &mut plan);
                }
            } else if !halted {
                supersede(outdated, &mut plan, &mut occupied, &mut ready);
            }
            continue;
        }
        if outdated.is_empty() {
            if target.recreate && rolling {
                // Old workers are still draining and hold the old socket.
                continue;
            }
            if occupied < limit || !rolling {
                plan.steps.push(Step::Create {
                    slot: number,
                    generation,
                });
                occupied += 1;
            }
            continue;
        }
        if halted {
            // One old worker keeps serving, and restarting with its own
            // definition, until the next generation: the newest that runs,
            // else the newest that will; the rest give way.
            let keep = newest_running(outdated).or_else(|| {
                outdated
                    .iter()
                    .rev()
                    .find(|w| matches!(w.state, State::Pending | State::Backoff { .. }))
                    .map(|w| w.id)
            });
            if let Some(keep) = keep {
                give_way(outdated, Some(keep), &mut plan, &mut occupied, &mut ready);
            }
            for old in outdated.iter().filter(|w| Some(w.id) == keep) {
                drive(
                    old,
                    spec,
                    now,
                    target.may_start && occupied <= limit,
                    &mut plan,
                );
            }
            continue;
        }
        if target.recreate {
            for old in outdated {
                ready = ready.saturating_sub(usize::from(retire(old, &mut plan)));
            }
            continue;
        }
        supersede(outdated, &mut plan, &mut occupied, &mut ready);
        if occupied < limit {
            plan.steps.push(Step::Create {
                slot: number,
                generation,
            });
            occupied += 1;
        } else if let Some(old) = outdated.iter().find(|w| w.state.is_ready())
            && ready > floor
        {
            // Make room: within max_unavailable, the old one goes first.
            ready = ready.saturating_sub(usize::from(retire(old, &mut plan)));
        }
    }
    plan
}

/// A slot `stop` holds: nothing in it starts, and one worker stands for
/// it — the current one, else the newest outdated one (a slot with none
/// gets one of the current generation, held on the next pass). That one,
/// waiting to start, is held; running (its start came before the hold), it
/// is stopped to be held. Any other is forgotten, or stopped for good if it
/// runs. Stopping workers finish their stop.
fn hold_slot(number: u32, generation: u64, slot: &Slot<'_>, plan: &mut Plan, occupied: &mut usize) {
    let Some(keeper) = slot.current.or_else(|| slot.outdated.last().copied()) else {
        plan.steps.push(Step::Create {
            slot: number,
            generation,
        });
        return;
    };
    for worker in slot.current.iter().chain(slot.outdated.iter()) {
        let kept = worker.id == keeper.id;
        match worker.state {
            State::Pending | State::Backoff { .. } => {
                plan.steps.push(if kept {
                    Step::Hold { id: worker.id }
                } else {
                    Step::Remove { id: worker.id }
                });
                *occupied = occupied.saturating_sub(1);
            }
            State::Starting { .. } | State::Ready { .. } => plan.steps.push(Step::Stop {
                id: worker.id,
                reason: StopReason::Held,
                then: if kept {
                    AfterStop::Hold
                } else {
                    AfterStop::Remove
                },
            }),
            State::Held | State::Failed | State::Exited | State::Completed { .. } if !kept => {
                plan.steps.push(Step::Remove { id: worker.id });
            }
            State::Spawning
            | State::Stopping { .. }
            | State::Held
            | State::Failed
            | State::Exited
            | State::Completed { .. } => {}
        }
    }
}

/// Outdated workers that do not serve make way at once: starting ones are
/// stopped, those without a process are forgotten. Ready ones stay until
/// their replacement is ready (or room is needed within `max_unavailable`).
fn supersede(outdated: &[&Worker], plan: &mut Plan, occupied: &mut usize, ready: &mut usize) {
    for old in outdated {
        match old.state {
            State::Ready { .. } | State::Stopping { .. } | State::Spawning => {}
            State::Starting { .. } => {
                *ready = ready.saturating_sub(usize::from(retire(old, plan)));
            }
            State::Pending | State::Backoff { .. } => {
                plan.steps.push(Step::Remove { id: old.id });
                *occupied = occupied.saturating_sub(1);
            }
            State::Failed | State::Exited | State::Completed { .. } | State::Held => {
                plan.steps.push(Step::Remove { id: old.id });
            }
        }
    }
}

/// The newest of `outdated` (oldest first) that runs.
fn newest_running(outdated: &[&Worker]) -> Option<WorkerId> {
    outdated
        .iter()
        .rev()
        .find(|w| w.state.is_running())
        .map(|w| w.id)
}

/// In a halted rollout, every old worker of a slot but `keep` goes: one
/// that runs is stopped, one without a process is forgotten; a stopping one
/// is on its way already.
fn give_way(
    outdated: &[&Worker],
    keep: Option<WorkerId>,
    plan: &mut Plan,
    occupied: &mut usize,
    ready: &mut usize,
) {
    for old in outdated.iter().filter(|w| Some(w.id) != keep) {
        match old.state {
            State::Stopping { .. } | State::Spawning => {}
            State::Starting { .. } | State::Ready { .. } => {
                *ready = ready.saturating_sub(usize::from(retire(old, plan)));
            }
            State::Pending | State::Backoff { .. } => {
                plan.steps.push(Step::Remove { id: old.id });
                *occupied = occupied.saturating_sub(1);
            }
            State::Failed | State::Exited | State::Completed { .. } | State::Held => {
                plan.steps.push(Step::Remove { id: old.id });
            }
        }
    }
}

/// Shutting down: stop every process, forget every worker without one.
fn wind_down(workers: &Workers, plan: &mut Plan) {
    for worker in workers.values() {
        match worker.state {
            State::Starting { .. } | State::Ready { .. } => plan.steps.push(Step::Stop {
                id: worker.id,
                reason: StopReason::WindDown,
                then: AfterStop::Remove,
            }),
            State::Stopping { .. } | State::Spawning => {}
            State::Pending
            | State::Backoff { .. }
            | State::Failed
            | State::Held
            | State::Exited
            | State::Completed { .. } => plan.steps.push(Step::Remove { id: worker.id }),
        }
    }
}

/// Stop a worker that has a process; forget one that has none.
/// Returns whether a ready worker was taken away.
fn retire(old: &Worker, plan: &mut Plan) -> bool {
    if old.state.is_running() {
        let reason = if old.recycle.is_some() {
            StopReason::Recycled
        } else {
            StopReason::Outdated
        };
        plan.steps.push(Step::Stop {
            id: old.id,
            reason,
            then: AfterStop::Remove,
        });
    } else if !old.state.is_stopping() && old.state != State::Spawning {
        plan.steps.push(Step::Remove { id: old.id });
    }
    old.state.is_ready()
}

/// A ready worker's watchdog and liveness checks: what is due now, and when
/// to look again. A worker being recycled is not checked any more (its
/// replacement is on its way), but its watchdog still holds.
fn watch(worker: &Worker, spec: &AppSpec, checks: bool, now: Instant, plan: &mut Plan) {
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
            started + health.timeout,
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

/// Keep one worker moving: start it (when `may_start`: a rollout already at
/// `N + max_surge` processes waits), restart it after backoff, decide
/// readiness.
fn drive(worker: &Worker, spec: &AppSpec, now: Instant, may_start: bool, plan: &mut Plan) {
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

#[cfg(test)]
mod tests;
