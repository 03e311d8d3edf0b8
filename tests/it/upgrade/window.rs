//! The exec window and what crosses it: what happens in it (a worker dies, a
//! `READY=1`, a child reaped elsewhere) is taken up by the new image;
//! rollouts, halts and holds carry over; the undertaker still acts; a new
//! image that hangs is killed; a binary replaced after its probe is not
//! exec'd.

use super::*;

/// A wrapper around this build that, when it takes over (not when probed),
/// waits `delay` seconds before it execs the real binary: the exec window,
/// stretched. In Perl, which neither forks nor reaps (a shell, or a pyenv
/// shim, would reap the workers' exits: nothing but supervise may).
fn slow_binary(dir: &Path, delay: &str) -> String {
    let path = dir.join("slow-supervise");
    let script = format!(
        "#!/usr/bin/perl\nmy $bin = {binary:?};\nselect(undef, undef, undef, {delay}) unless grep {{ $_ eq '--upgrade-probe' }} @ARGV;\nexec {{ $bin }} $bin, @ARGV or die \"exec: $!\";\n",
        binary = binary().display().to_string()
    );
    std::fs::write(&path, script).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

#[test]
fn what_happens_in_the_exec_window_is_taken_up_by_the_new_image() {
    let yaml = |crashy: u32| {
        format!(
            r#"
apps:
  crashy:
    command: [sleep, "1000"]
    instances: {crashy}
    ready: none
  late:
    command: [sh, -c, "while [ ! -e go ]; do sleep 0.02; done; exec python3 -c 'import os, socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); a = os.environ[\"NOTIFY_SOCKET\"]; s.sendto(b\"READY=1\", \"\\0\" + a[1:] if a.startswith(\"@\") else a); import time; time.sleep(1000)'"]
    ready: notify
"#
        )
    };
    let mut s = Supervised::start(&yaml(1));
    s.wait_count("spawned", "late", 1);
    s.wait_count("ready", "crashy", 1);
    let crashy = workers(&status_json(&s), "crashy")[0].1;
    let slow = slow_binary(s.dir.path(), "1.0");
    let client = upgrade_in_background(&s, &slow);
    s.wait_for("the exec", |e| e["event"] == "upgrading");
    // In the window: a worker dies, another says it is ready, the file is
    // edited (one more `crashy`).
    // SAFETY: killing a worker this test's supervisor started.
    unsafe { libc::kill(crashy as i32, libc::SIGKILL) };
    std::fs::write(s.path("go"), "").expect("go");
    save(&s, &yaml(2));
    let output = client.join().expect("client");
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        s.dump()
    );
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    s.wait_for("the exit seen by the new image", |e| {
        e["event"] == "exited" && e["app"] == "crashy"
    });
    s.wait_count("ready", "late", 1);
    // The first crashy, its restart, and the one the edit added.
    s.wait_count("ready", "crashy", 3);
    let status = status_json(&s);
    assert!(workers(&status, "late")[0].1 > 0, "{status}");
    let crashies = workers(&status, "crashy");
    assert_eq!(crashies.len(), 2, "{status}");
    assert!(
        crashies.iter().all(|w| w.1 > 0 && w.1 != crashy),
        "{status}"
    );
    assert_eq!(status["version"], 2, "the edit was applied: {status}");
}

#[test]
fn rollouts_halts_and_holds_carry_over_an_upgrade() {
    // `rolling`'s instances are ready (by notify) once the file `go-V` of
    // their version exists: the test holds the rollout under way until
    // the new image has taken over, however fast or loaded the machine.
    let yaml = |version: &str, bad: &str| {
        format!(
            r#"
apps:
  rolling:
    command: [sh, -c, "while [ ! -e go-$V ]; do sleep 0.02; done; exec python3 notify.py"]
    instances: 3
    env: {{V: "{version}"}}
    ready: notify
  halting:
    command: [sh, -c, "{bad}"]
    instances: 2
    env: {{V: "{version}"}}
    ready: {{delay: 300ms}}
    max_restarts: {{count: 1, within: 1m}}
  held:
    command: [sleep, "1000"]
    instances: 2
    ready: none
"#
        )
    };
    let mut s = Supervised::start_with(&yaml("1", "exec sleep 1000"), &[], |dir| {
        std::fs::write(dir.join("notify.py"), NOTIFY_READY).expect("write");
        std::fs::write(dir.join("go-1"), "").expect("go-1");
    });
    s.wait_count("ready", "rolling", 3);
    s.wait_count("ready", "halting", 2);
    s.wait_count("ready", "held", 2);
    assert!(run_client(&s, &["stop", "held.1"]).status.success());
    // A new version: `rolling`'s first new instance waits for go-2, so
    // the rollout is under way when the new image takes over; `halting`'s
    // replacement fails.
    save(&s, &yaml("2", "exit 3"));
    s.wait_for("halted", |e| {
        e["event"] == "rollout_halted" && e["app"] == "halting"
    });
    let before = status_json(&s);
    let rolling = app_status(&before, "rolling");
    assert!(rolling["rollout"]["complete"] == false, "{before}");
    upgrade(&s, &[]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    let upgraded = s.events.len();
    std::fs::write(s.path("go-2"), "").expect("go-2");
    let status = eventually(WAIT, || {
        app_status(&status_json(&s), "rolling")["rollout"]["complete"] == true
    });
    assert!(status, "the rollout went on: {}", s.dump());
    // Taken in: what the new image did once it ran, up to the last of
    // the new instances ready.
    let ready_at_2 = |s: &Supervised| {
        s.events
            .iter()
            .filter(|e| e["event"] == "ready" && e["app"] == "rolling" && e["generation"] == 2)
            .count()
    };
    assert!(s.until(WAIT, |s| ready_at_2(s) == 3), "{}", s.dump());
    let since = |name: &str, app: &str| {
        s.events[upgraded..]
            .iter()
            .filter(|e| e["event"] == name && e["app"] == app)
            .count()
    };
    assert!(
        since("spawned", "rolling") >= 1,
        "the new image started the rest of the rollout (it was under way at the exec): {}",
        s.dump()
    );
    assert_eq!(
        (
            since("spawned", "halting"),
            since("rollout_halted", "halting")
        ),
        (0, 0),
        "a halted rollout is not tried again: {}",
        s.dump()
    );
    let after = status_json(&s);
    assert_eq!(
        app_status(&after, "halting")["rollout"]["halted"],
        true,
        "{after}"
    );
    let held: Vec<Value> = app_status(&after, "held")["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["state"].clone())
        .collect();
    assert!(
        held.iter()
            .any(|state| state.as_str().is_some_and(|s| s.contains("held"))),
        "{after}"
    );
}

/// A program that says READY=1 on its `NOTIFY_SOCKET`, then sleeps.
const NOTIFY_READY: &str = "import os, socket, time\n\
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
    a = os.environ['NOTIFY_SOCKET']\n\
    s.sendto(b'READY=1', '\\0' + a[1:] if a.startswith('@') else a)\n\
    time.sleep(1000)\n";

#[test]
fn the_undertaker_still_acts_after_an_upgrade() {
    // The test that proves it for a supervisor that never upgraded, again
    // after two upgrades.
    let mut s = Supervised::start(FAMILY);
    s.wait_line("up");
    s.wait_line("up");
    upgrade(&s, &[]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    upgrade(&s, &[]);
    s.wait_for("upgraded", |e| {
        e["event"] == "upgraded" && e["upgrades"] == 2
    });
    sigkill_leaves_nothing(&mut s);
}

#[test]
fn notify_messages_sent_in_the_exec_window_count_before_any_deadline() {
    let mut s = Supervised::start_with(
        r#"
apps:
  dog:
    command: [python3, dog.py]
    ready: notify
    watchdog: 1s
  canary:
    command: [python3, notify.py]
    ready: notify
    watchdog: 1s
    backoff: {initial: 100ms, max: 100ms}
"#,
        &[],
        |dir| {
            // Ready, then silent: its watchdog is missed a second after
            // each start.
            std::fs::write(dir.join("notify.py"), NOTIFY_READY).expect("write");
            std::fs::write(
                dir.join("dog.py"),
                "import os, socket, time\n\
                 s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
                 a = os.environ['NOTIFY_SOCKET']\n\
                 a = '\\0' + a[1:] if a.startswith('@') else a\n\
                 s.sendto(b'READY=1', a)\n\
                 while True:\n    s.sendto(b'WATCHDOG=1', a)\n    time.sleep(0.02)\n",
            )
            .expect("write");
        },
    );
    s.wait_count("ready", "dog", 1);
    // A window of three seconds, three times the watchdog: the pings sent in
    // it wait in the notify socket and are taken before the deadline is
    // judged.
    let slow = slow_binary(s.dir.path(), "3.0");
    upgrade(&s, &["--binary", &slow]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    // The new image judges watchdog deadlines: the canary's next miss
    // after the takeover says it did, at a moment past the deadline the
    // dog had before the window. Had the dog's pings of the window not
    // been taken before that, its deadline would have been missed too,
    // by then.
    let upgraded = s.events.len();
    assert!(
        s.until(WAIT, |s| {
            s.events[upgraded..]
                .iter()
                .any(|e| e["event"] == "watchdog_missed" && e["app"] == "canary")
        }),
        "the new image judged no watchdog\n{}",
        s.dump()
    );
    assert_eq!(s.count("watchdog_missed", "dog"), 0, "{}", s.dump());
    assert_eq!(workers(&status_json(&s), "dog")[0].2, 0, "no restart");
}

#[test]
fn a_child_reaped_by_something_else_in_the_window_is_taken_as_killed() {
    let mut s = Supervised::start(
        "apps:\n  short:\n    command: [sh, -c, \"sleep 0.3; exit 3\"]\n    ready: none\n    kill_timeout: 1s\n",
    );
    s.wait_count("spawned", "short", 1);
    // A shell wrapper: its `sleep` is a child it waits for, and its wait
    // reaps any child of the process — the worker's exit among them.
    let wrapper = script(
        s.dir.path(),
        "shell-wrapper",
        &format!(
            "#!/bin/sh\n[ \"$1\" = --upgrade-probe ] || sleep 1\nexec {} \"$@\"\n",
            binary().display()
        ),
        0o755,
    );
    upgrade(&s, &["--binary", &wrapper]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    s.wait_for("the lost child", |e| e["event"] == "child_lost");
    s.wait_count("spawned", "short", 2);
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
}

#[test]
fn a_new_image_that_hangs_at_takeover_is_killed_with_every_worker() {
    // A takeover deadline of 2 s instead of 30 s.
    let mut s = Supervised::start_wrapped(
        "apps:\n  web:\n    command: [sh, -c, \"sleep 1000 & wait\"]\n    instances: 2\n    ready: none\n",
        &["env", "SUPERVISE_TAKEOVER_TIMEOUT=2s"],
        &[],
        |_| {},
    );
    s.wait_count("ready", "web", 2);
    // Agrees at the probe, then never runs a loop: nobody supervises, and
    // the signals that would stop it are held back.
    let hangs = script(
        s.dir.path(),
        "agrees-then-hangs",
        "#!/usr/bin/perl\nif (grep { $_ eq '--upgrade-probe' } @ARGV) { local $/; <STDIN>; print qq({\"ok\":true,\"version\":\"9.9.9\",\"format\":1}\\n); exit 0 }\nsleep 1000;\n",
        0o755,
    );
    // The undertaker, the spawner, 2 shells and their 2 sleeps.
    let pid = s.pid();
    assert!(
        eventually(WAIT, || descendants_of(pid).len() >= 6),
        "{:?}",
        descendants_of(pid)
    );
    let tree = descendants_of(s.pid());
    let client = upgrade_in_background(&s, &hangs);
    let started = Instant::now();
    let status = s.wait_exit(Duration::from_secs(20));
    println!("the hung image was killed after {:?}", started.elapsed());
    assert!(!status.success(), "killed, not exited: {status:?}");
    let all_gone = eventually(Duration::from_secs(5), || tree.iter().all(|p| is_gone(*p)));
    let left: Vec<i32> = tree.iter().copied().filter(|p| !is_gone(*p)).collect();
    assert!(all_gone, "survivors: {left:?}");
    let output = client.join().expect("client");
    assert!(
        !output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_binary_replaced_after_its_probe_is_not_exec_d() {
    let (s, before) = sleepers(1);
    let dir = s.dir.path().to_path_buf();
    // Agrees, slowly (saying when it runs); meanwhile another file takes its
    // name.
    let candidate = script(
        &dir,
        "candidate",
        "#!/bin/sh\ntouch \"$(dirname \"$0\")/probing\"\ncat > /dev/null\nsleep 1\necho '{\"ok\":true,\"version\":\"9.9.9\",\"format\":1}'\n",
        0o755,
    );
    let other = script(&dir, "other", "#!/bin/sh\nexit 7\n", 0o755);
    let client = upgrade_in_background(&s, &candidate);
    assert!(
        eventually(WAIT, || dir.join("probing").exists()),
        "{}",
        s.dump()
    );
    std::fs::rename(&other, &candidate).expect("the swap");
    let output = client.join().expect("client");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("not the file that was probed"), "{stderr}");
    assert_eq!(workers(&status_json(&s), "web")[0].1, before[0].1);
}
