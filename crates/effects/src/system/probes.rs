//! What watches a process from outside: the readiness probe a spawn
//! starts, the liveness checks, the memory measurements (each run off the
//! loop, reporting on its channel of [`super::Reports`]).

use std::collections::HashMap;

use tracing::error;

use super::System;
use crate::checks::Launcher;
use crate::probe;
use crate::usage;
use model::orders::CheckOrder;
use model::spec::Readiness;

impl System {
    pub(super) fn start_probe(
        &self,
        app: &str,
        slot: u32,
        readiness: &Readiness,
        pid: i32,
    ) -> Option<tokio::task::AbortHandle> {
        let Readiness::Probe(spec) = readiness else {
            return None;
        };
        let Some(target) = spec.target(slot).cloned() else {
            error!(app, slot, "{app}.{slot}: no probe target for this slot");
            return None;
        };
        let report = self.reports.probes.clone();
        let task = tokio::spawn(async move {
            probe::until_ready(&target).await;
            let _ = report.send(pid).await;
        });
        Some(task.abort_handle())
    }

    /// [`crate::Effects::check`]: start the liveness check of `order`.
    pub(super) fn check(&mut self, order: &CheckOrder) {
        let launcher = Launcher {
            groups: &mut self.groups,
            undertaker: &mut self.setup.undertaker,
            spawner: &mut self.setup.spawner,
            base_env: &self.setup.base_env,
            nofile_soft: self.setup.nofile_soft,
        };
        self.checks.start(order, launcher);
    }

    /// [`crate::Effects::measure_memory`]: measure what `pids`' instances
    /// use, off the loop; the answer comes on [`super::Reports::memory`].
    pub(super) fn measure_memory(&mut self, round: u64, pids: Vec<i32>) {
        let cgroups: HashMap<i32, std::path::PathBuf> = self.groups.cgroups().into_iter().collect();
        let instances: Vec<(i32, Option<std::path::PathBuf>)> = pids
            .into_iter()
            .map(|pid| (pid, cgroups.get(&pid).cloned()))
            .collect();
        let report = self.reports.memory.clone();
        tokio::task::spawn_blocking(move || {
            let _ = report.blocking_send((round, usage::memory(&instances)));
        });
    }
}
