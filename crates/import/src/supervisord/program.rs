//! Each key of a `[program:x]` section mapped to the app's keys, with a
//! note where the behaviour differs: supervisord's defaults that differ
//! from ours are written out (`autorestart` defaults to `unexpected`, our
//! `on-failure`), and what has no counterpart is left out with a warning.
//! The log keys are in [`super::logs`].

use std::time::Duration;

use serde_json::{Value, json};

use super::expand::{Expansions, expand};
use super::ini::{IniEntry, IniSection};
use super::logs::logs;
use super::values::{key_value_pairs, truthy};
use crate::{DraftApp, EnvVar, Places, app_name, checked_env};
use config::validate::parse_signal;
use model::spec::defaults::{MAX_INSTANCES, READY_TIMEOUT};

/// A marker of word characters that stands for the instance number while
/// `environment` is split (so the split sees one word, as supervisord sees
/// the number).
pub(super) const INSTANCE_MARK: &str = "SUPERVISEINSTANCEMARK";

/// The longest `max_restarts` window written: a year.
pub(super) const MAX_WINDOW_SECS: i64 = 365 * 24 * 3600;

/// The longest `startsecs` carried over as `ready: {delay}`: a year (a
/// start that takes longer is a typo, and a delay must fit the clock).
const MAX_STARTSECS: i64 = MAX_WINDOW_SECS;

/// How far above `startsecs` the `ready_timeout` written for a long one is.
/// `check` wants the timeout after the delay (or the start could never
/// succeed), and supervisord has no other limit on a start: the margin is
/// only the time a loaded machine may take to see the delay pass, kept
/// generous because a timeout that came first would fail a start
/// supervisord counts as good.
const READY_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// supervisord's main loop polls with a 1 s timeout (`timeout = 1` in
/// `supervisord.py`) and sends SIGKILL on the first tick past `stopwaitsecs`
/// (`process.py`, `transition`): with `stopwaitsecs = 0` that is within a
/// second of the stop signal, which is what `kill_timeout` (above 0) gets.
const SUPERVISORD_TICK: Duration = Duration::from_secs(1);

/// Keys of a program section that `translate_program` reads itself.
const READ: &[&str] = &[
    "command",
    "numprocs",
    "numprocs_start",
    "process_name",
    "directory",
    "autostart",
    "autorestart",
    "exitcodes",
    "startsecs",
    "startretries",
    "stopsignal",
    "stopwaitsecs",
    "stopasgroup",
    "killasgroup",
    "user",
    "environment",
    "redirect_stderr",
    "stdout_logfile",
    "stdout_logfile_maxbytes",
    "stdout_logfile_backups",
    "stderr_logfile",
    "stderr_logfile_maxbytes",
    "stderr_logfile_backups",
    "priority",
];

pub(super) fn translate_program(
    section: &IniSection,
    program: &str,
    base: &Expansions,
    base_env: &[(String, String, usize)],
    places: &Places,
    taken: &[String],
) -> DraftApp {
    let name = app_name(program, taken);
    let mut app = DraftApp::new(name.clone(), Some(section.line));
    if name != program {
        app.note(Some(section.line), format!("named `{name}` (supervisord: `{program}`): app names are lowercase letters, digits, `_` and `-`"));
    }
    let numprocs = numprocs(section, &mut app);
    let expansions = Expansions { numprocs, ..*base };
    let instance = first_instance(section, &mut app);
    let mut expand_at = |app: &mut DraftApp, entry: &IniEntry, instance: &str| {
        expand_entry(&expansions, app, entry, instance)
    };
    if let Some(entry) = section.get("command") {
        let command = expand_at(&mut app, entry, &instance);
        app.set("command", json!(command));
    }
    if let Some(entry) = section.get("directory") {
        let dir = expand_at(&mut app, entry, &instance);
        if let Some(cwd) = places.cwd(&dir) {
            app.set("cwd", json!(cwd));
        }
    }
    environment(section, &mut app, &mut expand_at, &instance, base_env);
    instances(section, &mut app, numprocs, &name);
    restarts(section, &mut app);
    let startsecs = readiness(section, &mut app);
    start_retries(section, &mut app, startsecs);
    stopping(section, &mut app);
    if let Some(entry) = section.get("user") {
        app.set("user", json!(entry.value));
    }
    if let Some(entry) = section.get("priority") {
        app.leave_out_with_note(
            "priority",
            Some(entry.line),
            format!(
                "`priority = {}`: supervise starts apps together; to order them use `depends_on`",
                entry.value
            ),
        );
    }
    logs(section, &mut app, &mut expand_at, &instance, places);
    leave_out_the_rest(section, &mut app);
    app
}

/// The number `key` gives, or supervisord's `default` (said) when it is
/// not one.
fn number(section: &IniSection, app: &mut DraftApp, key: &str, default: i64) -> i64 {
    match section.get(key) {
        None => default,
        Some(e) => e.value.trim().parse::<i64>().unwrap_or_else(|_| {
            app.leave_out(
                key,
                Some(e.line),
                format!(
                    "`{key} = {}` is not a number; supervisord's default {default} is used",
                    e.value
                ),
            );
            default
        }),
    }
}

/// `numprocs`, within supervise's bound of instances per app.
fn numprocs(section: &IniSection, app: &mut DraftApp) -> i64 {
    let numprocs = number(section, app, "numprocs", 1).max(0);
    if numprocs > i64::from(MAX_INSTANCES) {
        app.warn(
            section.get("numprocs").map(|e| e.line),
            format!("`numprocs = {numprocs}`: supervise runs at most {MAX_INSTANCES} instances of an app; written as {MAX_INSTANCES}"),
        );
        return i64::from(MAX_INSTANCES);
    }
    numprocs
}

/// What supervisord's `process_num` is written as: `{instance}`, or
/// `{instance+N}` from `numprocs_start`.
fn first_instance(section: &IniSection, app: &mut DraftApp) -> String {
    match number(section, app, "numprocs_start", 0) {
        0 => "{instance}".to_string(),
        start if start > 0 => format!("{{instance+{start}}}"),
        start => {
            app.warn(
                section.get("numprocs_start").map(|e| e.line),
                format!("`numprocs_start = {start}`: supervise numbers instances from 0 up ({{instance+N}}, N >= 0); written from 0"),
            );
            "{instance}".to_string()
        }
    }
}

/// `entry`'s value with supervisord's `%(…)s` expanded, each problem said.
fn expand_entry(
    expansions: &Expansions,
    app: &mut DraftApp,
    entry: &IniEntry,
    instance: &str,
) -> String {
    let (text, problems) = expand(&entry.value, expansions, instance);
    for problem in problems {
        let problem = problem.replace(INSTANCE_MARK, "{instance}");
        app.warn(Some(entry.line), format!("`{}`: {problem}", entry.key));
    }
    text
}

/// The environment: `[supervisord]`'s, then the program's.
fn environment(
    section: &IniSection,
    app: &mut DraftApp,
    expand_at: &mut impl FnMut(&mut DraftApp, &IniEntry, &str) -> String,
    instance: &str,
    base_env: &[(String, String, usize)],
) {
    let mut env: Vec<EnvVar> = base_env
        .iter()
        .map(|(name, value, line)| EnvVar {
            name: name.clone(),
            value: value.clone(),
            line: Some(*line),
        })
        .collect();
    if let Some(entry) = section.get("environment") {
        let text = expand_at(app, entry, INSTANCE_MARK);
        match key_value_pairs(&text) {
            Ok(pairs) => {
                for (name, value) in pairs {
                    crate::set_env(
                        &mut env,
                        EnvVar {
                            name,
                            value: value.replace(INSTANCE_MARK, instance),
                            line: Some(entry.line),
                        },
                    );
                }
            }
            Err(problem) => app.leave_out(
                "environment",
                Some(entry.line),
                format!(
                    "`environment`: {} (supervisord refuses it too); left out",
                    problem.replace(INSTANCE_MARK, "{instance}")
                ),
            ),
        }
    }
    let env = checked_env(app, env, section.get("user").is_some());
    if !env.is_empty() {
        app.set("env", Value::Object(env));
    }
}

/// `autostart` and `numprocs` as `instances`, and `process_name`.
fn instances(section: &IniSection, app: &mut DraftApp, numprocs: i64, name: &str) {
    let autostart = section
        .get("autostart")
        .is_none_or(|e| truthy(&e.value) != Some(false));
    if !autostart {
        app.note(
            section.get("autostart").map(|e| e.line),
            "`autostart = false`: declared with 0 instances; set `instances` to start it",
        );
        app.set("instances", json!(0));
    } else if numprocs != 1 {
        app.set("instances", json!(numprocs));
    }
    if let Some(entry) = section.get("process_name") {
        app.leave_out_with_note(
            "process_name",
            Some(entry.line),
            format!(
                "`process_name = {}`: supervise names instances {name}.0, {name}.1, …",
                entry.value
            ),
        );
    }
}

/// Restarts: supervisord's default is `unexpected`, our `on-failure`.
fn restarts(section: &IniSection, app: &mut DraftApp) {
    let autorestart = section
        .get("autorestart")
        .map_or("unexpected".to_string(), |e| e.value.to_ascii_lowercase());
    match truthy(&autorestart) {
        Some(true) => {}
        Some(false) => app.set("restart", json!("never")),
        None => {
            app.set("restart", json!("on-failure"));
            if autorestart != "unexpected" {
                app.warn(section.get("autorestart").map(|e| e.line), format!("`autorestart = {autorestart}` is not true, false nor unexpected; written as on-failure"));
            }
        }
    }
    if let Some(entry) = section.get("exitcodes") {
        let codes: Vec<&str> = entry.value.split(',').map(str::trim).collect();
        if codes != ["0"] {
            app.warn(
                Some(entry.line),
                format!(
                    "`exitcodes = {}`: supervise's `on-failure` takes only exit code 0 as expected",
                    entry.value
                ),
            );
        }
    }
}

/// `startsecs` as `ready: {delay}` (and a `ready_timeout` above a long one):
/// the `startsecs` taken, for `startretries`.
fn readiness(section: &IniSection, app: &mut DraftApp) -> i64 {
    let startsecs = number(section, app, "startsecs", 1).max(0);
    let startsecs = if startsecs > MAX_STARTSECS {
        app.warn(
            section.get("startsecs").map(|e| e.line),
            format!("`startsecs = {startsecs}`: more than a year; written as {MAX_STARTSECS}s"),
        );
        MAX_STARTSECS
    } else {
        startsecs
    };
    if let Some(entry) = section.get("startsecs") {
        if startsecs == 0 {
            app.set("ready", json!("none"));
        } else {
            app.set("ready", json!({"delay": format!("{startsecs}s")}));
        }
        app.note(
            Some(entry.line),
            format!(
                "`startsecs = {}`: an instance is ready once it has run that long",
                entry.value
            ),
        );
        // `startsecs` is below i64::MAX / 2 here: the sum cannot overflow.
        let delay = Duration::from_secs(startsecs.unsigned_abs());
        if delay >= READY_TIMEOUT {
            let timeout = delay + READY_TIMEOUT_MARGIN;
            app.set("ready_timeout", json!(format!("{}s", timeout.as_secs())));
            app.warn(
                Some(entry.line),
                format!(
                    "`startsecs = {startsecs}`: `ready_timeout: {}s` written too, {}s above the delay: supervise fails a start that is not ready within `ready_timeout` ({}s unless set), and supervisord has no such limit",
                    timeout.as_secs(),
                    READY_TIMEOUT_MARGIN.as_secs(),
                    READY_TIMEOUT.as_secs()
                ),
            );
        }
    }
    startsecs
}

/// `startretries` as `max_restarts` within the window supervisord would
/// have given up in.
fn start_retries(section: &IniSection, app: &mut DraftApp, startsecs: i64) {
    if let Some(entry) = section.get("startretries") {
        let retries = number(section, app, "startretries", 3).clamp(1, i64::from(u32::MAX));
        // supervisord waits 1 s, 2 s, … between tries: the window in which
        // it would have given up (at most a year).
        let within = startsecs
            .saturating_mul(retries.saturating_add(1))
            .saturating_add(retries.saturating_mul(retries.saturating_add(1)) / 2)
            .clamp(1, MAX_WINDOW_SECS);
        app.set(
            "max_restarts",
            json!({"count": retries, "within": format!("{within}s")}),
        );
        app.note(Some(entry.line), format!("`startretries = {}`: supervisord gives up after that many failed starts in a row; supervise after that many restarts within {within}s", entry.value));
    }
}

/// The stop signal, `stopwaitsecs` as `kill_timeout`, and the group keys.
fn stopping(section: &IniSection, app: &mut DraftApp) {
    if let Some(entry) = section.get("stopsignal") {
        let signal = entry.value.trim().to_ascii_uppercase();
        // supervisord takes a number too.
        let signal = match signal
            .parse::<i32>()
            .ok()
            .map(nix::sys::signal::Signal::try_from)
        {
            Some(Ok(number)) => number.as_str().to_string(),
            _ => signal,
        };
        match parse_signal(&signal) {
            Some(signal) => app.set("stop_signal", json!(signal.as_str())),
            None => app.leave_out(
                "stopsignal",
                Some(entry.line),
                format!(
                    "`stopsignal = {}` is not a signal (supervisord refuses it too): left out",
                    entry.value
                ),
            ),
        }
    }
    if let Some(entry) = section.get("stopwaitsecs") {
        let secs = number(section, app, "stopwaitsecs", 10).max(0);
        if secs == 0 {
            app.set(
                "kill_timeout",
                json!(format!("{}s", SUPERVISORD_TICK.as_secs())),
            );
            app.warn(
                Some(entry.line),
                format!(
                    "`stopwaitsecs = 0`: supervisord sends SIGKILL at the next tick of its loop, within {}s of the stop signal; written as `kill_timeout: {}s` (it is above 0 in supervise)",
                    SUPERVISORD_TICK.as_secs(),
                    SUPERVISORD_TICK.as_secs()
                ),
            );
        } else {
            app.set("kill_timeout", json!(format!("{secs}s")));
        }
    }
    for key in ["stopasgroup", "killasgroup"] {
        if let Some(entry) = section.get(key) {
            let what = if truthy(&entry.value) == Some(true) {
                "nothing to write: supervise always signals the whole instance (every process in it)"
            } else {
                "supervise always signals the whole instance (every process in it), not its main process alone"
            };
            app.note(
                Some(entry.line),
                format!("`{key} = {}`: {what}", entry.value),
            );
        }
    }
}

/// Every key not read above: left out, with a warning.
fn leave_out_the_rest(section: &IniSection, app: &mut DraftApp) {
    for entry in &section.entries {
        if app.left_out.contains(&entry.key) {
            continue;
        }
        if READ.contains(&entry.key.as_str()) {
            app.record_mapped(&entry.key);
        } else {
            app.leave_out(
                &entry.key,
                Some(entry.line),
                format!("`{}` has no counterpart in supervise: left out", entry.key),
            );
        }
    }
}
