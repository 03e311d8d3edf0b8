//! A real supervisor under test: writes an ecosystem file into a temp dir,
//! runs `supervise --log-format json -f` on it, and lets the test wait for its
//! event lines. Dropping it SIGKILLs the supervisor (by pid) — the undertaker
//! then kills every worker group — so a failing test leaves nothing behind.
//!
//! The other helpers are in submodules by topic, all re-exported here (so
//! `crate::common::NAME` names each): `processes` (/proc: states, children,
//! arguments), `client` (commands to a running supervisor), `output` (what a
//! command prints, and where it cannot), `host` (root, systemd-notify, free
//! ports).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

mod client;
mod host;
mod output;
mod processes;

pub use client::*;
pub use host::*;
pub use output::*;
pub use processes::*;

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

pub struct Supervised {
    pub child: Child,
    pub dir: tempfile::TempDir,
    lines: Receiver<Value>,
    /// Every event received so far, in order.
    pub events: Vec<Value>,
    /// Indices of events already returned by `wait_for`.
    claimed: std::collections::HashSet<usize>,
    /// Lines that were not JSON (the supervisor's diagnostics, panics).
    pub stderr_path: PathBuf,
}

/// A private XDG_RUNTIME_DIR inside `dir`, so each test has its own lock.
pub fn runtime_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let runtime = dir.join("run");
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&runtime);
    runtime
}

/// How many fds process `pid` holds: those open on /proc and /sys are not
/// counted, for they come and go while the supervisor samples what its
/// instances use (it keeps none of them open).
pub fn held_fds(pid: i32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| !target.starts_with("/proc") && !target.starts_with("/sys"))
        })
        .count()
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_supervise"))
}

impl Supervised {
    /// Start a supervisor on `yaml`, written as `ecosystem.yaml` in a fresh dir.
    pub fn start(yaml: &str) -> Supervised {
        Supervised::start_with(yaml, &[], |_| {})
    }

    /// Like [`Supervised::start`], with extra arguments and a hook to prepare
    /// the directory (fixture scripts) and the command (environment).
    pub fn start_with(yaml: &str, args: &[&str], prepare: impl FnOnce(&Path)) -> Supervised {
        Supervised::start_wrapped(yaml, &[], args, prepare)
    }

    /// Run the supervisor under `wrapper` (e.g. `unshare --pid --fork`).
    pub fn start_wrapped(
        yaml: &str,
        wrapper: &[&str],
        args: &[&str],
        prepare: impl FnOnce(&Path),
    ) -> Supervised {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ecosystem.yaml"), yaml).expect("write ecosystem.yaml");
        prepare(dir.path());
        Supervised::launch(dir, wrapper, args)
    }

    /// Like [`Supervised::start`], run as `program` (relative to the test's
    /// directory, made there by `prepare`: a symlink to the binary, say).
    pub fn start_as(yaml: &str, program: &str, prepare: impl FnOnce(&Path)) -> Supervised {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ecosystem.yaml"), yaml).expect("write ecosystem.yaml");
        prepare(dir.path());
        let program = dir.path().join(program);
        Supervised::launch_program(dir, &program, &[], &[], true)
    }

    /// Like [`Supervised::start`], but the lines workers print are not kept
    /// as events (a flood of them would fill the test's memory).
    pub fn start_dropping_output(yaml: &str, prepare: impl FnOnce(&Path)) -> Supervised {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ecosystem.yaml"), yaml).expect("write ecosystem.yaml");
        prepare(dir.path());
        Supervised::launch_with(dir, &[], &[], false)
    }

    /// A new supervisor in the directory of `previous`, which has exited
    /// (same files, same runtime directory).
    pub fn start_again(mut previous: Supervised, args: &[&str]) -> Supervised {
        let _ = previous.child.kill();
        let _ = previous.child.wait();
        let dir = std::mem::replace(&mut previous.dir, tempfile::tempdir().expect("temp dir"));
        Supervised::launch(dir, &[], args)
    }

    fn launch(dir: tempfile::TempDir, wrapper: &[&str], args: &[&str]) -> Supervised {
        Supervised::launch_with(dir, wrapper, args, true)
    }

    fn launch_with(
        dir: tempfile::TempDir,
        wrapper: &[&str],
        args: &[&str],
        keep_output: bool,
    ) -> Supervised {
        Supervised::launch_program(dir, &binary(), wrapper, args, keep_output)
    }

    fn launch_program(
        dir: tempfile::TempDir,
        binary: &Path,
        wrapper: &[&str],
        args: &[&str],
        keep_output: bool,
    ) -> Supervised {
        let runtime = runtime_dir(dir.path());
        let stderr_path = dir.path().join("supervise.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut command = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let mut child = command
            .current_dir(dir.path())
            .args(["--log-format", "json", "-f", "ecosystem.yaml"])
            .args(args)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("supervise starts");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
                const OUTPUT: &[u8] = br#""event":"output","#;
                if !keep_output && line.windows(OUTPUT.len()).take(64).any(|w| w == OUTPUT) {
                    continue;
                }
                if let Ok(value) = serde_json::from_slice::<Value>(&line)
                    && send.send(value).is_err()
                {
                    break;
                }
            }
        });
        Supervised {
            child,
            dir,
            lines,
            events: Vec::new(),
            claimed: Default::default(),
            stderr_path,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The first event matching `predicate` that no earlier call returned,
    /// whether it already arrived or is still to come. Repeated calls with the
    /// same predicate return successive matches.
    pub fn wait_for(&mut self, what: &str, predicate: impl Fn(&Value) -> bool) -> Value {
        let seen = (0..self.events.len())
            .find(|i| !self.claimed.contains(i) && predicate(&self.events[*i]));
        let index = seen
            .or_else(|| self.receive_until(WAIT, &predicate))
            .unwrap_or_else(|| panic!("timed out waiting for {what}\n{}", self.dump()));
        self.claimed.insert(index);
        self.events[index].clone()
    }

    /// Take in events until a new one matches `predicate` (its index) or
    /// `limit` passes.
    fn receive_until(
        &mut self,
        limit: Duration,
        predicate: impl Fn(&Value) -> bool,
    ) -> Option<usize> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self.lines.recv_timeout(left).ok()?;
            self.events.push(event);
            if predicate(&self.events[self.events.len() - 1]) {
                return Some(self.events.len() - 1);
            }
        }
    }

    /// Wait until `count` events matching `predicate` have been seen in all.
    pub fn wait_for_count(&mut self, what: &str, count: usize, predicate: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + WAIT;
        while self.events.iter().filter(|e| predicate(e)).count() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(event) => self.events.push(event),
                Err(_) => panic!("timed out waiting for {count} of {what}\n{}", self.dump()),
            }
        }
    }

    /// Wait for a worker to print `line` (the next such line not yet waited for).
    pub fn wait_line(&mut self, line: &str) -> Value {
        self.wait_for(line, |e| e["event"] == "output" && e["line"] == line)
    }

    /// Wait for event `name` of `app` (any slot).
    pub fn wait_event(&mut self, name: &str, app: &str) -> Value {
        self.wait_for(&format!("{name} of {app}"), |e| {
            e["event"] == name && e["app"] == app
        })
    }

    /// The next *new* event matching `predicate` within `limit` (history ignored):
    /// for asserting that something does not happen any more.
    pub fn next_within(
        &mut self,
        limit: Duration,
        predicate: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let index = self.receive_until(limit, predicate)?;
        Some(self.events[index].clone())
    }

    /// Take in events until `condition` holds (true) or `limit` passes (false).
    pub fn until(&mut self, limit: Duration, condition: impl Fn(&Supervised) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if condition(self) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.lines.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(event) => self.events.push(event),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return condition(self),
            }
        }
    }

    /// Wait until `count` events named `name` of `app` have been seen in all.
    pub fn wait_count(&mut self, name: &str, app: &str, count: usize) {
        let deadline = Instant::now() + WAIT;
        while self.count(name, app) < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(event) => self.events.push(event),
                Err(_) => panic!(
                    "timed out waiting for {count} {name} of {app}\n{}",
                    self.dump()
                ),
            }
        }
    }

    pub fn count(&self, name: &str, app: &str) -> usize {
        self.events
            .iter()
            .filter(|e| e["event"] == name && e["app"] == app)
            .count()
    }

    /// Pids of currently running workers of `app`, by spawned/exited/stopped events.
    pub fn running_pids(&self, app: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = Vec::new();
        for e in self.events.iter().filter(|e| e["app"] == app) {
            let Some(pid) = e["pid"].as_i64().map(|p| p as i32) else {
                continue;
            };
            match e["event"].as_str() {
                Some("spawned") => pids.push(pid),
                Some("exited") | Some("stopped") | Some("start_failed") => {
                    pids.retain(|p| *p != pid)
                }
                _ => {}
            }
        }
        pids
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling the supervisor we started, by its pid.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Every event the supervisor logged before this call, taken in: a
    /// SIGHUP makes it read its (unchanged) file again in a turn of its
    /// own, and say `applied`; what it decided in any earlier turn was
    /// logged before that. For asserting that something was not done.
    /// (The file version goes up by one; nothing else changes.)
    pub fn barrier(&mut self) {
        let applied = |e: &Value| e["event"] == "applied";
        let before = self.events.iter().filter(|e| applied(e)).count();
        self.signal(libc::SIGHUP);
        let deadline = Instant::now() + WAIT;
        while self.events.iter().filter(|e| applied(e)).count() <= before {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(event) => self.events.push(event),
                Err(_) => panic!("no `applied` after a SIGHUP\n{}", self.dump()),
            }
        }
    }

    /// Take in the events that have arrived, without waiting for more.
    pub fn take_in(&mut self) {
        while let Ok(event) = self.lines.try_recv() {
            self.events.push(event);
        }
    }

    /// Take in events up to the end of the supervisor's output (it has
    /// exited, or is about to): each may take up to [`WAIT`] to come.
    pub fn read_to_end(&mut self) {
        while let Ok(event) = self.lines.recv_timeout(WAIT) {
            self.events.push(event);
        }
    }

    /// Wait for the supervisor to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Collect what it printed last, up to the end of its output.
                self.read_to_end();
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "supervise did not exit\n{}",
                self.dump()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn dump(&self) -> String {
        let mut text = String::from("events:\n");
        for e in &self.events {
            text.push_str(&format!("  {e}\n"));
        }
        text.push_str(&format!("stderr:\n{}", self.stderr()));
        text
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Milliseconds since the epoch of an event's `timestamp`.
pub fn timestamp_ms(event: &Value) -> f64 {
    let text = event["timestamp"].as_str().expect("timestamp");
    let time = humantime::parse_rfc3339_weak(text).expect("rfc3339");
    time.duration_since(std::time::UNIX_EPOCH)
        .expect("after epoch")
        .as_secs_f64()
        * 1000.0
}
