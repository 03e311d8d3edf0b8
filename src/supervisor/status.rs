//! `status`: the core's apps and workers. Each process group's memory and
//! CPU time come from a pass over /proc, which the caller makes off the loop
//! thread ([`StatusReply::add_usage`]).

use super::Supervisor;
use crate::control::{AppStatus, Rollout, StatusReply, WorkerStatus};
use crate::effects::Effects;

impl<E: Effects> Supervisor<E> {
    /// The state of every app and instance (without CPU and memory).
    pub fn status(&self) -> StatusReply {
        let now = self.effects.now();
        let apps = self
            .core
            .apps()
            .filter(|a| !a.removed)
            .map(|app| {
                let mut workers: Vec<_> = app.workers.values().collect();
                workers.sort_by_key(|w| (w.slot, w.generation));
                let replaced = app.replaced() as u32;
                let outdated = app.outdated() as u32;
                let running = app
                    .workers
                    .values()
                    .filter(|w| w.state.is_running())
                    .count() as u32;
                let workers = workers
                    .into_iter()
                    .map(|w| {
                        let pid = w.state.pid();
                        let uptime = w
                            .state
                            .started()
                            .map(|t| now.saturating_duration_since(t).as_secs_f64());
                        WorkerStatus {
                            slot: w.slot,
                            generation: w.generation,
                            pid,
                            state: w.state.name().to_string(),
                            ready: w.state.is_ready(),
                            restarts: w.restarts,
                            uptime_s: uptime,
                            cpu_percent: None,
                            rss_bytes: None,
                            last_exit: w.last_outcome.map(|o| o.to_string()),
                            status: w.status_text.clone(),
                        }
                    })
                    .collect();
                AppStatus {
                    name: app.spec.name.clone(),
                    instances: app.spec.instances,
                    running,
                    generation: app.generation,
                    rollout: Rollout {
                        replaced,
                        total: app.spec.instances,
                        outdated,
                        halted: app.rollout_halted,
                        complete: outdated == 0 && replaced >= app.spec.instances,
                    },
                    workers,
                }
            })
            .collect();
        StatusReply {
            ok: true,
            file: self.shown_path(),
            version: self.core.file_version(),
            applied_at: humantime::format_rfc3339_seconds(self.applied_at).to_string(),
            config_error: self.config_error.clone(),
            tracking: None,
            apps,
        }
    }

    fn shown_path(&self) -> String {
        self.core.desired().source.display().to_string()
    }
}
