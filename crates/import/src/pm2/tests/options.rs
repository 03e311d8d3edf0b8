//! pm2's options: each documented one mapped or left out with a note at its
//! line; the environment, restarts, readiness, memory, cron, aliases, and
//! huge numbers.

use super::*;

#[test]
fn the_chosen_environment_goes_over_env() {
    let value = json!({"name": "a", "script": "a.js", "env": {"A": "1", "B": 2}, "env_production": {"A": "prod"}, "env_staging": {"A": "s"}});
    let files = machine(&[("/srv/app/a.js", FileKind::Text)]);
    let chosen = translate(
        &file(vec![app(value.clone())]),
        Some("production"),
        &places(),
        &files,
    )
    .0
    .remove(0);
    assert_eq!(chosen.fields["env"], json!({"A": "prod", "B": "2"}));
    assert!(chosen.notes.iter().any(|n| n.text.contains("env_staging")));
    let plain = translate(&file(vec![app(value)]), None, &places(), &files)
        .0
        .remove(0);
    assert_eq!(plain.fields["env"], json!({"A": "1", "B": "2"}));
}

#[test]
fn restarts_backoff_and_stopping_follow_pm2() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "max_restarts": 10, "min_uptime": "5s", "exp_backoff_restart_delay": 100, "kill_timeout": 3000, "autorestart": true}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(
        draft.fields["max_restarts"],
        json!({"count": 10, "within": "50s"})
    );
    assert_eq!(
        draft.fields["backoff"],
        json!({"initial": "100ms", "max": "15s", "factor": 1.5, "reset_after": "30s"})
    );
    assert_eq!(draft.fields["kill_timeout"], json!("3s"));
    assert_eq!(
        draft.fields["stop_signal"],
        json!("SIGINT"),
        "pm2 stops with SIGINT"
    );
    let fixed = one(
        json!({"name": "a", "script": "a.js", "restart_delay": 2000, "autorestart": false}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(
        fixed.fields["backoff"],
        json!({"initial": "2s", "max": "2s", "factor": 1})
    );
    assert_eq!(fixed.fields["restart"], json!("never"));
}

#[test]
fn ready_memory_and_instance_variables() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "wait_ready": true, "listen_timeout": 8000, "max_memory_restart": "300M",
               "env": {"PORT": "3000"}, "increment_var": "PORT", "instance_var": "INSTANCE_ID"}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(draft.fields["ready"], json!("notify"));
    assert_eq!(draft.fields["ready_timeout"], json!("8s"));
    assert_eq!(draft.fields["max_memory"], json!("300M"));
    assert_eq!(
        draft.fields["env"],
        json!({"PORT": "{instance+3000}", "INSTANCE_ID": "{instance}"})
    );
}

#[test]
fn cron_restart_becomes_a_schedule_that_replaces_the_run() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "cron_restart": "0 3 * * *"}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(draft.fields["schedule"], json!("0 3 * * *"));
    assert_eq!(draft.fields["overlap"], json!("replace"));
    assert_eq!(draft.fields["run_on_start"], json!(true));
    assert_eq!(draft.fields["restart"], json!("on-failure"));
    let many = one(
        json!({"name": "a", "script": "a.js", "cron_restart": "0 3 * * *", "instances": 4}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert!(!many.fields.contains_key("schedule"));
    let seconds = one(
        json!({"name": "a", "script": "a.js", "cron_restart": "0 0 3 * * *"}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert!(!seconds.fields.contains_key("schedule"));
}

#[test]
fn every_key_is_mapped_or_noted() {
    let draft = one(
        json!({"name": "My App", "script": "a.js", "watch": ["src"], "vizion": false, "namespace": "x", "something_new": 1, "autostart": false}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(draft.name, "my-app");
    assert_eq!(draft.fields["instances"], json!(0));
    for key in [
        "watch",
        "vizion",
        "namespace",
        "something_new",
        "My App",
        "autostart",
    ] {
        assert!(
            draft.notes.iter().any(|n| n.text.contains(key)),
            "{key} is not noted: {:?}",
            draft.notes
        );
    }
}

#[test]
fn camel_case_and_aliases_are_read() {
    assert_eq!(canonical("maxMemoryRestart"), "max_memory_restart");
    assert_eq!(canonical("interpreterArgs"), "node_args");
    assert_eq!(canonical("exec"), "script");
    assert_eq!(canonical("env_production"), "env_production");
}

#[test]
fn huge_numbers_do_not_overflow() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "instances": i64::MIN}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(draft.fields["instances"], json!("max"));
    let draft = one(
        json!({"name": "a", "script": "a.js", "max_restarts": 1e18, "min_uptime": 100000}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(draft.fields["max_restarts"]["count"], json!(u32::MAX));
    assert_eq!(draft.fields["max_restarts"]["within"], json!("8760h"));
}

/// Every app option of pm2 7's `lib/API/schema.json` (the documented
/// ones), with a value that is not pm2's default, and what becomes of it.
const PM2_OPTIONS: &[(&str, &str, Outcome)] = &[
    ("name_prefix", r#""x""#, Outcome::LeftOut),
    ("filter_env", "true", Outcome::LeftOut),
    ("namespace", r#""ns""#, Outcome::LeftOut),
    ("install_url", r#""https://x""#, Outcome::LeftOut),
    ("cwd", r#""sub""#, Outcome::Written),
    ("args", r#""--x""#, Outcome::Written),
    ("exec_interpreter", r#""python3""#, Outcome::Written),
    ("node_args", r#""--inspect""#, Outcome::Written),
    ("out_file", r#""out.log""#, Outcome::Written),
    ("error_file", r#""err.log""#, Outcome::Written),
    ("log_file", r#""all.log""#, Outcome::Written),
    ("log_file", "true", Outcome::LeftOut),
    ("disable_logs", "true", Outcome::Noted),
    ("log_type", r#""json""#, Outcome::LeftOut),
    ("log_date_format", r#""YYYY-MM-DD""#, Outcome::LeftOut),
    // supervise stamps every line with its time.
    ("time", "true", Outcome::Same),
    ("env", r#"{"A": "1"}"#, Outcome::Written),
    ("env_production", r#"{"A": "1"}"#, Outcome::LeftOut),
    ("max_memory_restart", r#""300M""#, Outcome::Written),
    ("max_memory_restart", r#""0""#, Outcome::LeftOut),
    ("pid_file", r#""a.pid""#, Outcome::LeftOut),
    ("restart_delay", "2000", Outcome::Written),
    ("exp_backoff_restart_delay", "100", Outcome::Written),
    ("source_map_support", "false", Outcome::LeftOut),
    ("disable_source_map_support", "true", Outcome::LeftOut),
    ("wait_ready", "true", Outcome::Written),
    ("instances", "4", Outcome::Written),
    ("kill_timeout", "3000", Outcome::Written),
    ("kill_timeout", "0", Outcome::Written),
    ("shutdown_with_message", "true", Outcome::LeftOut),
    ("listen_timeout", "5000", Outcome::LeftOut),
    ("cron_restart", r#""0 3 * * *""#, Outcome::Written),
    ("cron_restart", r#""@reboot""#, Outcome::LeftOut),
    // One file per app, whatever the instances.
    ("merge_logs", "true", Outcome::Same),
    ("vizion", "false", Outcome::LeftOut),
    ("autostart", "false", Outcome::Written),
    ("autorestart", "false", Outcome::Written),
    ("stop_exit_codes", "[0]", Outcome::Written),
    ("watch_delay", "1000", Outcome::LeftOut),
    ("watch", "true", Outcome::LeftOut),
    ("ignore_watch", r#"["node_modules"]"#, Outcome::LeftOut),
    (
        "watch_options",
        r#"{"followSymlinks": false}"#,
        Outcome::LeftOut,
    ),
    ("min_uptime", r#""5s""#, Outcome::Written),
    ("max_restarts", "5", Outcome::Written),
    ("execute_command", "true", Outcome::LeftOut),
    ("exec_mode", r#""cluster""#, Outcome::Noted),
    ("force", "true", Outcome::LeftOut),
    ("append_env_to_name", "true", Outcome::LeftOut),
    ("post_update", r#"["npm install"]"#, Outcome::LeftOut),
    ("trace", "true", Outcome::LeftOut),
    ("disable_trace", "false", Outcome::LeftOut),
    ("v8", "true", Outcome::LeftOut),
    ("event_loop_inspector", "true", Outcome::LeftOut),
    ("deep_monitoring", "true", Outcome::LeftOut),
    // Without `PORT` in `env` there is nothing to raise.
    ("increment_var", r#""PORT""#, Outcome::LeftOut),
    ("instance_var", r#""INSTANCE_ID""#, Outcome::Written),
    ("pmx", "false", Outcome::LeftOut),
    ("automation", "false", Outcome::LeftOut),
    // supervise signals every process of an instance.
    ("treekill", "true", Outcome::Same),
    ("treekill", "false", Outcome::LeftOut),
    ("port", "3000", Outcome::Written),
    ("username", r#""nobody""#, Outcome::Written),
    ("uid", r#""nobody""#, Outcome::Written),
    ("gid", r#""nogroup""#, Outcome::Written),
    ("windowsHide", "false", Outcome::LeftOut),
    ("kill_retry_time", "100", Outcome::LeftOut),
    ("write", "true", Outcome::LeftOut),
    ("io", r#"{"url": "x"}"#, Outcome::LeftOut),
];

#[test]
fn every_documented_pm2_option_is_mapped_or_left_out_with_a_note_at_its_line() {
    let files = [("/srv/app/a.js", FileKind::Text)];
    let base = one(json!({"name": "a", "script": "a.js"}), &files);
    for (key, value, expected) in PM2_OPTIONS {
        let value: Value = serde_json::from_str(value).expect("a JSON value");
        // `app` puts the key on line 4, after `name` and `script`.
        let mut app = json!({"name": "a", "script": "a.js"});
        app[*key] = value.clone();
        let draft = one(app, &files);
        let key = canonical(key);
        let noted = draft.notes.iter().any(|n| n.line == Some(4));
        let mapped = draft.mapped.contains(&key);
        let left_out = draft.left_out.contains(&key);
        // A pm2 key is mapped or left out, never both.
        let outcome = Outcome::of(mapped, left_out, draft.fields != base.fields, noted)
            .filter(|_| !(mapped && left_out))
            .unwrap_or_else(|| {
                panic!(
                    "`{key}: {value}`: mapped {mapped}, left out {left_out}, noted {noted}: {draft:#?}"
                )
            });
        assert_eq!(outcome, *expected, "`{key}: {value}`: {draft:#?}");
    }
    // The list is pm2's own, when the pm2 the tests install is there.
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/tools/pm2/node_modules/pm2/lib/API/schema.json");
    match std::fs::read_to_string(&schema) {
        Ok(text) => {
            let schema: Value = serde_json::from_str(&text).expect("pm2's schema is JSON");
            for key in schema.as_object().expect("a mapping").keys() {
                let listed = ["script", "name", "^env_\\S*$"].contains(&key.as_str())
                    || PM2_OPTIONS.iter().any(|(k, _, _)| k == key);
                assert!(listed, "pm2's `{key}` is not in PM2_OPTIONS");
            }
        }
        Err(_) => eprintln!(
            "pm2 is not installed in target/tools: PM2_OPTIONS not compared with its schema"
        ),
    }
}
