//! No escape: every process an instance starts is tracked, waited for and
//! stopped — however it daemonizes (setsid, a double fork, setpgid) — in both
//! tracking modes: cgroups (here: the `unified` hierarchy, writable as root)
//! and the environment (`--cgroups off`).
//!
//! Each test gives its workers a unique mark as their last argument, which
//! every forked descendant keeps in its command line, and looks for it in
//! /proc (a mark in argv, not the environment: the environment is what the
//! supervisor itself tracks by when it has no cgroups).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

/// The worker: forks an escaping child (`setsid`, `double`, `setpgid`),
/// which then `stay`s, `drain`s for 0.5 s on SIGTERM, is `stubborn` (ignores
/// it), or `burn`s CPU, and prints "escaped"; the leader sleeps, or with
/// `exit` exits 1 after 0.3 s.
const WORKER: &str = r#"
import os, signal, sys, time
how, what = sys.argv[1], sys.argv[2]
def escaped():
    if what == "drain":
        def drain(*_):
            time.sleep(0.5)
            os._exit(0)
        signal.signal(signal.SIGTERM, drain)
    elif what == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Said once the signal disposition is set, so the test's SIGTERM finds it.
    print("escaped", flush=True)
    while what == "burn":
        pass
    while True:
        time.sleep(1000)
if os.fork() == 0:
    if how == "setsid":
        os.setsid()
        escaped()
    elif how == "setpgid":
        os.setpgid(0, 0)
        escaped()
    else:
        if os.fork() == 0:
            os.setsid()
            escaped()
        os._exit(0)
if what == "exit":
    time.sleep(0.3)
    sys.exit(1)
while True:
    time.sleep(1000)
"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Cgroups,
    Environment,
}

const MODES: [Mode; 2] = [Mode::Cgroups, Mode::Environment];

/// A unique mark for one test run.
fn mark(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Live (not zombie) processes with `mark` in their command line.
fn marked(mark: &str) -> Vec<i32> {
    with_argument(mark).into_iter().collect()
}

/// An app of one worker escaping `how`, then doing `what`.
fn app(mark: &str, how: &str, what: &str, extra: &str) -> String {
    format!(
        r#"apps:
  esc:
    command: [{python}, worker.py, {how}, {what}, "{mark}"]
    ready: none
    kill_timeout: 3s
{extra}"#,
        python = python()
    )
}

/// The real interpreter, not a shim (pyenv's `python3` is a bash script
/// whose own children would be counted as the worker's).
fn python() -> String {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Start a supervisor in `mode`; `None` (and a printed "skipped") when cgroup
/// mode was asked for and the machine has no writable cgroup v2.
fn start(mode: Mode, yaml: &str) -> Option<Supervised> {
    let args: &[&str] = match mode {
        Mode::Cgroups => &[],
        Mode::Environment => &["--cgroups", "off"],
    };
    let mut s = Supervised::start_with(yaml, args, |dir| {
        std::fs::write(dir.join("worker.py"), WORKER).expect("worker.py");
    });
    in_mode(&mut s, mode).then_some(s)
}

/// Whether `s` tracks in `mode`: `false` (and a printed "skipped") when
/// cgroup mode was asked for and this machine has no writable cgroup v2 —
/// checked here independently, so that a supervisor that wrongly falls back
/// fails the test instead of skipping it.
fn in_mode(s: &mut Supervised, mode: Mode) -> bool {
    let tracking = s.wait_for("the tracking mode", |e| e["event"] == "tracking");
    let got = tracking["mode"].as_str().unwrap_or_default().to_string();
    match (mode, got.as_str()) {
        (Mode::Cgroups, "cgroup") | (Mode::Environment, "environment") => true,
        (Mode::Cgroups, _) if !cgroups_writable() => {
            println!("skipped: no writable cgroup v2 ({})", tracking["message"]);
            false
        }
        _ => panic!("asked for {mode:?}, got {got}: {}", tracking["message"]),
    }
}

/// Whether a child cgroup can be made in our own cgroup v2 (read from
/// /proc/self/cgroup and /proc/self/mountinfo, as the supervisor does).
fn cgroups_writable() -> bool {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(ours) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        return false;
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some(dir) = effects::cgroup::mounted_at(&mountinfo, ours.trim()) else {
        return false;
    };
    let probe = dir.join(format!("escape-test-probe.{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    made
}

/// Wait until the worker's escaped child is set up.
fn escaped(s: &mut Supervised, mark: &str, count: usize) {
    s.wait_line("escaped");
    assert!(
        eventually(WAIT, || marked(mark).len() >= count),
        "expected {count} marked processes, found {:?}",
        marked(mark)
    );
}

/// The supervisor (signalled) exits, leaving no marked process and, with
/// cgroups, no cgroup of its run.
fn ends_clean(s: &mut Supervised, mode: Mode, mark: &str, limit: Duration) {
    s.wait_exit(WAIT);
    assert!(
        mode != Mode::Cgroups || cgroups_gone(s.pid()),
        "cgroups left: {:?}",
        cgroup_roots()
    );
    assert!(none_left(mark, limit), "{mode:?}: left: {:?}", marked(mark));
}

fn none_left(mark: &str, limit: Duration) -> bool {
    eventually(limit, || marked(mark).is_empty())
}

/// The cgroups of supervisor `pid`'s run are gone (cgroup mode).
fn cgroups_gone(pid: i32) -> bool {
    let suffix = format!(".{pid}");
    eventually(Duration::from_secs(3), || {
        !cgroup_roots()
            .iter()
            .any(|p| p.to_string_lossy().ends_with(&suffix))
    })
}

/// Every `supervise.*` directory under the cgroup v2 mounts.
fn cgroup_roots() -> Vec<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo
        .lines()
        .filter(|l| l.contains(" - cgroup2 "))
        .filter_map(|l| l.split_whitespace().nth(4).map(|p| p.to_string()))
        .flat_map(|mount| {
            std::fs::read_dir(Path::new(&mount))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.starts_with("supervise."))
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn escaped_children_are_stopped_with_their_instance() {
    for mode in MODES {
        for how in ["setsid", "double", "setpgid"] {
            let mark = mark(how);
            let Some(mut s) = start(mode, &app(&mark, how, "stay", "")) else {
                continue;
            };
            escaped(&mut s, &mark, 2);
            let output = std::process::Command::new(binary())
                .current_dir(s.dir.path())
                .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
                .args(["stop", "esc"])
                .output()
                .expect("the client runs");
            assert!(output.status.success(), "{output:?}");
            s.wait_event("stopped", "esc");
            assert!(
                none_left(&mark, Duration::from_secs(2)),
                "{mode:?} {how}: left after stopping the app: {:?}",
                marked(&mark)
            );
            s.signal(libc::SIGTERM);
            ends_clean(&mut s, mode, &mark, Duration::from_secs(2));
        }
    }
}

#[test]
fn escaped_children_go_at_shutdown_and_when_supervise_is_killed() {
    for mode in MODES {
        for how in ["setsid", "double", "setpgid"] {
            for signal in [libc::SIGTERM, libc::SIGKILL] {
                let mark = mark(how);
                let Some(mut s) = start(mode, &app(&mark, how, "stay", "")) else {
                    continue;
                };
                escaped(&mut s, &mark, 2);
                s.signal(signal);
                ends_clean(&mut s, mode, &mark, Duration::from_secs(3));
            }
        }
    }
}

#[test]
fn a_crash_loop_of_escapers_leaks_at_most_the_current_one() {
    for mode in MODES {
        let mark = mark("loop");
        let extra = "    restart: always\n    backoff: {initial: 100ms, factor: 1}\n";
        let Some(mut s) = start(mode, &app(&mark, "setsid", "exit", extra)) else {
            continue;
        };
        let mut most = 0;
        let deadline = Instant::now() + WAIT;
        while s.count("exited", "esc") < 5 {
            assert!(Instant::now() < deadline, "{}", s.dump());
            most = most.max(marked(&mark).len());
            let _ = s.next_within(Duration::from_millis(20), |e| e["event"] == "exited");
        }
        // The leader and its escaped child: two marked processes at most.
        assert!(most <= 2, "{mode:?}: {most} marked processes at once");
        s.signal(libc::SIGTERM);
        ends_clean(&mut s, mode, &mark, Duration::from_secs(2));
    }
}

/// Without cgroups, a crashed worker's escaped child is found by its token,
/// which cannot be read while the child is within an `execve`. These
/// children do nothing but exec for their first seconds, so about one look
/// in six falls within one: of ten crashed instances, each escaped child
/// must still be killed with its instance.
#[test]
fn without_cgroups_an_escaped_child_caught_within_an_exec_is_killed() {
    let mark = mark("execing");
    let yaml = format!(
        "apps:\n  esc:\n    command: 'setsid sh again.sh 3000 {mark} & sleep 0.1; exit 1'\n    instances: 10\n    ready: none\n    restart: never\n"
    );
    let mut s = Supervised::start_with(&yaml, &["--cgroups", "off"], |dir| {
        std::fs::write(
            dir.join("again.sh"),
            "if [ \"$1\" -gt 0 ]; then exec sh again.sh $(($1 - 1)) \"$2\"; fi\nexec perl -e 'sleep 1000' \"$2\"\n",
        )
        .expect("again.sh");
    });
    assert!(in_mode(&mut s, Mode::Environment));
    s.wait_count("exited", "esc", 10);
    assert!(
        none_left(&mark, Duration::from_secs(10)),
        "escaped children outlived their instances: {:?}\n{}",
        marked(&mark),
        s.dump()
    );
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success());
}

/// Start one worker whose escaped child does `what`, stop everything with
/// SIGTERM: the `stopped` event (its `took_ms` and `killed`), once the
/// supervisor has exited clean. `None` when the mode is not available.
fn stop_escaper(mode: Mode, what: &str, kill_timeout: &str) -> Option<(u64, bool)> {
    let mark = mark(what);
    let yaml = app(&mark, "setsid", what, "").replace("kill_timeout: 3s", kill_timeout);
    let mut s = start(mode, &yaml)?;
    escaped(&mut s, &mark, 2);
    s.signal(libc::SIGTERM);
    let stopped = s.wait_event("stopped", "esc");
    ends_clean(&mut s, mode, &mark, Duration::from_secs(1));
    let took = stopped["took_ms"].as_u64().expect("took_ms");
    Some((took, stopped["killed"].as_bool().expect("killed")))
}

#[test]
fn a_stop_waits_for_an_escaped_child_up_to_kill_timeout() {
    for mode in MODES {
        // One drains in 0.5 s: the stop waits for it, and no SIGKILL.
        if let Some((took, killed)) = stop_escaper(mode, "drain", "kill_timeout: 3s") {
            assert!(
                (450..3000).contains(&took) && !killed,
                "{mode:?}: {took} ms, {killed}"
            );
        }
        // One ignores SIGTERM: killed at kill_timeout (1 s), not before.
        if let Some((took, killed)) = stop_escaper(mode, "stubborn", "kill_timeout: 1s") {
            assert!(took >= 1000 && killed, "{mode:?}: {took} ms, {killed}");
        }
    }
}

#[test]
fn a_killed_undertaker_is_replaced_and_still_kills_everything() {
    for mode in MODES {
        let mark = mark("undertaker");
        let Some(mut s) = start(mode, &app(&mark, "double", "stay", "")) else {
            continue;
        };
        escaped(&mut s, &mark, 2);
        let undertaker = child_with_argument(s.pid(), "__undertaker").expect("an undertaker");
        // SAFETY: killing the undertaker of the supervisor we started.
        unsafe {
            libc::kill(undertaker, libc::SIGKILL);
        }
        let started = Instant::now();
        let restarted = s.wait_for("a new undertaker", |e| e["event"] == "undertaker_restarted");
        // At once (a loaded machine may take a few seconds; a supervisor that
        // missed the death would take forever).
        assert!(started.elapsed() < Duration::from_secs(5), "{restarted}");
        assert!(
            child_with_argument(s.pid(), "__undertaker").is_some_and(|pid| pid != undertaker),
            "a new undertaker runs"
        );
        s.signal(libc::SIGKILL);
        ends_clean(&mut s, mode, &mark, Duration::from_secs(3));
    }
}

#[test]
fn status_counts_the_cpu_of_an_escaped_child() {
    let mark = mark("burn");
    let Some(mut s) = start(Mode::Cgroups, &app(&mark, "setsid", "burn", "")) else {
        return;
    };
    escaped(&mut s, &mark, 2);
    // Judged by work, not by a share of the clock (which a loaded machine
    // takes from the burning child): the CPU time status gives the instance
    // (its share over its uptime) is at least what its processes, the
    // escaped child among them, had used just before the request, once
    // that is half a second — the leader alone sleeps.
    let ticks = ticks_per_second();
    let mut last = None;
    let counted = eventually(WAIT, || {
        let used: u64 = marked(&mark).into_iter().filter_map(cpu_ticks).sum();
        if used < ticks / 2 {
            return false;
        }
        let output = std::process::Command::new(binary())
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .args(["status", "--json"])
            .output()
            .expect("the client runs");
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        assert!(
            status["tracking"]
                .as_str()
                .unwrap_or_default()
                .starts_with("cgroup"),
            "{status}"
        );
        let worker = &status["apps"][0]["workers"][0];
        let shown = worker["cpu_percent"].as_f64().unwrap_or(0.0) / 100.0
            * worker["uptime_s"].as_f64().unwrap_or(0.0)
            * ticks as f64;
        last = Some((used, shown, worker.clone()));
        shown + 1.0 >= used as f64
    });
    assert!(
        counted,
        "the escaped child's CPU is the instance's: used {} ticks before, status shows {} ({})",
        last.as_ref().map_or(0, |l| l.0),
        last.as_ref().map_or(0.0, |l| l.1),
        last.as_ref()
            .map_or(serde_json::Value::Null, |l| l.2.clone())
    );
    s.signal(libc::SIGTERM);
    ends_clean(&mut s, Mode::Cgroups, &mark, Duration::from_secs(2));
}

/// The CPU time (user and system) process `pid` has used, in clock ticks.
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as u64 }
}

/// Joins the process group named by `a.pid` (another instance's) or, with
/// `parent`, its parent's (the supervisor's), then sleeps.
const HOPPER: &str = r#"
import os, sys, time
where = sys.argv[1]
if where == "parent":
    target = os.getpgid(os.getppid())
else:
    while not os.path.exists("a.pid"):
        time.sleep(0.01)
    target = int(open("a.pid").read())
os.setpgid(0, target)
print("hopped", flush=True)
time.sleep(1000)
"#;

/// `supervise stop NAME` against `s`; it must succeed.
fn stop(s: &Supervised, name: &str) {
    let output = std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(["stop", name])
        .output()
        .expect("the client runs");
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn a_worker_that_joins_another_process_group_is_still_stopped() {
    for mode in MODES {
        let mark = mark("hop");
        let yaml = format!(
            "apps:\n  hop:\n    command: [{python}, hopper.py, parent, \"{mark}\"]\n    ready: none\n    kill_timeout: 2s\n",
            python = python()
        );
        let args: &[&str] = match mode {
            Mode::Cgroups => &[],
            Mode::Environment => &["--cgroups", "off"],
        };
        let mut s = Supervised::start_with(&yaml, args, |dir| {
            std::fs::write(dir.join("hopper.py"), HOPPER).expect("hopper.py");
        });
        if !in_mode(&mut s, mode) {
            continue;
        }
        s.wait_line("hopped");
        stop(&s, "hop");
        let stopped = s.wait_event("stopped", "hop");
        assert!(
            stopped["killed"] == false && stopped["took_ms"].as_u64() < Some(1000),
            "{mode:?}: the stop signal reached it: {stopped}"
        );
        assert!(
            none_left(&mark, Duration::from_secs(1)),
            "{mode:?}: {:?}",
            marked(&mark)
        );
        s.signal(libc::SIGTERM);
        assert!(s.wait_exit(WAIT).success());
    }
}

#[test]
fn with_cgroups_stopping_an_instance_spares_a_stranger_in_its_group() {
    let (a, b) = (mark("a"), mark("b"));
    let yaml = format!(
        "apps:\n  a:\n    command: [{python}, -c, \"import os, time; open('a.pid.tmp', 'w').write(str(os.getpid())); os.rename('a.pid.tmp', 'a.pid'); time.sleep(1000)\", \"{a}\"]\n    ready: none\n  b:\n    command: [{python}, hopper.py, a, \"{b}\"]\n    ready: none\n",
        python = python()
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("hopper.py"), HOPPER).expect("hopper.py");
    });
    if !in_mode(&mut s, Mode::Cgroups) {
        return;
    }
    s.wait_line("hopped");
    stop(&s, "a");
    let stopped = s.wait_event("stopped", "a");
    assert!(stopped["killed"] == false, "{stopped}");
    assert!(none_left(&a, Duration::from_secs(1)));
    assert_eq!(marked(&b).len(), 1, "b, in a's process group, was spared");
    s.signal(libc::SIGTERM);
    ends_clean(&mut s, Mode::Cgroups, &b, Duration::from_secs(1));
}

/// Starts a child in a new session with an empty environment (no
/// `SUPERVISE_RUN`), and sleeps.
const CLEARS_ENV: &str = r#"
import subprocess, sys, time
child = "import os, time; os.setsid(); print('escaped', flush=True); time.sleep(1000)"
subprocess.Popen([sys.executable, "-c", child, sys.argv[1]], env={})
time.sleep(1000)
"#;

#[test]
fn a_child_that_clears_its_environment_is_stopped_while_its_leader_lives() {
    for mode in MODES {
        let mark = mark("clearenv");
        let yaml = format!(
            "apps:\n  esc:\n    command: [{python}, clears.py, \"{mark}\"]\n    ready: none\n    kill_timeout: 3s\n",
            python = python()
        );
        let args: &[&str] = match mode {
            Mode::Cgroups => &[],
            Mode::Environment => &["--cgroups", "off"],
        };
        let mut s = Supervised::start_with(&yaml, args, |dir| {
            std::fs::write(dir.join("clears.py"), CLEARS_ENV).expect("clears.py");
        });
        if !in_mode(&mut s, mode) {
            continue;
        }
        escaped(&mut s, &mark, 2);
        stop(&s, "esc");
        let stopped = s.wait_event("stopped", "esc");
        assert!(stopped["killed"] == false, "{mode:?}: {stopped}");
        assert!(
            none_left(&mark, Duration::from_secs(1)),
            "{mode:?}: {:?}",
            marked(&mark)
        );
        s.signal(libc::SIGTERM);
        ends_clean(&mut s, mode, &mark, Duration::from_secs(1));
    }
}

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

/// The cgroup v2 directory of this test process (the supervisor's base).
fn own_cgroup_dir() -> Option<std::path::PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let ours = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    effects::cgroup::mounted_at(&mountinfo, ours.trim())
}

/// `leave`: the leader moves itself into the cgroup named by argv[2]; `nest`:
/// it makes a cgroup below its own and moves a child there, which drains on
/// SIGTERM; `bomb`: it grows a binary tree of argv[2] processes that each
/// call setsid, and exits while the tree still grows.
const CGROUP_TRICKS: &str = r#"
import os, signal, sys, time
what = sys.argv[1]
if what == "leave":
    open(os.path.join(sys.argv[2], "cgroup.procs"), "w").write(str(os.getpid()))
    print("escaped", flush=True)
    time.sleep(1000)
elif what == "nest":
    mine = [l[3:].strip() for l in open("/proc/self/cgroup") if l.startswith("0::")][0]
    mount = sys.argv[2]
    sub = os.path.join(mount, mine.lstrip("/"), "sub")
    os.mkdir(sub)
    if os.fork() == 0:
        open(os.path.join(sub, "cgroup.procs"), "w").write(str(os.getpid()))
        def drain(*_):
            print("drained", flush=True)
            os._exit(0)
        signal.signal(signal.SIGTERM, drain)
        print("escaped", flush=True)
        while True:
            time.sleep(1000)
    time.sleep(1000)
elif what == "bomb":
    def grow(budget):
        for share in (budget // 2, budget - budget // 2):
            if share > 0 and os.fork() == 0:
                os.setsid()
                grow(share - 1)
                time.sleep(1000)
                os._exit(0)
    grow(int(sys.argv[2]))
    sys.exit(1)
"#;

fn tricks(mode: Mode, mark: &str, what: &str, arg: &str, extra: &str) -> Option<Supervised> {
    let yaml = format!(
        "apps:\n  esc:\n    command: [{python}, tricks.py, {what}, \"{arg}\", \"{mark}\"]\n    ready: none\n    kill_timeout: 3s\n{extra}",
        python = python()
    );
    let args: &[&str] = match mode {
        Mode::Cgroups => &[],
        Mode::Environment => &["--cgroups", "off"],
    };
    let mut s = Supervised::start_with(&yaml, args, |dir| {
        std::fs::write(dir.join("tricks.py"), CGROUP_TRICKS).expect("tricks.py");
    });
    in_mode(&mut s, mode).then_some(s)
}

#[test]
fn with_cgroups_a_leader_that_moves_to_another_cgroup_is_still_stopped() {
    let Some(base) = own_cgroup_dir() else {
        return;
    };
    let mark = mark("leave");
    let Some(mut s) = tricks(Mode::Cgroups, &mark, "leave", &base.to_string_lossy(), "") else {
        return;
    };
    escaped(&mut s, &mark, 1);
    stop(&s, "esc");
    let stopped = s.wait_event("stopped", "esc");
    assert!(
        stopped["killed"] == false && stopped["took_ms"].as_u64() < Some(1000),
        "{stopped}"
    );
    s.signal(libc::SIGTERM);
    ends_clean(&mut s, Mode::Cgroups, &mark, Duration::from_secs(1));
}

#[test]
fn with_cgroups_a_cgroup_made_below_an_instance_is_signalled_and_removed() {
    let Some(base) = own_cgroup_dir() else {
        return;
    };
    // The mount point: our own cgroup's path stripped from its directory.
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let ours = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/")
        .trim()
        .trim_start_matches('/')
        .to_string();
    let mount = base
        .to_string_lossy()
        .trim_end_matches(&ours)
        .trim_end_matches('/')
        .to_string();
    let mark = mark("nest");
    let extra = "    restart: always\n";
    let Some(mut s) = tricks(Mode::Cgroups, &mark, "nest", &mount, extra) else {
        return;
    };
    escaped(&mut s, &mark, 2);
    // The stop signal reaches the child in the nested cgroup: it drains.
    stop(&s, "esc");
    s.wait_line("drained");
    let stopped = s.wait_event("stopped", "esc");
    assert!(stopped["killed"] == false, "{stopped}");
    assert!(
        none_left(&mark, Duration::from_secs(1)),
        "{:?}",
        marked(&mark)
    );
    s.signal(libc::SIGTERM);
    ends_clean(&mut s, Mode::Cgroups, &mark, Duration::from_secs(1));
}

#[test]
fn a_crash_loop_of_fork_trees_leaks_nothing() {
    for mode in MODES {
        let mark = mark("bomb");
        let extra = "    restart: always\n    backoff: {initial: 10ms, factor: 1}\n";
        let Some(mut s) = tricks(mode, &mark, "bomb", "100", extra) else {
            continue;
        };
        let mut most = 0;
        let deadline = Instant::now() + WAIT;
        while s.count("exited", "esc") < 20 {
            assert!(Instant::now() < deadline, "{}", s.dump());
            most = most.max(marked(&mark).len());
            let _ = s.next_within(Duration::from_millis(20), |e| e["event"] == "exited");
        }
        // One leader's tree, and the previous one's while it dies.
        assert!(
            most <= 2 * 100 + 2,
            "{mode:?}: {most} marked processes at once"
        );
        s.signal(libc::SIGTERM);
        ends_clean(&mut s, mode, &mark, Duration::from_secs(3));
    }
}

#[test]
fn where_no_instance_cgroup_can_be_made_the_environment_is_used() {
    let Some(base) = own_cgroup_dir() else {
        return;
    };
    if !cgroups_writable() {
        println!("skipped: no writable cgroup v2");
        return;
    }
    // A cgroup that allows two levels below it: the run's root and its
    // `instances/`, but no instance.
    let limited = base.join(format!("escape-test-depth.{}", std::process::id()));
    std::fs::create_dir(&limited).expect("a test cgroup");
    std::fs::write(limited.join("cgroup.max.depth"), "2").expect("cgroup.max.depth");
    let enter = format!(
        "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
        limited.display()
    );
    let mark = mark("depth");
    let mut s = Supervised::start_wrapped(
        &app(&mark, "setsid", "stay", ""),
        &["sh", "-c", &enter],
        &[],
        |dir| {
            std::fs::write(dir.join("worker.py"), WORKER).expect("worker.py");
        },
    );
    let tracking = s.wait_for("the tracking mode", |e| e["event"] == "tracking");
    assert_eq!(tracking["mode"], "environment", "{tracking}");
    assert!(
        tracking["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot create an instance's cgroup")),
        "{tracking}"
    );
    escaped(&mut s, &mark, 2);
    assert_eq!(s.count("start_failed", "esc"), 0, "{}", s.dump());
    s.signal(libc::SIGTERM);
    ends_clean(&mut s, Mode::Environment, &mark, Duration::from_secs(2));
    assert!(
        eventually(Duration::from_secs(2), || std::fs::remove_dir(&limited)
            .is_ok()),
        "the test cgroup is left empty"
    );
}
