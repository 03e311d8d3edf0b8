//! The `ready: notify` socket: systemd's sd_notify protocol, received for every
//! worker on one socket.
//!
//! The socket is *abstract* (`@supervise-…`), so workers running as another
//! `user` can reach it: abstract sockets have no file permissions. Every
//! datagram is received with SO_PASSCRED (the kernel vouches for the sender's
//! pid and uid) and MSG_CMSG_CLOEXEC, and every file descriptor passed with it
//! is closed at once — that is what answers `systemd-notify`'s `BARRIER=1`,
//! which waits until the receiver has closed the fd it sent. A datagram is
//! attributed to the worker whose *process group* contains the sender (read
//! from /proc at once, before the next datagram, as the sender may exit), so a
//! shell script's `systemd-notify --ready` counts for the worker it runs in.
//! Oversized or malformed datagrams are dropped with a debug log.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::debug;

use super::procfs;
use model::orders::WatchdogMessage;

/// The largest datagram accepted; a longer one is dropped (systemd uses the same bound).
pub(crate) const MAX_DATAGRAM: usize = 4096;
/// The most fds one datagram may carry that we make room for (the kernel's SCM_MAX_FD).
const MAX_PASSED_FDS: usize = 253;
/// The longest `STATUS=` text kept.
pub(crate) const MAX_STATUS_CHARS: usize = 200;

/// What one datagram said, and who (per the kernel) sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub sender_pid: i32,
    pub sender_uid: u32,
    /// The sender's process group, read from /proc when the datagram arrived.
    pub sender_pgid: Option<i32>,
    pub ready: bool,
    pub stopping: bool,
    pub status: Option<String>,
    /// `WATCHDOG=1` or `WATCHDOG=trigger`.
    pub watchdog: Option<WatchdogMessage>,
    /// `EXTEND_TIMEOUT_USEC=`.
    pub extend_timeout: Option<Duration>,
    /// `SUPERVISE_INJECTED=FD`: the preload library of `inject` handed the
    /// program supervise's socket.
    pub injected: bool,
}

/// The fields of a notify message we use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) ready: bool,
    pub(crate) stopping: bool,
    pub(crate) status: Option<String>,
    pub(crate) watchdog: Option<WatchdogMessage>,
    pub(crate) extend_timeout: Option<Duration>,
    pub(crate) injected: bool,
}

/// The fields of a notify message we use; unknown lines are ignored.
/// `None` for a message that is not `KEY=VALUE` lines of UTF-8.
pub(crate) fn parse_message(bytes: &[u8]) -> Option<Message> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut message = Message::default();
    for line in text.split('\n').filter(|l| !l.is_empty()) {
        let (key, value) = line.split_once('=')?;
        match key {
            "READY" => message.ready |= value == "1",
            "STOPPING" => message.stopping |= value == "1",
            "STATUS" => message.status = Some(value.chars().take(MAX_STATUS_CHARS).collect()),
            "WATCHDOG" => {
                message.watchdog = match value {
                    "1" => Some(WatchdogMessage::Ping),
                    "trigger" => Some(WatchdogMessage::Trigger),
                    _ => message.watchdog,
                }
            }
            "EXTEND_TIMEOUT_USEC" => {
                message.extend_timeout = value.parse().ok().map(Duration::from_micros);
            }
            "SUPERVISE_INJECTED" => message.injected = true,
            _ => {}
        }
    }
    Some(message)
}

/// The bound socket and the address workers get in `NOTIFY_SOCKET`.
pub struct NotifySocket {
    socket: AsyncFd<UnixDatagram>,
    /// `@name`, as `NOTIFY_SOCKET` spells an abstract address.
    pub env_value: String,
}

impl NotifySocket {
    /// Bind the abstract socket `@name` with SO_PASSCRED (inside the runtime).
    pub fn bind(name: &str) -> io::Result<NotifySocket> {
        let address = SocketAddr::from_abstract_name(name.as_bytes())?;
        // std creates the socket close-on-exec.
        let socket = UnixDatagram::bind_addr(&address)?;
        socket.set_nonblocking(true)?;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with a valid int option on our socket.
        let result = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the UnixDatagram owns its fd and keeps it open, unchanged,
        // for as long as the AsyncFd (which owns the UnixDatagram) lives.
        let socket =
            unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) }
                .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(NotifySocket {
            socket,
            env_value: format!("@{name}"),
        })
    }

    /// The socket the previous image kept open (datagrams sent meanwhile
    /// wait in it), named `env_value` in workers' `NOTIFY_SOCKET`.
    pub fn adopt(fd: std::os::fd::RawFd, env_value: String) -> io::Result<NotifySocket> {
        let fd = crate::upgrade::exec::adopt_fd(fd, "the notify socket")?;
        let socket = UnixDatagram::from(fd);
        socket.set_nonblocking(true)?;
        // SAFETY: as in `bind`: the AsyncFd owns the socket and its fd.
        let socket =
            unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) }
                .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(NotifySocket { socket, env_value })
    }

    /// The datagrams waiting in the socket now, at most `limit` (after an
    /// upgrade: those sent during the exec are taken before any deadline
    /// is judged).
    pub fn take_waiting(&self, limit: usize) -> Vec<Notification> {
        let mut buffer = vec![0u8; MAX_DATAGRAM + 1];
        let mut waiting = Vec::new();
        let fd = self.socket.get_ref().as_raw_fd();
        while waiting.len() < limit {
            match receive(fd, &mut buffer) {
                Ok(Some(notification)) => waiting.push(notification),
                Ok(None) => {}
                Err(error) => {
                    if error.kind() != io::ErrorKind::WouldBlock {
                        debug!("notify socket: {error}");
                    }
                    break;
                }
            }
        }
        waiting
    }

    /// Its fd, for an upgrade to keep.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.get_ref().as_raw_fd()
    }

    /// Receive until `events` closes, sending one [`Notification`] per valid datagram.
    pub async fn run(self, events: mpsc::Sender<Notification>) {
        let mut buffer = vec![0u8; MAX_DATAGRAM + 1];
        loop {
            let Ok(mut guard) = self.socket.readable().await else {
                return;
            };
            loop {
                match receive(self.socket.get_ref().as_raw_fd(), &mut buffer) {
                    Ok(Some(notification)) => {
                        if events.send(notification).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        guard.clear_ready();
                        break;
                    }
                    Err(error) => {
                        debug!("notify socket: {error}");
                        guard.clear_ready();
                        break;
                    }
                }
            }
        }
    }
}

/// Receive one datagram. `Ok(None)` for one that was dropped (too long,
/// malformed, no credentials).
fn receive(fd: RawFd, buffer: &mut [u8]) -> io::Result<Option<Notification>> {
    // Room for one ucred and MAX_PASSED_FDS fds, as CMSG_SPACE computes it.
    // SAFETY: CMSG_SPACE is a pure size computation.
    let control_len = unsafe {
        libc::CMSG_SPACE(std::mem::size_of::<libc::ucred>() as u32)
            + libc::CMSG_SPACE((MAX_PASSED_FDS * std::mem::size_of::<RawFd>()) as u32)
    } as usize;
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; control_len.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = control_len;
    // SAFETY: the header points to live buffers of the stated sizes.
    let received =
        unsafe { libc::recvmsg(fd, &mut header, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut credentials: Option<libc::ucred> = None;
    // SAFETY: walking the control messages the kernel wrote, within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            let payload = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    // Close every fd passed to us at once (BARRIER=1 waits for it).
                    for i in 0..payload / std::mem::size_of::<RawFd>() {
                        let passed = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        libc::close(passed);
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS)
                    if payload >= std::mem::size_of::<libc::ucred>() =>
                {
                    credentials = Some(std::ptr::read_unaligned(data.cast::<libc::ucred>()));
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    let length = received as usize;
    if length > MAX_DATAGRAM || header.msg_flags & libc::MSG_TRUNC != 0 {
        debug!("notify socket: dropped a datagram longer than {MAX_DATAGRAM} bytes");
        return Ok(None);
    }
    let Some(credentials) = credentials else {
        debug!("notify socket: dropped a datagram without credentials");
        return Ok(None);
    };
    let Some(message) = parse_message(&buffer[..length]) else {
        debug!(
            "notify socket: dropped a malformed datagram from pid {}",
            credentials.pid
        );
        return Ok(None);
    };
    Ok(Some(Notification {
        sender_pid: credentials.pid,
        sender_uid: credentials.uid,
        sender_pgid: procfs::pgrp(credentials.pid),
        ready: message.ready,
        stopping: message.stopping,
        status: message.status,
        watchdog: message.watchdog,
        extend_timeout: message.extend_timeout,
        injected: message.injected,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fields_we_use_and_ignores_others() {
        assert_eq!(
            parse_message(b"READY=1\nSTATUS=warming up\n"),
            Some(Message {
                ready: true,
                status: Some("warming up".into()),
                ..Message::default()
            })
        );
        assert_eq!(
            parse_message(b"STOPPING=1"),
            Some(Message {
                stopping: true,
                ..Message::default()
            })
        );
        assert_eq!(
            parse_message(b"MAINPID=42\nREADY=1\nX_CUSTOM=7"),
            Some(Message {
                ready: true,
                ..Message::default()
            })
        );
        assert_eq!(parse_message(b"READY=0"), Some(Message::default()));
        assert_eq!(
            parse_message(b"SUPERVISE_INJECTED=3"),
            Some(Message {
                injected: true,
                ..Message::default()
            })
        );
        assert_eq!(parse_message(b"garbage without equals"), None);
        assert_eq!(parse_message(b"READY=1\xff"), None);
        let long = format!("STATUS={}", "x".repeat(1000));
        assert_eq!(
            parse_message(long.as_bytes())
                .unwrap()
                .status
                .unwrap()
                .len(),
            MAX_STATUS_CHARS
        );
    }

    #[test]
    fn parses_the_watchdog_and_extend_timeout() {
        let message = parse_message(b"WATCHDOG=1\nEXTEND_TIMEOUT_USEC=2500000").unwrap();
        assert_eq!(message.watchdog, Some(WatchdogMessage::Ping));
        assert_eq!(message.extend_timeout, Some(Duration::from_millis(2500)));
        let trigger = parse_message(b"WATCHDOG=trigger").unwrap();
        assert_eq!(trigger.watchdog, Some(WatchdogMessage::Trigger));
        let odd = parse_message(b"WATCHDOG=0\nEXTEND_TIMEOUT_USEC=soon").unwrap();
        assert_eq!((odd.watchdog, odd.extend_timeout), (None, None));
    }

    #[tokio::test]
    async fn receives_credentials_and_closes_passed_fds() {
        let name = format!("supervise-test-{}", std::process::id());
        let socket = NotifySocket::bind(&name).unwrap();
        let (send, mut received) = mpsc::channel(4);
        tokio::spawn(socket.run(send));
        let client = UnixDatagram::unbound().unwrap();
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        client
            .send_to_addr(b"READY=1\nSTATUS=up", &address)
            .unwrap();
        let notification = received.recv().await.unwrap();
        assert_eq!(notification.sender_pid, std::process::id() as i32);
        assert!(notification.ready);
        assert_eq!(notification.status.as_deref(), Some("up"));
        // SAFETY: getpgrp has no preconditions.
        assert_eq!(notification.sender_pgid, Some(unsafe { libc::getpgrp() }));

        client
            .send_to_addr(&vec![b'x'; MAX_DATAGRAM + 10], &address)
            .unwrap();
        client.send_to_addr(b"STOPPING=1", &address).unwrap();
        let next = received.recv().await.unwrap();
        assert!(
            next.stopping,
            "the oversized datagram was dropped, the next one arrives"
        );
    }
}
