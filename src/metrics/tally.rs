//! The counters the core does not keep — restarts and exits by reason, per
//! slot; applied and rejected versions of the file — counted by the shell as
//! the core reports its events (`supervisor::execute`), so the core stays
//! pure and the count is exactly what the event log says.

use std::collections::{BTreeMap, HashMap};

use model::process::Exit;
use supervise_core::Event;
use supervise_core::event::Instance;
use supervise_core::worker::{Decision, StopEnd};

/// Why a process of a slot ended: the `reason` label of
/// `supervise_instance_exits_total`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub(crate) enum ExitReason {
    /// It exited on its own with code 0.
    ExitZero,
    /// It exited on its own with another code.
    ExitNonzero,
    /// A signal it did not get from supervise killed it.
    Signal,
    /// It could not be started (exec failed, a socket could not be bound …).
    StartFailed,
    /// supervise stopped it and it ended within `kill_timeout`.
    Stopped,
    /// supervise stopped it and SIGKILLed it at `kill_timeout`.
    Killed,
}

impl ExitReason {
    pub(crate) const ALL: [ExitReason; 6] = [
        ExitReason::ExitZero,
        ExitReason::ExitNonzero,
        ExitReason::Signal,
        ExitReason::StartFailed,
        ExitReason::Stopped,
        ExitReason::Killed,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            ExitReason::ExitZero => "exit_zero",
            ExitReason::ExitNonzero => "exit_nonzero",
            ExitReason::Signal => "signal",
            ExitReason::StartFailed => "start_failed",
            ExitReason::Stopped => "stopped",
            ExitReason::Killed => "killed",
        }
    }
}

/// The counters of one slot.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlotCounts {
    /// Restarts decided (after an exit, a failed start, a failed run) and
    /// replacements of a live instance (unhealthy, over `max_memory`): what
    /// `status` counts in `restarts`, but never reset by a rollout.
    pub restarts: u64,
    pub(crate) exits: BTreeMap<ExitReason, u64>,
}

/// The counters the shell keeps from the core's events, for `/metrics`
/// (an upgrade hands them over: counters never go back).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Tally {
    /// Versions of the file applied, the first one included.
    pub(crate) applies: u64,
    /// Edits refused (invalid or unreadable); the last good version ran on.
    pub(crate) rejected_edits: u64,
    /// As a list: JSON has no keys but strings.
    #[serde(with = "slot_list")]
    slots: HashMap<(String, u32), SlotCounts>,
}

mod slot_list {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::SlotCounts;

    pub(crate) fn serialize<S: Serializer>(
        slots: &HashMap<(String, u32), SlotCounts>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<(&(String, u32), &SlotCounts)> = slots.iter().collect();
        list.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<HashMap<(String, u32), SlotCounts>, D::Error> {
        let list: Vec<((String, u32), SlotCounts)> = Vec::deserialize(deserializer)?;
        Ok(list.into_iter().collect())
    }
}

impl Tally {
    /// Count what `event` says about restarts, exits and applied versions.
    pub(crate) fn count(&mut self, event: &Event) {
        match event {
            Event::Exited {
                instance,
                exit,
                decision,
                ..
            } => {
                let reason = match exit {
                    Exit::Code(0) => ExitReason::ExitZero,
                    Exit::Code(_) => ExitReason::ExitNonzero,
                    Exit::Signal { .. } => ExitReason::Signal,
                };
                self.ended(instance, reason, restarts(decision));
            }
            Event::StartFailed {
                instance, decision, ..
            } => self.ended(instance, ExitReason::StartFailed, restarts(decision)),
            Event::Stopped {
                instance,
                killed,
                end,
                ..
            } => {
                let reason = if *killed {
                    ExitReason::Killed
                } else {
                    ExitReason::Stopped
                };
                let restart = matches!(end, StopEnd::Decided(decision) if restarts(decision));
                self.ended(instance, reason, restart);
            }
            Event::Recycling { instance, .. } => self.slot_mut(instance).restarts += 1,
            Event::Applied { .. } => self.applies += 1,
            _ => {}
        }
    }

    /// The counters of slot `slot` of `app` (zero if nothing happened there).
    pub(crate) fn slot(&self, app: &str, slot: u32) -> SlotCounts {
        self.slots
            .get(&(app.to_string(), slot))
            .cloned()
            .unwrap_or_default()
    }

    fn ended(&mut self, instance: &Instance, reason: ExitReason, restart: bool) {
        let counts = self.slot_mut(instance);
        *counts.exits.entry(reason).or_default() += 1;
        if restart {
            counts.restarts += 1;
        }
    }

    fn slot_mut(&mut self, instance: &Instance) -> &mut SlotCounts {
        self.slots
            .entry((instance.app.clone(), instance.slot))
            .or_default()
    }
}

fn restarts(decision: &Decision) -> bool {
    matches!(decision, Decision::Restart { .. })
}
