//! The plumbing every command shares: connect to the control socket, send
//! one request, read the reply lines, each wait bounded (see
//! [`REPLY_TIMEOUT`]) so that a supervisor that does not answer cannot hang
//! a command. What each command asks and prints is in its own file.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Failure, REPLY_TIMEOUT, fail};
use crate::cli::exit;
use crate::cli::output::Unwritten;
use crate::control::server::MAX_CONNECTIONS;
use model::protocol::{Command, Request};

/// A connection to the supervisor.
///
/// Every wait on it is bounded by [`REPLY_TIMEOUT`]: from the connect to the
/// first reply line, then from each line to the next. A follow (`logs -f`) is
/// bounded only up to its first reply (the supervisor answers a follow at
/// once, before any new line): after that it lasts as long as the supervisor
/// keeps the stream open.
pub(crate) struct Connection {
    pub(super) reader: BufReader<Deadlined>,
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
pub(super) struct Deadlined {
    stream: UnixStream,
    pub(super) deadline: Option<Instant>,
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

/// The failure of a supervisor that exited before it answered.
fn went_away(socket: &Path) -> Failure {
    fail(
        exit::NOT_RUNNING,
        format!(
            "no supervisor is running for this file any more: it exited before it answered \
             (tried {})",
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
            // The supervisor exited with the request unread (or still in its
            // listen backlog): Linux resets such a Unix socket connection.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(went_away(&self.socket)),
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

    #[test]
    fn a_supervisor_that_exits_with_the_request_in_its_backlog_is_not_running() {
        use socket2::{Domain, SockAddr, Socket, Type};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("exiting.sock");
        let listener = Socket::new(Domain::UNIX, Type::STREAM, None).expect("socket");
        listener
            .bind(&SockAddr::unix(&path).expect("address"))
            .expect("bind");
        listener.listen(8).expect("listen");
        let Ok(mut connection) = Connection::open(&path, Command::Status) else {
            panic!("the request queues in the backlog");
        };
        // Closing the listener resets the connection still in its backlog.
        drop(listener);
        let Err(failure) = connection.next_reply() else {
            panic!("no answer comes");
        };
        assert_eq!(failure.code, exit::NOT_RUNNING, "{}", failure.message);
        assert!(
            failure.message.contains("exited before it answered")
                && failure.message.contains("exiting.sock"),
            "{}",
            failure.message
        );
    }
}
