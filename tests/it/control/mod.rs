//! The control socket and the everyday commands, against a real supervisor.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;
use supervise::client::REPLY_TIMEOUT;
use supervise::control::server::MAX_FOLLOWERS;

mod commands;
mod followers;
mod scale;
mod socket;
mod stdout;

const APPS: &str = r#"# two apps
apps:
  web:
    command: [sh, -c, "echo hello from $SUPERVISE_INSTANCE; exec sleep 1000"]
    instances: 2
    ready: none
  api:
    command: [sleep, "1000"]
    ready: {delay: 100ms}
"#;

/// Run `supervise ARGS` as a client of the supervisor `s`.
fn client(s: &Supervised, args: &[&str]) -> Output {
    std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(args)
        .output()
        .expect("the client runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn socket(s: &Supervised) -> PathBuf {
    let dir = runtime_dir(s.dir.path()).join("supervise");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the control socket exists")
}

fn status(s: &Supervised) -> Value {
    let output = client(s, &["status", "--json"]);
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn pids_of(status: &Value, app: &str) -> Vec<i64> {
    status["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == app)
        .map(|a| {
            a["workers"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|w| w["pid"].as_i64())
                .collect()
        })
        .unwrap_or_default()
}

fn started(yaml: &str) -> Supervised {
    let mut s = Supervised::start(yaml);
    s.wait_count("ready", "web", 2);
    s.wait_count("ready", "api", 1);
    s
}

/// One app that prints a line when it starts, then nothing.
const QUIET: &str = r#"apps:
  quiet:
    command: [sh, -c, "echo up; exec sleep 1000"]
    ready: none
"#;

/// A supervisor running [`QUIET`], its one line printed and its start
/// settled: the exec-status pipe of the spawn is closed once the instance is
/// ready (by exec), and the line may come before that, so a count of the
/// supervisor's fds taken after the line alone may hold that pipe.
fn quiet() -> Supervised {
    let mut s = Supervised::start(QUIET);
    s.wait_line("up");
    s.wait_event("ready", "quiet");
    s
}

/// SIGTERM each of `children` (by pid) and reap them.
fn terminate(children: Vec<Child>) {
    for child in &children {
        // SAFETY: signalling a client this test started, by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    for mut child in children {
        let _ = child.wait();
    }
}
