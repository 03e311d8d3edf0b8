//! pm2's ecosystem file to ours, following what pm2 7 itself does with each
//! key (read off its `lib/Common.js`, `God.js` and `God/ForkMode.js`):
//!
//! - the program: `script` is resolved against `cwd`, else looked up on the
//!   `PATH`; the interpreter comes from `interpreter`, else the script's
//!   extension (`.py` → python, `.sh` → bash, …), else `node` for a text file
//!   and none for a binary. The argv is `[interpreter, node_args…, script,
//!   args…]`, with string `args` split as pm2 splits them.
//! - pm2 stops an app with SIGINT (its `PM2_KILL_SIGNAL`), so the imported
//!   app does too: shutdown handlers written for pm2 keep working.
//! - `max_restarts`/`min_uptime`: pm2 gives up after `max_restarts` restarts
//!   of instances that ran less than `min_uptime`, counted while the app is
//!   younger than their product; that product is our `within`.
//! - `exp_backoff_restart_delay`: pm2 multiplies by 1.5 up to 15 s and resets
//!   after 30 s up.
//!
//! Keys are read under pm2's aliases and camelCase spellings too.
//!
//! One concern per file: [`source`] reads the file (apps, keys, lines),
//! [`argv`] makes the program's argv, [`policy`] the keys that say how it
//! runs; this file holds the app as a whole (name, cwd, environment) and
//! what no key maps to.

mod argv;
mod policy;
mod source;

use std::path::Path;

use serde_json::{Map, Value, json};

use super::{DraftApp, EnvVar, Note, Places, app_name, checked_env, normalize, set_env};
use argv::command;
pub use argv::{FileKind, Files, split_args};
use policy::{instances, logs, memory, readiness, restarts, schedule, stopping};
#[cfg(test)]
use source::canonical;
pub use source::{Pm2App, Pm2File, apps_from_evaluated, apps_from_tree};

/// A value as the string a process environment would get (as node's
/// `spawn` makes it).
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        // JavaScript writes a whole number without a fraction (`1e3` is
        // "1000", `8080.0` is "8080").
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// pm2's `min_uptime` and other "stime" values: milliseconds, or a number
/// with `h`, `m` or `s`.
fn stime(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64),
        Value::String(s) => {
            let (number, unit) = match s.char_indices().last()? {
                (i, 'h') => (&s[..i], 3_600_000.0),
                (i, 'm') => (&s[..i], 60_000.0),
                (i, 's') => (&s[..i], 1000.0),
                _ => (s.as_str(), 1.0),
            };
            number
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| *f >= 0.0)
                .map(|f| (f * unit) as u64)
        }
        _ => None,
    }
}

fn millis_of(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| *f >= 0.0)
            .map(|f| f as u64),
        _ => None,
    }
}

/// The longest `max_restarts` window written: a year.
const MAX_WINDOW_MS: u64 = 365 * 24 * 3600 * 1000;

/// Keys pm2 uses for its own monitoring and tooling: nothing a process sees.
const PM2_ONLY: &[&str] = &[
    "vizion",
    "pmx",
    "automation",
    "source_map_support",
    "disable_source_map_support",
    "trace",
    "disable_trace",
    "v8",
    "event_loop_inspector",
    "deep_monitoring",
    "windowsHide",
    "force",
    "append_env_to_name",
    "post_update",
    "install_url",
    "io",
    "pid_file",
    "execute_command",
    "write",
];

/// Translate pm2's apps. `env`: the pm2 environment chosen (`--env NAME`:
/// `env_NAME` over `env`).
/// Returns the apps and the notes about the file as a whole.
pub fn translate(
    file: &Pm2File,
    env: Option<&str>,
    places: &Places,
    files: &dyn Files,
) -> (Vec<DraftApp>, Vec<Note>) {
    let mut out: Vec<DraftApp> = Vec::new();
    let mut notes = file.notes.clone();
    for app in &file.apps {
        let taken: Vec<String> = out.iter().map(|a| a.name.clone()).collect();
        match translate_app(app, env, places, files, &taken) {
            Ok(draft) => out.push(draft),
            Err(note) => notes.push(note),
        }
    }
    if let Some(chosen) = env {
        let key = format!("env_{chosen}");
        if !file.apps.iter().any(|a| a.get(&key).is_some()) {
            notes.push(Note::warning(
                None,
                format!("--env {chosen}: no app has `{key}` (a typo?); only `env` is used"),
            ));
        }
    }
    (out, notes)
}

fn translate_app(
    app: &Pm2App,
    env_choice: Option<&str>,
    places: &Places,
    files: &dyn Files,
    taken: &[String],
) -> Result<DraftApp, Note> {
    // pm2 takes `cmd`, then `command`, for a missing `script`.
    let mut used: Vec<String> = vec!["name".to_string()];
    let mut script = String::new();
    for key in ["script", "cmd", "command"] {
        if let Some((value, _)) = app.get(key) {
            used.push(key.to_string());
            if script.is_empty() {
                script = value.as_str().unwrap_or_default().to_string();
            }
        }
    }
    // A script with a space is a command line pm2 runs with `bash -c`,
    // named after itself.
    let shell_line = script.contains(' ');
    let pm2_name = match app.get("name").map(|(v, _)| v) {
        Some(Value::String(name)) => name.clone(),
        Some(Value::Number(number)) => number.to_string(),
        _ if shell_line => script.clone(),
        _ => Path::new(&script)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if script.is_empty() {
        return Err(Note::warning(
            app.line,
            format!(
                "the app `{pm2_name}` has no `script` (pm2 refuses it: \"No script path\"): left out"
            ),
        ));
    }
    let name = app_name(&pm2_name, taken);
    let mut draft = DraftApp::new(name.clone(), app.line);
    if name != pm2_name {
        let why = if app_name(&pm2_name, &[]) == pm2_name {
            "another app has that name"
        } else {
            "app names are lowercase letters, digits, `_` and `-`"
        };
        draft.note(
            app.line_of("name"),
            format!("named `{name}` (pm2: `{pm2_name}`): {why}"),
        );
    }

    // The working directory: pm2 reads a relative `cwd` against the folder
    // pm2 was started in, taken here to be the file's own.
    let cwd = app
        .get("cwd")
        .and_then(|(v, _)| v.as_str())
        .map(str::to_string);
    let cwd_abs = normalize(&places.source_dir.join(cwd.as_deref().unwrap_or(".")));
    let cwd_written = places.cwd(cwd.as_deref().unwrap_or("."));
    if cwd.is_some() {
        used.push("cwd".to_string());
    }

    // The program and its argv.
    let mut env_extra: Map<String, Value> = Map::new();
    let argv = if shell_line {
        for key in ["args", "exec_interpreter", "node_args"] {
            if let Some((_, line)) = app.get(key) {
                draft.leave_out(key, line, format!("`{key}`: pm2 ignores it when `script` is a command line (it runs `bash -c SCRIPT`)"));
            }
        }
        vec!["bash".to_string(), "-c".to_string(), script.clone()]
    } else {
        command(
            app,
            &script,
            &cwd_abs,
            files,
            &mut draft,
            &mut env_extra,
            &mut used,
        )
    };
    for word in &argv {
        placeholder_warning(&mut draft, app.line_of("args"), word);
    }
    draft.set(
        "command",
        Value::Array(argv.into_iter().map(Value::String).collect()),
    );
    if let Some(cwd) = cwd_written {
        draft.set("cwd", json!(cwd));
    }

    environment(app, env_choice, env_extra, &mut draft, &mut used);
    instances(app, &mut draft, &mut used);
    restarts(app, &mut draft, &mut used);
    stopping(app, &mut draft, &mut used);
    readiness(app, &mut draft, &mut used);
    memory(app, &mut draft, &mut used);
    logs(app, &cwd_abs, places, &mut draft, &mut used);
    schedule(app, &mut draft, &mut used);

    leave_out_the_rest(app, &mut draft, &used);
    Ok(draft)
}

/// The environment: `env`, then the chosen `env_NAME` over it, `port` as
/// `PORT`, what the interpreter needs (`env_extra`) and pm2's instance
/// variables.
fn environment(
    app: &Pm2App,
    env_choice: Option<&str>,
    env_extra: Map<String, Value>,
    draft: &mut DraftApp,
    used: &mut Vec<String>,
) {
    let mut env: Vec<EnvVar> = Vec::new();
    if let Some((value, line)) = app.get("env") {
        merge_env(&mut env, value, line, draft, "env");
        used.push("env".to_string());
    }
    let mut other_envs = Vec::new();
    for (key, line, value) in &app.keys {
        if let Some(env_name) = key.strip_prefix("env_") {
            if Some(env_name) == env_choice {
                used.push(key.clone());
                merge_env(&mut env, value, *line, draft, key);
            } else {
                other_envs.push(key.clone());
            }
        }
    }
    if let Some(chosen) = env_choice
        && app.get(&format!("env_{chosen}")).is_none()
    {
        draft.note(
            app.line,
            format!("no `env_{chosen}` in this app: only `env` is used"),
        );
    }
    if let Some(first) = other_envs.first() {
        draft.note(
            app.line_of(first),
            format!(
                "not used: {} (choose one with `supervise import --env {}`)",
                other_envs.join(", "),
                &first["env_".len()..]
            ),
        );
        for key in &other_envs {
            draft.mark_left_out(key);
        }
    }
    if let Some((value, line)) = app.get("port") {
        used.push("port".to_string());
        set_env(
            &mut env,
            EnvVar {
                name: "PORT".to_string(),
                value: text_of(value),
                line,
            },
        );
    }
    for (name, value) in env_extra {
        if !env.iter().any(|v| v.name == name) {
            env.push(EnvVar {
                name,
                value: text_of(&value),
                line: app.line,
            });
        }
    }
    instance_variables(app, &mut env, draft, used);
    // pm2 reads `user` as `uid`.
    let has_user = app.get("uid").or(app.get("username")).is_some();
    let env = checked_env(draft, env, has_user);
    if !env.is_empty() {
        draft.set("env", Value::Object(env));
    }
}

/// Every key not read above: carried over as nothing to do, or left out
/// with why.
fn leave_out_the_rest(app: &Pm2App, draft: &mut DraftApp, used: &[String]) {
    for (key, line, value) in &app.keys {
        if draft.left_out.contains(key) {
            continue;
        }
        if used.contains(key) {
            draft.record_mapped(key);
            continue;
        }
        match key.as_str() {
            _ if key.starts_with("env_") => {}
            "watch" if value == &json!(false) => draft.record_mapped(key),
            "watch" => draft.leave_out(key, *line, "`watch`: supervise does not restart on file changes; after a deploy run `supervise reload APP` (zero downtime), or edit the ecosystem file"),
            "ignore_watch" | "watch_options" | "watch_delay" => draft.leave_out_with_note(
                key,
                *line,
                format!("`{key}`: goes with `watch`, which supervise does not have"),
            ),
            "treekill" if value == &json!(true) => draft.record_mapped(key),
            "treekill" => draft.leave_out(
                key,
                *line,
                "`treekill: false`: supervise always signals every process of an instance",
            ),
            "filter_env" => draft.leave_out(
                key,
                *line,
                "`filter_env`: supervise passes its own environment to every app whole; start it with only the variables the apps should see",
            ),
            "namespace" => draft.leave_out_with_note(
                key,
                *line,
                format!(
                    "`namespace: {}`: supervise has no namespaces; the file is the group",
                    text_of(value)
                ),
            ),
            k if PM2_ONLY.contains(&k) => draft.leave_out_with_note(
                key,
                *line,
                format!("`{k}`: pm2's own tooling, nothing to carry over"),
            ),
            k => draft.leave_out(
                key,
                *line,
                format!("`{k}` has no counterpart in supervise: left out"),
            ),
        }
    }
}

/// The variables of `value` (an `env` or `env_NAME` mapping, `key`) set
/// over those of `env`.
fn merge_env(
    env: &mut Vec<EnvVar>,
    value: &Value,
    line: Option<usize>,
    draft: &mut DraftApp,
    key: &str,
) {
    let Value::Object(vars) = value else {
        draft.leave_out(
            key,
            line,
            format!("`{key}` is not a mapping of variables: left out"),
        );
        return;
    };
    for (name, v) in vars {
        if v.is_null() {
            draft.warn(line, format!("`{key}.{name}` is null: left out"));
            continue;
        }
        let text = text_of(v);
        // A value supervise cannot read at all is left out by `checked_env`.
        if model::spec::Template::parse(&text).is_ok() {
            placeholder_warning(draft, line, &text);
        }
        set_env(
            env,
            EnvVar {
                name: name.clone(),
                value: text,
                line,
            },
        );
    }
}

/// supervise reads `{instance` as a placeholder and has no escape for it:
/// literal text that holds one is said, at its line.
fn placeholder_warning(draft: &mut DraftApp, line: Option<usize>, text: &str) {
    if text.contains("{instance") {
        draft.warn(line, format!("{text:?} holds `{{instance`, which supervise reads as a placeholder (0, 1, … per instance) and has no escape for"));
    }
}

/// `instance_var` (the variable that holds the instance number) and
/// `increment_var` (a variable raised by one per instance).
fn instance_variables(
    app: &Pm2App,
    env: &mut Vec<EnvVar>,
    draft: &mut DraftApp,
    used: &mut Vec<String>,
) {
    if let Some((value, line)) = app.get("instance_var") {
        used.push("instance_var".to_string());
        let var = text_of(value);
        if var != "NODE_APP_INSTANCE" {
            set_env(
                env,
                EnvVar {
                    name: var.clone(),
                    value: "{instance}".to_string(),
                    line,
                },
            );
            draft.note(line, format!("`instance_var: {var}`: set to the instance number, as supervise also sets NODE_APP_INSTANCE and SUPERVISE_INSTANCE"));
        }
    }
    if let Some((value, line)) = app.get("increment_var") {
        let var = text_of(value);
        let base = env
            .iter()
            .find(|v| v.name == var)
            .and_then(|v| v.value.parse::<i64>().ok());
        match base {
            // supervise adds a whole number of 0 or more: `{instance+N}`.
            Some(base) if base >= 0 => {
                used.push("increment_var".to_string());
                set_env(
                    env,
                    EnvVar {
                        name: var,
                        value: format!("{{instance+{base}}}"),
                        line,
                    },
                );
            }
            Some(base) => draft.leave_out(
                "increment_var",
                line,
                format!("`increment_var: {var}` from {base}: supervise counts up from 0 or more (`{{instance+N}}`); left out, {var} stays {base}"),
            ),
            None => draft.leave_out(
                "increment_var",
                line,
                format!("`increment_var: {var}` needs `{var}` set to a number in `env`: left out"),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
