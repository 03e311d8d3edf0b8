//! Across runs: a second supervisor through another runtime directory is
//! refused, and a new run kills what a killed run left.

use super::*;

#[test]
fn with_cgroups_a_second_supervisor_through_another_runtime_directory_is_refused() {
    let mark = mark("second");
    let Some(mut s) = start(Mode::Cgroups, &app(&mark, "setsid", "stay", "")) else {
        return;
    };
    escaped(&mut s, &mark, 2);
    // Another runtime directory: the lock cannot see the first run; its
    // cgroup tree can.
    let elsewhere = s.path("elsewhere");
    std::fs::create_dir(&elsewhere).expect("a runtime directory");
    std::fs::set_permissions(
        &elsewhere,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("0700");
    let second = std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", &elsewhere)
        .args(["-f", "ecosystem.yaml"])
        .output()
        .expect("the second supervisor runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("already supervised by pid {}", s.pid())),
        "{stderr}"
    );
    assert!(!is_gone(s.pid()), "the first supervisor runs on");
    assert_eq!(
        marked(&mark).len(),
        2,
        "its worker and escaped child run on"
    );
    s.signal(libc::SIGTERM);
    ends_clean(&mut s, Mode::Cgroups, &mark, Duration::from_secs(2));
}

#[test]
fn a_new_run_kills_what_a_killed_run_left() {
    for mode in MODES {
        let mark = mark("leftover");
        let Some(mut s) = start(mode, &app(&mark, "setsid", "stay", "")) else {
            continue;
        };
        escaped(&mut s, &mark, 2);
        // The supervisor and its undertaker die together (stopped first, so
        // that it cannot start another): nothing cleans up.
        let undertaker = child_with_argument(s.pid(), "__undertaker").expect("an undertaker");
        s.signal(libc::SIGSTOP);
        // SAFETY: killing the undertaker of the supervisor we started.
        unsafe {
            libc::kill(undertaker, libc::SIGKILL);
        }
        s.signal(libc::SIGKILL);
        s.wait_exit(WAIT);
        assert!(
            eventually(Duration::from_secs(2), || marked(&mark).len() == 1),
            "{mode:?}: the escaped child is left: {:?}",
            marked(&mark)
        );
        // The same file, another mark for the new run's own workers.
        let again = self::mark("again");
        std::fs::write(s.path("ecosystem.yaml"), app(&again, "setsid", "stay", ""))
            .expect("rewrite");
        let args: &[&str] = match mode {
            Mode::Cgroups => &[],
            Mode::Environment => &["--cgroups", "off"],
        };
        let old = s.pid();
        let mut next = Supervised::start_again(s, args);
        let leftovers = next.wait_for("the leftovers", |e| e["event"] == "leftovers_killed");
        assert!(
            leftovers["count"].as_u64() >= Some(1),
            "{mode:?}: {leftovers}"
        );
        assert!(
            none_left(&mark, Duration::from_secs(2)),
            "{mode:?}: {:?}",
            marked(&mark)
        );
        if mode == Mode::Cgroups {
            assert!(cgroups_gone(old), "the killed run's tree is removed");
        }
        escaped(&mut next, &again, 2);
        next.signal(libc::SIGTERM);
        ends_clean(&mut next, mode, &again, Duration::from_secs(2));
    }
}
