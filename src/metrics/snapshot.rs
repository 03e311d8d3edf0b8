//! The state of every app and slot, taken by the loop in one pass over the
//! core (no I/O), and what it uses — CPU time and memory, read from /proc
//! and the cgroups *off the loop thread* ([`measure`], which the endpoint
//! runs with `spawn_blocking`).

use std::collections::HashMap;
use std::path::PathBuf;

use effects::GroupUsage;

use super::tally::SlotCounts;

/// The supervisor's state for one scrape: taken by the loop, measured and
/// rendered elsewhere.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// How many versions of the file were applied (`status`' `version`).
    pub(crate) file_version: u64,
    pub(crate) applies: u64,
    pub(crate) rejected_edits: u64,
    pub(crate) apps: Vec<AppSeries>,
    pub instances: Vec<InstanceSeries>,
    /// The instances that have a cgroup (leader pid, cgroup): measured by it.
    pub(crate) cgroups: Vec<(i32, PathBuf)>,
}

/// One app's gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppSeries {
    pub(crate) name: String,
    /// `instances` in the file.
    pub(crate) desired: u32,
    /// Processes starting or ready.
    pub(crate) running: u32,
    /// Ready instances of the current generation.
    pub(crate) rollout_replaced: u32,
    pub(crate) rollout_size: u32,
    pub(crate) rollout_halted: bool,
    /// An autoscaled app's range, and the connections its last sample
    /// found waiting in its accept queue.
    pub(crate) autoscale: Option<AutoscaleSeries>,
}

/// The gauges of an autoscaled app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AutoscaleSeries {
    pub(crate) min: u32,
    pub(crate) max: u32,
    pub(crate) accept_queue: Option<u32>,
}

/// One slot of an app: its state and counters.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSeries {
    pub app: String,
    pub slot: u32,
    /// A process of the slot runs (starting or ready).
    pub(crate) up: bool,
    pub(crate) ready: bool,
    /// With `health`: whether its last liveness check passed (`None` before
    /// the first answer, while not ready, or without `health`).
    pub(crate) healthy: Option<bool>,
    /// Seconds since the slot's newest running process started.
    pub(crate) uptime_s: Option<f64>,
    /// The leaders of its processes (two during a replacement).
    pub(crate) pids: Vec<i32>,
    pub counts: SlotCounts,
}

/// A slot's CPU time and memory, measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SlotUsage {
    /// The memory of its processes now (none without a process).
    pub(crate) rss_bytes: Option<u64>,
    /// CPU seconds used by the slot's processes, earlier ones included.
    pub(crate) cpu_seconds: f64,
}

/// A snapshot with its measurements, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measured {
    pub(crate) snapshot: Snapshot,
    /// One per `snapshot.instances`, in the same order.
    pub(crate) usage: Vec<SlotUsage>,
    /// The supervisor's own resident memory.
    pub(crate) supervisor_rss_bytes: Option<u64>,
}

/// The CPU time each slot's processes were last seen to have used, so a
/// slot's total keeps what its ended processes had used.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct CpuLedger {
    /// As a list: JSON has no keys but strings.
    #[serde(with = "cpu_list")]
    slots: HashMap<(String, u32), SlotCpu>,
}

mod cpu_list {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::SlotCpu;

    pub(crate) fn serialize<S: Serializer>(
        slots: &HashMap<(String, u32), SlotCpu>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<(&(String, u32), &SlotCpu)> = slots.iter().collect();
        list.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<HashMap<(String, u32), SlotCpu>, D::Error> {
        let list: Vec<((String, u32), SlotCpu)> = Vec::deserialize(deserializer)?;
        Ok(list.into_iter().collect())
    }
}

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct SlotCpu {
    /// What processes that ended had used when last seen.
    banked: f64,
    /// The most each live leader was seen to have used.
    live: HashMap<i32, f64>,
}

impl CpuLedger {
    /// Each slot's usage from `usage` (per leader pid; CPU in `ticks` per
    /// second), folding the processes no longer in a slot into its total.
    pub(crate) fn account(
        &mut self,
        instances: &[InstanceSeries],
        usage: &HashMap<i32, GroupUsage>,
        ticks: u64,
    ) -> Vec<SlotUsage> {
        let ticks = ticks.max(1) as f64;
        instances
            .iter()
            .map(|instance| {
                let cpu = self
                    .slots
                    .entry((instance.app.clone(), instance.slot))
                    .or_default();
                let ended: Vec<i32> = cpu
                    .live
                    .keys()
                    .copied()
                    .filter(|pid| !instance.pids.contains(pid))
                    .collect();
                for pid in ended {
                    cpu.banked += cpu.live.remove(&pid).unwrap_or(0.0);
                }
                let mut rss = 0;
                for pid in &instance.pids {
                    let group = usage.get(pid).copied().unwrap_or_default();
                    rss += group.rss_bytes;
                    let seen = cpu.live.entry(*pid).or_default();
                    *seen = seen.max(group.cpu_ticks as f64 / ticks);
                }
                SlotUsage {
                    rss_bytes: (!instance.pids.is_empty()).then_some(rss),
                    cpu_seconds: cpu.banked + cpu.live.values().sum::<f64>(),
                }
            })
            .collect()
    }
}

/// Measure `snapshot`: every instance's CPU time and memory (cgroups and a
/// pass over /proc: call it off the loop thread) and the supervisor's own.
pub(crate) fn measure(snapshot: Snapshot, ledger: &mut CpuLedger) -> Measured {
    let usage = effects::usage::all(&snapshot.cgroups);
    let ticks = effects::procfs::ticks_per_second();
    Measured {
        usage: ledger.account(&snapshot.instances, &usage, ticks),
        supervisor_rss_bytes: effects::procfs::rss_bytes(std::process::id() as i32),
        snapshot,
    }
}
