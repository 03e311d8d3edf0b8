//! `scale`: it edits only the `instances` value, under the file's lock (no
//! update lost), in place through a hard link or a bind mount, never in an
//! invalid file, and waits for the result.

use super::*;

#[test]
fn scale_edits_only_that_value_and_waits() {
    let s = started(APPS);
    let original = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    let output = client(&s, &["scale", "web", "+1"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "web: instances 2 → 3 (edited ecosystem.yaml)\n"
    );
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert_eq!(edited, original.replace("instances: 2", "instances: 3"));
    assert_eq!(pids_of(&status(&s), "web").len(), 3);

    let output = client(&s, &["scale", "web", "-1"]);
    assert!(
        output.status.success(),
        "`scale web -1` is a count, not a flag: {output:?}"
    );
    let output = client(&s, &["scale", "api", "2"]);
    assert!(output.status.success(), "{output:?}");
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(
        edited.contains("  api:\n    instances: 2\n    command: [sleep"),
        "{edited}"
    );
}

/// Ten `scale +1` at once: each edit holds the file's lock from its read to
/// its write, so none is lost, each says the step it made, and each waits
/// for what the file says in the end.
#[test]
fn concurrent_scales_lose_no_update() {
    const SCALES: u32 = 10;
    let s = started(APPS);
    let children: Vec<Child> = (0..SCALES)
        .map(|_| {
            std::process::Command::new(binary())
                .current_dir(s.dir.path())
                .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
                .args([
                    "scale",
                    "-f",
                    "ecosystem.yaml",
                    "web",
                    "+1",
                    "--timeout",
                    "20s",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the client runs")
        })
        .collect();
    let mut steps: Vec<String> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("the client ends");
            assert!(output.status.success(), "{output:?}");
            let said = stdout(&output);
            let step = said.lines().find(|l| l.contains('→'));
            step.unwrap_or_else(|| panic!("no step in {said:?}"))
                .to_string()
        })
        .collect();
    steps.sort();
    let mut expected: Vec<String> = (2..2 + SCALES)
        .map(|n| format!("web: instances {n} → {} (edited ecosystem.yaml)", n + 1))
        .collect();
    expected.sort();
    assert_eq!(steps, expected);
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(edited.contains("    instances: 12\n"), "{edited}");
    assert_eq!(pids_of(&status(&s), "web").len(), 12);
}

/// A hard link is the same file: a scale through one name is written in
/// place (a rename would give that name a new inode, which the supervisor,
/// watching the other name, would never see), and the names stay linked.
#[test]
fn scale_through_a_hard_link_keeps_the_link_and_is_applied() {
    use std::os::unix::fs::MetadataExt;
    let s = started(APPS);
    std::fs::hard_link(s.path("ecosystem.yaml"), s.path("hard.yaml")).unwrap();
    let inode = std::fs::metadata(s.path("ecosystem.yaml")).unwrap().ino();
    let output = client(&s, &["-f", "hard.yaml", "scale", "web", "3"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "web: instances 2 → 3 (edited hard.yaml)\n");
    for name in ["ecosystem.yaml", "hard.yaml"] {
        let metadata = std::fs::metadata(s.path(name)).unwrap();
        assert_eq!((metadata.ino(), metadata.nlink()), (inode, 2), "{name}");
    }
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(edited.contains("    instances: 3\n"), "{edited}");
    assert_eq!(pids_of(&status(&s), "web").len(), 3);
}

/// A file bind-mounted over another (Docker's `-v file:file`, a Kubernetes
/// `subPath`) cannot be renamed over (EBUSY): it is written in place, and
/// the supervisor of the file mounted applies it.
#[test]
#[ignore = "needs root"]
fn scale_through_a_bind_mounted_file_writes_it_in_place() {
    require_root();
    /// Unmounts what the test mounted, and only that, when it ends.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let s = started(APPS);
    let mounted = s.path("mounted.yaml");
    std::fs::write(&mounted, "").unwrap();
    let mount = std::process::Command::new("mount")
        .arg("--bind")
        .arg(s.path("ecosystem.yaml"))
        .arg(&mounted)
        .status()
        .expect("mount runs");
    assert!(mount.success(), "mount --bind failed");
    let _unmount = Unmount(mounted.clone());
    let output = client(&s, &["-f", "mounted.yaml", "scale", "web", "3"]);
    assert!(output.status.success(), "{output:?}");
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(edited.contains("    instances: 3\n"), "{edited}");
    assert_eq!(std::fs::read_to_string(&mounted).unwrap(), edited);
    assert_eq!(pids_of(&status(&s), "web").len(), 3);
    let left: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn scale_refuses_an_invalid_file_and_leaves_it_untouched() {
    let s = started(APPS);
    let broken = format!("{APPS}    instnces: 3\n");
    std::fs::write(s.path("ecosystem.yaml"), &broken).unwrap();
    let output = client(&s, &["scale", "web", "5"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid"));
    assert_eq!(
        std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap(),
        broken
    );
}
