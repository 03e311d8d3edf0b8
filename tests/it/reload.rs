//! Live reconciliation: edit the file, the running system follows; a broken
//! edit changes nothing. Real files saved the ways editors and tools save them.

use std::path::Path;

use crate::common::*;
use effects::watch::DEBOUNCE_MAX;

/// A worker that reports the signal it was stopped with.
fn app(instances: u32, extra: &str) -> String {
    format!(
        r#"apps:
  web:
    command: [sh, -c, "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.05; done"]
    instances: {instances}
    ready: none
    kill_timeout: 5s
{extra}"#
    )
}

/// Save by writing a temp file and renaming it over (vim, sed -i, IDEs).
fn save(dir: &Path, text: &str) {
    let temp = dir.join(".ecosystem.yaml.tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, dir.join("ecosystem.yaml")).unwrap();
}

/// Wait for the next `applied` event (version > the last one seen).
fn wait_applied(s: &mut Supervised) -> serde_json::Value {
    s.wait_for("an apply", |e| {
        e["event"] == "applied" && e["file_version"].as_u64() > Some(1)
    })
}

fn alive(pids: &[i32]) -> bool {
    pids.iter().all(|p| !is_gone(*p))
}

#[test]
fn scaling_by_editing_the_file() {
    let mut s = Supervised::start(&app(1, ""));
    s.wait_count("spawned", "web", 1);
    for target in [4usize, 2, 0, 3] {
        save(s.dir.path(), &app(target as u32, ""));
        wait_applied(&mut s);
        let settled = s.until(WAIT, |s| s.running_pids("web").len() == target);
        assert!(settled, "expected {target} workers\n{}", s.dump());
        let pids = s.running_pids("web");
        assert!(alive(&pids), "{pids:?}");
    }
    let got_term = |s: &Supervised| {
        s.events
            .iter()
            .filter(|e| e["event"] == "output" && e["line"] == "got TERM")
            .count()
    };
    let all_got_term = s.until(WAIT, |s| got_term(s) == s.count("stopped", "web"));
    assert!(
        all_got_term,
        "every stopped worker was stopped with SIGTERM\n{}",
        s.dump()
    );
    assert_eq!(
        s.count("stopped", "web"),
        4,
        "4 → 2 stopped two, 2 → 0 two more"
    );
}

#[test]
fn every_way_of_saving_applies_exactly_once() {
    let mut s = Supervised::start(&app(1, ""));
    s.wait_count("spawned", "web", 1);
    let dir = s.dir.path().to_path_buf();
    let file = dir.join("ecosystem.yaml");
    type Save = Box<dyn Fn(&Path, &str)>;
    let methods: Vec<(&str, Save)> = vec![
        (
            "write in place",
            Box::new(|f: &Path, t: &str| {
                use std::io::{Seek, Write};
                let mut file = std::fs::OpenOptions::new().write(true).open(f).unwrap();
                file.set_len(0).unwrap();
                file.rewind().unwrap();
                file.write_all(t.as_bytes()).unwrap();
            }),
        ),
        (
            "truncate and write (>)",
            Box::new(|f: &Path, t: &str| {
                let status = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!("cat > '{}' <<'EOF'\n{t}EOF", f.display()))
                    .status()
                    .unwrap();
                assert!(status.success());
            }),
        ),
        (
            "rename over",
            Box::new(|f: &Path, t: &str| save(f.parent().unwrap(), t)),
        ),
        (
            "cp over",
            Box::new(|f: &Path, t: &str| {
                let source = f.with_file_name("copy-source.yaml");
                std::fs::write(&source, t).unwrap();
                assert!(
                    std::process::Command::new("cp")
                        .arg(&source)
                        .arg(f)
                        .status()
                        .unwrap()
                        .success()
                );
            }),
        ),
        (
            "delete and recreate",
            Box::new(|f: &Path, t: &str| {
                std::fs::remove_file(f).unwrap();
                std::fs::write(f, t).unwrap();
            }),
        ),
    ];
    for (index, (name, method)) in methods.iter().enumerate() {
        let instances = index as u32 + 2;
        method(&file, &app(instances, ""));
        let applied = wait_applied(&mut s);
        let plan = s.wait_for(name, |e| e["event"] == "plan" && e["app"] == "web");
        assert!(
            plan["message"]
                .as_str()
                .unwrap()
                .contains(&format!("→ {instances}")),
            "{name}: {plan}"
        );
        // A second apply of one save would come within the watcher's
        // debounce (x3).
        let again = s.next_within(DEBOUNCE_MAX * 3, |e| e["event"] == "applied");
        assert!(
            again.is_none(),
            "{name} applied twice: {applied} then {again:?}"
        );
    }
    // The same content saved again changes nothing.
    save(&dir, &app(6, ""));
    assert!(
        s.next_within(DEBOUNCE_MAX * 3, |e| e["event"] == "applied")
            .is_none()
    );
}

#[test]
fn a_symlink_swap_like_a_kubernetes_configmap_applies() {
    let mut s = Supervised::start_with("", &[], |dir| {
        std::fs::create_dir(dir.join("..v1")).unwrap();
        std::fs::write(dir.join("..v1/ecosystem.yaml"), app(1, "")).unwrap();
        std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
        std::fs::remove_file(dir.join("ecosystem.yaml")).unwrap();
        std::os::unix::fs::symlink("..data/ecosystem.yaml", dir.join("ecosystem.yaml")).unwrap();
    });
    s.wait_count("spawned", "web", 1);
    for (version, instances) in [(2, 3u32), (3, 2)] {
        let dir = s.dir.path();
        let data = dir.join(format!("..v{version}"));
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("ecosystem.yaml"), app(instances, "")).unwrap();
        std::os::unix::fs::symlink(format!("..v{version}"), dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        wait_applied(&mut s);
        s.wait_for("the scale", |e| {
            e["event"] == "plan"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("→ {instances}")))
        });
    }
}

#[test]
fn broken_edits_change_nothing_and_the_fix_applies() {
    let mut s = Supervised::start(&app(2, ""));
    s.wait_count("spawned", "web", 2);
    let pids = s.running_pids("web");
    let broken = [
        "apps:\n  web: [unclosed\n".to_string(),
        app(2, "    instnces: 3\n"),
        app(2, "    kill_timeout: soon\n"),
    ];
    for text in &broken {
        save(s.dir.path(), text);
        let error = s.wait_for("the refusal", |e| e["event"] == "config_invalid");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("still running the last good version")
        );
    }
    assert_eq!(s.running_pids("web"), pids);
    assert!(alive(&pids));
    assert_eq!(s.count("spawned", "web"), 2, "nothing restarted");
    save(s.dir.path(), &app(3, ""));
    wait_applied(&mut s);
    s.wait_count("spawned", "web", 3);
    let now = s.running_pids("web");
    assert!(
        pids.iter().all(|p| now.contains(p)),
        "the fix scaled up without restarting"
    );
}

#[test]
fn policy_changes_restart_nothing_and_env_changes_replace_only_that_app() {
    let two_apps = |kill: &str, env: &str| {
        format!(
            r#"apps:
  web:
    command: [sleep, "1000"]
    instances: 2
    ready: none
    kill_timeout: {kill}
    env: {{MODE: {env}}}
  other:
    command: [sleep, "1000"]
    ready: none
"#
        )
    };
    let mut s = Supervised::start(&two_apps("10s", "a"));
    s.wait_count("spawned", "web", 2);
    s.wait_count("spawned", "other", 1);
    let web = s.running_pids("web");
    let other = s.running_pids("other");

    save(s.dir.path(), &two_apps("3s", "a"));
    wait_applied(&mut s);
    let plan = s.wait_for("the plan", |e| e["event"] == "plan");
    assert!(
        plan["message"]
            .as_str()
            .unwrap()
            .contains("nothing restarted"),
        "{plan}"
    );
    assert_eq!(s.running_pids("web"), web);

    save(s.dir.path(), &two_apps("3s", "b"));
    s.wait_for("the env plan", |e| {
        e["event"] == "plan"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("env changed"))
    });
    s.wait_count("stopped", "web", 2);
    let replaced = s.running_pids("web");
    assert_eq!(replaced.len(), 2);
    assert!(
        replaced.iter().all(|p| !web.contains(p)),
        "every web instance replaced"
    );
    assert_eq!(s.running_pids("other"), other, "the other app untouched");
    assert_eq!(s.count("spawned", "other"), 1);
}

#[test]
fn a_removed_app_in_backoff_is_not_respawned() {
    let mut s = Supervised::start(
        r#"apps:
  crashy:
    command: [sh, -c, "exit 1"]
    backoff: {initial: 2s, factor: 1}
  keeper:
    command: [sleep, "1000"]
    ready: none
"#,
    );
    let crash = s.wait_for("the first crash", |e| {
        e["event"] == "exited" && e["app"] == "crashy"
    });
    save(
        s.dir.path(),
        "apps:\n  keeper:\n    command: [sleep, \"1000\"]\n    ready: none\n",
    );
    wait_applied(&mut s);
    // The restart the removal cancelled was due 2 s after the crash: once
    // that moment has passed (and 100 ms), every turn before the barrier's
    // has run.
    let due = crate::common::timestamp_ms(&crash)
        + crash["delay_ms"].as_f64().expect("the restart's delay")
        + 100.0;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
            * 1000.0
    };
    assert!(crate::common::eventually(WAIT, || now() >= due));
    s.barrier();
    assert_eq!(s.count("spawned", "crashy"), 1, "{}", s.dump());
}

#[test]
fn an_added_app_is_started_and_a_bind_failure_skips_only_that_app() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut s = Supervised::start(&app(1, ""));
    s.wait_count("spawned", "web", 1);
    let with_apps = format!(
        "{}  added:\n    command: [sleep, \"1000\"]\n    ready: none\n  blocked:\n    command: [sleep, \"1000\"]\n    listen: 127.0.0.1:{port}\n",
        app(1, "")
    );
    save(s.dir.path(), &with_apps);
    let failed = s.wait_for("the bind failure", |e| e["event"] == "bind_failed");
    assert_eq!(failed["app"], "blocked");
    s.wait_count("spawned", "added", 1);
    assert_eq!(s.count("spawned", "blocked"), 0);
    drop(taken);
}

#[test]
fn sighup_rereads_env_files() {
    let mut s = Supervised::start_with(
        "apps:\n  web:\n    command: [sh, -c, \"echo mode=$MODE; exec sleep 1000\"]\n    env_file: app.env\n    ready: none\n",
        &[],
        |dir| std::fs::write(dir.join("app.env"), "MODE=one\n").unwrap(),
    );
    s.wait_line("mode=one");
    std::fs::write(s.path("app.env"), "MODE=two\n").unwrap();
    s.signal(libc::SIGHUP);
    s.wait_line("mode=two");
}

#[test]
fn check_diff_prints_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("old.yaml"),
        "apps:\n  web:\n    command: sleep 1\n    instances: 2\n  api:\n    command: sleep 1\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("new.yaml"),
        "apps:\n  web:\n    command: sleep 1\n    instances: 4\n  api:\n    command: sleep 2\n    kill_timeout: 1s\n",
    )
    .unwrap();
    let output = std::process::Command::new(binary())
        .current_dir(dir.path())
        .args(["check", "-f", "new.yaml", "--diff", "--against", "old.yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "plan from old.yaml to new.yaml:\n  web: instances 2 → 4 (+2)\n  api: command changed; rolling replace of 1 instance; kill_timeout changed (applies to running instances)\n"
    );
}

/// The inode of the socket listening on 127.0.0.1:`port`, from /proc/net/tcp.
fn listening_inode(port: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
            .then(|| fields[9].to_string())
    })
}

#[test]
fn renaming_an_app_or_moving_its_address_keeps_the_socket() {
    let port = free_port();
    let named = |name: &str| {
        format!(
            "apps:\n  {name}:\n    command: [sleep, \"1000\"]\n    listen: 127.0.0.1:{port}\n    ready: none\n"
        )
    };
    let mut s = Supervised::start(&named("first"));
    s.wait_count("spawned", "first", 1);
    let inode = listening_inode(port).expect("listening");
    save(s.dir.path(), &named("second"));
    wait_applied(&mut s);
    s.wait_count("spawned", "second", 1);
    s.wait_count("stopped", "first", 1);
    assert_eq!(
        listening_inode(port),
        Some(inode),
        "the same socket, never rebound"
    );
    assert!(
        s.events.iter().all(|e| e["event"] != "unlistening"),
        "{}",
        s.dump()
    );
}

#[test]
fn a_new_address_is_bound_before_the_old_one_closes() {
    let (old, new) = (free_port(), free_port());
    let listen = |port: u16| {
        format!(
            "apps:\n  web:\n    command: [sleep, \"1000\"]\n    listen: 127.0.0.1:{port}\n    ready: none\n"
        )
    };
    let mut s = Supervised::start(&listen(old));
    s.wait_count("spawned", "web", 1);
    save(s.dir.path(), &listen(new));
    wait_applied(&mut s);
    let closed = s.wait_for("the old socket closing", |e| e["event"] == "unlistening");
    assert_eq!(closed["address"], format!("127.0.0.1:{old}"));
    let opened = s
        .events
        .iter()
        .position(|e| e["event"] == "listening" && e["address"] == format!("127.0.0.1:{new}"));
    let closed_at = s
        .events
        .iter()
        .position(|e| e["event"] == "unlistening")
        .unwrap();
    assert!(opened.is_some_and(|o| o < closed_at), "{}", s.dump());
    assert!(listening_inode(new).is_some());
    assert!(listening_inode(old).is_none());
}
