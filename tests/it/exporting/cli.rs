//! The command itself: `--strict`, an invalid file's diagnostics and exit
//! code, one app only, `--dir` (links replaced, stale units named), and a
//! stdout that cannot take the export.

use super::*;

#[test]
fn a_file_that_loses_nothing_passes_strict() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: sleep 77\n    instances: 2\n",
    )
    .unwrap();
    // The default backoff is exponential: systemd keeps it from 254 on.
    for args in [
        &["kubernetes"][..],
        &["systemd", "--systemd-version", "254"][..],
    ] {
        let target = args[0];
        let run = supervise(
            dir.path(),
            &[&["export"][..], args, &["--strict"][..]].concat(),
        );
        assert_eq!(run.code, 0, "{target}: {}", run.stderr);
        assert!(run.stderr.contains("nothing lost"), "{}", run.stderr);
    }
}

#[test]
fn an_invalid_file_gets_checks_diagnostics_and_exit_1() {
    let dir = root().join("tests/it/fixtures/invalid");
    for fixture in [
        "several-mixed.yaml",
        "unknown-app-key.yaml",
        "syntax-tab-indentation.yaml",
    ] {
        let check = supervise(&dir, &["check", "-f", fixture]);
        assert_eq!(check.code, 1);
        for target in ["kubernetes", "systemd"] {
            let run = supervise(&dir, &["export", target, "-f", fixture]);
            assert_eq!(run.code, 1, "{fixture} / {target}");
            assert_eq!(run.stdout, "", "nothing is exported");
            assert_eq!(
                run.stderr, check.stdout,
                "{fixture} / {target}: the same report as check"
            );
        }
    }
    let missing = supervise(
        root(),
        &["export", "kubernetes", "-f", "/nonexistent/ecosystem.yaml"],
    );
    assert_eq!(missing.code, 2, "an unreadable file is exit 2");
    let unknown = supervise(
        root(),
        &[
            "export",
            "systemd",
            "-f",
            "examples/hello/ecosystem.yaml",
            "--app",
            "nope",
        ],
    );
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains("no app named `nope`"),
        "{}",
        unknown.stderr
    );
    assert!(
        unknown.stderr.contains("it has: hello"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn one_app_only() {
    let run = supervise(
        root(),
        &[
            "export",
            "systemd",
            "-f",
            "examples/stack/ecosystem.yaml",
            "--app",
            "api",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The `# NAME` lines (a file's own comments have more words).
    let files: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("# ") && l.split(' ').count() == 2)
        .collect();
    assert_eq!(
        files,
        ["# api@.service", "# api.socket", "# api.target"],
        "{}",
        run.stdout
    );
    let run = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/stack/ecosystem.yaml",
            "--app",
            "nightly",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("kind: CronJob") && !run.stdout.contains("kind: Deployment"));
}

#[test]
fn dir_replaces_links_instead_of_writing_through_them_and_names_stale_units() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  hello:\n    command: /bin/sleep 1000\n    listen: 127.0.0.1:7201\n",
    )
    .unwrap();
    let units = dir.path().join("units");
    std::fs::create_dir(&units).unwrap();
    std::fs::write(dir.path().join("precious.txt"), "precious, not a unit\n").unwrap();
    // A unit added with `systemctl link`, a masked one, a stale one, and
    // files of other apps.
    std::os::unix::fs::symlink("../precious.txt", units.join("hello.socket")).unwrap();
    std::os::unix::fs::symlink("/dev/null", units.join("hello.target")).unwrap();
    for other in ["hello.1.socket", "hellox.service", "other@.service"] {
        std::fs::write(units.join(other), "[Unit]\n").unwrap();
    }
    // (254: the default backoff is kept, so the one warning is the stale unit's.)
    let run = supervise(
        dir.path(),
        &[
            "export",
            "systemd",
            "--systemd-version",
            "254",
            "--dir",
            units.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("precious.txt")).unwrap(),
        "precious, not a unit\n",
        "the link's target is untouched"
    );
    for name in ["hello.socket", "hello.target"] {
        let meta = std::fs::symlink_metadata(units.join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is a file now");
    }
    assert!(
        std::fs::read_to_string(units.join("hello.target"))
            .unwrap()
            .contains("Wants=hello.socket hello@0.service")
    );
    let stale: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("was not written by this export"))
        .collect();
    assert_eq!(stale.len(), 1, "{}", run.stderr);
    assert!(stale[0].starts_with("warning: ") && stale[0].contains("/hello.1.socket "));
    assert!(run.stderr.contains("1 warning\n"), "{}", run.stderr);
    let leftovers: Vec<String> = std::fs::read_dir(&units)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// How many apps the long file has: its Kubernetes objects are well over
/// what a pipe and `head`'s first read hold.
const LONG_FILE_APPS: usize = 300;

/// A stdout that cannot take the export (a full disk, a closed stdout) is an
/// error that says so, and no claim that it was exported; a reader that
/// leaves (`| head -1`) ends the export quietly.
#[test]
fn an_export_stdout_cannot_take_is_an_error_but_a_reader_that_left_is_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut yaml = String::from("apps:\n");
    for i in 0..LONG_FILE_APPS {
        yaml.push_str(&format!("  app{i}:\n    command: sleep {i}\n"));
    }
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).expect("write");
    let export = |target: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_supervise"));
        command
            .current_dir(dir.path())
            .args(["export", target])
            .env("SUPERVISE_TEST_CPUS", "2");
        command
    };
    for target in ["kubernetes", "systemd"] {
        for stderr in crate::common::assert_unwritable_stdout_is_an_error(|| export(target)) {
            assert!(!stderr.contains("exported"), "{target}: {stderr}");
        }
    }
    let (code, stderr, first) = crate::common::into_head(export("kubernetes"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stderr.contains("error") && !stderr.contains("exported"),
        "no word once the reader left: {stderr}"
    );
    assert!(!first.is_empty());
}
