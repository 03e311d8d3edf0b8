//! Tricks with cgroups: a leader that moves to another cgroup, a cgroup made
//! below an instance's, a crash loop of fork trees, and the environment mode
//! where no instance cgroup can be made.

use super::*;

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
