//! Dependencies and schedules as a hostile (or new) user met them: each test
//! is a problem that round found (scale writing a file the supervisor
//! refuses, a held job still running, an edit mid-run starting a second
//! run, stale restart memory, cron times off by the clock's fraction, a
//! quadratic did-you-mean), kept so that it stays fixed.

use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::common::{Supervised, app_status, run_client, save, status_json};

/// `scale` on a scheduled app: `instances` above 1 is invalid for it, so the
/// edit must be refused before the file is written — not written, refused
/// by the supervisor, waited for until the timeout (exit 4, "not coming
/// up"), and left invalid on disk, where the next start refuses the file.
#[test]
fn scaling_a_scheduled_app_to_two_is_refused_and_leaves_the_file_valid() {
    let yaml = r#"
apps:
  job:
    command: sh -c 'echo tick'
    schedule: "0 3 * * *"
"#;
    let mut s = Supervised::start(yaml);
    s.wait_for("the first apply", |e| e["event"] == "applied");
    let scale = run_client(&s, &["scale", "job", "2", "--timeout", "2s"]);
    let text = std::fs::read_to_string(s.path("ecosystem.yaml")).expect("the file");
    let check = Command::new(crate::common::binary())
        .current_dir(s.dir.path())
        .args(["check", "-f", "ecosystem.yaml"])
        .output()
        .expect("check runs");
    assert!(
        check.status.success(),
        "scale left an invalid file:\n{text}\n{}",
        String::from_utf8_lossy(&check.stdout)
    );
    assert_eq!(
        scale.status.code(),
        Some(1),
        "scale should refuse (exit 1), not wait and time out: {scale:?}"
    );
}

/// `supervise stop APP` holds an instance stopped "until start, a restart
/// of the supervisor, or a change of that app in the file" — a scheduled
/// app's next tick must not run it anyway.
#[test]
fn stop_holds_a_scheduled_app_across_its_ticks() {
    let yaml = r#"
apps:
  job:
    command: sh -c 'echo tick'
    schedule: {every: 1s}
"#;
    let mut s = Supervised::start(yaml);
    s.wait_event("run_ended", "job");
    let stop = run_client(&s, &["stop", "job"]);
    assert!(stop.status.success(), "{stop:?}");
    let status = status_json(&s);
    let state = &app_status(&status, "job")["workers"][0]["state"];
    assert_eq!(state, "stopped (held)", "{status}");
    // Issue 28: a paused schedule showed a next run that would not come.
    let schedule = &app_status(&status, "job")["schedule"];
    assert!(schedule["next_run"].is_null(), "{schedule}");
    assert_eq!(schedule["paused"], "held by `stop`", "{schedule}");
    let table = run_client(&s, &["status"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("paused (held by `stop`: `supervise start job` resumes it)")
            && !table.contains("next run"),
        "{table}"
    );
    // A held job's ticks pass quietly: two of them pass (the time is the
    // event here), then a barrier takes in everything decided meanwhile.
    let stopped_at = s.events.len();
    std::thread::sleep(Duration::from_millis(2200));
    s.barrier();
    let ran: Vec<&serde_json::Value> = s.events[stopped_at..]
        .iter()
        .filter(|e| e["event"] == "spawned" && e["app"] == "job")
        .collect();
    assert!(
        ran.is_empty(),
        "a held scheduled app ran on its next tick: {ran:?}\n{}",
        s.dump()
    );
    let start = run_client(&s, &["start", "job"]);
    assert!(start.status.success(), "{start:?}");
    let status = status_json(&s);
    let schedule = &app_status(&status, "job")["schedule"];
    assert!(schedule["next_run"].is_string(), "{schedule}");
    assert!(schedule["paused"].is_null(), "{schedule}");
}

/// A scheduled app with `instances: 0` is paused too: no next run.
#[test]
fn a_schedule_of_no_instance_shows_no_next_run() {
    let yaml = r#"
apps:
  job:
    command: sh -c 'echo tick'
    schedule: "* * * * *"
    instances: 0
"#;
    let mut s = Supervised::start(yaml);
    s.wait_for("the first apply", |e| e["event"] == "applied");
    let status = status_json(&s);
    let schedule = &app_status(&status, "job")["schedule"];
    assert!(schedule["next_run"].is_null(), "{schedule}");
    assert_eq!(schedule["paused"], "instances: 0", "{schedule}");
}

/// A change of a scheduled app's command while a run goes: the run that
/// goes may finish (or be stopped), and the new definition is for the next
/// run — it must not start a second run beside the first, outside the
/// schedule and against `overlap: skip`.
#[test]
fn a_command_edit_during_a_run_starts_no_second_run_beside_it() {
    let yaml = |word: &str| {
        format!(
            r#"
apps:
  job:
    command: sh -c 'echo {word}; sleep 3'
    schedule: "0 3 * * *"
    overlap: skip
"#
        )
    };
    let mut s = Supervised::start(&yaml("first"));
    s.wait_for("the first apply", |e| e["event"] == "applied");
    let trigger = run_client(&s, &["trigger", "job"]);
    assert!(trigger.status.success(), "{trigger:?}");
    let first = s.wait_event("spawned", "job");
    // The run is ready (its default 1 s delay): a rollout replaces it
    // surge-first.
    s.wait_event("ready", "job");
    save(&s, &yaml("second"));
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    // Until the first run ends (by itself or stopped by the rollout), no
    // other run starts.
    s.wait_event("run_ended", "job");
    assert_eq!(
        s.count("spawned", "job"),
        1,
        "a second run of job started while {} still ran\n{}",
        first["pid"],
        s.dump()
    );
}

/// `run_on_start` runs once at start; editing the schedule (the manual:
/// "restarts nothing", and the plan line says so) must not run the job.
#[test]
fn editing_the_schedule_of_a_run_on_start_app_does_not_run_it() {
    let yaml = |hour: u32| {
        format!(
            r#"
apps:
  backup:
    command: sh -c 'echo backing up'
    schedule: "0 {hour} * * *"
    run_on_start: true
"#
        )
    };
    let mut s = Supervised::start(&yaml(3));
    s.wait_event("run_ended", "backup");
    save(&s, &yaml(4));
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    // The next run is the one the new schedule says, not one now; and none
    // was made due by the edit's turn (before the barrier's).
    let status = status_json(&s);
    let schedule = &app_status(&status, "backup")["schedule"];
    assert!(
        schedule["next_run"]
            .as_str()
            .is_some_and(|t| t.ends_with("T04:00:00Z")),
        "{status}"
    );
    s.barrier();
    assert_eq!(
        s.count("run_due", "backup"),
        1,
        "the schedule edit ran the job again\n{}",
        s.dump()
    );
}

/// `on_dependency_restart` switched off, the dependency restarts, then it
/// is switched on again: the edit "restarts nothing" — yet the app was
/// replaced at once, for a restart that happened while it was `ignore`
/// (what the app had seen of db was kept from before).
#[test]
fn switching_on_dependency_restart_back_on_does_not_replace_for_an_old_restart() {
    let yaml = |policy: &str| {
        format!(
            r#"
apps:
  db:
    command: sleep 1000
    ready: none
  api:
    command: sleep 1000
    ready: none
    depends_on: [db]
    on_dependency_restart: {policy}
"#
        )
    };
    let mut s = Supervised::start(&yaml("restart"));
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    save(&s, &yaml("ignore"));
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    let db = s.running_pids("db");
    for pid in &db {
        // SAFETY: a worker this test's supervisor started.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    s.wait_count("spawned", "db", 2);
    s.wait_count("ready", "db", 2);
    save(&s, &yaml("restart"));
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 3
    });
    // Whatever the edit replaced, it decided in the turn it was applied in.
    s.barrier();
    assert_eq!(
        s.count("dependency_restarted", "api"),
        0,
        "api was replaced by the edit\n{}",
        s.dump()
    );
}

/// The same, with the dependency taken out of `depends_on` and put back.
#[test]
fn a_dependency_removed_and_put_back_does_not_replace_for_an_old_restart() {
    let yaml = |depends: &str| {
        format!(
            r#"
apps:
  db:
    command: sleep 1000
    ready: none
  api:
    command: sleep 1000
    ready: none
    depends_on: {depends}
    on_dependency_restart: restart
"#
        )
    };
    let mut s = Supervised::start(&yaml("[db]"));
    s.wait_for("every instance is ready", |e| e["event"] == "all_ready");
    save(&s, &yaml("[]"));
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    for pid in s.running_pids("db") {
        // SAFETY: a worker this test's supervisor started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    s.wait_count("ready", "db", 2);
    save(&s, &yaml("[db]"));
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 3
    });
    // Whatever the edit replaced, it decided in the turn it was applied in.
    s.barrier();
    assert_eq!(
        s.count("dependency_restarted", "api"),
        0,
        "api was replaced by the edit\n{}",
        s.dump()
    );
}

/// A job whose dependency gave up is held, not running: `trigger` should
/// say why it cannot run, not "a run is going", and `status --json` should
/// not report a run as going.
#[test]
fn trigger_of_a_held_job_says_it_is_held_not_that_a_run_goes() {
    let yaml = r#"
apps:
  db:
    command: sh -c 'exit 1'
    max_restarts: {count: 1, within: 1m}
    backoff: {initial: 50ms}
  job:
    command: echo job
    schedule: "0 3 * * *"
    depends_on: [db]
"#;
    let mut s = Supervised::start(yaml);
    s.wait_event("dependency_failed", "job");
    let trigger = run_client(&s, &["trigger", "job"]);
    let stderr = String::from_utf8_lossy(&trigger.stderr).into_owned();
    let status = status_json(&s);
    let schedule = &app_status(&status, "job")["schedule"];
    // First trigger: it arms a run that cannot start (held).
    let again = run_client(&s, &["trigger", "job"]);
    let again = String::from_utf8_lossy(&again.stderr).into_owned();
    assert!(
        !again.contains("a run is going"),
        "trigger of a held job: {stderr:?} then {again:?}"
    );
    assert_ne!(schedule["running"], true, "{status}");
}

/// A cron time is a whole minute: the run is due then, not up to a second
/// later (croner keeps the sub-second part of the time it is given, so
/// each run came as late as the fraction of the second the supervisor
/// started in).
#[test]
fn a_cron_run_is_due_on_the_whole_minute() {
    // Start half-way through a second.
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    let fraction = Duration::from_nanos(u64::from(since.subsec_nanos()));
    let half = Duration::from_millis(500);
    let wait = if fraction <= half {
        half - fraction
    } else {
        Duration::from_secs(1) + half - fraction
    };
    std::thread::sleep(wait);
    let mut s = Supervised::start(
        r#"
apps:
  minutely:
    command: echo x
    schedule: "* * * * *"
    timezone: UTC
"#,
    );
    s.wait_for("the first apply", |e| e["event"] == "applied");
    let before = SystemTime::now();
    let status = status_json(&s);
    let after = SystemTime::now();
    let schedule = &app_status(&status, "minutely")["schedule"];
    let next_run = humantime::parse_rfc3339(schedule["next_run"].as_str().expect("next_run"))
        .expect("an RFC 3339 time");
    let next_in = schedule["next_in_s"].as_f64().expect("next_in_s");
    let latest = next_run
        .duration_since(before)
        .expect("the next run is ahead")
        .as_secs_f64();
    let earliest = next_run
        .duration_since(after)
        .map_or(0.0, |d| d.as_secs_f64());
    assert!(
        next_in <= latest + 0.1 && next_in >= earliest - 0.1,
        "next_run {} is in {earliest:.3}..{latest:.3}s, but the run is due in {next_in:.3}s",
        schedule["next_run"]
    );
}

/// `check` reads a file of at most 4 MiB; a long unknown name in
/// `depends_on` is compared with every app for a suggestion, at a cost of
/// its length times theirs: 1.2 MB against 2,000 apps took 13 s (a 3 MB
/// file with 40,000 apps, over 5 minutes) — and the supervisor checks each
/// saved version the same way.
#[test]
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4 in cpu_time_of_exited, or killed and waited for"
)]
fn check_of_a_long_unknown_dependency_name_stays_fast() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut yaml = format!(
        "apps:\n  j:\n    command: echo hi\n    depends_on: [{}]\n",
        "j".repeat(1_200_000)
    );
    for i in 0..2000 {
        yaml.push_str(&format!("  a{i}:\n    command: x\n"));
    }
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).expect("written");
    let mut child = Command::new(crate::common::binary())
        .current_dir(dir.path())
        .args(["check", "-f", "ecosystem.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("check runs");
    // Judged by the CPU time check used (1.4 s in a debug build), which a
    // loaded machine does not stretch; the wall clock only bounds the wait.
    let cpu_limit = Duration::from_secs(5);
    let mut used = None;
    let finished = crate::common::eventually(Duration::from_secs(60), || {
        used = cpu_time_of_exited(child.id() as i32);
        used.is_some()
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(finished, "check still ran after a minute");
    let used = used.unwrap_or_default();
    assert!(used < cpu_limit, "check used {used:?} of CPU");
}

/// The CPU time (user and system) of child `pid` once it has exited (it is
/// reaped here), or `None` while it runs.
fn cpu_time_of_exited(pid: i32) -> Option<Duration> {
    // SAFETY: zeroed plain-data structs that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut status = 0;
    // SAFETY: wait4 on our own child, by its pid, without blocking.
    let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    (reaped == pid).then(|| {
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        time(usage.ru_utime) + time(usage.ru_stime)
    })
}
