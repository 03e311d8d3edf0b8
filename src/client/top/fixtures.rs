//! Status replies for the tests of the model and the view.

use ::model::protocol::{AppStatus, Rollout, StatusReply, WorkerStatus};

/// A worker of a test reply: ready with `pid`, or in backoff without one.
pub(crate) fn worker(slot: u32, pid: Option<i32>, cpu: Option<f64>) -> WorkerStatus {
    WorkerStatus {
        slot,
        generation: 1,
        pid,
        state: if pid.is_some() { "ready" } else { "backoff" }.to_string(),
        ready: pid.is_some(),
        restarts: 0,
        uptime_s: pid.map(|_| 61.0),
        cpu_percent: cpu,
        rss_bytes: pid.map(|_| 10_066_330),
        last_exit: None,
        status: None,
        health: None,
        memory_limit_bytes: None,
        watchdog_ping_s: None,
        replacing: None,
        completed_s: None,
    }
}

/// A reply with these apps and workers.
pub(crate) fn reply(apps: &[(&str, Vec<WorkerStatus>)]) -> StatusReply {
    StatusReply {
        ok: true,
        file: "/srv/ecosystem.yaml".to_string(),
        version: 1,
        applied_at: "2026-12-01T20:00:00Z".to_string(),
        config_error: None,
        tracking: None,
        supervisor: None,
        apps: apps
            .iter()
            .map(|(name, workers)| AppStatus {
                name: name.to_string(),
                instances: workers.len() as u32,
                running: workers.len() as u32,
                generation: 1,
                rollout: Rollout {
                    replaced: 0,
                    total: 0,
                    outdated: 0,
                    halted: false,
                    complete: true,
                    held: 0,
                },
                waiting: None,
                schedule: None,
                autoscale: None,
                log_file: None,
                log_error: None,
                workers: workers.clone(),
            })
            .collect(),
    }
}
