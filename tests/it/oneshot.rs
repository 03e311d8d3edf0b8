//! One-shot tasks: a command that runs to its end is `completed`, counts as
//! done for "every instance is ready", and runs again only when its
//! definition changes.

use crate::common::{Supervised, save};

/// The status table.
fn status(s: &Supervised) -> String {
    String::from_utf8_lossy(&crate::common::run_client(s, &["status"]).stdout).into_owned()
}

fn file(migration: &str, kill_timeout: &str) -> String {
    format!(
        r#"
apps:
  migrate:
    command: echo {migration}
    restart: never
    ready: none
    kill_timeout: {kill_timeout}
  web:
    command: sleep 1000
    ready: none
"#
    )
}

#[test]
fn a_one_shot_completes_counts_as_done_and_runs_again_only_for_a_new_definition() {
    let mut s = Supervised::start(&file("migrated", "10s"));
    s.wait_line("migrated");
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    let json = crate::common::status_json(&s);
    let migrate = crate::common::app_status(&json, "migrate");
    assert_eq!(migrate["workers"][0]["state"], "completed", "{json}");
    assert!(
        migrate["workers"][0]["completed_s"].as_f64().is_some(),
        "{json}"
    );
    assert!(status(&s).contains("completed (exit 0,"), "{}", status(&s));
    // A policy edit does not run it again…
    save(&s, &file("migrated", "5s"));
    s.wait_for("the policy edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    // Whatever the edit started, it started in the turn it was applied in,
    // before the barrier's.
    s.barrier();
    assert_eq!(s.count("spawned", "migrate"), 1, "{}", s.dump());
    // …a new definition does.
    save(&s, &file("migrated-again", "5s"));
    s.wait_line("migrated-again");
    assert_eq!(s.count("spawned", "migrate"), 2);
    // `reload` runs it once more, and returns once it has completed.
    let reload = crate::common::run_client(&s, &["reload", "migrate"]);
    assert!(
        reload.status.success(),
        "{}{}",
        String::from_utf8_lossy(&reload.stdout),
        String::from_utf8_lossy(&reload.stderr)
    );
    assert!(
        String::from_utf8_lossy(&reload.stdout).contains("1/1 replaced"),
        "{}",
        String::from_utf8_lossy(&reload.stdout)
    );
    s.wait_count("spawned", "migrate", 3);
    s.wait_count("exited", "migrate", 3);
    // `scale` of a one-shot returns once the new instance has run.
    let scale = crate::common::run_client(&s, &["scale", "migrate", "2", "--timeout", "10s"]);
    assert!(
        scale.status.success(),
        "{}{}",
        String::from_utf8_lossy(&scale.stdout),
        String::from_utf8_lossy(&scale.stderr)
    );
}
