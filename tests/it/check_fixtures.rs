//! `supervise check` against the fixture corpora, through the real binary.
//!
//! Runs with a fixed PATH, CPU count and time zone so the snapshots are the
//! same on every machine; absolute paths of the fixture folder are replaced by
//! `[FIXTURES]`.

use std::path::Path;

use assert_cmd::Command;

use crate::common::regex_escape;

fn check(dir: &Path, file: &str, extra: &[&str]) -> (i32, String) {
    let (code, stdout, stderr) = check_with_stderr(dir, file, extra);
    assert_eq!(stderr, "", "check writes diagnostics to stdout only");
    (code, stdout)
}

fn check_with_stderr(dir: &Path, file: &str, extra: &[&str]) -> (i32, String, String) {
    let output = Command::cargo_bin("supervise")
        .expect("the supervise binary is built")
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("SUPERVISE_TEST_CPUS", "4")
        .env("TZ", "UTC")
        .args(["check", "-f", file])
        .args(extra)
        .output()
        .expect("supervise runs");
    let stdout = String::from_utf8(output.stdout).expect("output is UTF-8");
    let stderr = String::from_utf8(output.stderr).expect("output is UTF-8");
    (
        output.status.code().expect("exited normally"),
        stdout,
        stderr,
    )
}

fn snapshot_settings(dir: &Path) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    let canonical = dir.canonicalize().expect("fixture folder exists");
    settings.add_filter(
        &regex_escape(&canonical.display().to_string()),
        "[FIXTURES]",
    );
    settings.set_prepend_module_to_snapshot(false);
    settings
}

#[test]
fn every_invalid_fixture_exits_1_with_its_diagnostics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/invalid");
    let settings = snapshot_settings(&dir);
    let mut count = 0;
    settings.bind(|| {
        insta::glob!("fixtures/invalid/*.yaml", |path| {
            let name = path.file_name().unwrap().to_str().unwrap();
            let (code, stdout) = check(&dir, name, &[]);
            assert_eq!(code, 1, "{name} must be invalid:\n{stdout}");
            assert!(
                stdout.starts_with(&format!("{name}:")),
                "{name}: the first line names file:line:column:\n{stdout}"
            );
            insta::assert_snapshot!(stdout);
            count += 1;
        });
    });
    assert!(
        count >= 40,
        "the invalid corpus has at least 40 files, found {count}"
    );
}

#[test]
fn every_valid_fixture_exits_0_with_a_summary() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/valid");
    let settings = snapshot_settings(&dir);
    settings.bind(|| {
        insta::glob!("fixtures/valid/*.yaml", |path| {
            let name = path.file_name().unwrap().to_str().unwrap();
            let (code, stdout) = check(&dir, name, &[]);
            assert_eq!(code, 0, "{name} must be valid:\n{stdout}");
            assert!(stdout.contains(&format!("{name}: ok,")), "{stdout}");
            insta::assert_snapshot!(stdout);
        });
    });
}

#[test]
fn every_example_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for example in ["hello", "node-cluster", "crashy", "kitchen-sink"] {
        let file = format!("examples/{example}/ecosystem.yaml");
        let output = Command::cargo_bin("supervise")
            .unwrap()
            .current_dir(root)
            .args(["check", "-f", &file])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{file}:\n{stdout}");
        let first_line = std::fs::read_to_string(root.join(&file)).unwrap();
        assert!(
            first_line
                .starts_with("# yaml-language-server: $schema=../../schemas/ecosystem.schema.json"),
            "{file} starts with the schema line"
        );
    }
}

/// A uid this machine has no entry for, as in a file written elsewhere
/// (an export from a dev machine): `check` accepts it, as a YAML integer or
/// a string of digits, warning at most that only root can switch to it.
#[test]
fn check_accepts_a_uid_this_machine_has_no_entry_for() {
    let uid = (3_000_000_000u32..4_000_000_000)
        .step_by(7919)
        .find(|&uid| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .is_ok_and(|found| found.is_none())
        })
        .expect("a uid without an entry");
    let dir = tempfile::tempdir().unwrap();
    for written in [uid.to_string(), format!("\"{uid}\"")] {
        std::fs::write(
            dir.path().join("ecosystem.yaml"),
            format!(
                "apps:\n  web:\n    command: sleep 1\n    user: {written}\n    group: {written}\n"
            ),
        )
        .unwrap();
        let (code, stdout) = check(dir.path(), "ecosystem.yaml", &[]);
        assert_eq!(code, 0, "user: {written}\n{stdout}");
        let warnings: Vec<&str> = stdout
            .lines()
            .filter(|l| l.contains(": warning: "))
            .collect();
        let root = nix::unistd::geteuid().is_root();
        assert!(
            if root {
                warnings.is_empty()
            } else {
                warnings.len() == 1
                    && warnings[0].contains(&format!("only root can run workers as `{uid}`"))
            },
            "user: {written}\n{stdout}"
        );
    }
}

#[test]
fn json_format_lists_each_diagnostic_with_its_position() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/invalid");
    let (code, stdout) = check(&dir, "several-semantic.yaml", &["--format", "json"]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("valid JSON");
    assert_eq!(report["valid"], false);
    let diagnostics = report["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 6);
    let first = &diagnostics[0];
    assert_eq!(first["file"], "several-semantic.yaml");
    assert_eq!(first["line"], 5);
    assert_eq!(first["column"], 19);
    assert_eq!(first["severity"], "error");
    assert!(first["message"].as_str().unwrap().contains("0ms"));
    assert!(first["help"].is_string());

    let valid = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/valid");
    let (code, stdout) = check(
        &valid,
        "warning-program-not-found.yaml",
        &["--format", "json"],
    );
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["valid"], true);
    assert_eq!(report["diagnostics"][0]["severity"], "warning");
}

#[test]
fn graph_draws_the_dependencies_in_mermaid_and_dot() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/valid");
    snapshot_settings(&dir).bind(|| {
        for (extra, name) in [
            (&["--graph"][..], "graph_mermaid"),
            (&["--graph", "dot"][..], "graph_dot"),
        ] {
            let (code, stdout, stderr) =
                check_with_stderr(&dir, "depends-and-schedules.yaml", extra);
            assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
            insta::assert_snapshot!(name, stdout);
        }
    });
}

#[test]
fn graph_prints_only_the_graph_on_stdout_and_only_for_a_valid_file() {
    let valid = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/valid");
    let (code, stdout, stderr) = check_with_stderr(
        &valid,
        "warning-depends-on-zero-instances.yaml",
        &["--graph"],
    );
    assert_eq!(code, 0);
    assert!(stdout.starts_with("flowchart LR\n"), "{stdout}");
    assert!(
        stderr.contains("warning: `db` has 0 instances"),
        "warnings go to stderr: {stderr}"
    );

    let invalid = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/invalid");
    let (code, with_graph) = check(&invalid, "depends-cycle.yaml", &["--graph", "dot"]);
    let (_, without) = check(&invalid, "depends-cycle.yaml", &[]);
    assert_eq!(code, 1);
    assert_eq!(with_graph, without, "an invalid file gets the usual report");
}

#[test]
fn the_default_file_is_ecosystem_yaml_then_yml() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        Command::cargo_bin("supervise")
            .unwrap()
            .current_dir(dir.path())
            .arg("check")
            .output()
            .unwrap()
    };
    let none = run();
    assert_eq!(none.status.code(), Some(2), "no file is a usage error");
    assert!(String::from_utf8_lossy(&none.stderr).contains("ecosystem.yaml"));

    std::fs::write(
        dir.path().join("ecosystem.yml"),
        "apps:\n  yml:\n    command: sleep 1\n",
    )
    .unwrap();
    let yml = run();
    assert_eq!(yml.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&yml.stdout).starts_with("ecosystem.yml: ok"));

    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  yaml:\n    command: sleep 1\n",
    )
    .unwrap();
    let yaml = run();
    assert!(String::from_utf8_lossy(&yaml.stdout).starts_with("ecosystem.yaml: ok"));
}

#[test]
fn an_unreadable_file_exits_2() {
    let output = Command::cargo_bin("supervise")
        .unwrap()
        .args(["check", "-f", "/nonexistent/ecosystem.yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot read /nonexistent/ecosystem.yaml")
    );

    let output = Command::cargo_bin("supervise")
        .unwrap()
        .args(["check", "--format", "yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "a usage error exits 2");
}
