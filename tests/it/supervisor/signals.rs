//! Signals to the supervisor: SIGUSR1 and SIGUSR2 leave the workers alone
//! (which start with default dispositions), and a SIGHUP from its first
//! instant does not kill it.

use super::*;

/// The mask `field` (`SigIgn`, `SigCgt`, `SigBlk`) of `pid`, from /proc.
fn signal_mask(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

fn signal_bit(signal: i32) -> u64 {
    1 << (signal - 1)
}

/// `supervise status --json` next to `s`: the reply, if it answered.
fn status_reply(s: &Supervised) -> Option<serde_json::Value> {
    let output = std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(["status", "--json"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

#[test]
fn sigusr1_reopens_the_log_files_and_sigusr2_upgrades_and_workers_keep_the_defaults() {
    let mut s = Supervised::start(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: 2\n    ready: none\n",
    );
    // Ready (`ready: none`): they run `sleep`, past the fork's masked window.
    s.wait_count("ready", "web", 2);
    let workers = s.running_pids("web");
    let ours = signal_bit(libc::SIGHUP) | signal_bit(libc::SIGUSR1) | signal_bit(libc::SIGUSR2);
    // The supervisor handles them; its workers start with every default.
    assert_eq!(signal_mask(s.pid(), "SigCgt") & ours, ours);
    for pid in &workers {
        for field in ["SigIgn", "SigCgt", "SigBlk"] {
            assert_eq!(
                signal_mask(*pid, field) & ours,
                0,
                "{field} of worker {pid}"
            );
        }
    }
    for signal in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGUSR1] {
        s.signal(signal);
        if signal == libc::SIGUSR1 {
            s.wait_for("the reopen", |e| e["event"] == "log_reopened");
        } else {
            // An upgrade in place, to the same binary: nothing else happens.
            s.wait_for("SIGUSR2's upgrade", |e| e["event"] == "upgraded");
        }
    }
    let status = status_reply(&s).expect("status answers after SIGUSR1/SIGUSR2");
    let mut shown: Vec<i64> = status["apps"][0]["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["pid"].as_i64())
        .collect();
    shown.sort();
    let mut expected: Vec<i64> = workers.iter().map(|p| i64::from(*p)).collect();
    expected.sort();
    assert_eq!(shown, expected, "the same workers");
    assert!(workers.iter().all(|p| !is_gone(*p)));
    // Anything the signals made it do, it did before the barrier's turn.
    s.barrier();
    assert!(
        !s.events
            .iter()
            .any(|e| e["event"] == "stopping" || e["event"] == "exited"),
        "a worker was touched\n{}",
        s.dump()
    );
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success());
    assert!(workers.iter().all(|p| is_gone(*p)));
}

#[test]
fn a_sighup_as_soon_as_it_runs_does_not_kill_it() {
    // The first moment a signal can be survived is when the process runs
    // code of ours at all (before, the dynamic loader runs: no program can
    // handle a signal then). So the SIGHUP goes as soon as the handler shows
    // in /proc — or, had it none yet, as soon as the lock file appears:
    // either way well before the event loop (tokio's handlers) exists.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    ready: none\n",
    )
    .unwrap();
    let runtime = runtime_dir(dir.path());
    let stderr = dir.path().join("supervise.stderr");
    let child = std::process::Command::new(binary())
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", &runtime)
        .env_remove("NOTIFY_SOCKET")
        .args(["--log-format", "json", "-f", "ecosystem.yaml"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    /// SIGKILLs the supervisor by pid if the test fails.
    struct Guard(std::process::Child);
    impl Drop for Guard {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let mut child = Guard(child);
    let pid = child.0.id() as i32;
    let locks = runtime.join("supervise");
    let has_lock = || {
        std::fs::read_dir(&locks).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "lock"))
        })
    };
    let deadline = Instant::now() + WAIT;
    // A spin, not a sleep: the window is milliseconds long.
    while signal_mask(pid, "SigCgt") & signal_bit(libc::SIGHUP) == 0 && !has_lock() {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "it exited on its own"
        );
        assert!(Instant::now() < deadline, "it never started");
        std::thread::yield_now();
    }
    // SAFETY: signalling the supervisor this test started, by its pid.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let answered = eventually(WAIT, || {
        child.0.try_wait().unwrap().is_some()
            || std::process::Command::new(binary())
                .current_dir(dir.path())
                .env("XDG_RUNTIME_DIR", &runtime)
                .args(["status", "--json"])
                .output()
                .is_ok_and(|o| o.status.success())
    });
    let exited = child.0.try_wait().unwrap();
    assert!(
        answered && exited.is_none(),
        "the early SIGHUP ended it: {exited:?}; stderr: {}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let mut status = None;
    eventually(WAIT, || {
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}
