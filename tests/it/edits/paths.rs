//! The same file through other paths: one supervisor per file through a
//! symlink, a hard link or a bind mount; a swapped release directory; a
//! Kubernetes ConfigMap swap; the file moved away and copied back.

use super::*;

#[test]
fn case2_one_supervisor_per_file_through_any_path() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(1, ""));
    s.wait_event("spawned", "web");
    let file = s.path("ecosystem.yaml");
    let first = s.pid();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("link.yaml");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let hard = elsewhere.path().join("hard.yaml");
    std::fs::hard_link(&file, &hard).unwrap();

    refused(&s, &mut findings, "(a) through a symlink", &link);
    refused(&s, &mut findings, "(b) through a hard link", &hard);

    // (c) a bind mount of the directory at another path. Declared after
    // `elsewhere`, so it is unmounted before that directory is removed.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let mount_point = elsewhere.path().join("mnt");
    std::fs::create_dir(&mount_point).unwrap();
    let mounted = is_root()
        && Command::new("mount")
            .arg("--bind")
            .arg(s.dir.path())
            .arg(&mount_point)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|st| st.success());
    let _unmount = mounted.then(|| Unmount(mount_point.clone()));
    if mounted {
        refused(
            &s,
            &mut findings,
            "(c) through a bind mount",
            &mount_point.join("ecosystem.yaml"),
        );
    } else {
        println!("skipped: (c) the bind mount needs root and a working `mount --bind`");
    }

    // An editor's save (a new inode), then at once a second supervisor.
    save(&file, &sleeper(2, ""));
    refused(&s, &mut findings, "right after an editor-style save", &file);
    let applied = find(&mut s, WAIT, |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    findings.check(applied.is_some(), || {
        "the editor-style save was not applied (no `applied` with file_version 2)".into()
    });
    refused(&s, &mut findings, "after the save was applied", &file);
    refused(
        &s,
        &mut findings,
        "(a) through the symlink after the save",
        &link,
    );

    let (outcome, json) = status_json(&s, &["-f", link.to_str().unwrap()], Duration::from_secs(5));
    findings.check(json.as_ref().is_some_and(|j| j["version"] == 2), || {
        format!(
            "status -f SYMLINK after the save did not find the first supervisor (version 2); {}",
            outcome.describe()
        )
    });
    findings.check(!is_gone(first), || "the first supervisor died".into());
    findings.finish(Some(&s));
}

// --------------------------------------------- 3. a directory symlink swapped

#[test]
fn case3_a_swapped_release_directory_is_applied_and_found() {
    let mut findings = Findings::default();
    let release = |instances: u32| {
        format!(
            "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: {instances}\n    ready: none\n"
        )
    };
    // The harness always passes `-f ecosystem.yaml`: the shell replaces
    // itself with the binary and our own `-f` (its `ecosystem.yaml` is unused).
    let mut s = Supervised::start_wrapped(
        "# unused: this supervisor runs on current/ecosystem.yaml\napps: {}\n",
        &[
            "sh",
            "-c",
            r#"exec "$0" --log-format json -f current/ecosystem.yaml"#,
        ],
        &[],
        |dir| {
            for (n, instances) in [(1, 1), (2, 2)] {
                let release_dir = dir.join(format!("releases/{n}"));
                std::fs::create_dir_all(&release_dir).unwrap();
                std::fs::write(release_dir.join("ecosystem.yaml"), release(instances)).unwrap();
            }
            std::os::unix::fs::symlink("releases/1", dir.join("current")).unwrap();
        },
    );
    s.wait_event("spawned", "web");

    std::os::unix::fs::symlink("releases/2", s.path("current.new")).unwrap();
    std::fs::rename(s.path("current.new"), s.path("current")).unwrap();
    let applied = find(&mut s, WAIT, |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    findings.check(applied.is_some(), || {
        "the swap of `current` was not applied (no `applied` with file_version 2 within 20 s)"
            .into()
    });

    let mut last = None;
    let found = poll(WAIT, Duration::from_millis(100), || {
        let (outcome, json) = status_json(
            &s,
            &["-f", "current/ecosystem.yaml"],
            Duration::from_secs(5),
        );
        let done = json
            .as_ref()
            .and_then(|j| app_of(j, "web"))
            .is_some_and(|a| a["running"] == 2 && a["rollout"]["complete"] == true);
        last = Some((outcome, json));
        done
    });
    findings.check(found, || {
        let (outcome, json) = last.take().unwrap();
        format!(
            "status -f current/ecosystem.yaml never showed 2 running (rollout complete) within 20 s; last: {}\n  json: {json:?}",
            outcome.describe()
        )
    });
    // The workers that status shows are real: two live pids of generation 2.
    if found && let Some((_, Some(json))) = &last {
        let workers = app_of(json, "web").unwrap()["workers"].clone();
        let live: Vec<i64> = workers
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["generation"] == 2)
            .filter_map(|w| w["pid"].as_i64())
            .filter(|p| !is_gone(*p as i32))
            .collect();
        findings.check(live.len() == 2, || {
            format!("status showed 2 running, but not 2 live workers of generation 2: {workers}")
        });
    }
    findings.finish(Some(&s));
}

// ---------------------------------- 7. a ConfigMap swap, kubelet's full dance

#[test]
fn case7_a_configmap_swap_that_deletes_the_old_data_logs_no_watch_warning() {
    let mut findings = Findings::default();
    // kubelet: write ..<timestamp>/, point ..data_tmp at it, rename it over
    // ..data, then delete the old ..<timestamp>/ directory.
    let mut s = Supervised::start_with("", &[], |dir| {
        std::fs::create_dir(dir.join("..2026_01_01_00_00_00.000000001")).unwrap();
        std::fs::write(
            dir.join("..2026_01_01_00_00_00.000000001/ecosystem.yaml"),
            sleeper(1, ""),
        )
        .unwrap();
        std::os::unix::fs::symlink("..2026_01_01_00_00_00.000000001", dir.join("..data")).unwrap();
        std::fs::remove_file(dir.join("ecosystem.yaml")).unwrap();
        std::os::unix::fs::symlink("..data/ecosystem.yaml", dir.join("ecosystem.yaml")).unwrap();
    });
    s.wait_event("spawned", "web");
    let mut old = "..2026_01_01_00_00_00.000000001".to_string();
    for (version, instances) in [(2u64, 3u32), (3, 2)] {
        let dir = s.dir.path().to_path_buf();
        let new = format!("..2026_01_01_00_00_00.00000000{version}");
        std::fs::create_dir(dir.join(&new)).unwrap();
        std::fs::write(
            dir.join(&new).join("ecosystem.yaml"),
            sleeper(instances, ""),
        )
        .unwrap();
        std::os::unix::fs::symlink(&new, dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        std::fs::remove_dir_all(dir.join(&old)).unwrap();
        old = new;
        let applied = find(&mut s, WAIT, |e| {
            e["event"] == "applied" && e["file_version"] == version
        });
        findings.check(applied.is_some(), || {
            format!("swap {version}: no `applied` with file_version {version} within 20 s")
        });
        let settled = s.until(WAIT, |s| s.running_pids("web").len() == instances as usize);
        findings.check(settled, || {
            format!("swap {version}: {instances} instances never ran")
        });
    }
    // Stop it, so everything it would print is printed.
    terminate(&mut s, Duration::from_secs(5), &mut findings);
    let watch_noise = |text: &str| {
        let lower = text.to_lowercase();
        lower.contains("unable to remove watch descriptor")
            || lower.contains("unable to remove the path from the watches")
    };
    for event in &s.events {
        let message = event["message"].as_str().unwrap_or("");
        let level = event["level"].as_str().unwrap_or("");
        let warning = matches!(level, "WARN" | "ERROR") && message.to_lowercase().contains("watch");
        findings.check(!watch_noise(message) && !warning, || {
            format!("the supervisor logged about its watches: {event}")
        });
    }
    let stderr = s.stderr();
    findings.check(
        !watch_noise(&stderr)
            && !stderr
                .lines()
                .any(|l| l.to_lowercase().contains("warn") && l.contains("watch")),
        || format!("stderr mentions watches: {stderr:?}"),
    );
    findings.finish(Some(&s));
}

// ------------------------------------ 9. the file moved away and copied back

/// Whether the `status` reply came from the supervisor of the file `name`.
fn serves(status: &Value, name: &str) -> bool {
    status["file"]
        .as_str()
        .is_some_and(|file| Path::new(file).file_name() == Some(name.as_ref()))
}

#[test]
fn case9_a_file_moved_away_and_copied_back_no_longer_leads_to_the_supervisor() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(1, ""));
    s.wait_event("spawned", "web");
    let file = s.path("ecosystem.yaml");
    let backup = s.path("backup.yaml");
    // `mv ecosystem.yaml backup.yaml; cp backup.yaml ecosystem.yaml`: the
    // supervisor's file is still ecosystem.yaml (same place, same content);
    // its old inode is backup.yaml now, another file.
    std::fs::rename(&file, &backup).unwrap();
    std::fs::copy(&backup, &file).unwrap();

    // Once the supervisor has seen the swap, backup.yaml leads nowhere.
    let mut last = None;
    let released = poll(WAIT, Duration::from_millis(100), || {
        let (outcome, _) = status_json(&s, &["-f", "backup.yaml"], Duration::from_secs(5));
        let done = outcome.code() == Some(3);
        last = Some(outcome);
        done
    });
    findings.check(released, || {
        format!(
            "`status -f backup.yaml` still reached a supervisor 20 s after the swap (expected exit 3); last: {}",
            last.take().map_or(String::new(), |o| o.describe())
        )
    });
    // ecosystem.yaml still leads to it.
    let (outcome, json) = status_json(&s, &["-f", "ecosystem.yaml"], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| serves(j, "ecosystem.yaml")),
        || {
            format!(
                "`status -f ecosystem.yaml` did not reach the supervisor; {}",
                outcome.describe()
            )
        },
    );
    // `scale` through backup.yaml finds no supervisor before editing anything.
    let before = std::fs::read_to_string(&backup).unwrap();
    let scaled = client(
        &s,
        &["-f", "backup.yaml", "scale", "web", "3"],
        Duration::from_secs(10),
    );
    findings.check(scaled.code() == Some(3), || {
        format!(
            "`scale -f backup.yaml web 3`: expected exit 3 (no supervisor); {}",
            scaled.describe()
        )
    });
    findings.check(std::fs::read_to_string(&backup).unwrap() == before, || {
        "`scale -f backup.yaml` edited backup.yaml".into()
    });

    // backup.yaml may have a supervisor of its own now.
    let mut other = Running::start(s.dir.path(), Path::new("backup.yaml"));
    let mut last = None;
    let answered = poll(WAIT, Duration::from_millis(100), || {
        let (outcome, json) = status_json(&s, &["-f", "backup.yaml"], Duration::from_secs(5));
        let done = json.as_ref().is_some_and(|j| serves(j, "backup.yaml"));
        last = Some(outcome);
        done
    });
    findings.check(answered, || {
        format!(
            "a second supervisor on backup.yaml never answered (refused?); last status: {}",
            last.take().map_or(String::new(), |o| o.describe())
        )
    });
    let (outcome, json) = status_json(&s, &["-f", "ecosystem.yaml"], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| serves(j, "ecosystem.yaml")),
        || {
            format!(
                "with both running, `status -f ecosystem.yaml` did not reach the first; {}",
                outcome.describe()
            )
        },
    );
    let stopped = other.stop(Duration::from_secs(10));
    findings.check(stopped.is_some_and(|st| st.success()), || {
        format!("the supervisor of backup.yaml did not stop cleanly on SIGTERM: {stopped:?}")
    });
    findings.check(!is_gone(s.pid()), || "the first supervisor died".into());
    let (outcome, json) = status_json(&s, &["-f", "ecosystem.yaml"], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| serves(j, "ecosystem.yaml")),
        || {
            format!(
                "after the second stopped, `status -f ecosystem.yaml` did not reach the first; {}",
                outcome.describe()
            )
        },
    );
    findings.finish(Some(&s));
}
