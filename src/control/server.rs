//! The control socket: a Unix stream socket, 0600, in the runtime directory.
//!
//! Each connection runs in its own task, so a slow or stuck client cannot
//! stall the supervisor: the request must arrive within [`REQUEST_TIMEOUT`]
//! and be at most [`MAX_REQUEST_BYTES`] long; each reply line must be taken
//! within [`WRITE_TIMEOUT`]. The peer's uid is checked with SO_PEERCRED (ours
//! or root) even though the socket is 0600 in a 0700 directory: permissions
//! can be loosened by accident, the check cannot. Requests reach the
//! supervisor loop through a bounded queue with a reply channel; `logs` is
//! served from the [`LogHub`] without involving the loop.
//!
//! Two pools of places, so that followers can never lock out a command:
//! every connection takes one of [`MAX_CONNECTIONS`] places until its
//! request is read; a `logs -f` follower then trades it for one of
//! [`MAX_FOLLOWERS`] places of its own, held for as long as it follows, and
//! one follower more is refused at once with an error that says so (it is
//! not left waiting for ever). A command holds its place only while it is
//! answered, so however many followers there are, `status`, `stop`,
//! `reload` and `upgrade` find a place within a request's time.
//!
//! A follower's end of the connection is watched too: when the client
//! closes it (or shuts down its sending side, or the connection fails) the
//! follow ends at once and frees its place, even if the followed instances
//! print nothing. A write would notice too, but a quiet instance never
//! causes one.

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc};
use tracing::{debug, warn};

use effects::output::LogHub;
use effects::output::rings::Line;
use model::protocol::{self, Command, MAX_REQUEST_BYTES, Request};

/// How long a client may take to send its request.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read one reply line.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests waiting for the supervisor loop.
pub(crate) const CONTROL_QUEUE: usize = 64;
/// Replies waiting for one client.
pub(crate) const REPLY_QUEUE: usize = 64;
/// Clients served at once, followers apart (see [`MAX_FOLLOWERS`]): a
/// command, or a connection whose request is not read yet. More wait in
/// the listen backlog.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// `logs -f` followers served at once, in a pool of their own; one more is
/// refused (see [`too_many_followers`]).
pub const MAX_FOLLOWERS: usize = 64;
/// The first pause after a failed accept (EMFILE), doubled each time…
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// …up to this.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Bytes read at a time from a follower's side of the connection: it has
/// nothing more to say after its request, so anything it sends is dropped;
/// what matters is the end of its stream.
const FOLLOWER_READ_BYTES: usize = 256;

/// A request for the loop, with where its replies go.
pub struct ControlRequest {
    pub(crate) command: Command,
    /// Reply lines (JSON, without the newline).
    pub(crate) reply: mpsc::Sender<String>,
    /// The client's connection, open for as long as `reply` is: an upgrade
    /// keeps it across the exec, and the new image answers on it.
    pub(crate) connection: std::os::fd::RawFd,
}

/// Bind the control socket at `path` (replacing a stale one: the caller holds
/// the lock, so no live supervisor owns it) with mode 0600.
/// The control listener the previous image kept open (clients that
/// connected meanwhile wait in its backlog).
pub(crate) fn adopt(fd: std::os::fd::RawFd) -> io::Result<UnixListener> {
    let fd = effects::upgrade::exec::adopt_fd(fd, "the control socket")?;
    let listener = std::os::unix::net::UnixListener::from(fd);
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

/// Answer, from the new image, the client whose request was an upgrade:
/// one line on its connection (kept open across the exec), then close it.
pub(crate) fn answer_kept_client(fd: std::os::fd::RawFd, line: &str) -> io::Result<()> {
    use std::io::Write;
    let fd = effects::upgrade::exec::adopt_fd(fd, "the upgrading client's connection")?;
    let mut stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let mut line = line.as_bytes().to_vec();
    line.push(b'\n');
    stream.write_all(&line)
}

pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Accept clients for as long as the supervisor runs: at most
/// [`MAX_CONNECTIONS`] at once besides at most [`MAX_FOLLOWERS`] followers
/// (more wait in the listen backlog), and after an accept error (EMFILE:
/// out of fds) a pause that doubles up to [`ACCEPT_BACKOFF_MAX`] instead of
/// a busy loop.
pub(crate) async fn serve(
    listener: UnixListener,
    requests: mpsc::Sender<ControlRequest>,
    logs: Arc<LogHub>,
) {
    // SAFETY: geteuid has no preconditions.
    let our_uid = unsafe { libc::geteuid() };
    // The two pools of places (see the module's docs).
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let followers = Arc::new(Semaphore::new(MAX_FOLLOWERS));
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                stream
            }
            Err(error) => {
                warn!(
                    event = "control_accept_failed",
                    "control socket: cannot accept a client ({error}); trying again in {}ms",
                    backoff.as_millis()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let requests = requests.clone();
        let logs = logs.clone();
        let followers = Arc::clone(&followers);
        tokio::spawn(async move {
            let client = Client {
                uid: our_uid,
                requests,
                logs,
                place: permit,
                followers,
            };
            if let Err(error) = connection(stream, client).await {
                debug!("control connection: {error}");
            }
        });
    }
}

/// The uid of the process at the other end (SO_PEERCRED).
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred of the stated size.
    let result = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(credentials.uid)
}

/// The reply line a client gets for a line an instance printed.
fn line_reply(line: &Line) -> Value {
    serde_json::json!({
        "ok": true,
        "app": &*line.app,
        "slot": line.slot,
        "time": humantime::format_rfc3339_millis(line.at).to_string(),
        "line": line.text,
    })
}

async fn send(stream: &mut tokio::net::unix::OwnedWriteHalf, value: &Value) -> io::Result<()> {
    send_line(stream, value.to_string()).await
}

async fn send_line(stream: &mut tokio::net::unix::OwnedWriteHalf, line: String) -> io::Result<()> {
    let mut line = line.into_bytes();
    line.push(b'\n');
    tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&line))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "client too slow"))?
}

/// What serving one connection needs.
struct Client {
    /// Our uid, which the peer's must be (or root's).
    uid: u32,
    requests: mpsc::Sender<ControlRequest>,
    logs: Arc<LogHub>,
    /// Its place among the [`MAX_CONNECTIONS`], held until it is answered
    /// (or, for a follower, until it has a place among the followers).
    place: OwnedSemaphorePermit,
    /// The followers' pool.
    followers: Arc<Semaphore>,
}

/// The error a follower gets when every follower's place is taken.
fn too_many_followers() -> Value {
    protocol::error_reply(&format!(
        "the supervisor already serves {MAX_FOLLOWERS} `logs -f` followers, as many as it \
         takes; end one of them, or read without -f"
    ))
}

async fn connection(stream: UnixStream, client: Client) -> io::Result<()> {
    let Client {
        uid: our_uid,
        requests,
        logs,
        place,
        followers,
    } = client;
    let uid = peer_uid(&stream)?;
    let connection = stream.as_raw_fd();
    let (read, mut write) = stream.into_split();
    if uid != our_uid && uid != 0 {
        warn!(
            event = "control_refused",
            uid, "control socket: refused a client of uid {uid} (not {our_uid} or root)"
        );
        return send(
            &mut write,
            &protocol::error_reply("permission denied: not the supervisor's user"),
        )
        .await;
    }
    // Read one line, bounded in size and time.
    let mut reader = BufReader::new(read.take(MAX_REQUEST_BYTES as u64 + 1));
    let mut line = Vec::new();
    let read = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_until(b'\n', &mut line)).await;
    let request = match read {
        Err(_) => return send(&mut write, &protocol::error_reply("no request within 5s")).await,
        Ok(Err(error)) => return Err(error),
        Ok(Ok(_)) if line.len() > MAX_REQUEST_BYTES => {
            Err(format!("request longer than {MAX_REQUEST_BYTES} bytes"))
        }
        Ok(Ok(_)) => {
            while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                line.pop();
            }
            protocol::decode(&line)
        }
    };
    let request: Request = match request {
        Ok(request) => request,
        Err(message) => return send(&mut write, &protocol::error_reply(&message)).await,
    };
    if let Command::Logs {
        target,
        lines,
        follow,
        since_ms,
    } = request.command
    {
        // A follower trades its place among the connections for one among
        // the followers, or is refused at once: the commands' places stay
        // free for the commands.
        let _place = if follow {
            let Ok(follower) = followers.try_acquire_owned() else {
                return send(&mut write, &too_many_followers()).await;
            };
            drop(place);
            follower
        } else {
            place
        };
        // Past the request line, only the end of the client's stream matters
        // (see `client_gone`): bytes buffered after the line are dropped.
        let client_side = reader.into_inner().into_inner();
        let since = since_ms.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let tail = Tail {
            target,
            count: lines,
            since,
            follow,
        };
        return serve_logs(client_side, &mut write, &logs, tail).await;
    }
    let (reply, mut replies) = mpsc::channel(REPLY_QUEUE);
    let queued = requests.try_send(ControlRequest {
        command: request.command,
        reply,
        connection,
    });
    if queued.is_err() {
        return send(
            &mut write,
            &protocol::error_reply("the supervisor is busy; try again"),
        )
        .await;
    }
    while let Some(line) = replies.recv().await {
        send_line(&mut write, line).await?;
    }
    Ok(())
}

/// What a `logs` request asks for.
struct Tail {
    target: Option<String>,
    /// Lines per instance, at most.
    count: usize,
    /// Only lines printed at this time or later.
    since: Option<SystemTime>,
    follow: bool,
}

async fn serve_logs(
    mut read: tokio::net::unix::OwnedReadHalf,
    write: &mut tokio::net::unix::OwnedWriteHalf,
    logs: &LogHub,
    tail: Tail,
) -> io::Result<()> {
    let Tail {
        target,
        count,
        since,
        follow,
    } = tail;
    let (app, slot) = match target.as_deref().map(protocol::parse_target) {
        Some(Ok((app, slot))) => (Some(app.to_string()), slot),
        Some(Err(message)) => return send(write, &protocol::error_reply(&message)).await,
        None => (None, None),
    };
    // An app or instance that does not exist is refused, as by every
    // command (a follow of it would wait for ever).
    if let Some(app) = app.as_deref()
        && let Err(message) = logs.check_target(app, slot)
    {
        return send(write, &protocol::error_reply(&message)).await;
    }
    // Subscribe first, so no line falls between the tail and the follow.
    let mut feed = logs.follow();
    for line in logs.tail(app.as_deref(), slot, count, since) {
        send(write, &line_reply(&line)).await?;
    }
    if !follow {
        return send(write, &serde_json::json!({"ok": true, "end": true})).await;
    }
    // Said at once, so that a client can bound its wait for a first reply
    // even when the instances it follows have printed nothing yet.
    send(write, &serde_json::json!({"ok": true, "following": true})).await?;
    loop {
        // `recv` on a broadcast receiver and `read` on a socket are both
        // cancel-safe: whichever loses the race loses nothing.
        let received = tokio::select! {
            received = feed.recv() => received,
            gone = client_gone(&mut read) => {
                debug!("control connection: a follower left ({gone})");
                return Ok(());
            }
        };
        match received {
            Ok(line) => {
                if app.as_deref().is_some_and(|a| a != &*line.app)
                    || slot.is_some_and(|s| s != line.slot)
                {
                    continue;
                }
                send(write, &line_reply(&line)).await?;
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                send(write, &serde_json::json!({"ok": true, "missed": missed})).await?;
            }
            Err(broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}

/// Resolves when the client's side of the connection ends: end of stream
/// (it closed the connection, exited, was killed, or shut down its sending
/// side) or an error (ECONNRESET). Anything it sends meanwhile is dropped,
/// [`FOLLOWER_READ_BYTES`] at a time. Cancel-safe (a `read` that loses a
/// `select!` has read nothing).
async fn client_gone(read: &mut tokio::net::unix::OwnedReadHalf) -> String {
    let mut discard = [0u8; FOLLOWER_READ_BYTES];
    loop {
        match read.read(&mut discard).await {
            Ok(0) => return "end of stream".to_string(),
            Ok(_) => continue,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn a_line_is_replied_with_its_instance_and_time() {
        let hub = LogHub::new();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
        hub.push(&Arc::from("web"), 1, b"hello", at);
        let reply = line_reply(&hub.tail(Some("web"), Some(1), 1, None)[0]);
        assert_eq!(reply["time"], "1970-01-01T00:00:01.000Z");
        assert_eq!(reply["app"], "web");
        assert_eq!(reply["slot"], 1);
        assert_eq!(reply["line"], "hello");
    }
}
