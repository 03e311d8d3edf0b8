//! Commands at bad moments and with odd names, as a hostile user tried them
//! (issue 28): `stop` during a rollout, `reload` of an app with a held
//! instance, `logs` of an app or instance that does not exist. Each is a
//! problem that round found, kept so that it stays fixed.

use std::time::Duration;

use crate::common::{Supervised, app_status, run_client, status_json};

/// Four instances ready 300 ms after their start, replaced one at a time.
const FOUR: &str = r#"
apps:
  web:
    command: [sleep, "1000"]
    instances: 4
    ready: {delay: 300ms}
"#;

fn started(yaml: &str, app: &str, instances: usize) -> Supervised {
    let mut s = Supervised::start(yaml);
    s.wait_count("ready", app, instances);
    s
}

/// States of `app`'s instances in `status --json`, by slot.
fn states(s: &Supervised, app: &str) -> Vec<(u64, String)> {
    let status = status_json(s);
    app_status(&status, app)["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            (
                w["slot"].as_u64().unwrap_or(u64::MAX),
                w["state"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// `stop web` while a `reload` replaces the first instance: the slots the
/// rollout had not reached started again 2 ms after their "held until
/// `supervise start`" line, and two processes ran.
#[test]
fn stop_during_a_rollout_holds_every_instance() {
    let mut s = started(FOUR, "web", 4);
    // The reload client waits for the rollout; the rollout's first
    // replacement is what matters.
    let mut reloading = std::process::Command::new(crate::common::binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", crate::common::runtime_dir(s.dir.path()))
        .args(["reload", "web", "--file", "ecosystem.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the reload client runs");
    s.wait_for("the first replacement", |e| {
        e["event"] == "spawned" && e["app"] == "web" && e["generation"] == 2
    });
    let stop = run_client(&s, &["stop", "web"]);
    assert!(stop.status.success(), "{stop:?}");
    assert!(
        String::from_utf8_lossy(&stop.stdout).contains("stop (held) 4 instances"),
        "{stop:?}"
    );
    let again = s.next_within(Duration::from_secs(3), |e| {
        e["event"] == "spawned" && e["app"] == "web"
    });
    assert!(
        again.is_none(),
        "a held instance started again: {again:?}\n{}",
        s.dump()
    );
    assert!(
        states(&s, "web")
            .iter()
            .all(|(_, state)| state == "stopped (held)"),
        "{:?}",
        states(&s, "web")
    );
    // The rollout is complete without the held instances: the client ends.
    let ended = crate::common::eventually(Duration::from_secs(10), || {
        reloading.try_wait().ok().flatten().is_some()
    });
    if !ended {
        let _ = reloading.kill();
    }
    let _ = reloading.wait();
    assert!(ended, "`reload` waits for instances `stop` holds");
}

/// `stop web.3`, then `reload web` and `restart web`: web.3 stays held,
/// the rest are replaced and restarted, and `restart web.3` is refused.
#[test]
fn reload_and_restart_pass_an_instance_stop_holds_by() {
    let mut s = started(FOUR, "web", 4);
    let stop = run_client(&s, &["stop", "web.3"]);
    assert!(stop.status.success(), "{stop:?}");
    s.wait_count("stopped", "web", 1);
    let reload = run_client(&s, &["reload", "web"]);
    assert!(reload.status.success(), "{reload:?}");
    assert!(
        String::from_utf8_lossy(&reload.stdout).contains("1 held"),
        "{reload:?}"
    );
    let restart = run_client(&s, &["restart", "web"]);
    assert!(restart.status.success(), "{restart:?}");
    assert!(
        String::from_utf8_lossy(&restart.stdout).contains("web.3 is held"),
        "{restart:?}"
    );
    let one = run_client(&s, &["restart", "web.3"]);
    assert_eq!(one.status.code(), Some(1), "{one:?}");
    assert!(
        String::from_utf8_lossy(&one.stderr).contains("supervise start web.3"),
        "{one:?}"
    );
    let started = s.next_within(Duration::from_secs(2), |e| {
        e["event"] == "spawned" && e["app"] == "web" && e["slot"] == 3
    });
    assert!(
        started.is_none(),
        "web.3 started: {started:?}\n{}",
        s.dump()
    );
    assert_eq!(
        states(&s, "web")
            .last()
            .map(|(slot, state)| (*slot, state.as_str())),
        Some((3, "stopped (held)"))
    );
    let start = run_client(&s, &["start", "web.3"]);
    assert!(start.status.success(), "{start:?}");
    s.wait_for("web.3 again", |e| {
        e["event"] == "ready" && e["app"] == "web" && e["slot"] == 3
    });
}

/// `logs nope`, `logs web.5` (of two) and `logs nope -f` exited 0 with no
/// output (the follow waited for ever), where every other command says
/// "no app `nope`" and exits 1.
#[test]
fn logs_of_an_app_or_instance_that_does_not_exist_is_refused() {
    let yaml = r#"
apps:
  web:
    command: [sh, -c, "echo hello from $SUPERVISE_INSTANCE; exec sleep 1000"]
    instances: 2
    ready: none
"#;
    let mut s = started(yaml, "web", 2);
    s.wait_line("hello from 1");
    for (args, error) in [
        (vec!["logs", "nope"], "no app `nope`"),
        (vec!["logs", "nope", "-f"], "no app `nope`"),
        (
            vec!["logs", "web.5"],
            "web has 2 instances; there is no web.5",
        ),
        (
            vec!["logs", "web.2", "-f"],
            "web has 2 instances; there is no web.2",
        ),
    ] {
        let output = crate::common::run_client(&s, &args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(error), "{args:?}: {stderr}");
    }
    let one = run_client(&s, &["logs", "web.1"]);
    assert!(one.status.success(), "{one:?}");
    assert_eq!(
        String::from_utf8_lossy(&one.stdout),
        "web.1 | hello from 1\n"
    );
    // An app added by an edit can be named at once; one removed cannot.
    crate::common::save(
        &s,
        &yaml.replace(
            "apps:\n",
            "apps:\n  api:\n    command: [sleep, \"1000\"]\n    ready: none\n",
        ),
    );
    s.wait_event("ready", "api");
    let api = run_client(&s, &["logs", "api"]);
    assert!(api.status.success(), "{api:?}");
    crate::common::save(&s, &yaml.replace("web:", "www:"));
    s.wait_event("ready", "www");
    let gone = run_client(&s, &["logs", "web"]);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
}
