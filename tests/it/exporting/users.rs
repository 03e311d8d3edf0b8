//! `user:`: a numeric user in a pod and a unit, `nobody` warned about, and
//! user units.

use super::*;

/// A uid with neither a passwd nor a group entry on this machine.
fn absent_id() -> u32 {
    (3_300_000_000u32..3_301_000_000)
        .find(|&id| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(id)).is_ok_and(|u| u.is_none())
                && nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(id))
                    .is_ok_and(|g| g.is_none())
        })
        .expect("an id without an entry")
}

#[test]
fn a_numeric_user_is_run_as_user_in_a_pod_and_user_in_a_unit() {
    let uid = absent_id();
    let yaml = format!("apps:\n  web:\n    command: sleep 77\n    user: {uid}\n");
    let pod = export_yaml("kubernetes", &yaml, &[], &[]);
    assert_eq!(pod.code, 0, "{}", pod.stderr);
    assert!(
        pod.stdout
            .contains(&format!("securityContext:\n          runAsUser: {uid}\n")),
        "{}",
        pod.stdout
    );
    assert!(!pod.stdout.contains("runAsGroup"), "{}", pod.stdout);
    assert!(!pod.stderr.contains("is a name"), "{}", pod.stderr);
    assert!(
        pod.stderr.contains(&format!(
            "note: web: user {uid} has no `group`: in a pod its group is the image's"
        )),
        "{}",
        pod.stderr
    );
    let unit = export_yaml("systemd", &yaml, &[], &[]);
    assert_eq!(unit.code, 0, "{}", unit.stderr);
    assert!(
        unit.stdout.contains(&format!("\nUser={uid}\n")),
        "{}",
        unit.stdout
    );
    assert!(!unit.stdout.contains("Group="), "{}", unit.stdout);
    assert!(
        unit.stderr.contains(&format!(
            "ecosystem.yaml:4:11: warning: this machine has no user of uid {uid}: systemd starts a unit with User={uid} only where one exists"
        )),
        "{}",
        unit.stderr
    );

    // A uid this machine has (root's) is written as the number too, and
    // without the warning; a string of digits is a number as well, and a
    // YAML integer is written as systemd reads numbers (0x10 → 16).
    let known = "apps:\n  web:\n    command: sleep 77\n    user: \"0\"\n    group: 0x10\n";
    let unit = export_yaml("systemd", known, &[], &[]);
    assert!(
        unit.stdout.contains("\nUser=0\nGroup=16\n"),
        "{}",
        unit.stdout
    );
    assert!(!unit.stderr.contains("no user of uid"), "{}", unit.stderr);
    let pod = export_yaml("kubernetes", known, &[], &[]);
    assert!(
        pod.stdout
            .contains("runAsGroup: 16\n          runAsUser: 0\n"),
        "{}",
        pod.stdout
    );
}

/// systemd-analyze calls `User=nobody` unsafe; the export says so first,
/// at the `user` line, so an example must not run as nobody (kitchen-sink
/// runs as a uid of its own) and a user's file that does is told why.
#[test]
fn user_nobody_is_warned_about_where_it_is_written() {
    assert!(
        nix::unistd::User::from_name("nobody").is_ok_and(|u| u.is_some()),
        "this test needs the user nobody, which every Linux has"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: sleep 77\n    user: nobody\n",
    )
    .unwrap();
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("ecosystem.yaml:4:11: warning: systemd calls User=nobody unsafe"),
        "{}",
        run.stderr
    );
    let verify = systemd_verify(&units);
    assert!(
        verify
            .iter()
            .any(|l| l.contains("Special user nobody configured")),
        "what the warning forestalls: {verify:?}"
    );
}

#[test]
fn user_units_switch_no_user_and_are_wanted_by_the_default_target() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: sleep 77\n    user: daemon\n    group: daemon\n",
    )
    .unwrap();
    let system = supervise(dir.path(), &["export", "systemd"]);
    assert!(
        system.stdout.contains("User=daemon\nGroup=daemon\n"),
        "{}",
        system.stdout
    );
    assert!(system.stdout.contains("WantedBy=multi-user.target"));
    let user = supervise(dir.path(), &["export", "systemd", "--user"]);
    assert_eq!(user.code, 0, "{}", user.stderr);
    assert!(!user.stdout.contains("User="), "{}", user.stdout);
    assert!(
        user.stdout.contains("WantedBy=default.target"),
        "{}",
        user.stdout
    );
    assert!(
        user.stderr
            .contains("ecosystem.yaml:4:11: warning: a user's systemd cannot switch users"),
        "{}",
        user.stderr
    );
    assert!(
        user.stderr
            .contains("ecosystem.yaml:5:12: warning: a user's systemd cannot switch groups")
    );
}
