use std::collections::HashMap;
use std::path::PathBuf;

use super::*;
use crate::outcome::Outcome;
use model::spec::defaults::MAX_INSTANCES;

/// A machine whose files are listed: path → kind, and programs on the PATH.
struct Listed {
    files: HashMap<PathBuf, FileKind>,
    path: Vec<&'static str>,
}

impl Files for Listed {
    fn kind(&self, path: &Path) -> FileKind {
        self.files.get(path).copied().unwrap_or(FileKind::Missing)
    }

    fn which(&self, name: &str) -> Option<PathBuf> {
        self.path
            .contains(&name)
            .then(|| PathBuf::from(format!("/usr/bin/{name}")))
    }
}

fn machine(files: &[(&str, FileKind)]) -> Listed {
    Listed {
        files: files.iter().map(|(p, k)| (PathBuf::from(p), *k)).collect(),
        path: vec!["node", "python3", "bash", "npm"],
    }
}

fn places() -> Places {
    Places {
        source_dir: "/srv/app".into(),
        output_dir: "/srv/app".into(),
    }
}

fn app(value: Value) -> Pm2App {
    let keys = value
        .as_object()
        .expect("an app")
        .iter()
        .enumerate()
        .map(|(i, (k, v))| (canonical(k), Some(i + 2), v.clone()))
        .collect();
    Pm2App {
        line: Some(1),
        keys,
    }
}

fn file(apps: Vec<Pm2App>) -> Pm2File {
    Pm2File {
        apps,
        notes: Vec::new(),
    }
}

fn one(value: Value, files: &[(&str, FileKind)]) -> DraftApp {
    translate(&file(vec![app(value)]), None, &places(), &machine(files))
        .0
        .remove(0)
}

#[test]
fn the_interpreter_follows_the_extension_then_the_file() {
    let text = FileKind::Text;
    let cases = [
        ("server.js", text, json!(["node", "./server.js"])),
        ("tool.py", text, json!(["python3", "./tool.py"])),
        ("run.sh", text, json!(["bash", "./run.sh"])),
        ("start", text, json!(["node", "./start"])),
        ("bin/server", FileKind::Binary, json!(["bin/server"])),
    ];
    for (script, kind, argv) in cases {
        let path = format!("/srv/app/{script}");
        let draft = one(json!({"name": "a", "script": script}), &[(&path, kind)]);
        assert_eq!(draft.fields["command"], argv, "{script}");
    }
}

#[test]
fn a_script_not_in_cwd_is_looked_up_on_the_path() {
    let draft = one(
        json!({"name": "a", "script": "npm", "args": "run start"}),
        &[],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["node", "/usr/bin/npm", "run", "start"]),
        "pm2 runs a text file found on the PATH with node"
    );
    let draft = one(json!({"name": "a", "script": "missing.js"}), &[]);
    assert!(
        draft.notes.iter().any(|n| n.text.contains("would refuse")),
        "{:?}",
        draft.notes
    );
}

#[test]
fn an_explicit_interpreter_and_its_arguments_come_first() {
    let draft = one(
        json!({"name": "a", "script": "app.rb", "interpreter": "ruby", "interpreter_args": "-W0", "args": ["--port", 3000]}),
        &[("/srv/app/app.rb", FileKind::Text)],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["ruby", "-W0", "./app.rb", "--port", "3000"])
    );
    let draft = one(
        json!({"name": "a", "script": "./server", "exec_interpreter": "none"}),
        &[("/srv/app/server", FileKind::Text)],
    );
    assert_eq!(draft.fields["command"], json!(["./server"]));
}

#[test]
fn string_args_split_as_pm2_splits_them() {
    assert_eq!(split_args("a  b"), ["a", "b"]);
    assert_eq!(
        split_args(r#"--name "night shift" 'x y'"#),
        ["--name", "night shift", "x y"]
    );
    assert_eq!(
        split_args("--name='night shift' k=\"v w\""),
        ["--name='night shift'", "k=\"v w\""]
    );
    assert_eq!(split_args("it's"), ["it's"]);
    assert_eq!(split_args(""), Vec::<String>::new());
}

#[test]
fn instances_map_zero_and_negative_counts_to_max() {
    let count = |v: Value| {
        one(
            json!({"name": "a", "script": "a.js", "instances": v}),
            &[("/srv/app/a.js", FileKind::Text)],
        )
    };
    assert_eq!(count(json!(4)).fields["instances"], json!(4));
    assert_eq!(count(json!("4")).fields["instances"], json!(4));
    assert_eq!(count(json!("max")).fields["instances"], json!("max"));
    assert_eq!(
        count(json!(0)).fields["instances"],
        json!("max"),
        "pm2's 0 is every CPU, ours would be stopped"
    );
    let minus = count(json!(-1));
    assert_eq!(minus.fields["instances"], json!("max"));
    assert!(
        minus
            .notes
            .iter()
            .any(|n| n.severity == super::super::Severity::Warning)
    );
}

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
fn lines_of_a_javascript_file_are_found_by_searching_it() {
    let text = "module.exports = {\n  apps: [{\n    name: 'api',\n    script: 'api.js',\n  }, {\n    name: \"web\",\n    script: 'web.js',\n  }],\n};\n";
    let value =
        json!({"apps": [{"name": "api", "script": "api.js"}, {"name": "web", "script": "web.js"}]});
    let apps = apps_from_evaluated(&value, text).expect("apps").apps;
    assert_eq!(apps[0].line, Some(3));
    assert_eq!(apps[0].line_of("script"), Some(4));
    assert_eq!(apps[1].line, Some(6));
    assert_eq!(apps[1].line_of("script"), Some(7));
}

#[test]
fn a_supervise_file_is_not_taken_for_a_pm2_one() {
    let error =
        apps_from_evaluated(&json!({"apps": {"web": {"command": "x"}}}), "").expect_err("refused");
    assert!(error.contains("supervise file"), "{error}");
}

#[test]
fn a_script_with_a_space_is_a_command_line_run_by_bash() {
    let draft = one(
        json!({"script": "python3 -m http.server 8000", "args": "--ignored"}),
        &[],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["bash", "-c", "python3 -m http.server 8000"])
    );
    assert_eq!(
        draft.name, "python3-m-http-server-8000",
        "named after the command line, as pm2 names it"
    );
    assert!(draft.notes.iter().any(|n| n.text.contains("`args`")));
}

#[test]
fn cmd_and_command_stand_for_a_missing_script() {
    let draft = one(json!({"name": "k", "command": "sleep 101"}), &[]);
    assert_eq!(draft.fields["command"], json!(["bash", "-c", "sleep 101"]));
    let draft = one(
        json!({"name": "l", "cmd": "sleep", "args": "102"}),
        &[("/srv/app/sleep", FileKind::Binary)],
    );
    assert_eq!(draft.fields["command"], json!(["./sleep", "102"]));
}

#[test]
fn an_app_without_a_script_and_entries_that_are_not_apps_are_left_out_with_a_warning() {
    let value = json!({"apps": [{"name": "a"}, "server.js", null, {"name": "b", "script": "b.js"}], "deploy": {"production": {}}});
    let pm2 = apps_from_evaluated(&value, "").expect("read");
    let (apps, notes) = translate(
        &pm2,
        None,
        &places(),
        &machine(&[("/srv/app/b.js", FileKind::Text)]),
    );
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].name, "b");
    let texts: Vec<&str> = notes.iter().map(|n| n.text.as_str()).collect();
    assert!(texts.iter().any(|t| t.contains("no `script`")), "{texts:?}");
    assert_eq!(
        texts.iter().filter(|t| t.contains("not an app")).count(),
        2,
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("`deploy`")), "{texts:?}");
    assert!(
        apps_from_evaluated(&json!({}), "").is_err(),
        "an empty export has no apps"
    );
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

#[test]
fn numbers_are_written_as_javascript_writes_them() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "args": [1e3, 1.0, 100, 0.5], "env": {"A": 1e3, "B": 8080.0}}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["node", "./a.js", "1000", "1", "100", "0.5"])
    );
    assert_eq!(draft.fields["env"], json!({"A": "1000", "B": "8080"}));
}

#[test]
fn literal_placeholder_text_and_a_missing_env_are_warned_about() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "args": "--a {instance}", "env": {"BR": "{instance}"}}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(
        draft
            .notes
            .iter()
            .filter(|n| n.text.contains("`{instance`"))
            .count(),
        2,
        "{:?}",
        draft.notes
    );
    let (_, notes) = translate(
        &file(vec![app(json!({"name": "a", "script": "a.js"}))]),
        Some("nope"),
        &places(),
        &machine(&[("/srv/app/a.js", FileKind::Text)]),
    );
    assert!(notes.iter().any(|n| n.text.contains("--env nope") && n.severity == super::super::Severity::Warning));
}

#[test]
fn a_large_javascript_file_is_read_in_one_pass() {
    let mut text = String::from("module.exports = { apps: [\n");
    let mut apps = Vec::new();
    for i in 0..4000 {
        text.push_str(&format!(
            "  {{\n    name: 'app{i}',\n    script: 'a.js',\n    instances: 2,\n  }},\n"
        ));
        apps.push(json!({"name": format!("app{i}"), "script": "a.js", "instances": 2}));
    }
    text.push_str("] };\n");
    let started = std::time::Instant::now();
    let pm2 = apps_from_evaluated(&json!({"apps": apps}), &text).expect("read");
    assert_eq!(pm2.apps[3999].line, Some(3 + 5 * 3999));
    assert_eq!(pm2.apps[3999].line_of("instances"), Some(5 + 5 * 3999));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
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

#[test]
fn values_check_refuses_are_adjusted_or_left_out_with_a_warning() {
    let files = [("/srv/app/a.js", FileKind::Text)];
    let draft = one(
        json!({"name": "a", "script": "a.js", "kill_timeout": 0, "wait_ready": true, "listen_timeout": 0,
               "instances": 5000, "max_memory_restart": "0K",
               "env": {"my-var": "1", "NOTIFY_SOCKET": "x", "BAD": "{instance-x}", "GOOD": "2"}}),
        &files,
    );
    assert_eq!(
        draft.fields["kill_timeout"],
        json!("1600ms"),
        "pm2's default"
    );
    assert_eq!(draft.fields["ready_timeout"], json!("3s"), "pm2's default");
    assert_eq!(draft.fields["instances"], json!(MAX_INSTANCES));
    assert!(!draft.fields.contains_key("max_memory"));
    assert_eq!(draft.fields["env"], json!({"GOOD": "2"}));
    for name in ["`my-var`", "`NOTIFY_SOCKET`", "`BAD`"] {
        assert!(
            draft
                .notes
                .iter()
                .any(|n| n.severity == super::super::Severity::Warning && n.text.contains(name)),
            "{name}: {:#?}",
            draft.notes
        );
    }
    // With a user, supervise sets HOME, USER and LOGNAME itself.
    let draft = one(
        json!({"name": "a", "script": "a.js", "user": "nobody", "env": {"HOME": "/x", "LANG": "C"}}),
        &files,
    );
    assert_eq!(draft.fields["env"], json!({"LANG": "C"}));
    // A nickname `check` reads is kept; one it refuses is not.
    for (cron, kept) in [
        ("@daily", true),
        ("@Hourly", true),
        ("@midnight", false),
        ("0 0 30 2 *", false),
    ] {
        let draft = one(
            json!({"name": "a", "script": "a.js", "cron_restart": cron}),
            &files,
        );
        assert_eq!(draft.fields.contains_key("schedule"), kept, "{cron}");
        assert_eq!(
            draft.left_out.contains(&"cron_restart".to_string()),
            !kept,
            "{cron}"
        );
    }
    let draft = one(
        json!({"name": "a", "script": "a.js", "increment_var": "PORT", "env": {"PORT": "-5"}}),
        &files,
    );
    assert_eq!(draft.fields["env"], json!({"PORT": "-5"}));
    assert!(draft.left_out.contains(&"increment_var".to_string()));
}
