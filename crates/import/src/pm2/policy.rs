//! The keys that say how an app is run once started: instances, restarts
//! and backoff, stopping, readiness, memory, logs and `cron_restart`, each
//! as pm2 7 reads it.

use std::path::Path;

use serde_json::{Value, json};

use super::super::{DraftApp, Places, millis};
use super::{MAX_WINDOW_MS, Pm2App, millis_of, stime, text_of};
use model::spec::defaults::MAX_INSTANCES;

/// pm2's `KILL_TIMEOUT` (its `constants.js`): how long pm2 waits after
/// SIGINT before SIGKILL, also when `kill_timeout` is 0, which pm2 reads as
/// unset (`pm2_env.kill_timeout ? … : KILL_TIMEOUT` in `God/Methods.js`).
const PM2_KILL_TIMEOUT_MS: u64 = 1600;

/// pm2's `GRACEFUL_LISTEN_TIMEOUT` (its `constants.js`): how long pm2 waits
/// for `process.send('ready')`, also when `listen_timeout` is 0
/// (`listen_timeout || GRACEFUL_LISTEN_TIMEOUT` in `God.js`).
const PM2_LISTEN_TIMEOUT_MS: u64 = 3000;

/// pm2's `WORKER_INTERVAL` (its `constants.js`): how often its worker
/// compares each app's memory with `max_memory_restart`.
const PM2_WORKER_INTERVAL_SECS: u64 = 30;

pub(super) fn instances(app: &Pm2App, draft: &mut DraftApp, used: &mut Vec<String>) {
    let autostart = app
        .get("autostart")
        .map(|(v, _)| v != &json!(false))
        .unwrap_or(true);
    if let Some((_, line)) = app.get("autostart") {
        used.push("autostart".to_string());
        if !autostart {
            draft.note(
                line,
                "`autostart: false`: declared with 0 instances; set `instances` to start it",
            );
        }
    }
    if let Some((value, line)) = app.get("exec_mode") {
        used.push("exec_mode".to_string());
        if matches!(value.as_str(), Some("cluster" | "cluster_mode")) {
            draft.note(line, "pm2 ran this app in cluster mode, where node shared the port the app listens on.\nUnder supervise every instance is a process of its own: declare the port with `listen: HOST:PORT`\nand have the app use fd 3 (LISTEN_FDS) when it is set, or read PORT (see the manual, Cluster mode).");
        }
    }
    let count = match app.get("instances") {
        None => None,
        Some((value, line)) => {
            used.push("instances".to_string());
            let n = match value {
                Value::String(s) if s == "max" => Some(0),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                Value::Number(n) => n.as_i64(),
                _ => None,
            };
            match n {
                Some(0) => Some(json!("max")),
                Some(n) if n > i64::from(MAX_INSTANCES) => {
                    draft.warn(line, format!("`instances: {n}`: supervise runs at most {MAX_INSTANCES} instances of an app; written as {MAX_INSTANCES}"));
                    Some(json!(MAX_INSTANCES))
                }
                Some(n) if n > 0 => Some(json!(n)),
                Some(n) => {
                    draft.warn(line, format!("`instances: {n}` (pm2: the CPU count minus {}): supervise has `max` (one per CPU); written as `max`", n.unsigned_abs()));
                    Some(json!("max"))
                }
                None => {
                    draft.leave_out(
                        "instances",
                        line,
                        format!(
                            "`instances: {}` is not a number nor `max`: left out",
                            text_of(value)
                        ),
                    );
                    None
                }
            }
        }
    };
    if !autostart {
        draft.set("instances", json!(0));
    } else if let Some(count) = count {
        draft.set("instances", count);
    }
}

pub(super) fn restarts(app: &Pm2App, draft: &mut DraftApp, used: &mut Vec<String>) {
    let autorestart = app
        .get("autorestart")
        .map(|(v, _)| v != &json!(false))
        .unwrap_or(true);
    if app.get("autorestart").is_some() {
        used.push("autorestart".to_string());
    }
    let stop_codes = app.get("stop_exit_codes");
    if !autorestart {
        draft.set("restart", json!("never"));
    } else if let Some((value, line)) = stop_codes {
        used.push("stop_exit_codes".to_string());
        let codes: Vec<i64> = match value {
            Value::Array(items) => items.iter().filter_map(Value::as_i64).collect(),
            other => other.as_i64().into_iter().collect(),
        };
        if codes == [0] {
            draft.set("restart", json!("on-failure"));
        } else {
            draft.set("restart", json!("on-failure"));
            draft.warn(line, format!("`stop_exit_codes: {codes:?}`: supervise's `on-failure` leaves only exit code 0 alone"));
        }
    }

    let max_restarts = app.get("max_restarts");
    let min_uptime = app.get("min_uptime");
    if max_restarts.is_some() || min_uptime.is_some() {
        // Counts past u32 mean "never give up" as much as any.
        let count = max_restarts
            .and_then(|(v, _)| millis_of(v))
            .unwrap_or(16)
            .min(u64::from(u32::MAX));
        let uptime = min_uptime.and_then(|(v, _)| stime(v)).unwrap_or(1000);
        if max_restarts.is_some() {
            used.push("max_restarts".to_string());
        }
        if min_uptime.is_some() {
            used.push("min_uptime".to_string());
        }
        let line = max_restarts.or(min_uptime).and_then(|(_, l)| l);
        if count == 0 {
            draft.warn(line, "`max_restarts: 0`: pm2 stops the app at its first unstable exit; written as 1 restart");
        }
        let count = count.max(1);
        let within = uptime.saturating_mul(count).clamp(1000, MAX_WINDOW_MS);
        draft.set(
            "max_restarts",
            json!({"count": count, "within": millis(within)}),
        );
        draft.note(line, format!("pm2 gives up after {count} restarts of instances that ran less than {}; supervise after {count} restarts of any kind within {}", millis(uptime), millis(within)));
    }

    let delay = app
        .get("restart_delay")
        .and_then(|(v, l)| millis_of(v).map(|ms| (ms, l)));
    let exp = app
        .get("exp_backoff_restart_delay")
        .and_then(|(v, l)| millis_of(v).map(|ms| (ms, l)));
    if app.get("restart_delay").is_some() {
        used.push("restart_delay".to_string());
    }
    if app.get("exp_backoff_restart_delay").is_some() {
        used.push("exp_backoff_restart_delay".to_string());
    }
    match (exp, delay) {
        (Some((ms, line)), delay) if ms > 0 => {
            if delay.is_some_and(|(d, _)| d > 0) {
                draft.note(line, "pm2 uses `exp_backoff_restart_delay` and not `restart_delay` when both are set");
            }
            draft.set(
                "backoff",
                json!({
                    "initial": millis(ms),
                    "max": millis(ms.max(15_000)),
                    "factor": 1.5,
                    "reset_after": "30s",
                }),
            );
        }
        (_, Some((ms, _))) if ms > 0 => {
            draft.set(
                "backoff",
                json!({"initial": millis(ms), "max": millis(ms), "factor": 1}),
            );
        }
        _ => {}
    }
}

pub(super) fn stopping(app: &Pm2App, draft: &mut DraftApp, used: &mut Vec<String>) {
    if let Some((value, line)) = app.get("kill_timeout") {
        used.push("kill_timeout".to_string());
        match millis_of(value) {
            Some(0) => {
                draft.set("kill_timeout", json!(millis(PM2_KILL_TIMEOUT_MS)));
                draft.warn(line, format!("`kill_timeout: 0`: pm2 reads 0 as unset and waits its default, {}, before SIGKILL; so does this file (supervise's `kill_timeout` is above 0)", millis(PM2_KILL_TIMEOUT_MS)));
            }
            Some(ms) => draft.set("kill_timeout", json!(millis(ms))),
            None => draft.leave_out(
                "kill_timeout",
                line,
                "`kill_timeout` is not a number of milliseconds: left out",
            ),
        }
    }
    draft.set("stop_signal", json!("SIGINT"));
    if let Some((value, line)) = app.get("shutdown_with_message") {
        used.push("shutdown_with_message".to_string());
        if value == &json!(true) {
            draft.leave_out("shutdown_with_message", line, "`shutdown_with_message`: supervise stops with a signal (SIGINT here), not a process message; handle `process.on('SIGINT')`");
        }
    }
    if let Some((_, line)) = app.get("kill_retry_time") {
        draft.leave_out_with_note(
            "kill_retry_time",
            line,
            "`kill_retry_time`: supervise sends SIGKILL once `kill_timeout` has passed",
        );
    }
    for key in ["uid", "gid"] {
        if let Some((value, _)) = app.get(key) {
            used.push(key.to_string());
            draft.set(
                if key == "uid" { "user" } else { "group" },
                json!(text_of(value)),
            );
        }
    }
    if let Some((value, _)) = app.get("username") {
        used.push("username".to_string());
        if app.get("uid").is_none() {
            draft.set("user", json!(text_of(value)));
        }
    }
}

pub(super) fn readiness(app: &Pm2App, draft: &mut DraftApp, used: &mut Vec<String>) {
    let wait_ready = app
        .get("wait_ready")
        .is_some_and(|(v, _)| v == &json!(true));
    if let Some((_, line)) = app.get("wait_ready") {
        used.push("wait_ready".to_string());
        if wait_ready {
            draft.set("ready", json!("notify"));
            draft.note(line, "`wait_ready`: pm2 waits for `process.send('ready')`; supervise waits for READY=1 on $NOTIFY_SOCKET\n(the sd-notify npm package, or `systemd-notify --ready` from a shell)");
        }
    }
    if let Some((value, line)) = app.get("listen_timeout") {
        used.push("listen_timeout".to_string());
        match millis_of(value) {
            Some(ms) if wait_ready => {
                let ms = if ms == 0 {
                    draft.warn(line, format!("`listen_timeout: 0`: pm2 reads 0 as unset and waits its default, {}; so does this file", millis(PM2_LISTEN_TIMEOUT_MS)));
                    PM2_LISTEN_TIMEOUT_MS
                } else {
                    ms
                };
                draft.set("ready_timeout", json!(millis(ms)));
                draft.note(line, "`listen_timeout`: when it passes pm2 takes the app as ready anyway; supervise counts a failed start");
            }
            Some(_) => draft.leave_out_with_note(
                "listen_timeout",
                line,
                "`listen_timeout` without `wait_ready`: nothing to carry over",
            ),
            None => draft.leave_out(
                "listen_timeout",
                line,
                "`listen_timeout` is not a number of milliseconds: left out",
            ),
        }
    }
}

pub(super) fn memory(app: &Pm2App, draft: &mut DraftApp, used: &mut Vec<String>) {
    let Some((value, line)) = app.get("max_memory_restart") else {
        return;
    };
    used.push("max_memory_restart".to_string());
    // pm2's K, M, G are 1024-based, as are ours; pm2 takes a whole number.
    // The size as text, and as written.
    let size: Option<(String, Value)> = match value {
        Value::Number(n) => n.as_u64().map(|n| (n.to_string(), json!(n))),
        Value::String(s)
            if s.strip_suffix(['K', 'M', 'G'])
                .unwrap_or(s)
                .parse::<u64>()
                .is_ok() =>
        {
            Some((s.clone(), json!(s)))
        }
        _ => None,
    };
    let bytes = |text: &str| config::validate::size_in_bytes(text);
    match size.map(|(text, written)| (bytes(&text), written)) {
        Some((Some(0), _)) => draft.leave_out(
            "max_memory_restart",
            line,
            format!(
                "`max_memory_restart: {}`: pm2 restarts the app every {PM2_WORKER_INTERVAL_SECS}s with it (any memory is above 0); supervise has no zero limit: left out, no limit",
                text_of(value)
            ),
        ),
        Some((Some(_), written)) => draft.set("max_memory", written),
        Some((None, _)) => draft.leave_out(
            "max_memory_restart",
            line,
            format!(
                "`max_memory_restart: {}` is more bytes than supervise can count: left out",
                text_of(value)
            ),
        ),
        None => draft.leave_out(
            "max_memory_restart",
            line,
            format!(
                "`max_memory_restart: {}` is not a size: left out",
                text_of(value)
            ),
        ),
    }
}

pub(super) fn logs(
    app: &Pm2App,
    cwd: &Path,
    places: &Places,
    draft: &mut DraftApp,
    used: &mut Vec<String>,
) {
    let path_of = |key: &str| {
        app.get(key)
            .and_then(|(v, l)| v.as_str().map(|s| (s.to_string(), l)))
            .filter(|(s, _)| s != "/dev/null" && !s.eq_ignore_ascii_case("NULL"))
    };
    for key in [
        "log_file",
        "out_file",
        "error_file",
        "merge_logs",
        "time",
        "disable_logs",
        "log_type",
    ] {
        if app.get(key).is_some() {
            used.push(key.to_string());
        }
    }
    if let Some((_, line)) = app.get("log_date_format") {
        draft.leave_out_with_note("log_date_format", line, "`log_date_format`: supervise stamps every line itself, in one format (RFC 3339 in UTC, with milliseconds)");
    }
    if let Some((value, line)) = app.get("log_file")
        && value == &json!(true)
    {
        draft.leave_out_with_note("log_file", line, "`log_file: true` (pm2's own log folder): the output is in `supervise logs`; for a file, set `log: {file: …}`");
    }
    if let Some((value, line)) = app.get("disable_logs")
        && value == &json!(true)
    {
        draft.note(line, "`disable_logs`: pm2 drops the output; supervise writes no log file for it either, and keeps only its last lines in memory for `supervise logs`");
        return;
    }
    let combined = path_of("log_file");
    let out = path_of("out_file");
    let err = path_of("error_file");
    let chosen = combined.clone().or_else(|| out.clone());
    if let Some((file, line)) = chosen {
        draft.set("log", json!({"file": places.file(cwd, &file)}));
        draft.note(line, "output goes to one file per app (both streams, timestamped: `TIME app.N stream | line`), rotated at 10MB, and to `supervise logs`");
        if combined.is_none() && err.is_some() {
            draft.warn(app.line_of("error_file"), "`error_file`: supervise writes stderr to the same file as stdout (each line says which stream)");
        }
    } else if let Some((file, line)) = err {
        draft.set("log", json!({"file": places.file(cwd, &file)}));
        draft.warn(
            line,
            "only `error_file` was set: supervise writes both streams to it",
        );
    }
    if let Some((value, line)) = app.get("log_type")
        && value.as_str() == Some("json")
    {
        if let Some(Value::Object(log)) = draft.fields.get_mut("log") {
            log.insert("format".to_string(), json!("json"));
        } else {
            draft.leave_out_with_note(
                "log_type",
                line,
                "`log_type: json`: set `log: {file: …, format: json}` to write JSON lines",
            );
        }
    }
}

pub(super) fn schedule(app: &Pm2App, draft: &mut DraftApp, used: &mut Vec<String>) {
    let Some((value, line)) = app.get("cron_restart") else {
        return;
    };
    used.push("cron_restart".to_string());
    let cron = text_of(value);
    // pm2's way of saying "no cron restart".
    if cron == "0" || value == &json!(false) {
        return;
    }
    let fields = cron.split_whitespace().count();
    let instances = draft.fields.get("instances").cloned();
    if cron.trim().eq_ignore_ascii_case("@reboot") {
        draft.leave_out("cron_restart", line, "`cron_restart: @reboot`: the app starts when supervise does (at boot, with `supervise install`), which is what @reboot means: no schedule written");
    } else if fields == 6 {
        draft.leave_out("cron_restart", line, format!("`cron_restart: {cron}`: supervise reads 5-field cron expressions (no seconds); left out"));
    } else if let Some(problem) = config::validate::cron_problem(&cron) {
        draft.leave_out(
            "cron_restart",
            line,
            format!("`cron_restart: {cron}`: {problem}; left out"),
        );
    } else if instances
        .as_ref()
        .is_some_and(|n| n != &json!(1) && n != &json!(0))
    {
        draft.leave_out("cron_restart", line, format!("`cron_restart: {cron}` with several instances: a scheduled app has one instance in supervise; left out (restart it from cron with `supervise reload {}`)", draft.name));
    } else {
        draft.set("schedule", json!(cron));
        draft.set("overlap", json!("replace"));
        draft.set("run_on_start", json!(true));
        let restart = if draft.fields.get("restart") == Some(&json!("never")) {
            "never"
        } else {
            "on-failure"
        };
        draft.set("restart", json!(restart));
        draft.note(line, "`cron_restart`: runs from start, and at each time the running instance is replaced by a new one;\nbetween two times a crash is restarted, an exit with code 0 is not");
    }
}
