//! `supervise status`: the table, one line per instance (or per app with
//! many), with what an app waits for and a scheduled app's runs.

use std::path::Path;

use super::{Failure, ask, fail, print};
use crate::cli::exit;
use effects::output::terminal::{Tab, printable};
use model::protocol::{AppStatus, Command, StatusReply};

pub(super) fn duration(seconds: f64) -> String {
    let s = seconds as u64;
    match s {
        0..=9 => format!("{seconds:.1}s"),
        10..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

/// A worker's health checks, watchdog and replacement, in one column.
fn health_column(worker: &model::protocol::WorkerStatus) -> String {
    let mut parts = Vec::new();
    if let Some(health) = &worker.health {
        parts.push(health.clone());
    }
    if let Some(ping) = worker.watchdog_ping_s {
        parts.push(format!("ping {ping:.1}s ago"));
    }
    if let Some(why) = &worker.replacing {
        parts.push(format!("being replaced ({why})"));
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(", ")
    }
}

/// A worker's memory, against its limit when it has one:
/// `41.2 MiB/300.0 MiB`.
fn memory_column(worker: &model::protocol::WorkerStatus) -> String {
    let used = worker.rss_bytes.map_or("-".into(), size);
    match worker.memory_limit_bytes {
        Some(limit) => format!("{used}/{}", size(limit)),
        None => used,
    }
}

/// A byte count in binary units, as the log writes it (`200.0 MiB`).
pub(super) fn size(bytes: u64) -> String {
    model::usage::binary_size(bytes)
}

/// A CPU share for the table. The sum over no process at all is -0.0 in
/// IEEE arithmetic (and Rust's `Sum` for floats starts there), which would
/// print as `-0.0%`; nothing here is below zero, so it prints `0.0%`.
pub(super) fn percent(cpu: f64) -> String {
    let cpu = if cpu > 0.0 { cpu } else { 0.0 };
    format!("{cpu:.1}%")
}

/// Ask for the status, as the shared reply type.
pub fn ask_status(socket: &Path) -> Result<StatusReply, Failure> {
    let value = ask(socket, Command::Status)?;
    serde_json::from_value(value).map_err(|e| fail(exit::INVALID, format!("bad status reply: {e}")))
}

/// `supervise status`: a table like `pm2 ls`.
pub fn status(socket: &Path, all: bool, json: bool) -> Result<(), Failure> {
    if json {
        let value = ask(socket, Command::Status)?;
        print(&format!("{value:#}\n"))?;
        return Ok(());
    }
    let status = ask_status(socket)?;
    let mut table = comfy_table::Table::new();
    let mut notes = String::new();
    table.load_style(comfy_table::presets::NOTHING).set_header([
        "app",
        "instance",
        "pid",
        "state",
        "ready",
        "health",
        "restarts",
        "uptime",
        "cpu",
        "memory",
        "last exit",
        "status",
    ]);
    /// Beyond this many instances an app shows as one summary line (unless --all).
    const SUMMARY_ABOVE: usize = 8;
    for app in &status.apps {
        let name = app.name.as_str();
        if app.workers.len() > SUMMARY_ABOVE && !all {
            let ready = app.workers.iter().filter(|w| w.ready).count();
            let restarts: u64 = app.workers.iter().map(|w| u64::from(w.restarts)).sum();
            let rss: u64 = app.workers.iter().filter_map(|w| w.rss_bytes).sum();
            let cpu: f64 = app.workers.iter().filter_map(|w| w.cpu_percent).sum();
            table.add_row([
                name.to_string(),
                format!("{} instances", app.workers.len()),
                String::new(),
                String::new(),
                format!("{ready}/{}", app.workers.len()),
                String::new(),
                restarts.to_string(),
                String::new(),
                percent(cpu),
                size(rss),
                String::new(),
                "(--all for each)".to_string(),
            ]);
            continue;
        }
        for worker in &app.workers {
            table.add_row([
                name.to_string(),
                worker.slot.to_string(),
                worker.pid.map_or("-".into(), |p| p.to_string()),
                match worker.completed_s {
                    Some(ago) => format!("completed (exit 0, {ago:.1}s ago)"),
                    None => worker.state.clone(),
                },
                if worker.ready { "yes" } else { "no" }.to_string(),
                printable(&health_column(worker), usize::MAX, Tab::Space),
                worker.restarts.to_string(),
                worker.uptime_s.map_or("-".into(), duration),
                worker.cpu_percent.map_or("-".into(), percent),
                memory_column(worker),
                worker.last_exit.clone().unwrap_or_else(|| "-".into()),
                // The worker's own words (`STATUS=`): on the screen of
                // whoever asks, so no control character of its.
                printable(
                    worker.status.as_deref().unwrap_or_default(),
                    usize::MAX,
                    Tab::Space,
                ),
            ]);
        }
        notes.extend(schedule_note(app).map(|line| format!("{name}: {line}\n")));
        if let Some(autoscale) = &app.autoscale {
            notes.push_str(&format!("{name}  {}\n", autoscale.describe(app.instances)));
        }
        if let Some(error) = &app.log_error {
            notes.push_str(&format!("{name}: log file {error}\n"));
        }
        if app.rollout.halted {
            table.add_row([
                name.to_string(),
                "rollout halted: a replacement failed; old instances serve".into(),
            ]);
        }
    }
    print(&format!("{table}\n"))?;
    // Under the table, so that they do not widen a column.
    print(&notes)?;
    print(&format!(
        "file {} (version {}, applied {})\n",
        status.file, status.version, status.applied_at
    ))?;
    if let Some(tracking) = &status.tracking {
        print(&format!("processes tracked by {tracking}\n"))?;
    }
    if let Some(supervisor) = &status.supervisor {
        let upgrades = match supervisor.upgrades {
            0 => String::new(),
            1 => ", upgraded once".to_string(),
            n => format!(", upgraded {n} times"),
        };
        print(&format!(
            "supervise {} (pid {}), running since {}{upgrades}\n",
            supervisor.version, supervisor.pid, supervisor.started_at
        ))?;
    }
    if let Some(error) = &status.config_error {
        print(&format!(
            "the last edit is invalid; still running the version before it:\n{error}"
        ))?;
    }
    Ok(())
}

/// A scheduled app's runs, and what it waits for (`next run
/// 2026-12-02T03:00:00Z (in 19h58m); last run exit 0, took 2.1s, 3m ago`);
/// the instances' state already says what another app waits for.
fn schedule_note(app: &AppStatus) -> Option<String> {
    let schedule = app.schedule.as_ref()?;
    let waiting = app
        .waiting
        .as_ref()
        .map_or(String::new(), |w| format!("{w}; "));
    let next = match (&schedule.paused, &schedule.next_run, schedule.next_in_s) {
        (Some(why), _, _) if why.starts_with("held") => {
            format!("paused ({why}: `supervise start {}` resumes it)", app.name)
        }
        (Some(why), _, _) => format!("paused ({why})"),
        (None, Some(at), Some(seconds)) => format!("next run {at} (in {})", duration(seconds)),
        _ => "no next run".to_string(),
    };
    let now = if schedule.running {
        match schedule.queued {
            0 => "; a run goes".to_string(),
            queued => format!("; a run goes, {queued} queued"),
        }
    } else {
        String::new()
    };
    let last = match (
        &schedule.last_result,
        schedule.last_took_s,
        schedule.last_ended_s,
    ) {
        (Some(result), Some(took), Some(ago)) => format!(
            "; last run {result}, took {}, {} ago",
            duration(took),
            duration(ago)
        ),
        _ => "; not run yet".to_string(),
    };
    Some(format!("{waiting}{next}{now}{last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_cpu_at_all_is_zero_not_minus_zero() {
        let none: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(percent(none), "0.0%");
        assert_eq!(percent(-0.0), "0.0%");
        assert_eq!(percent(f64::NAN), "0.0%");
        assert_eq!(percent(0.04), "0.0%");
        assert_eq!(percent(12.34), "12.3%");
    }

    /// Issue 28: `status` said `209.7 MB` where the log said `200.0 MiB`
    /// for the same `max_memory: 200M`: both are in binary units now.
    #[test]
    fn memory_against_its_limit_reads_as_the_log_writes_it() {
        let worker = model::protocol::WorkerStatus {
            slot: 0,
            generation: 1,
            pid: Some(100),
            state: "ready".into(),
            ready: true,
            restarts: 0,
            uptime_s: None,
            cpu_percent: None,
            rss_bytes: Some(43_200_000),
            last_exit: None,
            status: None,
            health: None,
            memory_limit_bytes: Some(200 << 20),
            watchdog_ping_s: None,
            replacing: None,
            completed_s: None,
        };
        assert_eq!(memory_column(&worker), "41.2 MiB/200.0 MiB");
        assert_eq!(model::usage::binary_size(200 << 20), "200.0 MiB");
    }
}
