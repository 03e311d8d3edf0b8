//! Carrying the core across a re-exec of the supervisor (`supervise
//! upgrade`): the old image serializes the whole [`Core`] (serde; instants
//! as CLOCK_MONOTONIC nanoseconds, [`model::monotonic`]), the new one
//! deserializes it and calls [`Core::resumed`] before its first input.
//!
//! Everything the core decides from is in its state, so a restored core
//! decides as the original would have — except about what was out in the
//! old image's effects and died with them, which `resumed` marks lost.

use std::time::Instant;

use super::worker::State;
use super::{Core, SPAWNS_PER_TURN};

/// The format of a serialized [`Core`]. Bump it on any change that an
/// older or newer image would read wrongly (a field renamed, removed or
/// given another meaning; a new field without a default): an image that
/// reads another version refuses the handover instead of guessing.
pub const STATE_VERSION: u32 = 1;

impl Core {
    /// A core restored from another image takes up where it was. Call it
    /// once, before the first input, then [`Core::converge`] and carry out
    /// the actions. It resets:
    ///
    /// - **a memory measurement out** (`measuring`): its answer would come
    ///   from a thread of the old image, which is gone. Kept, the core would
    ///   wait [`super::MEMORY_ANSWER_LOST`] before measuring again; instead
    ///   the measurement is given up and another is ordered now (its action
    ///   is in [`Core::take_actions`]). A later measurement was due anyway;
    ///   the round counter goes on, so no answer can be mistaken for it.
    /// - **liveness checks in flight** (`health.in_flight` of a worker):
    ///   the probe or exec check ran in the old image's effects and its
    ///   answer will never come. Kept, reconcile would time it out and count
    ///   a failure the instance never had; instead the check is forgotten
    ///   without counting (failures, the last failure and `answered` are
    ///   unchanged) and the next one is due now, so reconcile orders it at
    ///   once. The check numbers go on, so no late answer is taken for the
    ///   new check.
    /// - **the turn**: the starts budget begins afresh ([`Core::begin_turn`]),
    ///   as it does in the original at each turn.
    /// - **dirtiness**: every app is dirty, so the next convergence looks at
    ///   all of them (a level-triggered pass is always safe, and what the
    ///   original had marked dirty but not reconciled yet is not lost).
    ///
    /// Kept as they are, because their instants mean the same moment in the
    /// new image: every deadline (backoff, ready timeout, a stop's SIGKILL,
    /// watchdog, the next check and measurement, the schedule's next run),
    /// the processes and groups (`pids`, `draining`), counters, the gates.
    /// Not the core's to restart: readiness probes, exec status pipes, the
    /// watching of draining groups — the shell starts them again for what
    /// the restored core says runs.
    ///
    /// A worker in `Spawning` cannot be carried over (whether its process
    /// exists is unknown): the shell feeds back every spawn before the next
    /// event, so there is none at a handover; one found is reported as an
    /// anomaly.
    pub fn resumed(&mut self, now: Instant) {
        self.begin_turn(SPAWNS_PER_TURN);
        // A state from an image that had no `started_reported` told systemd
        // its start with `all_ready`.
        self.started_reported |= self.all_ready_reported;
        if self.measuring.take().is_some() {
            self.memory_due = self.memory_due.min(now);
            self.measure_memory(now);
        }
        let mut spawning = Vec::new();
        for (name, app) in &mut self.apps {
            app.dirty = true;
            // An image from before holds were kept by slot held its
            // workers only: their slots are held.
            let held = app.workers.values().filter(|w| w.state == State::Held);
            let held: Vec<u32> = held.map(|w| w.slot).collect();
            app.held.extend(held);
            for worker in app.workers.values_mut() {
                if worker.health.in_flight.take().is_some() {
                    worker.health.next_check = Some(now);
                }
                if worker.state == State::Spawning {
                    spawning.push(format!(
                        "{name}: worker {} was spawning at the handover",
                        worker.id
                    ));
                }
            }
        }
        for what in spawning {
            self.anomaly(what);
        }
    }
}

#[cfg(test)]
mod tests;
