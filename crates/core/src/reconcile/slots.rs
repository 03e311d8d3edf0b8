//! One pass over an app's wanted slots: each gets its current worker,
//! replacements are created and old workers retired within the rollout's
//! bounds (`N + max_surge` processes, `N − max_unavailable` served slots),
//! and held slots hold. The rules are those of [`super`]'s module doc.

use std::collections::BTreeMap;
use std::time::Instant;

use super::drive::drive;
use super::{Plan, Step, StopReason, Target, Workers, has_process, leaving, occupies};
use crate::worker::{AfterStop, State, Worker};
use model::orders::WorkerId;

/// The workers of one wanted slot.
#[derive(Default)]
struct Slot<'a> {
    /// The worker of the current generation (at most one stands for a slot).
    current: Option<&'a Worker>,
    /// Workers of older generations, oldest first.
    outdated: Vec<&'a Worker>,
}

/// The walk of one app's wanted slots, and the counts that bound it.
pub(super) struct Pass<'a> {
    target: Target<'a>,
    now: Instant,
    plan: Plan,
    slots: BTreeMap<u32, Slot<'a>>,
    /// Slots served now: a slot where an old and a new worker are both
    /// ready (for the moment it takes to retire the old one) counts once,
    /// so the count never lets another slot's only worker go below the
    /// floor.
    ready: usize,
    /// Workers that are or will be processes: running or draining
    /// anywhere, plus pending or backing-off ones in wanted slots.
    occupied: usize,
    /// `N + max_surge`: the most workers while rolling.
    limit: usize,
    /// `N − max_unavailable`: the fewest slots served.
    floor: usize,
    /// An outdated or recycled worker exists (draining ones included):
    /// creating is bounded by `limit`.
    rolling: bool,
    /// The rollout to this generation is halted.
    halted: bool,
}

impl<'a> Pass<'a> {
    /// Group the workers by slot and count; halt the rollout if a
    /// replacement failed.
    pub(super) fn new(
        target: Target<'a>,
        workers: &'a Workers,
        now: Instant,
        mut plan: Plan,
    ) -> Pass<'a> {
        let spec = target.spec;
        let desired = spec.instances;
        let generation = target.generation;
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
        let ready = slots
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

        let occupied = workers
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
        Pass {
            target,
            now,
            plan,
            slots,
            ready,
            occupied,
            limit,
            floor,
            rolling,
            halted,
        }
    }

    /// Every wanted slot, in order: the steps of the pass.
    pub(super) fn walk(mut self) -> Plan {
        let slots = std::mem::take(&mut self.slots);
        let empty = Slot::default();
        for number in 0..self.target.spec.instances {
            let slot = slots.get(&number).unwrap_or(&empty);
            if self.target.held.contains(&number) {
                let generation = self.target.generation;
                hold_slot(number, generation, slot, &mut self.plan, &mut self.occupied);
            } else if let Some(worker) = slot.current {
                self.current(worker, &slot.outdated);
            } else if slot.outdated.is_empty() {
                self.empty(number);
            } else if self.halted {
                self.halted_outdated(&slot.outdated);
            } else {
                self.outdated(number, &slot.outdated);
            }
        }
        self.plan
    }

    /// A slot with a worker of the current generation, and perhaps old
    /// ones it replaces.
    fn current(&mut self, worker: &Worker, outdated: &[&Worker]) {
        let (halted, limit) = (self.halted, self.limit);
        let replacing = !outdated.is_empty();
        if halted && replacing && worker.last_outcome.is_some() {
            // The failed replacement goes; the old worker keeps serving.
            retire(worker, &mut self.plan);
            return;
        }
        if halted && replacing && !worker.state.is_ready() {
            let serving = outdated.iter().any(|old| old.state.is_running());
            if matches!(worker.state, State::Pending) && serving {
                // Halted: no replacement starts while an old one serves.
                self.plan.steps.push(Step::Remove { id: worker.id });
                self.occupied = self.occupied.saturating_sub(1);
                return;
            }
            // A held slot keeps nothing running; otherwise the newest
            // old worker that runs keeps serving beside the replacement
            // in flight, and the rest give way.
            let keep = if worker.state == State::Held {
                None
            } else {
                newest_running(outdated)
            };
            give_way(
                outdated,
                keep,
                &mut self.plan,
                &mut self.occupied,
                &mut self.ready,
            );
        }
        if replacing
            && self.occupied > limit
            && matches!(worker.state, State::Pending | State::Backoff { .. })
        {
            // Over `N + max_surge` (a held slot was started again, say):
            // a replacement that is no process yet makes way, to be
            // created again when there is room, so that the slots it
            // crowds out can start and the rollout can go on.
            self.plan.steps.push(Step::Remove { id: worker.id });
            self.occupied -= 1;
            return;
        }
        let room = !self.rolling || self.occupied <= limit;
        let may_start = self.target.may_start && room;
        drive(
            worker,
            self.target.spec,
            self.now,
            may_start,
            &mut self.plan,
        );
        if !halted && worker.last_outcome.is_some() && !worker.state.is_running() {
            // The replacement of a recycled worker failed (gave up, or
            // backs off): the broken one does not serve on beside it —
            // it may hold what the replacement needs, its port say.
            for old in outdated.iter().filter(|w| w.recycle.is_some()) {
                self.retire_serving(old);
            }
        }
        if worker.state.is_ready() {
            // The slot stays served: no change to `ready`.
            for old in outdated {
                retire(old, &mut self.plan);
            }
        } else if !halted {
            supersede(
                outdated,
                &mut self.plan,
                &mut self.occupied,
                &mut self.ready,
            );
        }
    }

    /// A slot with no worker at all: one is created, within the bounds.
    fn empty(&mut self, number: u32) {
        if self.target.recreate && self.rolling {
            // Old workers are still draining and hold the old socket.
            return;
        }
        if self.occupied < self.limit || !self.rolling {
            self.create(number);
        }
    }

    /// A slot with old workers only, while the rollout is halted: one old
    /// worker keeps serving, and restarting with its own definition, until
    /// the next generation: the newest that runs, else the newest that
    /// will; the rest give way.
    fn halted_outdated(&mut self, outdated: &[&Worker]) {
        let keep = newest_running(outdated).or_else(|| {
            outdated
                .iter()
                .rev()
                .find(|w| matches!(w.state, State::Pending | State::Backoff { .. }))
                .map(|w| w.id)
        });
        if let Some(keep) = keep {
            give_way(
                outdated,
                Some(keep),
                &mut self.plan,
                &mut self.occupied,
                &mut self.ready,
            );
        }
        for old in outdated.iter().filter(|w| Some(w.id) == keep) {
            let may_start = self.target.may_start && self.occupied <= self.limit;
            drive(old, self.target.spec, self.now, may_start, &mut self.plan);
        }
    }

    /// A slot with old workers only: its replacement is created when there
    /// is room, or room is made (within `max_unavailable`); with
    /// `recreate`, the old ones stop first.
    fn outdated(&mut self, number: u32, outdated: &[&Worker]) {
        if self.target.recreate {
            for old in outdated {
                self.retire_serving(old);
            }
            return;
        }
        supersede(
            outdated,
            &mut self.plan,
            &mut self.occupied,
            &mut self.ready,
        );
        if self.occupied < self.limit {
            self.create(number);
        } else if let Some(old) = outdated.iter().find(|w| w.state.is_ready())
            && self.ready > self.floor
        {
            // Make room: within max_unavailable, the old one goes first.
            self.retire_serving(old);
        }
    }

    fn create(&mut self, slot: u32) {
        let generation = self.target.generation;
        self.plan.steps.push(Step::Create { slot, generation });
        self.occupied += 1;
    }

    /// Retire `old`; the slot it served is served no more.
    fn retire_serving(&mut self, old: &Worker) {
        let taken = retire(old, &mut self.plan);
        self.ready = self.ready.saturating_sub(usize::from(taken));
    }
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
