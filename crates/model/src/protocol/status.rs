//! The reply to `status`: one set of types, serialized by the supervisor and
//! read by every client (`status`, `reload`, `scale`), so the two can never
//! disagree on a field. The JSON form is documented in the manual (docs/src/commands.md) and stable.

use serde::{Deserialize, Serialize};

/// `supervise status --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    pub ok: bool,
    /// The ecosystem file.
    pub file: String,
    /// How many versions of the file were applied (1 at start).
    pub version: u64,
    /// When the current version was applied (RFC 3339).
    pub applied_at: String,
    /// The diagnostics of the last edit while it is invalid or unreadable.
    pub config_error: Option<String>,
    /// How escaped processes are tracked and stopped.
    #[serde(default)]
    pub tracking: Option<String>,
    /// The supervisor itself: its version, since when it runs, how often
    /// it was upgraded in place.
    #[serde(default)]
    pub supervisor: Option<SupervisorInfo>,
    pub apps: Vec<AppStatus>,
}

/// The supervisor process, for `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorInfo {
    pub pid: u32,
    /// The version of the binary that runs now.
    pub version: String,
    /// When the supervisor started (RFC 3339): upgrades keep it.
    pub started_at: String,
    /// How many times `supervise upgrade` replaced its binary.
    pub upgrades: u32,
}

impl StatusReply {
    /// Fill in the errors of the apps' log files (by app name).
    pub fn add_log_errors(&mut self, mut errors: std::collections::HashMap<String, String>) {
        for app in &mut self.apps {
            app.log_error = errors.remove(&app.name);
        }
    }

    /// Fill in every running worker's CPU share (over its life) and memory
    /// from `usage` of its process group's leader (CPU in `ticks` per
    /// second).
    pub fn add_usage(
        &mut self,
        usage: impl Fn(i32) -> Option<crate::usage::GroupUsage>,
        ticks: u64,
    ) {
        for worker in self.apps.iter_mut().flat_map(|a| a.workers.iter_mut()) {
            let Some(pid) = worker.pid else {
                continue;
            };
            let group = usage(pid).unwrap_or_default();
            worker.rss_bytes = Some(group.rss_bytes);
            worker.cpu_percent = worker
                .uptime_s
                .filter(|u| *u > 0.0)
                .map(|u| group.cpu_ticks as f64 / ticks.max(1) as f64 / u * 100.0);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStatus {
    pub name: String,
    /// Wanted instances.
    pub instances: u32,
    /// Processes starting or ready.
    pub running: u32,
    /// The version of the app's process definition.
    pub generation: u64,
    pub rollout: Rollout,
    /// Why it starts nothing while its dependencies are not met:
    /// `waiting for db (ready)`, `held: migrate exited with code 1`.
    #[serde(default)]
    pub waiting: Option<String>,
    /// A scheduled app's runs.
    #[serde(default)]
    pub schedule: Option<ScheduleStatus>,
    /// An autoscaled app's range and load (`instances` is its count now).
    #[serde(default)]
    pub autoscale: Option<AutoscaleStatus>,
    /// The file its output is written to (`{instance}` left in), if any.
    #[serde(default)]
    pub log_file: Option<String>,
    /// Why that file cannot be written, while it cannot.
    #[serde(default)]
    pub log_error: Option<String>,
    pub workers: Vec<WorkerStatus>,
}

/// The range an autoscaled app's count follows its load in, its targets
/// and the last sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoscaleStatus {
    pub min: u32,
    pub max: u32,
    /// Target: connections waiting per ready instance.
    pub queue_target: Option<u32>,
    /// Target: the average CPU of a ready instance (percent of one CPU).
    pub cpu_target: Option<u32>,
    /// The last sample: connections waiting per ready instance.
    pub queue: Option<f64>,
    /// The last sample: the average CPU of a ready instance.
    pub cpu_percent: Option<f64>,
}

impl AutoscaleStatus {
    /// `3 of 1..8 (queue 27/10, cpu 45%/70%)`, for an app running `count`.
    pub fn describe(&self, count: u32) -> String {
        let mut load = Vec::new();
        if let Some(target) = self.queue_target {
            let now = self.queue.map_or("?".to_string(), |q| format!("{q:.0}"));
            load.push(format!("queue {now}/{target}"));
        }
        if let Some(target) = self.cpu_target {
            let now = self
                .cpu_percent
                .map_or("?".to_string(), |c| format!("{c:.0}%"));
            load.push(format!("cpu {now}/{target}%"));
        }
        format!(
            "{count} of {}..{} ({})",
            self.min,
            self.max,
            load.join(", ")
        )
    }
}

/// The runs of a scheduled app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleStatus {
    /// When the next tick is due (RFC 3339, UTC), if one is.
    pub next_run: Option<String>,
    /// Seconds until then.
    pub next_in_s: Option<f64>,
    /// A process of a run lives.
    pub running: bool,
    /// Runs queued behind it (`overlap: queue`).
    pub queued: u32,
    /// How the last run ended: `exit 0`, `exited with code 1`.
    pub last_result: Option<String>,
    pub last_ok: Option<bool>,
    /// How long the last run took, in seconds.
    pub last_took_s: Option<f64>,
    /// Seconds since the last run ended.
    pub last_ended_s: Option<f64>,
    /// Why no run is due while it is paused: `held by \`stop\``,
    /// `instances: 0` (then `next_run` is none).
    #[serde(default)]
    pub paused: Option<String>,
}

/// How far replacing the app's instances with the current generation got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// Ready instances of the current generation.
    pub replaced: u32,
    pub total: u32,
    /// Workers of older generations still there.
    pub outdated: u32,
    pub halted: bool,
    /// Every instance not held by `stop` is of the current generation and
    /// ready (a held one rolls out once `start` releases it).
    pub complete: bool,
    /// Instances held by `stop` (absent from an older supervisor's reply).
    #[serde(default)]
    pub held: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub slot: u32,
    pub generation: u64,
    pub pid: Option<i32>,
    pub state: String,
    pub ready: bool,
    pub restarts: u32,
    pub uptime_s: Option<f64>,
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    /// How its last run ended (`exited with code 1`, `failed to start: exec: …`).
    pub last_exit: Option<String>,
    /// The last `STATUS=` it sent on the notify socket.
    pub status: Option<String>,
    /// Its liveness checks (with `health`): `healthy`, `failing (1/3: HTTP
    /// 500)`, `unhealthy (3/3: HTTP 500)`; `-` before the first one.
    #[serde(default)]
    pub health: Option<String>,
    /// Its app's `max_memory` (bytes).
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
    /// Seconds since its last `WATCHDOG=1`, while it is ready (with
    /// `watchdog`, once it pinged).
    #[serde(default)]
    pub watchdog_ping_s: Option<f64>,
    /// Being replaced while it serves: `unhealthy`, `over max_memory`.
    #[serde(default)]
    pub replacing: Option<String>,
    /// Seconds since it completed (a one-shot that exited 0).
    #[serde(default)]
    pub completed_s: Option<f64>,
}
