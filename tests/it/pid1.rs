//! supervise as a container's init: PID 1 of a new PID namespace. It must reap
//! the orphans its workers' children leave behind (they are reparented to PID
//! 1) and stop everything on SIGTERM.

use crate::common::*;

#[test]
#[ignore = "needs root"]
fn as_pid_1_it_reaps_orphans_and_stops_everything_on_sigterm() {
    require_root();
    let permitted = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        permitted,
        "cannot create a PID namespace here (unshare --pid failed)"
    );
    let mut s = Supervised::start_wrapped(
        r#"apps:
  parent:
    command: [sh, -c, "for i in 1 2 3 4 5; do (sleep 0.2 &); done; echo orphaned; exec sleep 1000"]
    instances: 2
    ready: none
"#,
        &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
        &[],
        |_| {},
    );
    s.wait_line("orphaned");
    s.wait_line("orphaned");
    // The supervisor is unshare's child on the host, PID 1 inside.
    let supervisor = children_of(s.pid())[0];
    let status = std::fs::read_to_string(format!("/proc/{supervisor}/status")).unwrap();
    let ns_pid = status
        .lines()
        .find(|l| l.starts_with("NSpid:"))
        .unwrap()
        .to_string();
    assert!(
        ns_pid.trim_end().ends_with("\t1"),
        "PID 1 in its namespace: {ns_pid}"
    );

    // Ten `sleep 0.2` orphans were adopted by PID 1; once they exit they must
    // not linger as zombies.
    let no_zombies = eventually(WAIT, || {
        let sleepers = descendants_of(supervisor)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("0.2"))
            })
            .count();
        sleepers == 0
            && children_of(supervisor)
                .iter()
                .all(|p| process_state(*p) != Some('Z'))
    });
    // Every orphan has exited and none is a zombie: there is nothing left
    // that could become one (the workers exec sleep 1000).
    assert!(no_zombies, "orphans reaped");

    let tree = descendants_of(supervisor);
    // SAFETY: signalling the supervisor this test started, by pid.
    unsafe { libc::kill(supervisor, libc::SIGTERM) };
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
    assert!(s.events.iter().any(|e| e["event"] == "exiting"));
    let left: Vec<i32> = tree.into_iter().filter(|p| !is_gone(*p)).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
