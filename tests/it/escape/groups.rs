//! Process groups and the environment: a worker that joins another process
//! group, a stranger in an instance's group, and a child that clears its
//! environment.

use super::*;

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
