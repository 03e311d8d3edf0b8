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
use std::time::Instant;

use super::worker::{AfterStop, State, Worker};
use model::orders::WorkerId;
use model::spec::AppSpec;

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

/// Decide the next steps for one app.
pub fn reconcile(target: Target<'_>, workers: &Workers, now: Instant) -> Plan {
    let mut plan = Plan::default();
    kill_past_kill_timeout(workers, now, &mut plan);
    if target.winding_down {
        wind_down(workers, &mut plan);
        return plan;
    }
    let before = plan.steps.len();
    for worker in workers.values() {
        drive::watch(worker, target.spec, !target.holding, now, &mut plan);
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
    scale_down(workers, target.spec.instances, &mut plan);
    slots::Pass::new(target, workers, now, plan).walk()
}

/// A stop that outlived its `kill_timeout` becomes a SIGKILL; the others
/// are looked at again at their deadline.
fn kill_past_kill_timeout(workers: &Workers, now: Instant, plan: &mut Plan) {
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
}

/// Above the desired count: stop (highest slot first) or forget.
fn scale_down(workers: &Workers, desired: u32, plan: &mut Plan) {
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

mod drive;
pub use drive::answer_within;
mod slots;

#[cfg(test)]
mod tests;
