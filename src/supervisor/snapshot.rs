//! `/metrics`: the core's apps and slots with the shell's counters, as a
//! [`Snapshot`] taken in one pass on the loop (no I/O: CPU time and memory
//! are measured by the HTTP server, off this thread; see [`crate::metrics`]).

use std::collections::BTreeMap;

use super::Supervisor;
use crate::metrics::snapshot::{AppSeries, AutoscaleSeries, InstanceSeries, Snapshot};
use effects::Effects;
use supervise_core::worker::Worker;

impl<E: Effects> Supervisor<E> {
    /// Every app and slot as `/metrics` shows them (without CPU and memory,
    /// and without the cgroups, which the caller adds).
    pub fn metrics_snapshot(&self) -> Snapshot {
        let now = self.effects.now();
        let mut apps = Vec::new();
        let mut instances = Vec::new();
        for app in self.core.apps().filter(|a| !a.removed) {
            let mut slots: BTreeMap<u32, Vec<&Worker>> = BTreeMap::new();
            for worker in app.workers.values() {
                slots.entry(worker.slot).or_default().push(worker);
            }
            let checked = app.spec.health.is_some();
            for (slot, mut workers) in slots {
                // The newest generation first: its process is the one that
                // stays.
                workers.sort_by_key(|w| std::cmp::Reverse(w.generation));
                let current = workers
                    .iter()
                    .find(|w| w.state.is_running())
                    .or(workers.first());
                instances.push(InstanceSeries {
                    app: app.spec.name.clone(),
                    slot,
                    up: workers.iter().any(|w| w.state.is_running()),
                    ready: workers.iter().any(|w| w.state.is_ready()),
                    healthy: current
                        .filter(|w| checked && w.state.is_ready() && w.health.answered)
                        .map(|w| w.health.failures == 0),
                    uptime_s: current
                        .and_then(|w| w.state.started())
                        .map(|t| now.saturating_duration_since(t).as_secs_f64()),
                    pids: workers.iter().filter_map(|w| w.state.pid()).collect(),
                    counts: self.tally.slot(&app.spec.name, slot),
                });
            }
            apps.push(AppSeries {
                name: app.spec.name.clone(),
                desired: app.spec.instances,
                running: app
                    .workers
                    .values()
                    .filter(|w| w.state.is_running())
                    .count() as u32,
                rollout_replaced: app.replaced() as u32,
                rollout_size: app.spec.instances,
                rollout_halted: app.rollout_halted,
                autoscale: app.spec.autoscale.as_ref().map(|range| AutoscaleSeries {
                    min: range.min,
                    max: range.max,
                    accept_queue: app
                        .autoscaler
                        .as_ref()
                        .and_then(|a| a.last)
                        .and_then(|l| l.waiting),
                }),
            });
        }
        Snapshot {
            file_version: self.core.file_version(),
            applies: self.tally.applies,
            rejected_edits: self.tally.rejected_edits,
            apps,
            instances,
            cgroups: Vec::new(),
        }
    }
}
