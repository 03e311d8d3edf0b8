//! `supervise export kubernetes|systemd`, through the real binary, checked
//! by the engines' own tools:
//!
//! - every example's Kubernetes objects validate in strict mode against the
//!   1.33 schemas with `kubernetes-validate` (PyPI; `.ci/run` installs it in
//!   `target/kv-venv`, or name it with `KUBERNETES_VALIDATE`), and are
//!   snapshot-tested;
//! - every example's systemd units pass `systemd-analyze verify`;
//! - `examples/hello`'s exported socket and command serve a request from
//!   fd 3 under `systemd-socket-activate` (systemd's own socket passing,
//!   without systemd as PID 1);
//! - every key of the file format (walked from the JSON Schema, so a new key
//!   fails this test until it is covered) is either exported or warned about;
//! - hostile app names and values, and invalid files.
//!
//! Runs with a fixed PATH, CPU count and time zone so the output is the same
//! on every machine; the repository's path is replaced by `[ROOT]`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, regex_escape};
use export::systemd::MAX_PART_OF_PER_UNIT;

mod cli;
mod dependencies;
mod hostile;
mod keys;
mod kubernetes;
mod names;
mod schedules;
mod systemd;
mod users;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `supervise ARGS` in `dir`, with the machine's facts pinned.
fn supervise(dir: &Path, args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_supervise"))
        .current_dir(dir)
        .args(args)
        .env("PATH", "/usr/bin:/bin")
        .env("TZ", "UTC")
        .env("SUPERVISE_TEST_CPUS", "2")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .expect("supervise runs");
    Run {
        code: output.status.code().expect("exited normally"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8"),
    }
}

fn examples() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            path.join("ecosystem.yaml")
                .exists()
                .then(|| path.file_name()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    assert!(names.len() >= 5, "the examples are found: {names:?}");
    names
}

fn snapshot_settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    let canonical = root().canonicalize().expect("the repository");
    settings.add_filter(&regex_escape(&canonical.display().to_string()), "[ROOT]");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

/// `kubernetes-validate`: `$KUBERNETES_VALIDATE`, else the venv `.ci/run`
/// makes, else one on PATH. Missing, the test fails and says how to get it.
fn kubernetes_validate() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBERNETES_VALIDATE") {
        return PathBuf::from(path);
    }
    let venv = root().join("target/kv-venv/bin/kubernetes-validate");
    if venv.exists() {
        return venv;
    }
    if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubernetes-validate"))
            .find(|candidate| candidate.exists())
    }) {
        return found;
    }
    panic!(
        "kubernetes-validate is not installed: run `python3 -m venv target/kv-venv && \
         target/kv-venv/bin/pip install kubernetes-validate` (as .ci/run does), or set \
         KUBERNETES_VALIDATE to its path"
    );
}

/// Validate a YAML stream against the Kubernetes 1.33 schemas, strictly
/// (unknown fields are errors). Returns the validator's report.
fn validate_kubernetes(yaml: &str) -> Result<String, String> {
    validate_kubernetes_each(&[yaml])
        .pop()
        .expect("one report for one stream")
}

/// [`validate_kubernetes`] for each of `streams`, in one run of the
/// validator (a Python program that takes half a second to start): each
/// stream is a file of its own, and each report holds the lines that name
/// its file. A stream passes when its lines say `passed` and none says
/// `ERROR`, and the run as a whole succeeded or failed only for streams
/// that did not pass; anything else (the validator failing without naming
/// a file) fails every stream, with the whole report.
fn validate_kubernetes_each(streams: &[&str]) -> Vec<Result<String, String>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let files: Vec<PathBuf> = (0..streams.len())
        .map(|i| dir.path().join(format!("objects-{i:04}.yaml")))
        .collect();
    for (file, yaml) in files.iter().zip(streams) {
        std::fs::write(file, yaml).expect("write the objects");
    }
    let output = Command::new(kubernetes_validate())
        .args(["--strict", "-k", "1.33.0"])
        .args(&files)
        .output()
        .expect("kubernetes-validate runs");
    let whole = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: Vec<String> = files
        .iter()
        .map(|file| {
            let name = format!("{} ", file.display());
            whole
                .lines()
                .filter(|line| line.contains(&name))
                .map(|line| format!("{line}\n"))
                .collect()
        })
        .collect();
    let passed = |report: &String| report.contains("passed") && !report.contains("ERROR");
    let explained = output.status.success() || reports.iter().any(|r| !passed(r));
    reports
        .into_iter()
        .map(|report| {
            if !explained {
                Err(format!("{report}the whole report:\n{whole}"))
            } else if passed(&report) {
                Ok(report)
            } else {
                Err(report)
            }
        })
        .collect()
}

/// `systemd-analyze verify` on every unit file in `dir`; the lines it prints.
fn systemd_verify(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("unit folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&files)
        .output()
        .unwrap_or_else(|e| {
            panic!("systemd-analyze verify cannot run ({e}): install systemd, as .ci/run does")
        });
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&output.stdout).lines())
        .map(String::from)
        .filter(|line| !line.trim().is_empty())
        .collect()
}

/// The value of `key=` lines in a unit file's text (all of them, in order).
fn directives<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .collect()
}

/// Run `supervise export TARGET ARGS` on `yaml` (with `files` beside it).
fn export_yaml(target: &str, yaml: &str, files: &[(&str, &str)], args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    for (name, text) in files {
        if let Some(parent) = Path::new(name).parent() {
            std::fs::create_dir_all(dir.path().join(parent)).unwrap();
        }
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let mut all = vec!["export", target];
    all.extend_from_slice(args);
    supervise(dir.path(), &all)
}

/// `export systemd --dir units` in `dir`: the run, and the folder.
fn export_units(dir: &Path) -> (Run, PathBuf) {
    let units = dir.join("units");
    let run = supervise(
        dir,
        &[
            "export",
            "systemd",
            "--dir",
            units.to_str().expect("UTF-8 path"),
        ],
    );
    (run, units)
}

/// Export `yaml` as systemd units into a folder and verify them; the run
/// and what `systemd-analyze verify` said.
fn systemd_units(yaml: &str, files: &[(&str, &str)]) -> (Run, Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let (run, units) = export_units(dir.path());
    let printed = supervise(dir.path(), &["export", "systemd"]).stdout;
    let complaints = if run.code == 0 {
        systemd_verify(&units)
    } else {
        Vec::new()
    };
    (run, complaints, printed)
}

/// The text of unit file `name` in `supervise export systemd`'s output.
fn unit_text<'a>(printed: &'a str, name: &str) -> &'a str {
    let start = printed
        .find(&format!("# {name}\n"))
        .unwrap_or_else(|| panic!("no {name} in:\n{printed}"));
    let rest = &printed[start..];
    rest.find("\n\n# ").map_or(rest, |end| &rest[..end + 1])
}
