//! `supervise import`: the files of tests/it/fixtures/import imported to the
//! snapshots, each result passing `check`, and the imported files run to
//! start what pm2 7 and supervisord 4 themselves start from the originals:
//! argv, environment and working directory, read from /proc for
//! supervisord's programs, and reported by the programs themselves for pm2's
//! (node runs a pm2 app's script from pm2's own container, so /proc shows the
//! container).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common::{WAIT, binary, eventually};
use serde_json::Value;

mod garbage;
mod hostile;
mod output;
mod peers;

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/import")
        .join(kind)
}

/// A fresh copy of a fixture folder, with an empty `reports` folder the
/// fixture programs write into.
fn copy_of(kind: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let status = Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", fixtures(kind).display()))
        .arg(dir.path())
        .status()
        .expect("cp runs");
    assert!(status.success());
    std::fs::create_dir(dir.path().join("reports")).expect("reports folder");
    dir
}

fn supervise(dir: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("supervise runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Import `file` of `dir` to `dir/ecosystem.yaml`; returns the file and stderr.
fn import(dir: &Path, file: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["import", file, "-o", "ecosystem.yaml"];
    args.extend(extra);
    let output = supervise(dir, &args);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "import {file} failed:\n{stderr}");
    assert!(stderr.contains("`supervise check` passes"), "{stderr}");
    let check = supervise(dir, &["check", "-f", "ecosystem.yaml"]);
    assert!(
        check.status.success(),
        "check fails on the import of {file}:\n{}",
        text(&check.stdout)
    );
    let written = std::fs::read_to_string(dir.join("ecosystem.yaml")).expect("written");
    (written, stderr)
}

#[test]
fn pm2_files_in_js_cjs_json_and_yaml_import_to_the_same_apps() {
    let mut first: Option<String> = None;
    for file in [
        "ecosystem.config.js",
        "ecosystem.config.cjs",
        "ecosystem.json",
        "process.yaml",
    ] {
        let dir = copy_of("pm2");
        let (written, stderr) = import(dir.path(), file, &["--env", "production"]);
        insta::assert_snapshot!(
            format!("pm2_{}", file.replace('.', "_")),
            format!("{written}\n--- stderr ---\n{stderr}")
        );
        // The apps are the same whatever the file's language; only the
        // lines the notes cite differ.
        let apps: String = written
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        match &first {
            None => first = Some(apps),
            Some(first) => assert_eq!(first, &apps, "{file} imports other apps"),
        }
    }
}

#[test]
fn a_procfile_imports_to_the_snapshot() {
    let dir = copy_of("procfile");
    let (written, stderr) = import(dir.path(), "Procfile", &[]);
    // Whether `bundle` is on this machine's PATH is not the import's.
    let stderr = drop_path_warnings(&stderr);
    insta::assert_snapshot!(format!("{written}\n--- stderr ---\n{stderr}"));
}

#[test]
fn a_supervisord_file_imports_to_the_snapshot() {
    let dir = copy_of("supervisord");
    let (written, stderr) = import(dir.path(), "supervisord.conf", &[]);
    let here = dir.path().display().to_string();
    insta::assert_snapshot!(
        format!("{written}\n--- stderr ---\n{stderr}").replace(&here, "[HERE]")
    );
}

/// `stderr` without check's "not found on PATH" warnings (four lines each),
/// which say what this machine has installed.
fn drop_path_warnings(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].contains("was not found on PATH") {
            i += 4;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

/// The variables named in `names` of the environment of `pid`.
fn environment(pid: u32, names: &[&str]) -> Option<BTreeMap<String, String>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        environ
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = text(kv);
                let (k, v) = kv.split_once('=')?;
                names.contains(&k).then(|| (k.to_string(), v.to_string()))
            })
            .collect(),
    )
}
