//! A real supervisor under test: writes an ecosystem file into a temp dir,
//! runs `supervise --log-format json -f` on it, and lets the test wait for its
//! event lines. Dropping it SIGKILLs the supervisor (by pid) — the undertaker
//! then kills every worker group — so a failing test leaves nothing behind.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

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

/// A process's state letter from /proc (`None` once it is gone).
pub fn process_state(pid: i32) -> Option<char> {
    effects::procfs::state(pid)
}

/// Whether `arg` is one of the arguments in `pid`'s command line.
pub fn has_argument(pid: i32, arg: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|a| a == arg))
}

/// Live (not zombie) processes with `arg` among their arguments: a test
/// marks its workers with a unique one, which forked descendants keep.
pub fn with_argument(arg: &str) -> std::collections::BTreeSet<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
                .filter(|pid| !is_gone(*pid) && has_argument(*pid, arg.as_bytes()))
                .collect()
        })
        .unwrap_or_default()
}

/// An app whose two instances each leave two `sleep`s in their group: what
/// [`sigkill_leaves_nothing`] kills the supervisor of.
pub const FAMILY: &str = r#"
apps:
  family:
    command: [sh, -c, "sleep 1000 & sleep 1000 & echo up; wait"]
    instances: 2
    ready: none
"#;

/// SIGKILL the supervisor of [`FAMILY`] (both instances up): every process
/// of its tree — the undertaker, the shells, their sleeps — must be gone
/// within 5 s.
pub fn sigkill_leaves_nothing(s: &mut Supervised) {
    let tree = descendants_of(s.pid());
    assert!(tree.len() >= 7, "undertaker, 2 shells, 4 sleeps: {tree:?}");
    s.signal(libc::SIGKILL);
    let start = Instant::now();
    let all_gone = eventually(Duration::from_secs(5), || tree.iter().all(|p| is_gone(*p)));
    println!(
        "the whole tree was gone {:?} after SIGKILL",
        start.elapsed()
    );
    let left: Vec<i32> = tree.iter().copied().filter(|p| !is_gone(*p)).collect();
    assert!(all_gone, "survivors: {left:?}");
}

/// The child of `pid` running with `arg` (a helper: `__spawner`, `__undertaker`).
pub fn child_with_argument(pid: i32, arg: &str) -> Option<i32> {
    children_of(pid)
        .into_iter()
        .find(|child| has_argument(*child, arg.as_bytes()))
}

/// Gone, or a zombie (this machine's PID 1 may not reap orphans).
pub fn is_gone(pid: i32) -> bool {
    matches!(process_state(pid), None | Some('Z'))
}

/// The children of `pid`, from /proc.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return children;
    };
    for entry in entries.flatten() {
        let Some(candidate) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{candidate}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(pid) {
            children.push(candidate);
        }
    }
    children
}

/// Every descendant of `pid`.
pub fn descendants_of(pid: i32) -> Vec<i32> {
    let mut all = Vec::new();
    let mut frontier = vec![pid];
    while let Some(next) = frontier.pop() {
        for child in children_of(next) {
            all.push(child);
            frontier.push(child);
        }
    }
    all
}

/// Poll `condition` every 10 ms for up to `limit`; true if it became true.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
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

/// The resident memory of `pid`, in kB.
pub fn rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The port of the first socket the supervisor bound (`listening` event).
pub fn listening_port(s: &mut Supervised) -> u16 {
    let listening = s.wait_for("the socket", |e| e["event"] == "listening");
    listening["address"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Run `supervise ARGS --file ecosystem.yaml` as a client of the supervisor of
/// `s` (its directory and runtime directory), and wait for it.
pub fn run_client(s: &Supervised, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(args)
        .args(["--file", "ecosystem.yaml"])
        .output()
        .expect("the client runs")
}

/// Save `yaml` as the supervised ecosystem file, as an editor does (a new
/// file renamed over the old one).
pub fn save(s: &Supervised, yaml: &str) {
    let temp = s.path(".ecosystem.yaml.tmp");
    std::fs::write(&temp, yaml).expect("the new version is written");
    std::fs::rename(&temp, s.path("ecosystem.yaml")).expect("and renamed over the file");
}

/// `supervise status --json`, parsed.
pub fn status_json(s: &Supervised) -> Value {
    let output = run_client(s, &["status", "--json"]);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// App `name` in a `status --json` reply.
pub fn app_status<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["apps"]
        .as_array()
        .and_then(|apps| apps.iter().find(|a| a["name"] == name))
        .unwrap_or_else(|| panic!("no app {name} in {status}"))
}

/// Whether `systemd-notify` is installed (`.ci/run` installs it).
pub fn has_systemd_notify() -> bool {
    Command::new("systemd-notify")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Tests marked `#[ignore = "needs root"]` run with `--ignored` (`.ci/run`
/// does when it is root); run without root they fail, they do not pass.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root: run it as root (cargo test -- --ignored)"
    );
}

/// `text` as a regex that matches it literally (for insta's path filters).
pub fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if "\\.+*?()|[]{}^$".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Run the command `make` builds with its stdout on /dev/full, then closed
/// (`>&-`): each run must exit 1 saying why (`cannot write to standard
/// output: …`), without a panic. Their stderr, to assert more on.
pub fn assert_unwritable_stdout_is_an_error(make: impl Fn() -> Command) -> Vec<String> {
    use std::os::unix::process::CommandExt;
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full opens");
    let mut on_full = make();
    on_full.stdout(full);
    let mut closed = make();
    // SAFETY: only close(2), async-signal-safe, between fork and exec.
    unsafe {
        closed.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    [
        (on_full, "No space left on device"),
        (closed, "Bad file descriptor"),
    ]
    .into_iter()
    .map(|(mut command, reason)| {
        let output = command.output().expect("the command runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(1), "{reason}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "error: cannot write to standard output: {reason}\n"
            )) && !stderr.contains("panicked"),
            "{stderr}"
        );
        stderr
    })
    .collect()
}

/// Run `command` into `head -1`, which leaves after the first line: its
/// exit code and stderr, and the line.
pub fn into_head(mut command: Command) -> (Option<i32>, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let stdout = child.stdout.take().expect("stdout");
    let head = Command::new("head")
        .arg("-1")
        .stdin(stdout)
        .output()
        .expect("head runs");
    let output = child.wait_with_output().expect("the command ends");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        String::from_utf8_lossy(&head.stdout).into_owned(),
    )
}

/// The first port below which nothing picks ports for itself: the kernel
/// takes the local port of every outgoing connection and of every bind to
/// port 0 from `ip_local_port_range` (32768 and up by default).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The lowest port [`free_ports`] hands out (above the usual services).
const FIRST_TEST_PORT: u16 = 20_000;

/// A port with `count` free ports on 127.0.0.1 from it, each bound once and
/// let go. They are picked below the kernel's ephemeral range, so no
/// connection another test makes meanwhile, and no bind to port 0, can take
/// one between this and the bind that needs it; randomly, so the test
/// threads running beside this one do not pick the same.
pub fn free_ports(count: u16) -> u16 {
    use std::hash::{BuildHasher, RandomState};
    let end = ephemeral_start().max(FIRST_TEST_PORT + 1_000);
    let span = u64::from(end - FIRST_TEST_PORT - count);
    for attempt in 0..1_000u64 {
        let random = RandomState::new().hash_one((std::process::id(), attempt));
        let base = FIRST_TEST_PORT + (random % span) as u16;
        let listeners: Vec<_> = (0..count)
            .map_while(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if listeners.len() == usize::from(count) {
            return base;
        }
    }
    panic!("no {count} free ports in a row below {end}");
}

/// A port free on 127.0.0.1 (see [`free_ports`]).
pub fn free_port() -> u16 {
    free_ports(1)
}
