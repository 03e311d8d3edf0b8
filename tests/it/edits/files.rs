//! What is at the file's path: a FIFO for the file (refused by `check` and
//! `run`, or renamed over the running file), and a file made unreadable.

use super::*;

// ---------------------------------------------------------------- 1. a FIFO

#[test]
fn case1ab_a_fifo_for_the_file_is_refused_at_once_by_check_and_run() {
    let mut findings = Findings::default();
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_dir(dir.path());
    mkfifo(&dir.path().join("ecosystem.yaml"));
    let command = |args: &[&str]| {
        let mut command = Command::new(binary());
        command
            .current_dir(dir.path())
            .env("XDG_RUNTIME_DIR", &runtime)
            .args(args);
        command
    };
    // Nothing ever writes to the FIFO: a blocking open would hang for good.
    let check = run_bounded(&mut command(&["check", "-f", "ecosystem.yaml"]), SECOND);
    findings.check(check.code() == Some(2), || {
        format!(
            "(a) check -f FIFO: expected exit 2 within 1 s; {}",
            check.describe()
        )
    });
    findings.check(
        check.stderr.contains("FIFO") && check.stderr.contains("not a regular file"),
        || {
            format!(
                "(a) check -f FIFO: the message does not say FIFO / not a regular file; {}",
                check.describe()
            )
        },
    );
    let run = run_bounded(
        &mut command(&["--log-format", "json", "-f", "ecosystem.yaml"]),
        SECOND,
    );
    findings.check(run.code() == Some(2), || {
        format!(
            "(b) run -f FIFO: expected exit 2 within 1 s; {}",
            run.describe()
        )
    });
    findings.check(run.stderr.contains("FIFO"), || {
        format!(
            "(b) run -f FIFO: the message does not say FIFO; {}",
            run.describe()
        )
    });
    findings.finish(None);
}

#[test]
fn case1c_a_fifo_renamed_over_the_running_file_stalls_nothing() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(1, ""));
    let first = s.wait_event("spawned", "web");
    let pid = first["pid"].as_i64().unwrap() as i32;

    let fifo = s.path("ecosystem.fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, s.path("ecosystem.yaml")).unwrap();
    let refused = find(&mut s, WAIT, |e| e["event"] == "config_invalid");
    findings.check(refused.is_some(), || {
        "no `config_invalid` event within 20 s of the FIFO replacing the file".into()
    });
    if let Some(refused) = &refused {
        findings.check(
            refused["message"]
                .as_str()
                .is_some_and(|m| m.contains("FIFO")),
            || format!("the config_invalid event does not mention the FIFO: {refused}"),
        );
    }

    // Found through the file's path (now the FIFO's), and through --socket.
    let socket = std::fs::read_dir(runtime_dir(s.dir.path()).join("supervise"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the control socket exists")
        .display()
        .to_string();
    for (how, extra) in [
        ("-f ecosystem.yaml", ["-f", "ecosystem.yaml"]),
        ("--socket", ["--socket", socket.as_str()]),
    ] {
        let (outcome, json) = status_json(&s, &extra, SECOND);
        findings.check(json.is_some(), || {
            format!(
                "status --json {how} did not answer within 1 s; {}",
                outcome.describe()
            )
        });
        if let Some(json) = json {
            findings.check(
                json["config_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("FIFO")),
                || {
                    format!(
                        "status --json {how}: config_error does not mention the FIFO: {}",
                        json["config_error"]
                    )
                },
            );
        }
    }

    kill(pid, libc::SIGKILL);
    let again = find(&mut s, WAIT, |e| {
        e["event"] == "spawned" && e["app"] == "web" && e["pid"].as_i64() != Some(pid as i64)
    });
    findings.check(again.is_some(), || {
        format!("worker {pid} SIGKILLed while the file is a FIFO: no new `spawned` within 20 s")
    });

    terminate(&mut s, Duration::from_secs(5), &mut findings);
    findings.finish(Some(&s));
}

// ------------------------------------------------ 5. an unreadable file

#[test]
fn case5_an_unreadable_file_is_reported_and_the_fix_applies() {
    let mut findings = Findings::default();
    // As root, mode bits do not stop reads: run the supervisor as nobody.
    let wrapper: &[&str] = if is_root() {
        let has_setpriv = Command::new("setpriv")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_setpriv {
            println!(
                "skipped: running as root and `setpriv` is missing (needed to drop to nobody)"
            );
            return;
        }
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]
    } else {
        &[]
    };
    let as_nobody = !wrapper.is_empty();
    let mut s = Supervised::start_wrapped(&sleeper(1, ""), wrapper, &[], |dir| {
        if as_nobody {
            // The temp dir, the file and the runtime dir must be nobody's.
            let runtime = runtime_dir(dir);
            for path in [dir.to_path_buf(), dir.join("ecosystem.yaml"), runtime] {
                std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            }
        }
    });
    s.wait_event("spawned", "web");
    if as_nobody {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
        assert!(
            uid.contains("65534"),
            "the supervisor runs as nobody: {uid}"
        );
    }
    let file = s.path("ecosystem.yaml");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    let refused = find(&mut s, WAIT, |e| e["event"] == "config_invalid");
    findings.check(refused.is_some(), || {
        "no `config_invalid` event within 20 s of `chmod 000`".into()
    });
    let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| j["config_error"].is_string()),
        || {
            format!(
                "status --json after chmod 000: config_error is not set; {}",
                outcome.describe()
            )
        },
    );

    // The fix: new content, still mode 000 (renamed over, so the supervisor
    // cannot read a half-done version in between), then `chmod 644`.
    let temp = s.path(".fixed.tmp");
    std::fs::write(&temp, sleeper(2, "")).unwrap();
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::rename(&temp, &file).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let applied = find(&mut s, WAIT, |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    findings.check(applied.is_some(), || {
        "after chmod 644 with instances 2: no `applied` with file_version 2 within 20 s".into()
    });
    let settled = s.until(WAIT, |s| s.running_pids("web").len() == 2);
    findings.check(settled, || "2 instances never ran after the fix".into());
    let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| {
            j["config_error"].is_null() && app_of(j, "web").is_some_and(|a| a["instances"] == 2)
        }),
        || {
            format!(
                "status --json after the fix: expected config_error null and 2 instances; {}",
                outcome.describe()
            )
        },
    );
    findings.finish(Some(&s));
}
