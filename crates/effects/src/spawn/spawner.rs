//! The spawner: a small process of our own binary that forks the workers.
//!
//! Why: a fork copies the forking process's page tables and its whole fd
//! table, and the child then closes every one of those fds at exec. The
//! supervisor holds two fds per worker (its output pipes), so with N workers
//! each spawn cost O(N) in the kernel and starting N cost O(N²) — 5,000
//! `sleep`s took 15 s. The spawner holds a handful of fds and little memory,
//! so a fork from it costs the same whatever N is. It forks with
//! `CLONE_PARENT`: the supervisor stays every worker's parent (it reaps them,
//! and their `PR_SET_PDEATHSIG` follows it), and nothing else about a spawn
//! changes: the child runs the same code ([`super::child`]) on data prepared
//! before the fork.
//!
//! The supervisor starts it by fork+exec of its own binary (`/proc/self/exe
//! __spawner`, with its end of a SOCK_SEQPACKET socketpair as fd 3) — an exec,
//! so that it is a fresh single-threaded process even when started again from
//! the running supervisor — and restarts it if it dies. One request (a
//! [`wire`] datagram, the fds beside it as SCM_RIGHTS), one reply: the pid,
//! or the stage and errno of what failed. The spawner exits when the socket
//! closes, and with the supervisor (`PR_SET_PDEATHSIG`).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use super::fork::{ChildFds, Parent, Prepared, fork_exec};
use super::{Launch, SpawnError, pipe, wire};
use model::process::StartStage;

/// How long the supervisor waits for the spawner's answer (one fork) before
/// it takes the spawner for broken (stopped, wedged), kills it, and fails
/// that start. It blocks the loop, so it is short: a fork takes well under
/// a millisecond.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long starting the spawner may take (one fork and exec).
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a killed spawner may take to die (SIGKILL: at once, in practice).
const DEATH_WAIT: Duration = Duration::from_secs(1);
/// How many requests may wait for the spawner's answer at once: the
/// spawner forks one while the supervisor prepares the next (each holds
/// its pipes' read ends and its cgroup's directory meanwhile). Few: the
/// replies queue in our socket, and the last waits for every fork before it.
pub(crate) const SPAWNS_IN_FLIGHT: usize = 8;
/// The argument that makes our binary a spawner.
pub const SPAWNER_ARG: &str = "__spawner";
/// The fds a request carries besides the listening sockets: stdin, stdout,
/// stderr, the status pipe.
const STDIO_FDS: usize = 4;
/// The most fds one request carries (with a cgroup directory).
const MAX_FDS: usize = STDIO_FDS + 1 + model::limits::MAX_LISTEN_FDS;
/// A reply: the pid (or -1), the stage code, the errno.
const REPLY_BYTES: usize = 12;

/// The supervisor's side of the spawner: the process, while there is one.
///
/// A spawner that fails a request in any way (no answer in time, a closed
/// socket, a short reply) is killed and waited for at once, never asked
/// again: whatever it was doing, it cannot fork anything later, and no
/// reply of one request can be read as another's. Its pre-exec children are
/// killed with it; the caller kills what the request may have started
/// (its cgroup, its token), and the next spawn starts a new spawner.
#[derive(Debug)]
pub struct Spawner {
    helper: Option<Helper>,
    /// A worker's stdin; outlives every spawner.
    devnull: OwnedFd,
    /// Requests sent to `helper` not answered yet.
    in_flight: usize,
    /// Requests a killed spawner had not answered: each fails at its
    /// [`Spawner::receive`] before anything is sent to a new one.
    unanswered: usize,
}

/// One spawner process and the socket to it.
#[derive(Debug)]
struct Helper {
    socket: OwnedFd,
    pid: i32,
}

fn spawn_error(stage: StartStage, errno: i32, context: &str) -> SpawnError {
    SpawnError {
        stage,
        errno,
        context: context.to_string(),
    }
}

fn io_errno(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

impl Helper {
    fn start() -> io::Result<Helper> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let timeout = libc::timeval {
            tv_sec: REPLY_TIMEOUT.as_secs() as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: setsockopt with a timeval of the stated size on our socket.
        unsafe {
            libc::setsockopt(
                ours.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        let launch = Launch {
            program: b"/proc/self/exe".to_vec(),
            cwd: b"/".to_vec(),
            argv: vec![b"supervise".to_vec(), SPAWNER_ARG.as_bytes().to_vec()],
            env: vec![HELPER_ENV.to_vec()],
            pid_variables: Vec::new(),
            identity: None,
            nofile_soft: libc::RLIM_INFINITY,
            die_with_parent: true,
        };
        let pid = start_helper(&launch, theirs)?;
        Ok(Helper { socket: ours, pid })
    }

    /// SIGKILL it and wait (bounded) until it is dead — a zombie for our
    /// reap loop — so it forks nothing more; then SIGKILL its children that
    /// had not reached exec (ours, by `CLONE_PARENT`: copies of it).
    fn kill(self) {
        // SAFETY: killing our own helper process.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        let deadline = std::time::Instant::now() + DEATH_WAIT;
        while !matches!(crate::procfs::state(self.pid), None | Some('Z'))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        for pid in crate::tracking::adopted(&std::collections::HashSet::new()) {
            let is_spawner_copy = std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == SPAWNER_ARG.as_bytes()));
            if is_spawner_copy && pid != self.pid {
                // SAFETY: a pre-exec fork of the spawner we just killed; our child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Send one request; `Err` when the spawner is broken.
    fn send(&self, request: &[u8], fds: &[RawFd]) -> io::Result<()> {
        // A large request goes in a memfd, passed as the first fd.
        let memfd = (request.len() > wire::INLINE_REQUEST_BYTES)
            .then(|| in_memfd(request))
            .transpose()?;
        let (request, with_memfd): (&[u8], Vec<RawFd>) = match &memfd {
            Some(memfd) => (
                wire::IN_MEMFD,
                std::iter::once(memfd.as_raw_fd())
                    .chain(fds.iter().copied())
                    .collect(),
            ),
            None => (request, fds.to_vec()),
        };
        let rights = [ControlMessage::ScmRights(&with_memfd)];
        // A signal (SIGCHLD, most often) interrupts a call with a timeout
        // even under SA_RESTART: try again, never take it for a broken spawner.
        loop {
            match sendmsg::<()>(
                self.socket.as_raw_fd(),
                &[IoSlice::new(request)],
                &rights,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                sent => return sent.map(drop).map_err(io::Error::from),
            }
        }
    }

    /// The reply to the oldest request not answered yet (the spawner takes
    /// them in order); `Err` when the spawner is broken.
    fn receive(&self) -> io::Result<Result<i32, SpawnError>> {
        let mut reply = [0u8; REPLY_BYTES];
        let n = loop {
            // SAFETY: reading into a stack buffer of the stated size from our socket.
            let n = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    reply.as_mut_ptr().cast(),
                    reply.len(),
                    0,
                )
            };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break n;
        };
        if n != REPLY_BYTES as isize {
            let error = if n < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the spawner closed its socket",
                )
            };
            return Err(error);
        }
        let word =
            |i: usize| i32::from_le_bytes([reply[i], reply[i + 1], reply[i + 2], reply[i + 3]]);
        Ok(match word(0) {
            pid if pid > 0 => Ok(pid),
            _ => Err(spawn_error(
                StartStage::from_code(word(4)),
                word(8),
                "the spawner could not start it",
            )),
        })
    }
}

impl Spawner {
    /// Start a spawner process.
    pub fn start() -> io::Result<Spawner> {
        let devnull = OwnedFd::from(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?,
        );
        Ok(Spawner {
            helper: Some(Helper::start()?),
            devnull,
            in_flight: 0,
            unanswered: 0,
        })
    }

    /// The spawner's pid, while one runs (its exit is not a worker's).
    pub(crate) fn pid(&self) -> Option<i32> {
        self.helper.as_ref().map(|h| h.pid)
    }

    /// The spawner process died (reaped): the next spawn starts another.
    pub(crate) fn lost(&mut self) {
        self.helper = None;
        self.unanswered += self.in_flight;
        self.in_flight = 0;
    }

    /// What a worker's stdin is.
    pub(crate) fn devnull(&self) -> RawFd {
        self.devnull.as_raw_fd()
    }

    /// Send the request of a worker: `fds` are stdin, stdout, stderr, the
    /// status pipe, the directory of its cgroup when `cgroup`, then the
    /// listening sockets. Starts a spawner first when there is none. Its
    /// answer is not waited for: the spawner forks it while we prepare the
    /// next. Once this returns, the spawner holds its own copies of `fds`.
    /// At most [`SPAWNS_IN_FLIGHT`] may wait for [`Spawner::receive`].
    pub(crate) fn send(
        &mut self,
        launch: &Launch,
        fds: &[RawFd],
        cgroup: bool,
    ) -> Result<(), SpawnError> {
        debug_assert!(self.in_flight < SPAWNS_IN_FLIGHT);
        let extras = wire::Extras {
            listen: fds.len().saturating_sub(STDIO_FDS + usize::from(cgroup)),
            cgroup,
        };
        let request = wire::encode(launch, extras).ok_or_else(|| {
            spawn_error(
                StartStage::Prepare,
                libc::E2BIG,
                &format!(
                    "the arguments and environment are more than {} bytes",
                    wire::MAX_REQUEST_BYTES
                ),
            )
        })?;
        // A killed spawner's unanswered requests fail at their receive,
        // before any answer of this one is read: the order is kept.
        let helper = match &self.helper {
            Some(helper) => helper,
            None => self.helper.insert(Helper::start().map_err(|e| {
                spawn_error(StartStage::Fork, io_errno(&e), "cannot start the spawner")
            })?),
        };
        match helper.send(&request, fds) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            // This request fails now; those before it, at their receive.
            Err(error) => Err(self.broken(&error)),
        }
    }

    /// The answer to the oldest request sent and not answered yet: the pid,
    /// or why not. After a broken spawner, every request it had fails: the
    /// spawner may have been killed mid-request, and the caller kills what
    /// the request may have started.
    pub(crate) fn receive(&mut self) -> Result<i32, SpawnError> {
        if self.unanswered > 0 {
            self.unanswered -= 1;
            return Err(spawn_error(
                StartStage::Fork,
                libc::EPIPE,
                "the spawner did not answer",
            ));
        }
        let Some(helper) = &self.helper else {
            return Err(spawn_error(
                StartStage::Fork,
                libc::EINVAL,
                "no request is waiting for the spawner",
            ));
        };
        match helper.receive() {
            Ok(answer) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                answer
            }
            Err(error) => {
                let error = self.broken(&error);
                // This one fails now; the others at their receive.
                self.unanswered -= 1;
                Err(error)
            }
        }
    }

    /// The spawner failed a request: kill it (another starts with the next
    /// request once every request it had has failed), and say so once.
    fn broken(&mut self, error: &io::Error) -> SpawnError {
        if let Some(helper) = self.helper.take() {
            tracing::warn!(
                "the spawner (pid {}) did not answer ({error}); killed it, another starts with the next spawn",
                helper.pid
            );
            helper.kill();
        }
        self.unanswered += self.in_flight;
        self.in_flight = 0;
        spawn_error(
            StartStage::Fork,
            io_errno(error),
            "the spawner did not answer",
        )
    }
}

/// A sealed memfd holding `request`, read from its start.
fn in_memfd(request: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a static name; we own the fd it returns.
    let fd = unsafe {
        libc::memfd_create(
            c"supervise-request".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create succeeded: the fd is ours.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(memfd);
    std::io::Write::write_all(&mut file, request)?;
    std::io::Seek::rewind(&mut file)?;
    // SAFETY: fcntl on our memfd; the spawner reads exactly what we wrote.
    unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL,
        );
    }
    Ok(OwnedFd::from(file))
}

/// The request a memfd holds (at most [`wire::MAX_REQUEST_BYTES`]).
fn from_memfd(memfd: OwnedFd) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut request = Vec::new();
    std::fs::File::from(memfd)
        .take(wire::MAX_REQUEST_BYTES as u64 + 1)
        .read_to_end(&mut request)
        .ok()?;
    (request.len() <= wire::MAX_REQUEST_BYTES).then_some(request)
}

/// The whole environment of our helper processes. Not empty: a child of ours
/// whose environment reads empty may be within an `execve`, and is waited
/// for (see [`crate::procfs::Environ::Changing`]).
pub const HELPER_ENV: &[u8] = b"SUPERVISE_HELPER=1";

/// Start one of our helper processes (the spawner, the undertaker): a fork
/// and exec of `launch`, with `fd` as its fd 3, stdin and stdout on /dev/null
/// and our stderr; returns once it runs (its exec succeeded).
pub fn start_helper(launch: &Launch, fd: OwnedFd) -> io::Result<i32> {
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let mut prepared = Prepared::new(launch).map_err(io::Error::other)?;
    let (status_read, status_write) = pipe().map_err(io::Error::other)?;
    let fds = ChildFds {
        stdin: devnull.as_raw_fd(),
        stdout: devnull.as_raw_fd(),
        // Its own errors (a panic) go where ours go.
        stderr: libc::STDERR_FILENO,
        status: status_write.as_raw_fd(),
        listen: &[fd.as_raw_fd()],
    };
    // SAFETY: getpid has no preconditions.
    let pid = fork_exec(&mut prepared, &fds, unsafe { libc::getpid() }, Parent::Us)
        .map_err(io::Error::other)?;
    drop((status_write, fd));
    wait_for_exec(&status_read, START_TIMEOUT)?;
    Ok(pid)
}

/// Wait (bounded) for a child's exec status: EOF is success.
fn wait_for_exec(status: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let mut poll = libc::pollfd {
        fd: status.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let deadline = std::time::Instant::now() + timeout;
    let ready = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis() as libc::c_int) };
        if ready < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break ready;
    };
    if ready <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the spawner did not start",
        ));
    }
    match super::read_status(status) {
        super::ExecStatus::Failed(error) => Err(io::Error::other(format!("{error}"))),
        _ => Ok(()),
    }
}

/// The spawner's main loop, on `socket`: take a request, fork the worker,
/// answer. Returns when the supervisor closes the socket.
pub fn serve(socket: OwnedFd) {
    // SAFETY: getppid has no preconditions; our parent is the supervisor.
    let supervisor = unsafe { libc::getppid() };
    let mut buffer = vec![0u8; wire::INLINE_REQUEST_BYTES];
    // The fds, and a memfd holding a large request.
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS + 1]);
    loop {
        let mut iov = [IoSliceMut::new(&mut buffer)];
        let received = recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        );
        let (length, fds) = match received {
            Ok(message) if message.bytes > 0 => {
                let mut fds: Vec<OwnedFd> = Vec::new();
                if let Ok(cmsgs) = message.cmsgs() {
                    for cmsg in cmsgs {
                        if let ControlMessageOwned::ScmRights(raw) = cmsg {
                            // SAFETY: the kernel gave us these fds: ours to own.
                            fds.extend(
                                raw.into_iter()
                                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                            );
                        }
                    }
                }
                (message.bytes, fds)
            }
            Ok(_) => return,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        };
        let mut fds = fds;
        let answer = if buffer[..length] == wire::IN_MEMFD[..] && !fds.is_empty() {
            let memfd = fds.remove(0);
            match from_memfd(memfd) {
                Some(request) => start(&request, &fds, supervisor),
                None => Err(spawn_error(
                    StartStage::Prepare,
                    libc::E2BIG,
                    "an unreadable or oversized request",
                )),
            }
        } else {
            start(&buffer[..length], &fds, supervisor)
        };
        drop(fds);
        let (pid, stage, errno) = match answer {
            Ok(pid) => (pid, 0, 0),
            Err(error) => (-1, error.stage.code(), error.errno),
        };
        let mut reply = [0u8; REPLY_BYTES];
        reply[..4].copy_from_slice(&pid.to_le_bytes());
        reply[4..8].copy_from_slice(&stage.to_le_bytes());
        reply[8..].copy_from_slice(&errno.to_le_bytes());
        // SAFETY: sending a stack buffer on our socket.
        let sent = unsafe {
            libc::send(
                socket.as_raw_fd(),
                reply.as_ptr().cast(),
                reply.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent != REPLY_BYTES as isize {
            return;
        }
    }
}

/// Decode one request and fork its worker as a child of the supervisor.
fn start(request: &[u8], fds: &[OwnedFd], supervisor: libc::pid_t) -> Result<i32, SpawnError> {
    let malformed = || spawn_error(StartStage::Prepare, libc::EINVAL, "a malformed request");
    let (launch, extras) = wire::decode(request).ok_or_else(malformed)?;
    let cgroup = usize::from(extras.cgroup);
    if fds.len() != STDIO_FDS + cgroup + extras.listen {
        return Err(malformed());
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut prepared = Prepared::new(&launch)?;
    let child = ChildFds {
        stdin: raw[0],
        stdout: raw[1],
        stderr: raw[2],
        status: raw[3],
        listen: &raw[STDIO_FDS + cgroup..],
    };
    let parent = Parent::Ours {
        cgroup: extras.cgroup.then(|| raw[STDIO_FDS]),
    };
    fork_exec(&mut prepared, &child, supervisor, parent)
}
