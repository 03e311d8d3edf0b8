//! The everyday commands: `status` and `ls` match the processes, `reload`,
//! `restart`, `stop`, `start` and `logs` do what they say.

use super::*;

#[test]
fn status_matches_the_processes() {
    let s = started(APPS);
    let json = status(&s);
    assert_eq!(json["version"], 1);
    for app in ["web", "api"] {
        let pids = pids_of(&json, app);
        assert_eq!(pids.len(), if app == "web" { 2 } else { 1 });
        for pid in pids {
            let stat =
                std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the pid is alive");
            assert!(stat.contains("(sleep)"), "{stat}");
            assert_eq!(
                crate::common::process_state(pid as i32).map(|c| c != 'Z'),
                Some(true)
            );
        }
    }
    let worker = &json["apps"][0]["workers"][0];
    assert_eq!(worker["state"], "ready");
    assert!(worker["rss_bytes"].as_u64().unwrap() > 0);
    let table = stdout(&client(&s, &["ls"]));
    assert!(table.contains("app") && table.contains("memory"), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.trim_start().starts_with("web"))
            .count(),
        2,
        "{table}"
    );
}

#[test]
fn reload_replaces_every_pid_of_the_app_and_no_other() {
    let s = started(APPS);
    let before = status(&s);
    let output = client(&s, &["reload", "web"]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).contains("web: 2/2 replaced"),
        "{}",
        stdout(&output)
    );
    let after = status(&s);
    let (old, new) = (pids_of(&before, "web"), pids_of(&after, "web"));
    assert_eq!(new.len(), 2);
    assert!(new.iter().all(|p| !old.contains(p)), "{old:?} → {new:?}");
    assert_eq!(pids_of(&before, "api"), pids_of(&after, "api"));
}

#[test]
fn a_halted_reload_exits_4() {
    let mut s = started(APPS);
    // Make replacements fail: the file changes the command, the rollout halts,
    // and a reload of the halted app halts again.
    let broken = APPS.replace(
        "command: [sh, -c, \"echo hello from $SUPERVISE_INSTANCE; exec sleep 1000\"]",
        "command: [sh, -c, \"exit 1\"]\n    ready: {delay: 500ms}",
    );
    let temp = s.path(".tmp");
    std::fs::write(&temp, broken.replace("    ready: none\n  api", "  api")).unwrap();
    std::fs::rename(&temp, s.path("ecosystem.yaml")).unwrap();
    s.wait_for("the halt", |e| e["event"] == "rollout_halted");
    let output = client(&s, &["reload", "web"]);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
}

#[test]
fn restart_stop_and_start() {
    let mut s = started(APPS);
    let before = pids_of(&status(&s), "web");
    assert!(client(&s, &["restart", "web.1"]).status.success());
    s.wait_count("spawned", "web", 3);
    let after = pids_of(&status(&s), "web");
    assert!(
        after.contains(&before[0]) && !after.contains(&before[1]),
        "{before:?} → {after:?}"
    );

    assert!(client(&s, &["stop", "web"]).status.success());
    s.wait_count("stopped", "web", 3);
    let held = status(&s);
    let states: Vec<&str> = held["apps"][0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["stopped (held)", "stopped (held)"]);
    assert!(stdout(&client(&s, &["status"])).contains("stopped (held)"));
    // Held, not waiting out a backoff (status says so): nothing was or is
    // to be started, by anything the supervisor did before the barrier.
    s.barrier();
    assert_eq!(s.count("spawned", "web"), 3, "held\n{}", s.dump());

    assert!(client(&s, &["start", "web.0"]).status.success());
    s.wait_count("spawned", "web", 4);
    assert_eq!(pids_of(&status(&s), "web").len(), 1);
    let unknown = client(&s, &["stop", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no app `nope`"));
}

#[test]
fn logs_return_what_the_workers_printed() {
    let s = started(APPS);
    let output = client(&s, &["logs", "web", "-n", "5"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    assert!(
        text.contains("web.0 | hello from 0") && text.contains("web.1 | hello from 1"),
        "{text}"
    );
    let one = stdout(&client(&s, &["logs", "web.1"]));
    assert_eq!(one, "web.1 | hello from 1\n");
}
