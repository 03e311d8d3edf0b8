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

#[test]
fn every_example_exports_to_objects_that_validate_against_kubernetes_1_33() {
    let settings = snapshot_settings();
    let examples = examples();
    let runs: Vec<Run> = examples
        .iter()
        .map(|example| {
            let file = format!("examples/{example}/ecosystem.yaml");
            let run = supervise(
                root(),
                &[
                    "export",
                    "kubernetes",
                    "-f",
                    &file,
                    "--image",
                    "registry.example/app:1",
                ],
            );
            assert_eq!(run.code, 0, "{file}:\n{}", run.stderr);
            run
        })
        .collect();
    let streams: Vec<&str> = runs.iter().map(|run| run.stdout.as_str()).collect();
    let reports = validate_kubernetes_each(&streams);
    for ((example, run), report) in examples.iter().zip(&runs).zip(reports) {
        let documents = run.stdout.split("\n---\n").count();
        let report = report.unwrap_or_else(|report| {
            panic!(
                "examples/{example} does not validate:\n{report}\n{}",
                run.stdout
            )
        });
        assert_eq!(
            report.matches("passed for resource").count(),
            documents,
            "every object was checked:\n{report}"
        );
        settings.bind(|| {
            insta::assert_snapshot!(format!("kubernetes_{example}"), run.stdout);
        });
    }
}

#[test]
fn the_validator_is_not_a_rubber_stamp() {
    let hello = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/hello/ecosystem.yaml",
        ],
    );
    assert_eq!(hello.code, 0, "{}", hello.stderr);
    let broken = hello
        .stdout
        .replace("replicas: 2", "replicas: two")
        .replace(
            "  type: ClusterIP",
            "  type: ClusterIP\n  sessionStickiness: true",
        );
    let report = validate_kubernetes(&broken).expect_err("a broken object fails");
    assert!(report.contains("'two' is not of type"), "{report}");
    assert!(report.contains("sessionStickiness"), "{report}");
    // Validated together, each stream gets its own verdict and report.
    let [first, second, third] =
        &validate_kubernetes_each(&[&hello.stdout, &broken, &hello.stdout])[..]
    else {
        panic!("three reports for three streams");
    };
    let (first, third) = (
        first.as_ref().expect("hello passes"),
        third.as_ref().expect("hello passes"),
    );
    assert!(
        first.contains("passed for resource") && !first.contains("two"),
        "{first}"
    );
    assert_eq!(first.replace("0000", "0002"), *third);
    let second = second.as_ref().expect_err("the broken one fails");
    assert!(
        second.contains("'two' is not of type") && !second.contains("passed"),
        "{second}"
    );
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

#[test]
fn every_example_exports_to_units_that_systemd_analyze_verify_accepts() {
    let settings = snapshot_settings();
    for example in examples() {
        let file = format!("examples/{example}/ecosystem.yaml");
        let dir = tempfile::tempdir().expect("temp dir");
        let units = dir.path().join("units");
        let run = supervise(
            root(),
            &[
                "export",
                "systemd",
                "-f",
                &file,
                "--dir",
                units.to_str().expect("UTF-8 path"),
            ],
        );
        assert_eq!(run.code, 0, "{file}:\n{}", run.stderr);
        // Every program the examples run exists here (python3, node, sh and
        // the examples' scripts), so verify has nothing to say about a
        // missing executable either: it has nothing to say at all.
        let complaints = systemd_verify(&units);
        assert!(
            complaints.is_empty(),
            "systemd-analyze verify on {file}:\n{}\n{}",
            complaints.join("\n"),
            supervise(root(), &["export", "systemd", "-f", &file]).stdout
        );
        let printed = supervise(root(), &["export", "systemd", "-f", &file]);
        assert_eq!(printed.code, 0);
        settings.bind(|| {
            insta::assert_snapshot!(format!("systemd_{example}"), printed.stdout);
        });
    }
}

#[test]
fn restart_steps_are_written_only_for_a_systemd_that_has_them() {
    let file = "examples/crashy/ecosystem.yaml";
    let old = supervise(root(), &["export", "systemd", "-f", file]);
    assert!(!old.stdout.contains("RestartSteps="), "{}", old.stdout);
    assert!(
        old.stderr.contains(
            "ecosystem.yaml:10:5: warning: systemd 252 has no RestartSteps= (254 and later): \
             the backoff doubles from 200ms to 5s, but every restart waits RestartSec=200ms"
        ),
        "{}",
        old.stderr
    );
    // 200ms doubling to 5s: 5s/200ms = 25 = 2^4.6, so 5 steps, of 1.90.
    let new = supervise(
        root(),
        &["export", "systemd", "-f", file, "--systemd-version", "254"],
    );
    assert!(new.stdout.contains("RestartSec=200ms\n"), "{}", new.stdout);
    assert!(new.stdout.contains("RestartSteps=5\n"), "{}", new.stdout);
    assert!(
        new.stdout.contains("RestartMaxDelaySec=5s\n"),
        "{}",
        new.stdout
    );
    assert!(
        !new.stderr.contains("has no RestartSteps"),
        "{}",
        new.stderr
    );
    assert!(
        new.stderr.contains(
            "note: crashy: the backoff doubles from 200ms to 5s, in whole steps under systemd: \
             RestartSteps=5 makes each delay 1.90 times the last, not 2"
        ),
        "{}",
        new.stderr
    );
    // And the 252 here would not know the keys: that is why 252 is the default.
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path().join("units");
    let run = supervise(
        root(),
        &[
            "export",
            "systemd",
            "-f",
            file,
            "--systemd-version",
            "254",
            "--dir",
            units.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0);
    let lines = systemd_verify(&units);
    if systemd_version() < 254 {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("Unknown key 'RestartSteps'")),
            "{lines:?}"
        );
    }
}

/// The default backoff is exponential too: under systemd 252 its loss is
/// said for every app that restarts (at the app's name when `backoff` is
/// not written), and under 254 whole steps that change the factor are noted.
#[test]
fn an_exponential_backoff_lost_to_systemd_252_is_said_even_when_it_is_the_default() {
    let yaml = "apps:\n  plain:\n    command: sleep 77\n  once:\n    command: sleep 77\n    restart: never\n\
                \x20 flat:\n    command: sleep 77\n    backoff: {initial: 1s, factor: 1}\n\
                \x20 exact:\n    command: sleep 77\n    backoff: {initial: 100ms, max: 25600ms}\n";
    let old = export_yaml("systemd", yaml, &[], &[]);
    assert_eq!(old.code, 0, "{}", old.stderr);
    let lost: Vec<&str> = old
        .stderr
        .lines()
        .filter(|l| l.contains("the exponential part is lost"))
        .collect();
    assert_eq!(
        lost,
        [
            "ecosystem.yaml:2:3: warning: systemd 252 has no RestartSteps= (254 and later): \
             by default the backoff doubles from 100ms to 30s, but every restart waits \
             RestartSec=100ms; the exponential part is lost",
            "ecosystem.yaml:12:5: warning: systemd 252 has no RestartSteps= (254 and later): \
             the backoff doubles from 100ms to 25s600ms, but every restart waits \
             RestartSec=100ms; the exponential part is lost",
        ],
        "{}",
        old.stderr
    );
    assert!(
        old.stderr.contains("--systemd-version 254 to keep it"),
        "{}",
        old.stderr
    );
    let strict = export_yaml("systemd", yaml, &[], &["--strict"]);
    assert_eq!(strict.code, 1, "a lost backoff fails --strict");

    let new = export_yaml(
        "systemd",
        yaml,
        &[],
        &["--systemd-version", "254", "--strict"],
    );
    assert_eq!(new.code, 0, "{}", new.stderr);
    assert!(
        new.stderr.contains(
            "note: plain: the backoff doubles from 100ms to 30s, in whole steps under systemd: \
             RestartSteps=8 makes each delay 2.04 times the last, not 2"
        ),
        "{}",
        new.stderr
    );
    // 25.6s / 100ms = 256 = 2^8: whole steps, the same delays.
    assert!(!new.stderr.contains("note: exact"), "{}", new.stderr);
    assert!(
        unit_text(&new.stdout, "exact@.service")
            .contains("RestartSteps=8\nRestartMaxDelaySec=25600ms\n"),
        "{}",
        new.stdout
    );
}

fn systemd_version() -> u32 {
    let output = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .expect("systemd-analyze");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The value of `key=` lines in a unit file's text (all of them, in order).
fn directives<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .collect()
}

/// What systemd does to a unit's words for instance `slot`: `%i` is the
/// instance, `%%` a percent sign; quotes are taken off (the words we write
/// for hello are plain or fully quoted, with no escapes inside).
fn instance_text(text: &str, slot: &str) -> String {
    text.replace("%i", slot).replace("%%", "%")
}

fn unquote(text: &str) -> String {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
        .to_string()
}

/// Kills the process (by pid) when dropped, even when the test fails.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn hello_serves_from_fd_3_under_systemd_socket_activation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    std::fs::copy(
        root().join("examples/hello/server.py"),
        dir.path().join("server.py"),
    )
    .expect("copy server.py");
    let example =
        std::fs::read_to_string(root().join("examples/hello/ecosystem.yaml")).expect("hello");
    let yaml = example.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    assert_ne!(yaml, example, "the example listens on 127.0.0.1:8080");
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let socket = std::fs::read_to_string(units.join("hello.socket")).expect("hello.socket");
    let service = std::fs::read_to_string(units.join("hello@.service")).expect("hello@.service");
    let [address] = directives(&socket, "ListenStream")[..] else {
        panic!("one ListenStream=:\n{socket}");
    };
    let [name] = directives(&socket, "FileDescriptorName")[..] else {
        panic!("one FileDescriptorName=:\n{socket}");
    };
    assert_eq!(directives(&service, "Sockets"), ["hello.socket"]);
    let [exec] = directives(&service, "ExecStart")[..] else {
        panic!("one ExecStart=:\n{service}");
    };
    let argv: Vec<String> = exec
        .split(' ')
        .map(|word| unquote(&instance_text(word, "0")))
        .collect();
    let [cwd] = directives(&service, "WorkingDirectory")[..] else {
        panic!("one WorkingDirectory=:\n{service}");
    };
    let env: Vec<String> = directives(&service, "Environment")
        .into_iter()
        .map(|value| unquote(&instance_text(value, "0")))
        .collect();
    assert!(env.contains(&format!("PORT={port}")), "{env:?}");

    // The exported socket, name, environment and command, given to
    // systemd's own socket passing. It binds the port itself, so a worker
    // that tried to bind PORT instead would fail: an answer proves fd 3.
    let mut command = Command::new("systemd-socket-activate");
    command
        .arg("-l")
        .arg(address)
        .arg(format!("--fdname={name}"));
    for assignment in &env {
        command.arg("-E").arg(assignment);
    }
    let child = command
        .args(&argv)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("systemd-socket-activate starts (install systemd, as .ci/run does)");
    let mut child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut stream) => {
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                break answer;
            }
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("nothing listens on {port}: {error}"),
        }
    };
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    assert!(
        answer.contains("hello from instance 0"),
        "GREETING and SUPERVISE_INSTANCE came through: {answer}"
    );
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut err = String::new();
    if let Some(mut stderr) = child.0.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    assert!(
        err.contains(&format!("Listening on 127.0.0.1:{port} as 3")),
        "systemd-socket-activate passed the socket as fd 3: {err}"
    );
}

/// Every key of the file format, as dotted paths (`backoff.max`), walked
/// from the JSON Schema the loader checks files against: app keys, the
/// fixed keys of their blocks (through `$ref`s, `anyOf`s and list items),
/// and the top-level keys besides `apps` and `defaults`.
fn schema_keys() -> Vec<String> {
    let schema = config::json_schema();
    let defs = schema["$defs"].clone();
    fn walk(
        node: &serde_json::Value,
        defs: &serde_json::Value,
        prefix: &str,
        keys: &mut Vec<String>,
        depth: usize,
    ) {
        if depth > 8 {
            return;
        }
        if let Some(reference) = node["$ref"].as_str() {
            let name = reference.trim_start_matches("#/$defs/");
            walk(&defs[name], defs, prefix, keys, depth + 1);
        }
        for alternative in ["anyOf", "oneOf", "allOf"] {
            for option in node[alternative].as_array().into_iter().flatten() {
                walk(option, defs, prefix, keys, depth + 1);
            }
        }
        if node.get("items").is_some() {
            walk(&node["items"], defs, prefix, keys, depth + 1);
        }
        for (key, value) in node["properties"].as_object().into_iter().flatten() {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            if !keys.contains(&path) {
                keys.push(path.clone());
            }
            walk(value, defs, &path, keys, depth + 1);
        }
    }
    let mut keys = Vec::new();
    walk(&defs["AppFields"], &defs, "", &mut keys, 0);
    for top in schema["properties"]
        .as_object()
        .expect("top-level properties")
        .keys()
    {
        if top != "apps" && top != "defaults" {
            keys.push(top.clone());
        }
    }
    keys
}

/// What an export must do with a key.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The output contains this text.
    Maps(&'static str),
    /// A warning containing this text, placed on the key's line (or on its
    /// block's line, for a block that is lost as a whole).
    Warns(&'static str),
}

struct Case {
    key: &'static str,
    /// The ecosystem file; `key`'s last segment is written on a line of
    /// its own, after its block's key.
    yaml: &'static str,
    kubernetes: Expect,
    systemd: Expect,
}

const fn case(key: &'static str, yaml: &'static str, kubernetes: Expect, systemd: Expect) -> Case {
    Case {
        key,
        yaml,
        kubernetes,
        systemd,
    }
}

use Expect::{Maps, Warns};

/// One row per key of the format: nothing may be dropped silently.
const CASES: &[Case] = &[
    case(
        "command",
        "apps:\n  web:\n    command: sleep 77\n",
        Maps("- sleep"),
        Maps("ExecStart=/usr/bin/sleep 77"),
    ),
    case(
        "shell",
        "apps:\n  web:\n    command: exec sleep 77\n    shell: true\n",
        Maps("- exec sleep 77"),
        Maps("sh -c \"exec sleep 77\""),
    ),
    case(
        "cwd",
        "apps:\n  web:\n    command: sleep 77\n    cwd: /tmp\n",
        Maps("workingDir: /tmp"),
        Maps("WorkingDirectory=/tmp"),
    ),
    case(
        "env",
        "apps:\n  web:\n    command: sleep 77\n    env:\n      COLOUR: blue\n",
        Maps("value: blue"),
        Maps("Environment=\"COLOUR=blue\""),
    ),
    case(
        "env_file",
        "apps:\n  web:\n    command: sleep 77\n    env_file: app.env\n",
        Maps("FROM_FILE: yes-it-is"),
        Maps("EnvironmentFile="),
    ),
    case(
        "instances",
        "apps:\n  web:\n    command: sleep 77\n    instances: 3\n",
        Maps("replicas: 3"),
        Maps("Wants=web@0.service web@1.service web@2.service"),
    ),
    case(
        "listen",
        "apps:\n  web:\n    command: sleep 77\n    listen: 127.0.0.1:7001\n",
        Maps("port: 7001"),
        Maps("ListenStream=127.0.0.1:7001"),
    ),
    case(
        "listen.address",
        "apps:\n  web:\n    command: sleep 77\n    listen:\n      - address: 127.0.0.1:7002\n",
        Maps("port: 7002"),
        Maps("ListenStream=127.0.0.1:7002"),
    ),
    case(
        "listen.name",
        "apps:\n  web:\n    command: sleep 77\n    listen:\n      - address: 127.0.0.1:7003\n        name: http\n",
        Maps("name: http"),
        Maps("FileDescriptorName=http"),
    ),
    case(
        "listen.reuseport",
        "apps:\n  web:\n    command: sleep 77\n    listen:\n      - address: 127.0.0.1:7004\n        reuseport: true\n",
        Warns("`reuseport` has no effect in Kubernetes"),
        Maps("ReusePort=yes"),
    ),
    case(
        "listen.inject",
        "apps:\n  web:\n    command: sleep 77\n    listen:\n      - address: 127.0.0.1:7007\n        inject: true\n",
        Maps("containerPort: 7007"),
        Warns("systemd cannot hand a socket to a program that binds"),
    ),
    case(
        "ready",
        "apps:\n  web:\n    command: sleep 77\n    ready: notify\n",
        Warns("`ready: notify` has no Kubernetes equivalent"),
        Maps("Type=notify"),
    ),
    case(
        "ready.tcp",
        "apps:\n  web:\n    command: sleep 77\n    ready:\n      tcp: 127.0.0.1:7005\n",
        Maps("port: 7005"),
        Warns("systemd has no readiness probe"),
    ),
    case(
        "ready.http",
        "apps:\n  web:\n    command: sleep 77\n    ready:\n      http: http://127.0.0.1:7006/up\n",
        Maps("path: /up"),
        Warns("systemd has no readiness probe"),
    ),
    case(
        "ready.delay",
        "apps:\n  web:\n    command: sleep 77\n    ready:\n      delay: 3s\n",
        Maps("minReadySeconds: 3"),
        Maps("ExecStartPost=/bin/sleep 3"),
    ),
    case(
        "ready_timeout",
        "apps:\n  web:\n    command: sleep 77\n    ready: {tcp: \"127.0.0.1:7007\"}\n    ready_timeout: 45s\n",
        Warns("`ready_timeout` is not exported"),
        Maps("TimeoutStartSec=45s"),
    ),
    // A CronJob's and a Job's pods have no rollout and no readiness.
    case(
        "ready_timeout",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n    ready_timeout: 45s\n",
        Warns("`ready_timeout` is not exported"),
        Maps("TimeoutStartSec=45s"),
    ),
    case(
        "ready_timeout",
        "apps:\n  web:\n    command: sleep 77\n    restart: never\n    ready_timeout: 45s\n",
        Warns("`ready_timeout` is not exported"),
        Maps("TimeoutStartSec=45s"),
    ),
    case(
        "ready.delay",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n    ready:\n      delay: 3s\n",
        Warns("`ready: {delay}` is not exported"),
        Maps("ExecStartPost=/bin/sleep 3"),
    ),
    case(
        "ready.delay",
        "apps:\n  web:\n    command: sleep 77\n    restart: never\n    ready:\n      delay: 3s\n",
        Warns("`ready: {delay}` is not exported"),
        Maps("ExecStartPost=/bin/sleep 3"),
    ),
    case(
        "reload",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n    reload:\n      max_surge: 2\n",
        Warns("`reload` is not exported"),
        Warns("`reload` is not exported"),
    ),
    case(
        "reload.max_unavailable",
        "apps:\n  web:\n    command: sleep 77\n    restart: never\n    reload:\n      max_unavailable: 1\n",
        Warns("`reload` is not exported"),
        Warns("`reload` is not exported"),
    ),
    case(
        "restart",
        "apps:\n  web:\n    command: sleep 77\n    restart: on-failure\n",
        Warns("restart `on-failure` is not exported"),
        Maps("Restart=on-failure"),
    ),
    case(
        "backoff",
        "apps:\n  web:\n    command: sleep 77\n    backoff:\n      initial: 2s\n",
        Warns("`backoff` is not exported"),
        Maps("RestartSec=2s"),
    ),
    // Under systemd 252 (the default) a growing backoff is lost: said at
    // `backoff` (or, left to its default, at the app's name).
    case(
        "backoff",
        "apps:\n  web:\n    command: sleep 77\n    backoff:\n      initial: 2s\n",
        Warns("`backoff` is not exported"),
        Warns("the backoff doubles from 2s to 30s, but every restart waits RestartSec=2s"),
    ),
    case(
        "backoff.initial",
        "apps:\n  web:\n    command: sleep 77\n    backoff:\n      initial: 3s\n",
        Warns("`backoff` is not exported"),
        Maps("RestartSec=3s"),
    ),
    case(
        "backoff.max",
        "apps:\n  web:\n    command: sleep 77\n    backoff:\n      max: 9s\n",
        Warns("`backoff` is not exported"),
        Warns(
            "the backoff doubles from 100ms to 9s, but every restart waits RestartSec=100ms; the exponential part is lost",
        ),
    ),
    case(
        "backoff.factor",
        "apps:\n  web:\n    command: sleep 77\n    backoff:\n      factor: 3\n",
        Warns("`backoff` is not exported"),
        Warns("the backoff grows by a factor of 3 from 100ms to 30s"),
    ),
    case(
        "backoff.reset_after",
        "apps:\n  web:\n    command: sleep 77\n    backoff:\n      reset_after: 9s\n",
        Warns("`backoff` is not exported"),
        Warns("`reset_after` is not exported"),
    ),
    case(
        "max_restarts",
        "apps:\n  web:\n    command: sleep 77\n    max_restarts:\n      count: 4\n      within: 1m\n",
        Warns("`max_restarts` is not exported"),
        Maps("StartLimitBurst=5"),
    ),
    case(
        "max_restarts.count",
        "apps:\n  web:\n    command: sleep 77\n    max_restarts:\n      count: 4\n      within: 1m\n",
        Warns("`max_restarts` is not exported"),
        Maps("StartLimitBurst=5"),
    ),
    case(
        "max_restarts.within",
        "apps:\n  web:\n    command: sleep 77\n    max_restarts:\n      count: 4\n      within: 2m\n",
        Warns("`max_restarts` is not exported"),
        Maps("StartLimitIntervalSec=120s"),
    ),
    case(
        "stop_signal",
        "apps:\n  web:\n    command: sleep 77\n    stop_signal: SIGINT\n",
        Maps("stopSignal: SIGINT"),
        Maps("KillSignal=SIGINT"),
    ),
    case(
        "kill_timeout",
        "apps:\n  web:\n    command: sleep 77\n    kill_timeout: 25s\n",
        Maps("terminationGracePeriodSeconds: 25"),
        Maps("TimeoutStopSec=25s"),
    ),
    case(
        "reload",
        "apps:\n  web:\n    command: sleep 77\n    reload:\n      max_surge: 2\n",
        Maps("maxSurge: 2"),
        Warns("`reload` is not exported"),
    ),
    case(
        "reload.max_surge",
        "apps:\n  web:\n    command: sleep 77\n    reload:\n      max_surge: 3\n",
        Maps("maxSurge: 3"),
        Warns("`reload` is not exported"),
    ),
    case(
        "reload.max_unavailable",
        "apps:\n  web:\n    command: sleep 77\n    instances: 4\n    reload:\n      max_unavailable: 2\n",
        Maps("maxUnavailable: 2"),
        Warns("`reload` is not exported"),
    ),
    case(
        "user",
        "apps:\n  web:\n    command: sleep 77\n    user: daemon\n",
        Warns("user `daemon` is a name"),
        Maps("User=daemon"),
    ),
    case(
        "user",
        "apps:\n  web:\n    command: sleep 77\n    user: 4242\n",
        Maps("runAsUser: 4242"),
        Maps("User=4242"),
    ),
    case(
        "group",
        "apps:\n  web:\n    command: sleep 77\n    user: daemon\n    group: daemon\n",
        Warns("group `daemon` is a name: Kubernetes takes a numeric gid"),
        Maps("Group=daemon"),
    ),
    case(
        "group",
        "apps:\n  web:\n    command: sleep 77\n    user: \"4242\"\n    group: \"4343\"\n",
        Maps("runAsGroup: 4343"),
        Maps("Group=4343"),
    ),
    case(
        "health",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      tcp: 127.0.0.1:7008\n",
        Maps("livenessProbe"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.http",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      http: http://127.0.0.1:7009/health\n",
        Maps("path: /health"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.tcp",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      tcp: 127.0.0.1:7010\n",
        Maps("port: 7010"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.exec",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      exec: [test, -e, /tmp]\n",
        Maps("- test"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.every",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      tcp: 127.0.0.1:7011\n      every: 7s\n",
        Maps("periodSeconds: 7"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.timeout",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      tcp: 127.0.0.1:7012\n      timeout: 4s\n",
        Maps("timeoutSeconds: 4"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.failures",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      tcp: 127.0.0.1:7013\n      failures: 5\n",
        Maps("failureThreshold: 5"),
        Warns("`health` is not exported"),
    ),
    case(
        "health.grace",
        "apps:\n  web:\n    command: sleep 77\n    health:\n      tcp: 127.0.0.1:7014\n      grace: 6s\n",
        Maps("initialDelaySeconds: 6"),
        Warns("`health` is not exported"),
    ),
    case(
        "max_memory",
        "apps:\n  web:\n    command: sleep 77\n    max_memory: 300MB\n",
        Maps("memory: \"300000000\""),
        Maps("MemoryMax=300000000"),
    ),
    case(
        "watchdog",
        "apps:\n  web:\n    command: sleep 77\n    watchdog: 20s\n",
        Warns("`watchdog` is not exported"),
        Maps("WatchdogSec=20s"),
    ),
    case(
        "watchdog_signal",
        "apps:\n  web:\n    command: sleep 77\n    watchdog: 20s\n    watchdog_signal: SIGUSR2\n",
        Warns("`watchdog_signal` is not exported"),
        Maps("WatchdogSignal=SIGUSR2"),
    ),
    case(
        "depends_on",
        "apps:\n  db:\n    command: sleep 77\n  web:\n    command: sleep 77\n    depends_on: [db]\n",
        Maps("supervise/depends-on: db (ready)"),
        Maps("Wants=db.target\nAfter=db.target\n"),
    ),
    case(
        "on_dependency_restart",
        "apps:\n  db:\n    command: sleep 77\n  web:\n    command: sleep 77\n    depends_on: [db]\n    on_dependency_restart: restart\n",
        Warns("`on_dependency_restart` is not exported"),
        Maps("PartOf=db@0.service\nAfter=db@0.service\n"),
    ),
    case(
        "schedule",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"30 4 * * 1-5\"\n",
        Maps("schedule: 30 4 * * 1-5"),
        Maps("OnCalendar=Mon..Fri *-*-* 04:30:00 UTC"),
    ),
    case(
        "schedule.every",
        "apps:\n  web:\n    command: sleep 77\n    schedule:\n      every: 10m\n",
        Warns("every 10m becomes the cron `*/10 * * * *`"),
        Maps("OnUnitActiveSec=600s"),
    ),
    case(
        "timezone",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n    timezone: Europe/Paris\n",
        Maps("timeZone: Europe/Paris"),
        Maps("OnCalendar=*-*-* 03:00:00 Europe/Paris"),
    ),
    case(
        "overlap",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n    overlap: replace\n",
        Maps("concurrencyPolicy: Replace"),
        Warns("only `overlap: skip` is exported"),
    ),
    case(
        "run_on_start",
        "apps:\n  web:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n    run_on_start: true\n",
        Warns("`run_on_start` is not exported"),
        Maps("OnActiveSec=0"),
    ),
    case(
        "log",
        "apps:\n  web:\n    command: sleep 77\n    log:\n      file: web.log\n",
        Warns("`log` is not exported"),
        Warns("`log` is not exported"),
    ),
    case(
        "log.file",
        "apps:\n  web:\n    command: sleep 77\n    log:\n      file: web.log\n",
        Warns("`log` is not exported"),
        Warns("`log` is not exported"),
    ),
    case(
        "log.max_size",
        "apps:\n  web:\n    command: sleep 77\n    log:\n      file: web.log\n      max_size: 1MB\n",
        Warns("`log` is not exported"),
        Warns("`log` is not exported"),
    ),
    case(
        "log.keep",
        "apps:\n  web:\n    command: sleep 77\n    log:\n      file: web.log\n      keep: 2\n",
        Warns("`log` is not exported"),
        Warns("`log` is not exported"),
    ),
    case(
        "log.format",
        "apps:\n  web:\n    command: sleep 77\n    log:\n      file: web.log\n      format: json\n",
        Warns("`log` is not exported"),
        Warns("`log` is not exported"),
    ),
    case(
        "memory_check",
        "memory_check: 2s\napps:\n  web:\n    command: sleep 77\n",
        Warns("`memory_check` has no effect in Kubernetes"),
        Warns("`memory_check` has no effect under systemd"),
    ),
    case(
        "metrics",
        "metrics: 127.0.0.1:7015\napps:\n  web:\n    command: sleep 77\n",
        Warns("`metrics` is not exported"),
        Warns("`metrics` is not exported"),
    ),
];

/// The 1-based line where `key`'s last segment is written: the first line
/// with `SEGMENT:` after the lines of the segments before it.
fn line_of(yaml: &str, key: &str) -> (usize, usize) {
    let mut from = 0;
    let mut block_line = 0;
    let mut line = 0;
    let segments: Vec<&str> = key.split('.').collect();
    for (index, segment) in segments.iter().enumerate() {
        let needle = format!("{segment}:");
        let found = yaml
            .lines()
            .enumerate()
            .skip(from)
            .find(|(_, text)| {
                let text = text.trim_start().trim_start_matches("- ");
                text.starts_with(&needle)
            })
            .unwrap_or_else(|| panic!("`{segment}:` is written in the case of {key}:\n{yaml}"))
            .0;
        if index + 1 < segments.len() {
            block_line = found + 1;
        }
        line = found + 1;
        from = found + 1;
    }
    (line, if segments.len() > 1 { block_line } else { line })
}

/// What one key case found wrong, and what `export kubernetes` wrote for it.
type CaseFindings = (Vec<String>, Option<String>);

/// What [`every_key_of_the_format_is_exported_or_warned_about`] finds
/// wrong with one case, and what `export kubernetes` wrote for it (to
/// validate with the others).
fn check_case(case: &Case) -> CaseFindings {
    let mut failures = Vec::new();
    let mut objects = None;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("ecosystem.yaml"), case.yaml).unwrap();
    std::fs::write(dir.path().join("app.env"), "FROM_FILE=yes-it-is\n").unwrap();
    let (line, block_line) = line_of(case.yaml, case.key);
    // Each case's units pass systemd-analyze verify, and its objects
    // the Kubernetes schemas, whatever the key does.
    let (written, units) = export_units(dir.path());
    if written.code == 0 {
        let complaints = systemd_verify(&units);
        if !complaints.is_empty() {
            failures.push(format!(
                "{} / systemd-analyze verify:\n{}",
                case.key,
                complaints.join("\n")
            ));
        }
    }
    for (target, expect) in [("kubernetes", case.kubernetes), ("systemd", case.systemd)] {
        let run = supervise(dir.path(), &["export", target]);
        if run.code != 0 {
            failures.push(format!(
                "{} / {target}: exit {}\n{}",
                case.key, run.code, run.stderr
            ));
            continue;
        }
        if target == "kubernetes" {
            objects = Some(run.stdout.clone());
        }
        match expect {
            Maps(text) => {
                if !run.stdout.contains(text) {
                    failures.push(format!(
                        "{} / {target}: the output lacks {text:?}\n{}",
                        case.key, run.stdout
                    ));
                }
            }
            Warns(text) => {
                let placed = run.stderr.lines().any(|l| {
                    (l.starts_with(&format!("ecosystem.yaml:{line}:"))
                        || l.starts_with(&format!("ecosystem.yaml:{block_line}:")))
                        && l.contains(": warning: ")
                        && l.contains(text)
                });
                if !placed {
                    failures.push(format!(
                        "{} / {target}: no warning {text:?} at line {line} (or {block_line})\n{}",
                        case.key, run.stderr
                    ));
                }
                // A lost key fails --strict.
                let strict = supervise(dir.path(), &["export", target, "--strict"]);
                if strict.code != 1 {
                    failures.push(format!(
                        "{} / {target}: --strict exited {}",
                        case.key, strict.code
                    ));
                }
            }
        }
    }
    (failures, objects)
}

#[test]
fn every_key_of_the_format_is_exported_or_warned_about() {
    let keys = schema_keys();
    let covered: Vec<&str> = CASES.iter().map(|c| c.key).collect();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !covered.contains(&k.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "keys of the format that no case covers (add a row to CASES, and make \
         the exports map or warn about them): {missing:?}"
    );
    let stale: Vec<&&str> = covered
        .iter()
        .filter(|k| !keys.iter().any(|key| key == *k))
        .collect();
    assert!(
        stale.is_empty(),
        "cases for keys the format does not have: {stale:?}"
    );
    assert!(
        keys.len() >= 50,
        "the schema walk found the nested keys too: {keys:?}"
    );

    // The cases run on as many threads as there are cores (each is a few
    // short processes: the exports and systemd-analyze), their findings
    // kept in the order of CASES.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut checked: Vec<(usize, CaseFindings)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(case) = CASES.get(i) else {
                            return done;
                        };
                        done.push((i, check_case(case)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a case panicked"))
            .collect()
    });
    checked.sort_by_key(|(i, _)| *i);
    let mut failures = Vec::new();
    // What `export kubernetes` wrote for each case, validated all at once
    // (one run of the validator instead of one per case).
    let mut objects = Vec::new();
    for (i, (found, written)) in checked {
        failures.extend(found);
        if let Some(written) = written {
            objects.push((CASES[i].key, written));
        }
    }
    let streams: Vec<&str> = objects.iter().map(|(_, yaml)| yaml.as_str()).collect();
    for ((key, _), report) in objects.iter().zip(validate_kubernetes_each(&streams)) {
        if let Err(report) = report {
            failures.push(format!("{key} / kubernetes-validate:\n{report}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

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
fn app_names_that_are_not_kubernetes_names_are_renamed_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |yaml: &str| std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    // Valid for us, not for Kubernetes: `_`, a trailing `_`, a leading digit.
    write(
        "apps:\n  my_app:\n    command: sleep 77\n    listen: 127.0.0.1:7101\n\
         \x20 worker_:\n    command: sleep 77\n\
         \x20 1st:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n",
    );
    let run = supervise(dir.path(), &["export", "kubernetes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for (name, renamed, line) in [
        ("my_app", "my-app", 2),
        ("worker_", "worker", 5),
        ("1st", "app-1st", 7),
    ] {
        assert!(
            run.stderr.contains(&format!(
                "ecosystem.yaml:{line}:3: warning: app name `{name}` is not a Kubernetes name; its objects are named `{renamed}`"
            )),
            "{}",
            run.stderr
        );
        assert!(
            run.stdout.contains(&format!("name: {renamed}\n")),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout.contains(&format!("supervise/app: {name}\n")),
            "{}",
            run.stdout
        );
    }
    validate_kubernetes(&run.stdout).unwrap_or_else(|report| panic!("{report}\n{}", run.stdout));

    // Two names that become one, and a name too long for a DNS label.
    let long = "a".repeat(64);
    write(&format!(
        "apps:\n  a_b:\n    command: sleep 77\n  a-b:\n    command: sleep 77\n  {long}:\n    command: sleep 77\n"
    ));
    let run = supervise(dir.path(), &["export", "kubernetes"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("ecosystem.yaml:4:3: error: the Deployment `a-b` of app `a-b` has the name of another app's"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "ecosystem.yaml:6:3: error: app name `{long}` is 64 characters"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("not exported (2 errors"),
        "{}",
        run.stderr
    );
    // systemd takes every one of them as it is.
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(units.join("a_b@.service").exists());
    let complaints = systemd_verify(&units);
    assert!(complaints.is_empty(), "{complaints:?}");
}

#[test]
fn hostile_values_cannot_break_out_of_a_unit_file() {
    let dir = tempfile::tempdir().unwrap();
    // Percent signs (systemd's specifiers), dollars (its variables), quotes,
    // a newline that would start a directive, and a shell metacharacter.
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: [/usr/bin/printf, \"100%% of $HOME; \\\"quoted\\\"\\nExecStartPre=/bin/false\"]\n\
         \x20   env:\n      EVIL: \"a\\nExecStart=/bin/false %n $USER\"\n      PORT_OFFSET: \"{instance+7}\"\n",
    )
    .unwrap();
    let run = supervise(dir.path(), &["export", "systemd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let unit = &run.stdout;
    assert_eq!(
        unit.lines().filter(|l| l.starts_with("ExecStart")).count(),
        1,
        "no directive was injected:\n{unit}"
    );
    assert!(!unit.contains("\nExecStartPre"), "{unit}");
    assert!(unit.contains("%%%%"), "percent signs are escaped: {unit}");
    assert!(unit.contains("$$HOME"), "dollars are escaped: {unit}");
    assert!(
        unit.contains("Environment=\"EVIL=a\\nExecStart=/bin/false %%n $USER\""),
        "{unit}"
    );
    assert!(unit.contains("export PORT_OFFSET=$$((7+%i))"), "{unit}");
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0);
    let complaints = systemd_verify(&units);
    assert!(complaints.is_empty(), "{complaints:?}");
}

#[test]
fn namespace_image_and_replicas_for_max_are_applied_to_every_object() {
    let run = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/node-cluster/ecosystem.yaml",
            "--namespace",
            "shop",
            "--image",
            "registry.example/api:2",
            "--replicas-for-max",
            "6",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.matches("namespace: shop\n").count(),
        2,
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("image: registry.example/api:2\n"));
    assert!(run.stdout.contains("replicas: 6\n"), "{}", run.stdout);
    assert!(
        run.stderr.contains("a Deployment needs a number: 6")
            && run.stderr.contains("from --replicas-for-max"),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));

    let bad = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/hello/ecosystem.yaml",
            "--namespace",
            "Bad_NS",
        ],
    );
    assert_eq!(bad.code, 2, "a bad namespace is a usage error");
    assert!(
        bad.stderr.contains("not a Kubernetes namespace name"),
        "{}",
        bad.stderr
    );
    let hello = "examples/hello/ecosystem.yaml";
    let too_long = "n".repeat(64);
    for (flag, value, code) in [
        ("--namespace", too_long.as_str(), 2),
        ("--namespace", "1abc", 0),
        ("--image", "", 2),
        ("--image", " x", 2),
    ] {
        let run = supervise(root(), &["export", "kubernetes", "-f", hello, flag, value]);
        assert_eq!(run.code, code, "{flag} {value:?}: {}", run.stderr);
        if code == 0 {
            assert!(
                run.stdout.contains(&format!("namespace: {value}\n")),
                "{}",
                run.stdout
            );
        } else {
            assert_eq!(run.stdout, "");
        }
    }
}

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
fn systemd_gets_an_absolute_program_even_when_this_machine_lacks_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: ./bin/run --x\n    cwd: app\n",
    )
    .unwrap();
    let run = supervise(dir.path(), &["export", "systemd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let folder = dir.path().canonicalize().unwrap();
    assert!(
        run.stdout
            .contains(&format!("ExecStart={}/app/bin/run --x\n", folder.display())),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("does not exist"),
        "check's own warning is shown too: {}",
        run.stderr
    );
}

#[test]
fn values_that_look_like_other_yaml_stay_strings_in_the_objects() {
    let tricky = [
        "yes",
        "no",
        "on",
        "off",
        "true",
        "null",
        "~",
        "0x10",
        "1e3",
        "0755",
        "08",
        ": colon",
        "- dash",
        "#hash",
        "a: b",
        "[list]",
        "{map}",
        "*alias",
        "&anchor",
        "multi\nline",
        " padded ",
        "'single'",
        "\"double\"",
        "%percent",
        "",
    ];
    let mut yaml = String::from("apps:\n  web:\n    command: sleep 77\n    env:\n");
    for (index, value) in tricky.iter().enumerate() {
        yaml.push_str(&format!(
            "      V{index}: {}\n",
            serde_json::to_string(value).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), &yaml).unwrap();
    let run = supervise(dir.path(), &["export", "kubernetes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}\n{}", run.stdout));
    let deployment: serde_json::Value =
        serde_saphyr::from_str(&run.stdout).expect("the output reads back as YAML");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    for (index, value) in tricky.iter().enumerate() {
        let found = env
            .iter()
            .find(|e| e["name"] == format!("V{index}"))
            .unwrap_or_else(|| panic!("V{index} is exported"));
        assert_eq!(found["value"], serde_json::json!(value), "V{index}");
    }
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

#[test]
fn values_systemd_reads_verbatim_cannot_continue_or_change_a_line() {
    const BS: &str = "ends with `\\`";
    const CONTROL: &str = "holds a control character";
    // Each value would end its line with `\` (joining the next directive to
    // it) or hold a character systemd cannot be given in a path.
    for (yaml, line, what) in [
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    listen:\n      - {name: 'fd\\', address: \"127.0.0.1:9001\"}\n",
            5,
            ["the socket name `fd\\`", BS],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    listen:\n      - 'unix:/tmp/s\\'\n",
            5,
            ["the socket path `/tmp/s\\`", BS],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    cwd: 'x\\'\n",
            4,
            ["the working directory", BS],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    cwd: \"tab\\tdir\"\n",
            4,
            ["the working directory", CONTROL],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    cwd: \"c1\\u0085dir\"\n",
            4,
            ["the working directory", CONTROL],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    env_file: 'e\\'\n",
            4,
            ["the env_file path", BS],
        ),
    ] {
        let files = [
            ("e\\", "A=1\n"),
            ("x\\/keep", ""),
            ("tab\tdir/keep", ""),
            ("c1\u{85}dir/keep", ""),
        ];
        let run = export_yaml("systemd", yaml, &files, &[]);
        assert_eq!(run.code, 1, "{yaml}\n{}{}", run.stdout, run.stderr);
        assert_eq!(run.stdout, "", "nothing is written");
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with(&format!("ecosystem.yaml:{line}:"))
                    && l.contains(": error: ")
                    && what.iter().all(|w| l.contains(w))),
            "{yaml}\n{}",
            run.stderr
        );
    }
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

#[test]
fn a_paused_schedule_is_exported_paused() {
    let yaml = "apps:\n  cronzero:\n    command: /bin/true\n    schedule: \"*/5 * * * *\"\n    instances: 0\n\
                \x20 everyzero:\n    command: /bin/true\n    schedule: {every: 10m}\n    instances: 0\n\
                \x20 running:\n    command: /bin/true\n    schedule: \"0 3 * * *\"\n";
    let run = export_yaml("kubernetes", yaml, &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.matches("suspend: true").count(),
        2,
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains(
            "note: cronzero: `instances: 0` pauses its schedule: the CronJob is suspended"
        ),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));

    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    assert!(
        printed.contains("# cronzero.timer\n"),
        "the timer is written"
    );
    let wants: Vec<&str> = directives(&printed, "Wants");
    assert_eq!(wants, ["running.timer"], "{printed}");
    assert!(
        run.stderr
            .contains("note: everyzero: `instances: 0` pauses its schedule: everyzero.target does not want everyzero.timer"),
        "{}",
        run.stderr
    );
    assert!(printed.contains("Description=cronzero: its schedule is paused"));
}

#[test]
fn env_file_cannot_set_what_supervise_sets() {
    let yaml = "apps:\n  ef:\n    command: /bin/sleep 1000\n    env_file: app.env\n    listen: 0.0.0.0:8080\n";
    let env = "PORT=1234\nSUPERVISE_INSTANCE=9\nSUPERVISE_APP=evil\nLISTEN_FDS=5\nNOTIFY_SOCKET=/x\nKEEP=1\n";
    let files = [("app.env", env)];
    let (run, complaints, printed) = systemd_units(yaml, &files);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    assert!(
        directives(&printed, "EnvironmentFile").is_empty(),
        "{printed}"
    );
    let env = directives(&printed, "Environment");
    assert!(env.contains(&"\"KEEP=1\""), "{printed}");
    for evil in ["1234", "=9", "evil", "LISTEN_FDS", "NOTIFY_SOCKET"] {
        assert!(!env.iter().any(|e| e.contains(evil)), "{evil}: {printed}");
    }
    assert!(
        run.stderr.lines().any(|l| l.starts_with("ecosystem.yaml:4:")
            && l.contains("warning: env_file is copied into Environment= lines")
            && l.contains("it sets `PORT`, `SUPERVISE_INSTANCE`, `SUPERVISE_APP`, `LISTEN_FDS`, `NOTIFY_SOCKET`, which supervise sets itself")),
        "{}",
        run.stderr
    );

    let run = export_yaml("kubernetes", yaml, &files, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let config_map = run
        .stdout
        .split("---\n")
        .find(|d| d.contains("kind: ConfigMap"))
        .expect("a ConfigMap");
    assert!(
        config_map.contains("data:\n  KEEP: \"1\"\n"),
        "{config_map}"
    );
    for evil in [
        "1234",
        "SUPERVISE_INSTANCE",
        "evil",
        "LISTEN_FDS",
        "NOTIFY_SOCKET",
    ] {
        assert!(!config_map.contains(evil), "{evil}: {config_map}");
    }
    assert!(
        run.stderr.lines().any(|l| l.starts_with("ecosystem.yaml:4:")
            && l.contains("warning: env_file sets `PORT`, `SUPERVISE_INSTANCE`, `SUPERVISE_APP`, `LISTEN_FDS`, `NOTIFY_SOCKET`, which supervise sets itself: left out of the ConfigMap")),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));
}

#[test]
fn cron_expressions_are_written_as_each_engine_reads_them() {
    let yaml = "apps:\n  weekdays:\n    command: /bin/true\n    schedule: \"0 0 * * 0-5\"\n\
                \x20 everyday:\n    command: /bin/true\n    schedule: \"0 0 * * sun-sat\"\n\
                \x20 hourstep:\n    command: /bin/true\n    schedule: \"0 */25 * * *\"\n\
                \x20 sunday7:\n    command: /bin/true\n    schedule: \"0 0 * * 5-7\"\n\
                \x20 lastday:\n    command: /bin/true\n    schedule: \"0 0 L * *\"\n";
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}\n{printed}");
    let calendars = directives(&printed, "OnCalendar");
    assert_eq!(
        calendars,
        [
            "Mon..Fri,Sun *-*-* 00:00:00 UTC",
            "Mon..Sun *-*-* 00:00:00 UTC",
            "*-*-* 00:00:00 UTC",
            "Fri..Sun *-*-* 00:00:00 UTC",
        ],
        "{printed}"
    );
    assert!(
        run.stderr.contains(
            "ecosystem.yaml:16:15: warning: `0 0 L * *` cannot be written as a systemd calendar"
        ),
        "{}",
        run.stderr
    );

    let run = export_yaml("kubernetes", yaml, &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("schedule: 0 0 * * 5-6,0\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains(
            "ecosystem.yaml:16:15: warning: `0 0 L * *` cannot be a Kubernetes schedule: the day of the month `L`"
        ),
        "{}",
        run.stderr
    );
    let strict = export_yaml("kubernetes", yaml, &[], &["--strict"]);
    assert_eq!(strict.code, 1, "what Kubernetes cannot read fails --strict");
}

#[test]
fn an_app_waited_for_as_completed_is_a_oneshot_even_when_retried() {
    let yaml = "apps:\n  migrate:\n    command: /bin/sh -c \"sleep 5; exit 0\"\n    restart: on-failure\n\
                \x20 api:\n    command: /bin/sleep 1000\n    depends_on: {migrate: completed}\n";
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    let migrate = unit_text(&printed, "migrate@.service");
    assert!(
        migrate.contains("Type=oneshot\nRemainAfterExit=yes\n"),
        "{migrate}"
    );
    assert!(migrate.contains("Restart=on-failure\n"), "{migrate}");
    // Through its target, which requires each instance (and so fails when
    // one does) and is ordered after each, as targets are by default.
    assert!(
        unit_text(&printed, "api@.service")
            .contains("Requires=migrate.target\nAfter=migrate.target\n"),
        "{printed}"
    );
    assert!(
        unit_text(&printed, "migrate.target").contains("\nRequires=migrate@0.service\n"),
        "{printed}"
    );
}

/// A oneshot's start ends when it exits: what its `ready` asked for
/// (READY=1, or alive for a while) is not exported, and said so at `ready`.
#[test]
fn the_ready_of_an_app_waited_for_as_completed_is_warned_about() {
    for (ready, warning) in [
        (
            "ready: notify",
            "4:12: warning: `ready: notify` is not exported: `migrate` is waited for as `completed`",
        ),
        (
            "ready: {delay: 2s}",
            "4:5: warning: `ready: {delay}` is not exported: `migrate` is waited for as `completed`",
        ),
    ] {
        let yaml = format!(
            "apps:\n  migrate:\n    command: /bin/true\n    {ready}\n    restart: never\n\
             \x20 api:\n    command: /bin/sleep 1000\n    depends_on: {{migrate: completed}}\n"
        );
        let (run, complaints, printed) = systemd_units(&yaml, &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(complaints.is_empty(), "{complaints:?}");
        let migrate = unit_text(&printed, "migrate@.service");
        assert!(migrate.contains("Type=oneshot\n"), "{migrate}");
        assert!(!migrate.contains("ExecStartPost="), "{migrate}");
        assert!(!migrate.contains("NotifyAccess="), "{migrate}");
        assert!(
            run.stderr.contains(&format!("ecosystem.yaml:{warning}")),
            "{ready}:\n{}",
            run.stderr
        );
    }
}

/// The text of unit file `name` in `supervise export systemd`'s output.
fn unit_text<'a>(printed: &'a str, name: &str) -> &'a str {
    let start = printed
        .find(&format!("# {name}\n"))
        .unwrap_or_else(|| panic!("no {name} in:\n{printed}"));
    let rest = &printed[start..];
    rest.find("\n\n# ").map_or(rest, |end| &rest[..end + 1])
}

#[test]
fn a_program_is_absolute_with_an_instance_in_it_or_a_prefix_character_first() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  relinst:\n    command: ./bin/run{instance} x\n    instances: 2\n\
         \x20 q:\n    command: [\"-zzznotfound\", \"1000\"]\n\
         \x20 shelled:\n    command: ./bin/run{instance+1}\n",
    )
    .unwrap();
    let run = supervise(dir.path(), &["export", "systemd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let folder = dir.path().canonicalize().unwrap();
    let folder = folder.display();
    assert_eq!(
        directives(&run.stdout, "ExecStart"),
        [
            format!("{folder}/bin/run%i x"),
            format!("{folder}/-zzznotfound 1000"),
            // sh runs it from WorkingDirectory=.
            "/bin/sh -c \"exec './bin/run'$$((1+%i))\"".to_string(),
        ],
        "{}",
        run.stdout
    );
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

#[test]
fn probes_of_another_host_keep_their_host_and_loopback_probes_get_a_note() {
    let yaml = "apps:\n  waiter:\n    command: /bin/sleep 1000\n    ready: {tcp: \"192.0.2.10:5432\"}\n    health: {http: \"http://192.0.2.11:9000/up\"}\n\
                \x20 local:\n    command: /bin/sleep 1000\n    listen: 0.0.0.0:8080\n    health: {http: \"http://127.0.0.1:9100/health\"}\n";
    let run = export_yaml("kubernetes", yaml, &[], &["--image", "x"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("host: \"192.0.2.10\"\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("host: \"192.0.2.11\"\n"),
        "{}",
        run.stdout
    );
    assert_eq!(run.stdout.matches("host:").count(), 2, "{}", run.stdout);
    for (line, ip) in [(4, "192.0.2.10"), (5, "192.0.2.11")] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with(&format!("ecosystem.yaml:{line}:"))
                    && l.contains(&format!("warning: the probe is of another host, {ip}"))),
            "{}",
            run.stderr
        );
    }
    assert!(
        run.stderr
            .contains("note: local: the probe of 127.0.0.1:9100 is of a loopback address"),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));
}

/// Apps that reach each other on 127.0.0.1 are in pods of their own in a
/// cluster: where the file says so precisely (an env value naming another
/// app's address, a probe of another app's port) it is a warning naming
/// the Service to use; a bare port, or an app's own address, is not.
#[test]
fn an_app_reaching_another_on_loopback_is_warned_about_where_the_file_says_so() {
    let yaml = "apps:\n  db:\n    command: sleep 77\n    ready: {tcp: \"127.0.0.1:7400\"}\n\
                \x20 cache:\n    command: sleep 77\n    listen: 0.0.0.0:6379\n\
                \x20 api:\n    command: sleep 77\n    listen: 127.0.0.1:8080\n    env:\n\
                \x20     DB_URL: postgres://u:p@localhost:7400/app\n\
                \x20     CACHE: \"redis://127.0.0.1:6379\"\n\
                \x20     SELF: \"http://127.0.0.1:8080/\"\n\
                \x20     DB_PORT: \"7400\"\n\
                \x20   health: {tcp: \"127.0.0.1:6379\"}\n";
    let run = export_yaml("kubernetes", yaml, &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(": warning: ") || l.trim_start().starts_with("help: "))
        .collect();
    assert_eq!(
        warnings,
        [
            "ecosystem.yaml:12:15: warning: env `DB_URL` reaches 127.0.0.1:7400, where app `db` \
             serves: in Kubernetes they run in pods of their own, and 127.0.0.1 in `api`'s pod is `api`'s",
            "  help: `db` gets no Service for port 7400 (only a TCP `listen` address of a \
             Deployment does): give it one, and reach it by that name",
            "ecosystem.yaml:13:14: warning: env `CACHE` reaches 127.0.0.1:6379, where app `cache` \
             serves: in Kubernetes they run in pods of their own, and 127.0.0.1 in `api`'s pod is `api`'s",
            "  help: reach it through its Service instead: `cache:6379` (in the same namespace)",
            "ecosystem.yaml:16:19: warning: 127.0.0.1:6379 is where app `cache` listens: in \
             Kubernetes the kubelet probes `api`'s own pod, which that port is not in",
            "  help: probe a port `api` serves itself",
        ],
        "{}",
        run.stderr
    );
    // The probe of another app's port gets the warning, not the note
    // telling the worker to bind every interface.
    assert!(
        !run.stderr.contains("note: api: the probe"),
        "{}",
        run.stderr
    );

    // A program that binds a loopback address itself (`inject`) would not
    // answer its Service or its probe in a pod.
    let inject = export_yaml(
        "kubernetes",
        "apps:\n  web:\n    command: sleep 77\n    listen:\n      - {address: \"127.0.0.1:7020\", inject: true}\n",
        &[],
        &[],
    );
    assert!(
        inject.stderr.contains(
            "ecosystem.yaml:5:45: warning: with `inject` the program binds 127.0.0.1:7020 itself"
        ),
        "{}",
        inject.stderr
    );
}

#[test]
fn c1_control_characters_are_escaped_as_characters_not_bytes() {
    let yaml = "apps:\n  t2:\n    command: /bin/sleep 1000\n    env:\n      NEL: \"x\\u0085y\"\n      CSI: \"x\\u009by\"\n\
                \x20 uni:\n    command: [\"/bin/echo\", \"x\\u0085y\"]\n";
    // `systemd_units` reads the output as UTF-8: a lone `\x85` byte is not.
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    assert!(
        printed.contains("Environment=\"NEL=x\\u0085y\"\n"),
        "{printed}"
    );
    assert!(
        printed.contains("Environment=\"CSI=x\\u009by\"\n"),
        "{printed}"
    );
    assert!(
        printed.contains("ExecStart=/bin/echo \"x\\u0085y\"\n"),
        "{printed}"
    );
    assert!(
        !printed.contains("\\x85") && !printed.contains("\\x9b"),
        "{printed}"
    );
}

#[test]
fn every_derived_kubernetes_name_is_held_to_63_characters() {
    let long = "a".repeat(62);
    let yaml = format!(
        "apps:\n  {long}:\n    command: /bin/sleep 1000\n    listen: [\"0.0.0.0:9101\", \"0.0.0.0:9102\"]\n    env_file: app.env\n"
    );
    let run = export_yaml("kubernetes", &yaml, &[("app.env", "A=1\n")], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    for derived in [
        format!("Service `{long}-1`"),
        format!("ConfigMap `{long}-env`"),
    ] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with("ecosystem.yaml:2:3: error: the ")
                    && l.contains(&derived)
                    && l.contains("characters: a Kubernetes name has at most 63")),
            "{derived}: {}",
            run.stderr
        );
    }
}

#[test]
fn replicas_for_max_counts_for_a_job_and_is_clamped_to_what_kubernetes_takes() {
    let job = "apps:\n  once:\n    command: /bin/true\n    restart: never\n    instances: max\n";
    let run = export_yaml("kubernetes", job, &[], &["--replicas-for-max", "7"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("completions: 7\n") && run.stdout.contains("parallelism: 7\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("ecosystem.yaml:5:16: warning: `instances: max` means one per CPU of the machine; a Job needs a number: 7"),
        "{}",
        run.stderr
    );
    let deployment = "apps:\n  mx:\n    command: /bin/sleep 1000\n    instances: max\n";
    let run = export_yaml(
        "kubernetes",
        deployment,
        &[],
        &["--replicas-for-max", "4294967295"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("replicas: 2147483647\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("a Deployment needs a number: 2147483647")
            && run
                .stderr
                .contains("from --replicas-for-max 4294967295, clamped to 2147483647"),
        "{}",
        run.stderr
    );
}

/// Found by the hostile round: an app named `multi-user` was exported as
/// `multi-user.target`, which in /etc/systemd/system replaces the machine's
/// boot target (and `user` every user's manager, `getty` the consoles').
#[test]
fn app_names_that_would_replace_systemds_own_units_are_refused() {
    let yaml = "apps:\n  multi-user:\n    command: sleep 77\n  user:\n    command: sleep 77\n\
                \x20 dbus:\n    command: sleep 77\n    listen: 127.0.0.1:7022\n\
                \x20 systemd-tmpfiles-clean:\n    command: sleep 77\n    schedule: \"@daily\"\n\
                \x20 sshx:\n    command: sleep 77\n    listen: 127.0.0.1:7023\n";
    let run = export_yaml("systemd", yaml, &[], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(": error: "))
        .collect();
    assert_eq!(
        errors,
        [
            "ecosystem.yaml:2:3: error: the unit `multi-user.target` of app `multi-user` is one of systemd's own: installed, it would replace it",
            "ecosystem.yaml:4:3: error: the unit `user@.service` of app `user` is one of systemd's own: installed, it would replace it",
            "ecosystem.yaml:6:3: error: the unit `dbus.socket` of app `dbus` is one of systemd's own: installed, it would replace it",
            "ecosystem.yaml:9:3: error: the unit `systemd-tmpfiles-clean.timer` of app `systemd-tmpfiles-clean` is one of systemd's own: installed, it would replace it",
        ],
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, "", "nothing is written when an app is refused");
}

/// Found by the hostile round: an app named `kubernetes` with a `listen`
/// address got the Service `kubernetes`, which in `default` (kubectl's
/// namespace when none is given) is the API server's own.
#[test]
fn an_app_whose_service_would_be_the_api_servers_is_refused_in_default() {
    let yaml = "apps:\n  kubernetes:\n    command: sleep 77\n    listen: 0.0.0.0:7443\n";
    for namespace in [&[][..], &["--namespace", "default"][..]] {
        let run = export_yaml("kubernetes", yaml, &[], namespace);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            run.stderr.contains(
                "ecosystem.yaml:2:3: error: the Service `kubernetes` of app `kubernetes` would replace the API server's own"
            ),
            "{}",
            run.stderr
        );
    }
    let elsewhere = export_yaml("kubernetes", yaml, &[], &["--namespace", "shop"]);
    assert_eq!(elsewhere.code, 0, "{}", elsewhere.stderr);
    assert!(
        elsewhere.stdout.contains("kind: Service"),
        "{}",
        elsewhere.stdout
    );
}

#[test]
fn app_names_too_long_for_systemd_units_are_refused_at_the_app() {
    // `system-APP.slice` (where systemd puts the instances) is 242 + 13 =
    // 255 characters, the most systemd takes; `APP@11.service` 242 + 11.
    for (length, fits) in [(242, true), (243, false), (250, false)] {
        let name = "l".repeat(length);
        let yaml = format!("apps:\n  {name}:\n    command: /bin/sleep 1000\n    instances: 12\n");
        let (run, complaints, _) = systemd_units(&yaml, &[]);
        if fits {
            assert_eq!(run.code, 0, "{length}: {}", run.stderr);
            assert!(complaints.is_empty(), "{length}: {complaints:?}");
        } else {
            assert_eq!(run.code, 1, "{length}: {}", run.stderr);
            assert!(
                run.stderr.contains(&format!(
                    "ecosystem.yaml:2:3: error: the unit `system-{name}.slice` of app `{name}` would have a name of {} characters: systemd takes at most 255",
                    length + 13
                )),
                "{length}: {}",
                run.stderr
            );
        }
    }
}

/// How long `systemd-analyze verify` may take on the units of two apps of
/// the most instances `check` allows (2.7 s here; with an edge per pair of
/// instances it took 8 minutes).
const VERIFY_WITHIN: Duration = Duration::from_secs(60);

/// An app that depends on another is ordered through the other's target:
/// a few lines whatever the instance counts, which systemd loads quickly.
/// Restarting with a dependency of more than [`MAX_PART_OF_PER_UNIT`]
/// instances goes through the target too, with a warning.
#[test]
fn dependencies_between_apps_of_thousands_of_instances_stay_a_few_lines() {
    let yaml = "apps:\n  big:\n    command: sleep 77\n    instances: 4096\n\
                \x20   listen: [\"127.0.0.1:7100\", {address: \"127.0.0.1:7101\", reuseport: true}]\n\
                \x20 once:\n    command: /bin/true\n    restart: never\n    instances: 4096\n\
                \x20 dep:\n    command: sleep 77\n    instances: 4096\n\
                \x20   depends_on: {big: ready, once: completed}\n    on_dependency_restart: restart\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dep = std::fs::read_to_string(units.join("dep@.service")).unwrap();
    assert!(
        dep.contains(
            "Wants=big.target\nAfter=big.target\nPartOf=big.target\n\
             Requires=once.target\nAfter=once.target\nPartOf=once.target\n"
        ),
        "{dep}"
    );
    // `big` is too many to be PartOf= one by one: said, where it is asked.
    assert!(
        run.stderr.contains(&format!(
            "ecosystem.yaml:14:28: warning: `big` has 4096 instances, and a unit is made PartOf= at most {MAX_PART_OF_PER_UNIT} one by one"
        )),
        "{}",
        run.stderr
    );
    assert!(!dep.contains("big@") && !dep.contains("once@"), "{dep}");
    let once = std::fs::read_to_string(units.join("once.target")).unwrap();
    assert!(
        once.contains("\nRequires=once@4088.service once@4089.service"),
        "{once}"
    );

    let mut files: Vec<PathBuf> = std::fs::read_dir(&units)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // Into a file, so a long report cannot fill a pipe and stall it.
    let report = dir.path().join("verify.txt");
    let out = std::fs::File::create(&report).expect("report file");
    let mut verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&files)
        .stdout(out.try_clone().expect("report file"))
        .stderr(out)
        .spawn()
        .expect("systemd-analyze runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = verify.try_wait().expect("wait for systemd-analyze") {
            break Some(status);
        }
        if started.elapsed() > VERIFY_WITHIN {
            verify.kill().expect("kill the systemd-analyze we started");
            verify.wait().expect("reap it");
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.is_some(),
        "systemd-analyze verify took more than {VERIFY_WITHIN:?}"
    );
    let said = std::fs::read_to_string(&report).expect("the report");
    assert!(said.trim().is_empty(), "{said}");
}

/// `on_dependency_restart: restart` makes a unit `PartOf=` (and `After=`)
/// each instance of a dependency it waits for as started or ready, so that
/// systemd restarting one (its `Restart=` after a crash) restarts the
/// dependent after it; up to a bound of instances per unit, above which
/// it is the dependency's target, with a warning saying what that loses.
/// A one-shot waited for as `completed` is always its target, which
/// requires each instance.
#[test]
fn restarting_with_a_dependency_is_part_of_each_instance_up_to_a_bound() {
    let yaml = format!(
        "apps:\n  db:\n    command: sleep 77\n    instances: 2\n\
         \x20 fits:\n    command: sleep 77\n    instances: {MAX_PART_OF_PER_UNIT}\n\
         \x20 over:\n    command: sleep 77\n    instances: {}\n\
         \x20 migrate:\n    command: /bin/true\n    restart: never\n\
         \x20 web:\n    command: sleep 77\n    depends_on: {{db: ready, migrate: completed}}\n    on_dependency_restart: restart\n\
         \x20 full:\n    command: sleep 77\n    depends_on: [fits]\n    on_dependency_restart: restart\n\
         \x20 beyond:\n    command: sleep 77\n    depends_on: [db, over]\n    on_dependency_restart: restart\n",
        MAX_PART_OF_PER_UNIT - 1
    );
    let (run, complaints, printed) = systemd_units(&yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}\n{printed}");
    let web = unit_text(&printed, "web@.service");
    assert!(
        web.contains(
            "Wants=db.target\nAfter=db.target\n\
             PartOf=db@0.service db@1.service\nAfter=db@0.service db@1.service\n\
             Requires=migrate.target\nAfter=migrate.target\nPartOf=migrate.target\n"
        ),
        "{web}"
    );
    // At the bound: every instance, none left out, no target.
    let full = unit_text(&printed, "full@.service");
    let part_of = directives(full, "PartOf");
    let listed: Vec<&str> = part_of
        .iter()
        .flat_map(|line| line.split(' '))
        .filter(|unit| unit.starts_with("fits@"))
        .collect();
    let all: Vec<String> = (0..MAX_PART_OF_PER_UNIT)
        .map(|slot| format!("fits@{slot}.service"))
        .collect();
    assert_eq!(listed, all, "{full}");
    assert!(!full.contains("PartOf=fits.target"), "{full}");
    // Above it (2 of `db` and 63 of `over`): `db` one by one, `over` its target.
    let beyond = unit_text(&printed, "beyond@.service");
    assert!(
        beyond.contains("PartOf=db@0.service db@1.service\n")
            && beyond.contains("\nPartOf=over.target\n")
            && !beyond.contains("over@"),
        "{beyond}"
    );
    let warned: Vec<&str> = run
        .stderr
        .lines()
        .filter(|line| line.contains("is made PartOf= at most"))
        .collect();
    assert_eq!(
        warned,
        [format!(
            "ecosystem.yaml:25:28: warning: `over` has {} instances, and a unit is made PartOf= at most {MAX_PART_OF_PER_UNIT} one by one (each is an edge for every instance, which systemd loads slowly): `beyond` is PartOf=over.target instead, stopped or restarted with that target, but no longer when one instance of `over` stops or restarts (a crash that Restart= restarts, `systemctl restart over@N`)",
            MAX_PART_OF_PER_UNIT - 1
        )],
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "help: it is PartOf= each instance of the dependencies it restarts with while they have at most {MAX_PART_OF_PER_UNIT} together (those before `over` have 2)"
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn huge_durations_and_counts_are_values_systemd_takes() {
    let yaml = "apps:\n  ev:\n    command: /bin/true\n    schedule: {every: 31days}\n\
                \x20 kt:\n    command: /bin/sleep 100\n    kill_timeout: 400days\n    max_restarts: {count: 4294967295, within: 45days}\n    max_memory: 18446744073709551615\n";
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}\n{printed}");
    // 31 days, not humantime's `1month 13h 30m 36s` (a month of 30.44 days).
    assert_eq!(directives(&printed, "OnActiveSec"), ["2678400s"]);
    assert_eq!(directives(&printed, "TimeoutStopSec")[1], "34560000s");
    assert_eq!(directives(&printed, "StartLimitIntervalSec")[1], "3888000s");
    assert_eq!(directives(&printed, "StartLimitBurst"), ["4294967295"]);
    assert_eq!(directives(&printed, "MemoryMax"), ["infinity"]);
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
