//! While it runs: a deleted `cwd`, edits landing mid-rollout and mid-reload,
//! `scale` below zero, and what clean runs leave in the runtime directory.

use super::*;

// --------------------------------------------------------- 4. a deleted cwd

#[test]
fn case4_a_deleted_cwd_fails_at_chdir_and_never_shows_a_dead_ready_pid() {
    let mut findings = Findings::default();
    let mut s = Supervised::start_with(&sleeper(1, "    cwd: ./work\n"), &[], |dir| {
        std::fs::create_dir(dir.join("work")).unwrap();
    });
    let ready = s.wait_event("ready", "web");
    let pid = ready["pid"].as_i64().unwrap();
    // Linux lets a directory that is a process's cwd be removed.
    let removed = std::fs::remove_dir(s.path("work"));
    findings.check(removed.is_ok(), || {
        format!("rmdir of the running worker's cwd failed: {removed:?}")
    });
    kill(pid as i32, libc::SIGKILL);

    let failed = find(&mut s, WAIT, |e| {
        e["event"] == "start_failed" && e["app"] == "web"
    });
    findings.check(failed.is_some(), || {
        "no `start_failed` within 20 s of killing the worker whose cwd is gone".into()
    });
    if let Some(failed) = &failed {
        let message = failed["message"].as_str().unwrap_or("");
        findings.check(
            failed["stage"] == "chdir" && message.contains("chdir") && !message.contains("exec"),
            || format!("the start_failed event should say chdir (not exec): {failed}"),
        );
    }

    // Over ~1 s, status never shows a ready worker with a pid that is gone.
    let mut last_exit = None;
    let deadline = Instant::now() + SECOND;
    let mut looks = 0;
    while Instant::now() < deadline || looks < 5 {
        looks += 1;
        let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
        let Some(json) = json else {
            findings.check(false, || {
                format!("status --json failed; {}", outcome.describe())
            });
            break;
        };
        for worker in app_of(&json, "web")
            .and_then(|a| a["workers"].as_array())
            .into_iter()
            .flatten()
        {
            if worker["ready"] == true {
                let live = worker["pid"].as_i64().is_some_and(pid_exists);
                findings.check(live, || {
                    format!("status shows a ready worker whose pid is not in /proc: {worker}")
                });
            }
            if let Some(exit) = worker["last_exit"].as_str() {
                last_exit = Some(exit.to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    findings.check(
        last_exit
            .as_deref()
            .is_some_and(|e| e.contains("chdir") && !e.contains("exec")),
        || format!("status last_exit should say chdir (not exec): {last_exit:?}"),
    );

    terminate(&mut s, Duration::from_secs(5), &mut findings);
    findings.finish(Some(&s));
}

// ------------------------------------------- 6. edits during a rollout

#[test]
fn case6_edits_landing_mid_rollout_and_mid_reload_still_finish() {
    let mut findings = Findings::default();
    let version = |value: &str| {
        format!(
            "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: 2\n    ready: {{delay: 1s}}\n    env: {{VERSION: \"{value}\"}}\n"
        )
    };
    // The first instance of `generation` started: a rollout to it is under
    // way (that instance is ready only a second later).
    let rolling_to = |s: &mut Supervised, generation: u64| {
        s.wait_for("a new instance of the rollout", |e| {
            e["event"] == "spawned" && e["app"] == "web" && e["generation"] == generation
        });
    };
    let mut s = Supervised::start(&version("1"));
    s.wait_count("ready", "web", 2);
    let file = s.path("ecosystem.yaml");

    save(&file, &version("2"));
    rolling_to(&mut s, 2);
    save(&file, &version("3"));
    let mut last = None;
    let converged = poll(Duration::from_secs(15), Duration::from_millis(200), || {
        let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
        let done = json
            .as_ref()
            .and_then(|j| app_of(j, "web"))
            .is_some_and(|a| {
                let workers = a["workers"].as_array().cloned().unwrap_or_default();
                a["generation"] == 3
                    && a["rollout"]["complete"] == true
                    && workers.len() == 2
                    && workers
                        .iter()
                        .all(|w| w["ready"] == true && w["generation"] == 3)
            });
        last = Some((outcome, json));
        done
    });
    findings.check(converged, || {
        let (outcome, json) = last.take().unwrap();
        format!(
            "an edit landing mid-rollout of the one before: not every instance ready at generation 3 (rollout complete) within 15 s; last status: {}\n  app: {}",
            outcome.describe(),
            json.as_ref()
                .and_then(|j| app_of(j, "web"))
                .map_or("-".into(), |a| a.to_string())
        )
    });

    // `supervise reload web`, and an edit lands once its rollout is under way.
    let dir = s.dir.path().to_path_buf();
    let reload = std::thread::spawn(move || {
        run_bounded(
            Command::new(binary())
                .current_dir(&dir)
                .env("XDG_RUNTIME_DIR", runtime_dir(&dir))
                .args(["reload", "web"]),
            Duration::from_secs(20),
        )
    });
    let reload_to = s.wait_for("the reload", |e| {
        e["event"] == "reload" && e["app"] == "web"
    })["generation"]
        .as_u64()
        .expect("the reload's generation");
    rolling_to(&mut s, reload_to);
    save(&file, &version("4"));
    let outcome = reload.join().unwrap();
    findings.check(outcome.code() == Some(0), || {
        format!(
            "`reload web` with an edit landing mid-rollout: expected exit 0 within 20 s; {}",
            outcome.describe()
        )
    });
    // What has come meanwhile, for the report.
    s.take_in();
    findings.finish(Some(&s));
}

// ------------------------------------------------------ 8. scale below zero

#[test]
fn case8_scale_below_zero_is_refused_and_a_non_number_is_a_usage_error() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(2, ""));
    s.wait_count("spawned", "web", 2);
    let before = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    let below = client(&s, &["scale", "web", "-5"], Duration::from_secs(10));
    findings.check(
        below.code() == Some(1) && !below.stderr.trim().is_empty(),
        || {
            format!(
                "`scale web -5` (2 instances): expected exit 1 with a message; {}",
                below.describe()
            )
        },
    );
    let word = client(&s, &["scale", "web", "x"], Duration::from_secs(10));
    findings.check(word.code() == Some(2), || {
        format!(
            "`scale web x`: expected exit 2 (usage); {}",
            word.describe()
        )
    });
    let after = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    findings.check(before == after, || {
        format!("the file was changed by a refused scale:\n{after}")
    });
    findings.check(s.running_pids("web").len() == 2, || {
        "the running count changed".into()
    });
    findings.finish(Some(&s));
}

// ------------------------------------ 10. what runs leave in the runtime dir

/// The names in the runtime directory of `dir`.
fn runtime_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(runtime_dir(dir).join("supervise"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn case10_clean_runs_leave_nothing_in_the_runtime_directory() {
    let mut findings = Findings::default();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ecosystem.yaml");
    for run in 1..=3 {
        // A new inode each time (an editor's save), as files are between runs.
        save(&file, &sleeper(1, &format!("# run {run}\n")));
        let mut supervisor = Running::start(dir.path(), Path::new("ecosystem.yaml"));
        let answered = poll(WAIT, Duration::from_millis(50), || {
            client_in(dir.path(), &["status", "--json"], Duration::from_secs(5)).code() == Some(0)
        });
        findings.check(answered, || format!("run {run}: status never answered"));
        if run == 2 {
            // Saved while it runs: it follows the file to its new inode.
            save(&file, &sleeper(2, "# run 2, edited\n"));
            let followed = poll(WAIT, Duration::from_millis(100), || {
                let outcome = client_in(dir.path(), &["status", "--json"], Duration::from_secs(5));
                serde_json::from_str::<Value>(&outcome.stdout).is_ok_and(|j| j["version"] == 2)
            });
            findings.check(followed, || "run 2: the edit was never applied".into());
        }
        let stopped = supervisor.stop(Duration::from_secs(10));
        findings.check(stopped.is_some_and(|st| st.success()), || {
            format!("run {run}: no clean exit on SIGTERM: {stopped:?}")
        });
        let left = runtime_entries(dir.path());
        findings.check(left.is_empty(), || {
            format!("run {run} left {left:?} in the runtime directory")
        });
    }
    findings.finish(None);
}
