//! Hostile edits and hostile paths, against the real binary: a FIFO where the
//! ecosystem file should be, the same file reached through a symlink, a hard
//! link or a bind mount, a swapped release directory, a deleted `cwd`, a file
//! made unreadable, edits landing in the middle of a rollout or a reload, a
//! Kubernetes ConfigMap swap that deletes the old data, `scale` below zero,
//! the file moved away and copied back, and what runs leave in the runtime
//! directory.
//!
//! Each test records every broken promise it sees (not only the first) and
//! fails with all of them, so one run says exactly what is wrong. Every wait
//! is bounded and on an event, a reply or /proc; the only sleeps are the
//! deliberate 0.5 s gaps between edits that the scenarios call for.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

mod files;
mod paths;
mod running;

// ---------------------------------------------------------------- helpers

/// Every broken promise a test saw, reported together at the end.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    /// Record `what` unless `ok`; returns `ok`.
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) -> bool {
        if !ok {
            self.0.push(what());
        }
        ok
    }

    /// Fail the test with every finding (and the supervisor's output, if any).
    fn finish(self, s: Option<&Supervised>) {
        if self.0.is_empty() {
            return;
        }
        let mut text = String::new();
        for (i, finding) in self.0.iter().enumerate() {
            text.push_str(&format!("FAILURE {}: {finding}\n", i + 1));
        }
        if let Some(s) = s {
            text.push_str(&format!("--- the supervisor's output\n{}", s.dump()));
        }
        panic!("{}", text);
    }
}

/// How a bounded run of the binary ended.
#[derive(Debug)]
struct Outcome {
    /// `None` when it did not exit within the limit (it was then SIGKILLed).
    status: Option<ExitStatus>,
    took: Duration,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    fn describe(&self) -> String {
        let ended = match self.status {
            None => format!(
                "did NOT exit within its limit (killed after {:?})",
                self.took
            ),
            Some(status) => format!("exited with {status} after {:?}", self.took),
        };
        format!(
            "{ended}\n  stdout: {:?}\n  stderr: {:?}",
            self.stdout, self.stderr
        )
    }
}

/// Run `command` with its output in files (nothing it leaves behind can hold
/// a pipe open), for at most `limit`; SIGKILL it if it is still running then.
fn run_bounded(command: &mut Command, limit: Duration) -> Outcome {
    let mut out = tempfile::tempfile().expect("a temp file");
    let mut err = tempfile::tempfile().expect("a temp file");
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup"))
        .stderr(err.try_clone().expect("dup"))
        .spawn()
        .expect("the binary runs");
    let mut status = None;
    eventually(limit, || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    let took = started.elapsed();
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let read = |file: &mut File| {
        let mut text = String::new();
        file.rewind().expect("rewind");
        let _ = file.read_to_string(&mut text);
        text
    };
    Outcome {
        status,
        took,
        stdout: read(&mut out),
        stderr: read(&mut err),
    }
}

/// `supervise ARGS` as a client of `s` (its directory, its runtime directory).
fn client(s: &Supervised, args: &[&str], limit: Duration) -> Outcome {
    client_in(s.dir.path(), args, limit)
}

/// `supervise ARGS` in `dir`, with the runtime directory of `dir`.
fn client_in(dir: &Path, args: &[&str], limit: Duration) -> Outcome {
    run_bounded(
        Command::new(binary())
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(dir))
            .args(args),
        limit,
    )
}

/// A supervisor this test started and means to let run (in `dir`, with the
/// runtime directory of `dir`); SIGKILLed by pid if the test ends first —
/// its undertaker then kills its workers.
struct Running(std::process::Child);

impl Running {
    fn start(dir: &Path, file: &Path) -> Running {
        let child = Command::new(binary())
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(dir))
            .env_remove("NOTIFY_SOCKET")
            .arg("--log-format")
            .arg("json")
            .arg("-f")
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary runs");
        Running(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// SIGTERM, then wait up to `limit` for the exit: its status, if it exited.
    fn stop(&mut self, limit: Duration) -> Option<ExitStatus> {
        kill(self.pid(), libc::SIGTERM);
        let mut status = None;
        eventually(limit, || {
            status = self.0.try_wait().expect("try_wait");
            status.is_some()
        });
        status
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A second `supervise -f FILE` next to `s` (same runtime directory), which
/// must be refused; if it is not, it is killed after `limit`.
fn second_supervisor(s: &Supervised, file: &Path, limit: Duration) -> Outcome {
    run_bounded(
        Command::new(binary())
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .env_remove("NOTIFY_SOCKET")
            .arg("--log-format")
            .arg("json")
            .arg("-f")
            .arg(file),
        limit,
    )
}

/// `status --json` with extra arguments; the parsed reply, if it answered.
fn status_json(s: &Supervised, extra: &[&str], limit: Duration) -> (Outcome, Option<Value>) {
    let mut args = vec!["status", "--json"];
    args.extend_from_slice(extra);
    let outcome = client(s, &args, limit);
    let json = if outcome.code() == Some(0) {
        serde_json::from_str(&outcome.stdout).ok()
    } else {
        None
    };
    (outcome, json)
}

fn app_of<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["apps"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
}

/// The first event (seen or still to come, within `limit`) matching `predicate`.
fn find(s: &mut Supervised, limit: Duration, predicate: impl Fn(&Value) -> bool) -> Option<Value> {
    s.until(limit, |s| s.events.iter().any(&predicate));
    s.events.iter().find(|e| predicate(e)).cloned()
}

/// Save like an editor: a temp file renamed over the file (a new inode).
fn save(file: &Path, text: &str) {
    let temp = file.with_file_name(".edit.tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, file).unwrap();
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: signalling a process this test started (or a worker of it), by pid.
    unsafe {
        libc::kill(pid, signal);
    }
}

fn pid_exists(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// SIGTERM the supervisor and wait up to `limit` for it to exit on its own
/// (no second signal); records a finding if it does not, or exits non-zero.
fn terminate(s: &mut Supervised, limit: Duration, findings: &mut Findings) {
    let sent = Instant::now();
    s.signal(libc::SIGTERM);
    let mut status = None;
    eventually(limit, || {
        status = s.child.try_wait().expect("try_wait");
        status.is_some()
    });
    let took = sent.elapsed();
    findings.check(status.is_some(), || {
        format!("SIGTERM: the supervisor did not exit within {limit:?} (no second signal sent)")
    });
    if let Some(status) = status {
        findings.check(status.success(), || {
            format!("SIGTERM: the supervisor exited with {status} after {took:?}")
        });
    }
    // Take in what it printed last, to the end of its output.
    s.read_to_end();
}

/// One app `web` running `sleep 1000`.
fn sleeper(instances: u32, extra: &str) -> String {
    format!(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: {instances}\n    ready: none\n{extra}"
    )
}

const SECOND: Duration = Duration::from_secs(1);

// ------------------------------------------------ 2. one supervisor per file

/// A second supervisor on `path` must be refused: exit 1, naming the pid of `s`.
fn refused(s: &Supervised, findings: &mut Findings, what: &str, path: &Path) {
    let first = s.pid();
    let outcome = second_supervisor(s, path, Duration::from_secs(5));
    findings.check(
        outcome.code() == Some(1) && outcome.stderr.contains(&format!("pid {first}")),
        || {
            format!(
                "{what} ({}): expected exit 1 naming pid {first}; {}",
                path.display(),
                outcome.describe()
            )
        },
    );
}

/// Call `condition` every `step` until it holds (true) or `limit` passes.
fn poll(limit: Duration, step: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}
