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

mod cgroups;
mod children;
mod groups;
mod runs;

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
