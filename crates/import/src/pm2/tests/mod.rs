//! pm2 files translated, against a machine whose files are listed.
//!
//! Here: the helpers, and the three tests that check a note's severity: they
//! name the crate's `Severity` as `super::super::Severity`, a path that leads
//! there from this module only. The others are in submodules by topic.

use std::collections::HashMap;
use std::path::PathBuf;

use super::*;
use crate::outcome::Outcome;
use model::spec::defaults::MAX_INSTANCES;

mod command;
mod options;
mod source;

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
