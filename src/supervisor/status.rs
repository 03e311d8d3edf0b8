//! `status`: the core's apps and workers, with their health, memory limit
//! and watchdog. Each process group's memory and
//! CPU time come from a pass over /proc, which the caller makes off the loop
//! thread ([`StatusReply::add_usage`]).

use super::Supervisor;
use effects::Effects;
use model::protocol::{
    AppStatus, AutoscaleStatus, Rollout, ScheduleStatus, StatusReply, WorkerStatus,
};
use supervise_core::schedule::Runs;
use supervise_core::worker::{Outcome, State, Worker};

impl<E: Effects> Supervisor<E> {
    /// The state of every app and instance (without CPU and memory).
    pub fn status(&self) -> StatusReply {
        let now = self.effects.now();
        let wall = self.effects.wall_clock();
        let apps = self
            .core
            .apps()
            .filter(|a| !a.removed)
            .map(|app| {
                let mut workers: Vec<_> = app.workers.values().collect();
                workers.sort_by_key(|w| (w.slot, w.generation));
                let replaced = app.replaced() as u32;
                let outdated = app.outdated() as u32;
                // Held slots are passed by until `start`: a rollout is
                // complete without them.
                let held = app.held.iter().filter(|s| **s < app.spec.instances).count() as u32;
                let outdated_unheld = app
                    .workers
                    .values()
                    .filter(|w| w.generation < app.generation && !app.held.contains(&w.slot))
                    .count();
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
                        let state = match (&w.state, app.gate.describe(), &app.runs) {
                            (State::Pending, Some(waiting), _) => waiting,
                            (State::Pending, None, Some(runs)) if !runs.armed => {
                                "scheduled".to_string()
                            }
                            _ => w.state.name().to_string(),
                        };
                        WorkerStatus {
                            slot: w.slot,
                            generation: w.generation,
                            pid,
                            state,
                            ready: w.state.is_ready(),
                            restarts: w.restarts,
                            uptime_s: uptime,
                            cpu_percent: None,
                            rss_bytes: None,
                            last_exit: w.last_outcome.map(|o| o.to_string()),
                            status: w.status_text.clone(),
                            health: app.spec.health.as_ref().map(|h| health(w, h.failures)),
                            memory_limit_bytes: app.spec.max_memory,
                            watchdog_ping_s: w
                                .watchdog
                                .filter(|_| w.state.is_ready())
                                .and_then(|dog| dog.last_ping)
                                .map(|ping| now.saturating_duration_since(ping).as_secs_f64()),
                            completed_s: match w.state {
                                State::Completed { at } => {
                                    Some(now.saturating_duration_since(at).as_secs_f64())
                                }
                                _ => None,
                            },
                            replacing: w.recycle.map(|r| match r.outcome {
                                Outcome::MemoryExceeded => "over max_memory".to_string(),
                                _ => "unhealthy".to_string(),
                            }),
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
                        complete: outdated_unheld == 0
                            && replaced >= app.spec.instances.saturating_sub(held),
                        held,
                    },
                    waiting: app.gate.describe(),
                    schedule: app.runs.as_ref().map(|runs| schedule(runs, app, now, wall)),
                    autoscale: app.spec.autoscale.as_ref().map(|range| {
                        let last = app.autoscaler.as_ref().and_then(|a| a.last);
                        AutoscaleStatus {
                            min: range.min,
                            max: range.max,
                            queue_target: range.queue,
                            cpu_target: range.cpu_percent,
                            queue: last.and_then(|l| l.queue),
                            cpu_percent: last.and_then(|l| l.cpu_percent),
                        }
                    }),
                    log_file: app.spec.log.as_ref().map(|log| log.file.clone()),
                    log_error: None,
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
            supervisor: None,
            apps,
        }
    }

    fn shown_path(&self) -> String {
        self.core.desired().source.display().to_string()
    }
}

/// A scheduled app's next tick and last run.
fn schedule(
    runs: &Runs,
    app: &supervise_core::App,
    now: std::time::Instant,
    wall: std::time::SystemTime,
) -> ScheduleStatus {
    let workers = &app.workers;
    // Its ticks come and are skipped: no run is due while it is paused.
    let paused = if app.paused_by_hold() {
        Some("held by `stop`".to_string())
    } else if app.spec.instances == 0 {
        Some("instances: 0".to_string())
    } else {
        None
    };
    // A cron time as the schedule has it; an `every` tick from the monotonic clock.
    let next_wall = runs
        .next_wall
        .or_else(|| {
            runs.next_at
                .map(|at| wall + at.saturating_duration_since(now))
        })
        .filter(|_| paused.is_none());
    let last = runs.last.as_ref();
    ScheduleStatus {
        next_run: next_wall.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        next_in_s: next_wall.map(|t| t.duration_since(wall).unwrap_or_default().as_secs_f64()),
        running: runs.running(workers),
        queued: runs.queued,
        last_result: last.map(|l| l.result.clone()),
        last_ok: last.map(|l| l.ok),
        last_took_s: last.map(|l| l.took.as_secs_f64()),
        last_ended_s: last.map(|l| now.saturating_duration_since(l.ended).as_secs_f64()),
        paused,
    }
}

/// How a worker's liveness checks stand: `-` before the first answer (or
/// without a process), `healthy`, `failing (1/3: HTTP 500)`, `unhealthy
/// (3/3: HTTP 500)`.
fn health(worker: &Worker, threshold: u32) -> String {
    let failures = worker.health.failures;
    let last = worker.health.last_failure.as_deref().unwrap_or("");
    if !worker.state.is_ready() || !worker.health.answered {
        "-".to_string()
    } else if worker.recycle.is_some() && failures >= threshold {
        format!("unhealthy ({failures}/{threshold}: {last})")
    } else if failures > 0 {
        format!("failing ({failures}/{threshold}: {last})")
    } else {
        "healthy".to_string()
    }
}
