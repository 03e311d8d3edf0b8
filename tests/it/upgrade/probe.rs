//! Bad new binaries are refused and nothing changes: a failed probe, one
//! that hangs or prints what it should not, one that must answer the format
//! it was given, one judged whoever holds its stdout; what it printed is
//! echoed, bounded.

use super::*;

#[test]
fn a_binary_that_fails_the_probe_is_refused_and_nothing_changes() {
    // A probe deadline of 2 s instead of 5 s, for the probe that hangs (the
    // others are scripts that end at once).
    let (mut s, before) = sleepers_under(&["env", "SUPERVISE_PROBE_TIMEOUT=2s"], 2);
    let dir = s.dir.path().to_path_buf();
    let exits_1 = script(
        &dir,
        "exits-1",
        "#!/bin/sh\necho 'not today' >&2\nexit 1\n",
        0o755,
    );
    let not_executable = script(&dir, "plain", "#!/bin/sh\nexit 0\n", 0o644);
    let hangs = script(&dir, "hangs", "#!/bin/sh\nexec sleep 1000\n", 0o755);
    let liar = script(&dir, "liar", "#!/bin/sh\necho hello\n", 0o755);
    let said = refused_upgrade(&s, &["--binary", &exits_1]);
    assert!(
        said.contains("not today") && said.contains("exit"),
        "{said}"
    );
    let said = refused_upgrade(&s, &["--binary", &not_executable]);
    assert!(said.contains("ermission denied"), "{said}");
    let said = refused_upgrade(&s, &["--binary", &liar]);
    assert!(
        said.contains("did not answer as a supervise binary does"),
        "{said}"
    );
    let started = Instant::now();
    let said = refused_upgrade(&s, &["--binary", &hangs]);
    assert!(said.contains("did not answer within 2s"), "{said}");
    // At its deadline: not before, and not much after (×3).
    assert!(
        (Duration::from_secs(2)..Duration::from_secs(6)).contains(&started.elapsed()),
        "{:?}",
        started.elapsed()
    );
    let missing = dir.join("missing").display().to_string();
    refused_upgrade(&s, &["--binary", &missing]);
    // Agrees at the probe, then cannot be run when the exec comes (the same
    // file, no longer executable): the exec fails, and the running image
    // goes on.
    let vanishing = script(
        &dir,
        "vanishing",
        "#!/bin/sh\ncat > /dev/null\necho '{\"ok\":true,\"version\":\"9.9.9\",\"format\":1}'\nchmod a-x -- \"$0\"\n",
        0o755,
    );
    let said = refused_upgrade(&s, &["--binary", &vanishing]);
    assert!(
        said.contains("cannot exec") && said.contains("ermission denied"),
        "{said}"
    );
    for _ in 0..6 {
        s.wait_for("a refusal", |e| e["event"] == "upgrade_refused");
    }
    let status = status_json(&s);
    assert_eq!(status["supervisor"]["upgrades"], 0);
    let after = workers(&status, "web");
    let pids = |w: &[(u64, i64, u64, f64)]| w.iter().map(|w| (w.0, w.1, w.2)).collect::<Vec<_>>();
    assert_eq!(pids(&after), pids(&before), "the workers are untouched");
    // The hanging probe was killed and reaped: no child of ours but the
    // workers and the helpers sleeps.
    let sleeping: Vec<i32> = children_of(s.pid())
        .into_iter()
        .filter(|pid| has_argument(*pid, b"1000"))
        .collect();
    assert_eq!(sleeping.len(), 2, "{sleeping:?}");
    // The failed exec gave back every fd's close-on-exec flag: a worker
    // started now sees exactly stdio.
    assert!(run_client(&s, &["restart", "web.0"]).status.success());
    let restarted = s.wait_for("web.0 again", |e| {
        e["event"] == "ready" && e["app"] == "web" && e["slot"] == 0 && e["pid"] != before[0].1
    });
    let pid = restarted["pid"].as_i64().expect("pid");
    // `sleep` opens a locale file for a moment as it starts; a leaked fd stays.
    assert!(
        eventually(WAIT, || open_fds(pid) == BTreeSet::from([0, 1, 2])),
        "{:?}\n{}",
        open_fds(pid),
        s.dump()
    );
}

#[test]
fn a_probe_is_killed_with_what_it_left_and_refused_for_what_it_said() {
    let (s, _) = sleepers_under(PATIENT_PROBE, 1);
    let token = format!("left-by-probe-{}", std::process::id());
    let leaves = script(
        s.dir.path(),
        "leaves-a-child",
        &format!("#!/bin/sh\n{SLEEPER} {token} &\necho no\nexit 0\n"),
        0o755,
    );
    let started = Instant::now();
    let said = refused_upgrade(&s, &["--binary", &leaves]);
    assert!(
        said.contains("did not answer as a supervise binary does"),
        "{said}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(2), || with_argument(&token).is_empty()),
        "the probe's child is left: {:?}",
        with_argument(&token)
    );
}

#[test]
fn a_probe_that_answered_and_exited_is_judged_whoever_holds_its_stdout() {
    let (s, before) = sleepers_under(PATIENT_PROBE, 1);
    let dir = s.dir.path().to_path_buf();
    // The probe says who it is and waits for the test to hold its stdout,
    // then answers (the real probe) and exits.
    let probe = script(
        &dir,
        "held",
        &format!(
            "#!/bin/sh\nif [ \"$1\" = --upgrade-probe ]; then\n  echo $$ > \"$0.pid.new\" && mv \"$0.pid.new\" \"$0.pid\"\n  while [ ! -e \"$0.go\" ]; do sleep 0.01; done\n  exec {binary} --upgrade-probe\nfi\nexec {binary} \"$@\"\n",
            binary = binary().display()
        ),
        0o755,
    );
    let client = upgrade_in_background(&s, &probe);
    let mut pid = 0;
    assert!(eventually(WAIT, || {
        pid = std::fs::read_to_string(format!("{probe}.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    }));
    // The probe's stdout, held open by this test until the end.
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/1"))
        .expect("the probe's stdout");
    let started = Instant::now();
    std::fs::write(format!("{probe}.go"), "").expect("go");
    let output = client.join().expect("client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(workers(&status_json(&s), "web")[0].1, before[0].1);
    drop(held);
}

#[test]
fn a_probe_must_answer_the_format_it_was_given_and_a_plain_version() {
    let (mut s, before) = sleepers(1);
    let dir = s.dir.path().to_path_buf();
    let answers = |name: &str, answer: &str| {
        script(
            &dir,
            name,
            &format!("#!/bin/sh\ncat > /dev/null\necho '{answer}'\n"),
            0o755,
        )
    };
    let other_format = answers(
        "other-format",
        r#"{"ok":true,"version":"9.9.9","format":99999}"#,
    );
    let said = refused_upgrade(&s, &["--binary", &other_format]);
    assert!(
        said.contains("read a state of format 99999") && said.contains("wrote format 1"),
        "{said}"
    );
    let hidden = answers(
        "hidden",
        r#"{"ok":true,"version":"1.0\u202e\u200bevil","format":1}"#,
    );
    let long = answers(
        "long",
        &format!(r#"{{"ok":true,"version":"{}","format":1}}"#, "9".repeat(65)),
    );
    for binary in [&hidden, &long] {
        let said = refused_upgrade(&s, &["--binary", binary]);
        assert!(
            said.contains("a version that is not 1 to 64 printable ASCII characters"),
            "{said}"
        );
        assert!(!said.contains(['\u{202e}', '\u{200b}']), "{said}");
    }
    for _ in 0..3 {
        let refusal = s.wait_for("a refusal", |e| e["event"] == "upgrade_refused");
        let reason = refusal["reason"].as_str().unwrap_or_default();
        assert!(!reason.contains(['\u{202e}', '\u{200b}']), "{refusal}");
    }
    let status = status_json(&s);
    assert_eq!(status["supervisor"]["upgrades"], 0, "{status}");
    assert_eq!(workers(&status, "web")[0].1, before[0].1);
}

#[test]
fn what_a_refused_probe_printed_is_echoed_bounded() {
    /// What the echo of one output may take, ellipsis and count included.
    const ECHO_BOUND: usize = 512 + 64;
    let (mut s, _) = sleepers(1);
    let dir = s.dir.path().to_path_buf();
    let flood = |name: &str, end: &str| {
        script(
            &dir,
            name,
            &format!(
                "#!/bin/sh\ncat > /dev/null\nhead -c 16384 /dev/zero | tr '\\0' o\nhead -c 16384 /dev/zero | tr '\\0' e >&2\n{end}\n"
            ),
            0o755,
        )
    };
    for (binary, outputs) in [
        (flood("floods-0", "exit 0"), 2),
        (flood("floods-1", "exit 1"), 1),
    ] {
        let said = refused_upgrade(&s, &["--binary", &binary]);
        let refusal = s.wait_for("a refusal", |e| e["event"] == "upgrade_refused");
        let reason = refusal["reason"].as_str().unwrap_or_default().to_string();
        for text in [&said, &reason] {
            let bound = binary.len() + 200 + outputs * ECHO_BOUND;
            assert!(text.len() < bound, "{} bytes: {text}", text.len());
            assert!(text.contains("more bytes)"), "{text}");
        }
        assert!(
            reason.contains(&format!("… ({} more bytes)", 16384 - 512)),
            "{reason}"
        );
    }
}
