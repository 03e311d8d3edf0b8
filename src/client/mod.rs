//! The everyday commands, as clients of a running supervisor's control socket:
//! `status`, `reload`, `restart`, `stop`, `start`, `scale`, `logs`, and the
//! live dashboard over them, `top`.
//!
//! The socket is found from the ecosystem file (the same default as `check`)
//! or `--socket`. With no supervisor there, a command says so, names the
//! socket it tried, and exits 3.
//!
//! A supervisor that is there but does not answer (stopped with SIGSTOP,
//! wedged, or serving as many clients as it takes) must not hang a command
//! either: connecting, sending the request and getting the first reply line
//! take at most [`REPLY_TIMEOUT`] together, and each later line at most as
//! long again, after which the command names the socket, says the supervisor
//! did not answer, and exits 3 as well. Only `logs -f`, once its first reply
//! has come, waits as long as the supervisor keeps the stream open: the
//! instances it follows may be quiet for hours.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::output::{self, Unwritten};
use crate::cli::{ecosystem_path, exit};
use crate::control::server::MAX_CONNECTIONS;
use config;
use effects::output::terminal::{Tab, printable};
use effects::runtime;
use model::protocol::{Command, Request};
use std::borrow::Cow;

mod status;
mod top;

pub use status::{ask_status, status};
pub use top::top;

/// How long a command waits for the supervisor to take its connection and
/// request and send the first reply line; then, for each next line (but see
/// [`Connection`] for `logs -f`).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `upgrade` waits for the new image's answer: the probe (5 s at
/// most), then the exec and the restore of a large state.
pub(crate) const UPGRADE_REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `reload` waits for the rollout to complete.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(300);
/// How often they look.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A failure with its exit code and message (empty when there is nothing
/// to say: the reader of stdout went away, see [`Unwritten`]).
pub struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl From<Unwritten> for Failure {
    fn from(unwritten: Unwritten) -> Failure {
        Failure {
            code: unwritten.exit_code(),
            message: unwritten.message().unwrap_or_default(),
        }
    }
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// Where the control socket of the supervisor for `file` is.
pub fn socket_path(file: Option<&Path>, socket: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(socket) = socket {
        return Ok(socket.to_path_buf());
    }
    let file = ecosystem_path(file).map_err(|m| fail(exit::USAGE, m))?;
    let identity = runtime::identify(&file)
        .map_err(|e| fail(exit::USAGE, format!("cannot read {}: {e}", file.display())))?;
    Ok(runtime::find_socket(&runtime::runtime_dir(), &identity))
}

/// A connection to the supervisor.
///
/// Every wait on it is bounded by [`REPLY_TIMEOUT`]: from the connect to the
/// first reply line, then from each line to the next. A follow (`logs -f`) is
/// bounded only up to its first reply (the supervisor answers a follow at
/// once, before any new line): after that it lasts as long as the supervisor
/// keeps the stream open.
pub(crate) struct Connection {
    reader: BufReader<Deadlined>,
    /// The socket, to name it when the supervisor does not answer.
    socket: PathBuf,
    /// Whether the wait for each reply after the first is unbounded.
    follow: bool,
    /// Whether the first reply has come.
    answered: bool,
}

/// A stream whose reads fail with `TimedOut` once `deadline` has passed,
/// however many reads a line takes. Without a deadline (a follow) a read
/// waits as long as it takes, unless the reader of stdout goes away
/// meanwhile (`supervise logs -f | grep -m1 ready`): then it fails with
/// `BrokenPipe`, as the next write would, so that a quiet app does not keep
/// the follow (and its place among the supervisor's clients) for good.
struct Deadlined {
    stream: UnixStream,
    deadline: Option<Instant>,
}

impl Read for Deadlined {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let left = match self.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                Some(left)
            }
            None => {
                wait_unless_stdout_closed(&self.stream)?;
                None
            }
        };
        self.stream.set_read_timeout(left)?;
        self.stream.read(buffer)
    }
}

/// Wait until `stream` has something to read (or is closed), unless the
/// reader of stdout goes away first (`BrokenPipe`): poll reports that as an
/// error (or a hangup) of stdout, asked for nothing.
fn wait_unless_stdout_closed(stream: &UnixStream) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = io::stdout();
    loop {
        let mut fds = [
            PollFd::new(stream.as_fd(), PollFlags::POLLIN),
            PollFd::new(stdout.as_fd(), PollFlags::empty()),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
            Ok(_) => {}
        }
        let gone = PollFlags::POLLERR | PollFlags::POLLHUP;
        if fds[1]
            .revents()
            .is_some_and(|events| events.intersects(gone))
        {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        return Ok(());
    }
}

/// Whether `error` is a socket timeout (SO_RCVTIMEO and SO_SNDTIMEO give
/// EAGAIN, a passed deadline gives `TimedOut`).
fn timed_out(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// The failure of a supervisor that took the connection (or left it in the
/// listen backlog) but did not answer in time.
fn no_answer(socket: &Path) -> Failure {
    fail(
        exit::NOT_RUNNING,
        format!(
            "the supervisor did not answer within {} (tried {}); it may be stopped \
             (SIGSTOP) or already serving {MAX_CONNECTIONS} clients",
            humantime::format_duration(REPLY_TIMEOUT),
            socket.display()
        ),
    )
}

/// Connect to `socket`, waiting at most `timeout` for a place in its listen
/// backlog: a blocking connect to a Unix socket whose backlog is full waits
/// for the listener to accept, and SO_SNDTIMEO is what bounds that wait.
fn connect(socket: &Path, timeout: Duration) -> io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let client = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    client.set_write_timeout(Some(timeout))?;
    client.connect(&SockAddr::unix(socket)?)?;
    Ok(client.into())
}

impl Connection {
    /// Send one request; replies are read with [`Connection::next_reply`].
    pub(crate) fn open(socket: &Path, command: Command) -> Result<Connection, Failure> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let follow = matches!(command, Command::Logs { follow: true, .. });
        let mut stream = connect(socket, REPLY_TIMEOUT).map_err(|e| {
            if timed_out(&e) {
                return no_answer(socket);
            }
            fail(
                exit::NOT_RUNNING,
                format!(
                    "no supervisor is running for this file (tried {}: {e})",
                    socket.display()
                ),
            )
        })?;
        let mut line = serde_json::to_vec(&Request::new(command))
            .map_err(|e| fail(exit::USAGE, e.to_string()))?;
        line.push(b'\n');
        // A refusal may arrive before the request is written (EPIPE then):
        // the reply says why, so read it before giving up.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(no_answer(socket));
        }
        let written = stream
            .set_write_timeout(Some(left))
            .and_then(|()| stream.write_all(&line));
        let mut connection = Connection {
            reader: BufReader::new(Deadlined {
                stream,
                deadline: Some(deadline),
            }),
            socket: socket.to_path_buf(),
            follow,
            answered: false,
        };
        if let Err(error) = written {
            return match connection.next_reply() {
                Err(refusal) => Err(refusal),
                _ => Err(fail(
                    exit::NOT_RUNNING,
                    format!("{}: {error}", socket.display()),
                )),
            };
        }
        Ok(connection)
    }

    /// The next reply line; `None` at the end. An `ok: false` reply is a failure.
    pub(crate) fn next_reply(&mut self) -> Result<Option<Value>, Failure> {
        // The first reply keeps the deadline set at `open`.
        if self.answered {
            self.reader.get_mut().deadline = (!self.follow).then(|| Instant::now() + REPLY_TIMEOUT);
        }
        let mut line = String::new();
        let read = self.reader.read_line(&mut line);
        self.answered = true;
        match read {
            Ok(0) => Ok(None),
            Ok(_) => {
                let value: Value = serde_json::from_str(&line)
                    .map_err(|e| fail(exit::INVALID, format!("bad reply: {e}")))?;
                if value["ok"] == false {
                    let error = value["error"].as_str().unwrap_or("refused");
                    return Err(fail(exit::INVALID, error.to_string()));
                }
                Ok(Some(value))
            }
            Err(e) if timed_out(&e) => Err(no_answer(&self.socket)),
            // Reading a socket never fails so: stdout's reader left a follow.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(Unwritten::from(e).into()),
            Err(e) => Err(fail(exit::INVALID, format!("reading the reply: {e}"))),
        }
    }
}

/// One request, one reply.
pub(crate) fn ask(socket: &Path, command: Command) -> Result<Value, Failure> {
    Connection::open(socket, command)?
        .next_reply()?
        .ok_or_else(|| fail(exit::INVALID, "the supervisor closed the connection"))
}

/// Write to stdout (see [`output`]).
fn print(text: &str) -> Result<(), Failure> {
    Ok(output::write(text.as_bytes())?)
}

/// Turn a command's result into output and an exit code.
pub fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(failure) => {
            if !failure.message.is_empty() {
                let _ = writeln!(std::io::stderr(), "error: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}

/// `supervise reload APP|all`: start a rolling replacement and follow it.
pub fn reload(socket: &Path, app: &str) -> Result<(), Failure> {
    let started = ask(
        socket,
        Command::Reload {
            app: app.to_string(),
        },
    )?;
    let apps: Vec<String> = started["apps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut shown = String::new();
    loop {
        let status = ask_status(socket)?;
        let mut done = true;
        let mut line = Vec::new();
        for app in status.apps.iter().filter(|a| apps.contains(&a.name)) {
            let name = &app.name;
            if app.rollout.halted {
                print(&format!(
                    "{name}: rollout halted: a replacement failed to become ready; the old instances keep serving\n"
                ))?;
                return Err(fail(exit::HALTED, format!("{name}: rollout halted")));
            }
            let held = match app.rollout.held {
                0 => String::new(),
                n => format!(" ({n} held by `stop`: they follow on `start`)"),
            };
            line.push(format!(
                "{name}: {}/{} replaced{held}",
                app.rollout.replaced, app.rollout.total
            ));
            done &= app.rollout.complete;
        }
        let text = line.join(", ");
        if text != shown {
            print(&format!("{text}\n"))?;
            shown = text;
        }
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(exit::HALTED, "timed out waiting for the rollout"));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// `supervise upgrade [--binary PATH]`: replace the supervisor's binary;
/// the new image answers, with the versions and how long it took.
pub fn upgrade(socket: &Path, binary: Option<&Path>) -> Result<(), Failure> {
    let binary = match binary {
        Some(path) => Some(
            std::path::absolute(path)
                .map_err(|e| fail(exit::USAGE, format!("{}: {e}", path.display())))?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    let mut connection = Connection::open(socket, Command::Upgrade { binary })?;
    // The answer comes from the new image: after the probe, the exec and
    // the restore of the whole state.
    connection.reader.get_mut().deadline = Some(Instant::now() + UPGRADE_REPLY_TIMEOUT);
    let reply = connection.next_reply()?.ok_or_else(|| {
        fail(
            exit::INVALID,
            "the connection closed without an answer: the new binary did not take over (see the supervisor's log)",
        )
    })?;
    let kept = match reply["lost"].as_u64().unwrap_or(0) {
        0 => "every worker kept".to_string(),
        n => format!("{n} workers ended in the exec window (see `child_lost` in the log)"),
    };
    print(&format!(
        "upgraded from {} to {} in {} ms (pid {}, upgrade {}); {kept}\n",
        reply["from_version"].as_str().unwrap_or("?"),
        reply["to_version"].as_str().unwrap_or("?"),
        reply["took_ms"],
        reply["pid"],
        reply["upgrades"],
    ))?;
    Ok(())
}

/// `supervise restart|stop|start TARGET`.
pub fn simple(socket: &Path, command: Command) -> Result<(), Failure> {
    let reply = ask(socket, command)?;
    if let Some(message) = reply["message"].as_str() {
        print(&format!("{message}\n"))?;
    }
    Ok(())
}

/// Milliseconds since the Unix epoch (0 before it), as `logs` sends `since`.
pub fn unix_millis(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `supervise logs [TARGET] [-n LINES] [-f] [--since WHEN]`: `request` is a
/// [`Command::Logs`].
pub fn logs(socket: &Path, request: Command) -> Result<(), Failure> {
    let again = match &request {
        Command::Logs {
            target,
            follow: true,
            ..
        } => Some(Command::Logs {
            target: target.clone(),
            lines: 0,
            follow: true,
            since_ms: None,
        }),
        _ => None,
    };
    // On a terminal, what the workers printed is made printable (see
    // `effects::output::terminal`); into a pipe or a file, as printed.
    let terminal = {
        use std::io::IsTerminal;
        std::io::stdout().is_terminal()
    };
    let mut connection = Connection::open(socket, request)?;
    loop {
        let Some(reply) = connection.next_reply()? else {
            // A follow that ends without a word: the supervisor stopped (its
            // socket is gone), or it was upgraded (the socket is there, and
            // the new image answers). Follow the new one.
            let Some(again) = again.clone().filter(|_| socket.exists()) else {
                return Ok(());
            };
            let _ = writeln!(
                std::io::stderr(),
                "[the supervisor was upgraded (or restarted): following again; lines printed meanwhile are in `supervise logs`]"
            );
            connection = Connection::open(socket, again)?;
            continue;
        };
        if reply["end"] == true {
            return Ok(());
        }
        // The supervisor's first word on a follow: the tail is done.
        if reply["following"] == true {
            continue;
        }
        if let Some(missed) = reply["missed"].as_u64() {
            print(&format!("[{missed} lines missed]\n"))?;
            continue;
        }
        let line = reply["line"].as_str().unwrap_or("");
        let line = if terminal {
            Cow::Owned(printable(line, usize::MAX, Tab::Keep))
        } else {
            Cow::Borrowed(line)
        };
        print(&format!(
            "{}.{} | {line}\n",
            printable(reply["app"].as_str().unwrap_or("?"), usize::MAX, Tab::Keep),
            reply["slot"],
        ))?;
    }
}

/// `supervise scale APP N|+N|-N`: edit `instances` in the file, then wait
/// (at most `timeout`) until the running count matches what the file says.
/// Meanwhile, instances that are not coming up are shown with why (backoff,
/// failed, the exit).
///
/// The edit holds the file's [`crate::scale::EditLock`] from its read to
/// its write, so that scales at once each apply to what the one before
/// wrote; the wait does not (the next may edit the file meanwhile), and so
/// it waits for what the file says *now*, read again each time it looks.
pub fn scale(
    file: Option<&Path>,
    socket: &Path,
    app: &str,
    change: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    let path = ecosystem_path(file).map_err(|m| fail(exit::USAGE, m))?;
    let shown = path.display().to_string();
    // The supervisor must be there to follow the edit; asked before the
    // lock, which is held for nothing but the file.
    ask(socket, Command::Status)?;
    let (before, after) = edit_instances(&path, &shown, app, change)?;
    print(&format!(
        "{app}: instances {before} → {after} (edited {shown})\n"
    ))?;
    let deadline = Instant::now() + timeout;
    let mut wanted = after;
    let mut shown_problems = String::new();
    loop {
        // An invalid or unreadable moment (an editor saving) keeps the last.
        if let Some(now) = instances_in(&path, app) {
            wanted = now;
        }
        let status = ask_status(socket)?;
        let Some(found) = status.apps.iter().find(|a| a.name == app) else {
            return Err(fail(
                exit::INVALID,
                format!("the supervisor has no app `{app}`"),
            ));
        };
        // A one-shot that completed came up and did its job.
        let completed = found
            .workers
            .iter()
            .filter(|w| w.completed_s.is_some() && w.slot < wanted)
            .count() as u32;
        if found.instances == wanted && found.running + completed == wanted {
            if wanted != after {
                print(&format!(
                    "{app}: {wanted} instances, as {shown} says now (edited again since)\n"
                ))?;
            }
            return Ok(());
        }
        // Not there yet: say which instances are not coming up, and why.
        let problems: Vec<String> = found
            .workers
            .iter()
            .filter(|w| {
                w.slot < wanted && !matches!(w.state.as_str(), "starting" | "ready" | "stopping")
            })
            .map(|w| {
                let why = w.last_exit.as_deref().unwrap_or("no exit yet");
                format!(
                    "  {app}.{}: {} ({why}; {} restarts)",
                    w.slot, w.state, w.restarts
                )
            })
            .collect();
        let text = problems.join("\n");
        if !text.is_empty() && text != shown_problems {
            print(&format!(
                "{app}: {} of {wanted} running; not coming up:\n{text}\n",
                found.running
            ))?;
            shown_problems = text;
        }
        if Instant::now() > deadline {
            return Err(fail(
                exit::HALTED,
                format!(
                    "{app}: {} of {wanted} instances running after {}; {shown} says {wanted}",
                    found.running,
                    humantime::format_duration(timeout)
                ),
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The read-modify-write of `scale`, under the file's lock: the count before
/// and the one written, both as the file says (read under the lock; the
/// edited text, checked before it is written).
fn edit_instances(
    path: &Path,
    shown: &str,
    app: &str,
    change: &str,
) -> Result<(u32, u32), Failure> {
    let _lock = crate::scale::lock(path, crate::scale::LOCK_WAIT).map_err(|e| match e {
        crate::scale::LockError::Busy => fail(
            exit::HALTED,
            format!(
                "another `scale` of {shown} has held its lock for {}; the file is unchanged",
                humantime::format_duration(crate::scale::LOCK_WAIT)
            ),
        ),
        crate::scale::LockError::Io(e) => fail(exit::USAGE, format!("cannot read {shown}: {e}")),
    })?;
    let checked = config::check_file(path, &config::Host::detect())
        .map_err(|e| fail(exit::USAGE, e.to_string()))?;
    let Some(desired) = checked.desired else {
        return Err(fail(
            exit::INVALID,
            format!("{shown} is invalid; fix it before scaling (supervise check)"),
        ));
    };
    let Some(spec) = desired.app(app) else {
        return Err(fail(exit::INVALID, format!("{shown} has no app `{app}`")));
    };
    let before = spec.instances;
    let after = crate::scale::target(before, change).map_err(|e| match e {
        crate::scale::CountError::NotACount(m) => fail(exit::USAGE, m),
        crate::scale::CountError::Refused(m) => fail(exit::INVALID, m),
    })?;
    // The edited file must be valid too (a scheduled app runs one
    // instance, say): the supervisor would refuse it, and it would be left
    // on disk for the next start.
    let edited =
        crate::scale::edit_text(&checked.text, app, after).map_err(|m| fail(exit::INVALID, m))?;
    let after_edit = config::check_text(&edited, path, &config::Host::detect());
    let Some(written) = after_edit.desired.as_ref() else {
        let errors: Vec<_> = after_edit
            .diagnostics
            .into_iter()
            .filter(|d| d.severity == config::diagnostic::Severity::Error)
            .collect();
        return Err(fail(
            exit::INVALID,
            format!(
                "{app}: {after} instances would make {shown} invalid; the file is unchanged\n{}",
                config::diagnostic::render(shown, &edited, &errors).trim_end()
            ),
        ));
    };
    let says = written.app(app).map(|spec| spec.instances);
    if says != Some(after) {
        return Err(fail(
            exit::INVALID,
            format!(
                "{app}: the edit would not make {shown} say {after} instances; the file is unchanged"
            ),
        ));
    }
    // Atomically next to the real file (a symlinked file stays a symlink; a
    // file with hard links or bind-mounted is written in place), keeping
    // its mode and owner: see `crate::replace`.
    crate::replace::replace(path, edited.as_bytes(), "scale")
        .map_err(|e| fail(exit::INVALID, format!("cannot write {shown}: {e}")))?;
    Ok((before, after))
}

/// How many instances of `app` the file at `path` says, if it can be read
/// and is valid.
fn instances_in(path: &Path, app: &str) -> Option<u32> {
    let checked = config::check_file(path, &config::Host::detect()).ok()?;
    Some(checked.desired?.app(app)?.instances)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_to_a_full_backlog_gives_up_in_time() {
        use socket2::{Domain, SockAddr, Socket, Type};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("full.sock");
        let listener = Socket::new(Domain::UNIX, Type::STREAM, None).expect("socket");
        listener
            .bind(&SockAddr::unix(&path).expect("address"))
            .expect("bind");
        // A backlog of 0 holds one pending connection; it is never accepted.
        listener.listen(0).expect("listen");
        let _pending = connect(&path, REPLY_TIMEOUT).expect("the first one queues");
        let limit = Duration::from_millis(200);
        let started = Instant::now();
        let error = connect(&path, limit).expect_err("the backlog is full");
        assert!(timed_out(&error), "{error}");
        assert!(
            started.elapsed() >= limit && started.elapsed() < REPLY_TIMEOUT,
            "gave up after {:?}",
            started.elapsed()
        );
    }
}
