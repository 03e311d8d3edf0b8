//! The undertaker: makes sure no worker outlives the supervisor, even when the
//! supervisor is SIGKILLed.
//!
//! `PR_SET_PDEATHSIG` kills a worker's leader when the supervisor dies, but not
//! the leader's children (a `sh -c` and its program, a server's own workers),
//! let alone a child that daemonized. So the supervisor starts this small
//! process of its own binary (`supervise __undertaker`, by fork+exec, so it can
//! be started again from the running supervisor if it dies). It holds the read
//! end of a close-on-exec pipe; without cgroups the supervisor writes `+PGID`
//! / `-PGID` lines as worker process groups come and go (with cgroups, every
//! process of every instance is in the run's cgroup tree: nothing to tell).
//! When the pipe reaches EOF — the supervisor has exited, however it died,
//! unless it said `!` first (a clean shutdown, which tears down itself) —
//! it SIGKILLs every group still recorded, and then, depending on how
//! instances are tracked:
//! - with cgroups, every instance cgroup at once (`cgroup.kill` on
//!   `instances/`), waits for them to empty and removes them;
//! - without, every process that still carries the run's `SUPERVISE_RUN`
//!   token in its environment, again and again until none is left (bounded).
//!
//! It runs in a process group of its own (a Ctrl-C on the terminal does not
//! reach it), ignores the usual termination signals, and has no
//! `PR_SET_PDEATHSIG`: outliving the supervisor is its job. The supervisor
//! never blocks on it: the pipe is non-blocking and large
//! ([`PIPE_CAPACITY`]); an undertaker that stops reading (SIGSTOPped, say)
//! until the pipe is full is killed, and its successor told every group.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cgroup;
use super::spawn::{self, Launch};

/// The argument that makes our binary an undertaker.
pub const UNDERTAKER_ARG: &str = "__undertaker";
/// The pipe's capacity (the default, 1 MiB, that an unprivileged process may
/// ask for): ~100,000 `+PGID` lines, so a new undertaker can be told every
/// group at once.
pub(crate) const PIPE_CAPACITY: i32 = 1 << 20;
/// The last line of a clean shutdown: nothing to clean up.
const DISMISSED: &str = "!\n";
/// `?MILLIS`: an upgrade's exec comes; unless [`TOOK_OVER`] follows within
/// that many milliseconds, the new image is taken for hung (it is not
/// supervising, and the signals that would stop it are held back): the
/// supervisor process is killed and everything cleaned up, as after a crash.
const EXPECT_TAKEOVER: &str = "?";
/// The new image of an upgrade runs the loop.
const TOOK_OVER: &str = ".\n";
/// Rounds of looking for what is left in the run's cgroups, at most…
const CGROUP_ROUNDS: usize = 20;
/// …this far apart.
const CGROUP_ROUND_PAUSE: Duration = Duration::from_millis(50);

/// What to clean up besides the recorded process groups.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Orders {
    /// The run's cgroup tree: `root/instances` holds every instance;
    /// `base` is where the undertaker moves to before removing the tree.
    Cgroups { root: PathBuf, base: PathBuf },
    /// Every process whose `SUPERVISE_RUN` starts with `token.`.
    Token(String),
}

impl Orders {
    fn to_args(&self) -> Vec<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        match self {
            Orders::Cgroups { root, base } => vec![
                b"--cgroup-root".to_vec(),
                root.as_os_str().as_bytes().to_vec(),
                b"--cgroup-base".to_vec(),
                base.as_os_str().as_bytes().to_vec(),
            ],
            Orders::Token(token) => vec![b"--token".to_vec(), token.as_bytes().to_vec()],
        }
    }

    /// Read back what [`Orders::to_args`] wrote.
    pub fn from_args(args: &[std::ffi::OsString]) -> Option<Orders> {
        let text: Vec<&str> = args.iter().map(|a| a.to_str()).collect::<Option<_>>()?;
        match text.as_slice() {
            ["--cgroup-root", root, "--cgroup-base", base] => Some(Orders::Cgroups {
                root: PathBuf::from(root),
                base: PathBuf::from(base),
            }),
            ["--token", token] => Some(Orders::Token(token.to_string())),
            _ => None,
        }
    }
}

/// The undertaker as an upgrade hands it over.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct UndertakerState {
    pub(crate) pid: i32,
    /// The write end of its pipe, kept open across the exec.
    pub(crate) pipe: std::os::fd::RawFd,
    pub(crate) orders: Orders,
    pub(crate) groups: BTreeSet<i32>,
}

/// The supervisor's side of the pipe.
#[derive(Debug)]
pub struct Undertaker {
    pipe: File,
    pid: i32,
    orders: Orders,
    /// The groups recorded, to tell a new undertaker if this one dies.
    groups: BTreeSet<i32>,
    /// Groups are recorded (without cgroups).
    records_groups: bool,
}

impl Undertaker {
    /// Start an undertaker process with these orders.
    pub fn start(orders: Orders) -> io::Result<Undertaker> {
        let (read, write) = pipe()?;
        let mut argv = vec![b"supervise".to_vec(), UNDERTAKER_ARG.as_bytes().to_vec()];
        argv.extend(orders.to_args());
        let launch = Launch {
            program: b"/proc/self/exe".to_vec(),
            cwd: b"/".to_vec(),
            argv,
            env: vec![spawn::HELPER_ENV.to_vec()],
            pid_variables: Vec::new(),
            identity: None,
            nofile_soft: libc::RLIM_INFINITY,
            die_with_parent: false,
        };
        let pid = spawn::start_helper(&launch, read)?;
        Ok(Undertaker {
            pipe: File::from(write),
            pid,
            records_groups: matches!(orders, Orders::Token(_)),
            orders,
            groups: BTreeSet::new(),
        })
    }

    /// Start a new undertaker (this one died) and tell it every group.
    pub(crate) fn restart(&mut self) -> io::Result<()> {
        let mut next = Undertaker::start(self.orders.clone())?;
        let lines: String = self
            .groups
            .iter()
            .map(|pgid| format!("+{pgid}\n"))
            .collect();
        next.pipe.write_all(lines.as_bytes())?;
        next.groups = std::mem::take(&mut self.groups);
        *self = next;
        Ok(())
    }

    /// Write one line (a single write below `PIPE_BUF`: all or nothing). A
    /// full pipe means the undertaker stopped reading: kill it; the reap of
    /// its exit starts another ([`Undertaker::restart`]).
    fn send(&mut self, line: &str) -> io::Result<()> {
        match self.pipe.write(line.as_bytes()) {
            Ok(n) if n == line.len() => Ok(()),
            Ok(_) => Err(io::Error::new(io::ErrorKind::WriteZero, "a short write")),
            Err(error) => {
                if error.kind() == io::ErrorKind::WouldBlock {
                    tracing::error!(
                        "the undertaker (pid {}) stopped reading its orders; killing it",
                        self.pid
                    );
                    // SAFETY: killing our own helper process.
                    unsafe {
                        libc::kill(self.pid, libc::SIGKILL);
                    }
                }
                Err(error)
            }
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Record a worker's process group (without cgroups).
    pub(crate) fn watch(&mut self, pgid: i32) -> io::Result<()> {
        if !self.records_groups {
            return Ok(());
        }
        self.groups.insert(pgid);
        self.send(&format!("+{pgid}\n"))
    }

    /// Forget a worker's process group (it is empty).
    pub(crate) fn forget(&mut self, pgid: i32) -> io::Result<()> {
        if !self.groups.remove(&pgid) {
            return Ok(());
        }
        self.send(&format!("-{pgid}\n"))
    }

    /// For an upgrade: the pipe stays open across the exec, so the
    /// undertaker (which keeps its own list) never sees it end.
    pub(crate) fn export(&self) -> UndertakerState {
        UndertakerState {
            pid: self.pid,
            pipe: self.pipe.as_raw_fd(),
            orders: self.orders.clone(),
            groups: self.groups.clone(),
        }
    }

    /// The undertaker the previous image started.
    pub fn restore(state: UndertakerState) -> io::Result<Undertaker> {
        let pipe = crate::upgrade::exec::adopt_fd(state.pipe, "the undertaker's pipe")?;
        Ok(Undertaker {
            pipe: File::from(pipe),
            pid: state.pid,
            records_groups: matches!(state.orders, Orders::Token(_)),
            orders: state.orders,
            groups: state.groups,
        })
    }

    /// An upgrade's exec comes: the new image must say [`Undertaker::took_over`]
    /// within `within`. (An undertaker of an older version ignores both.)
    pub(crate) fn expect_takeover(&mut self, within: Duration) -> io::Result<()> {
        self.send(&format!("{EXPECT_TAKEOVER}{}\n", within.as_millis()))
    }

    /// The new image of an upgrade runs (or the exec failed and the old one
    /// goes on).
    pub(crate) fn took_over(&mut self) -> io::Result<()> {
        self.send(TOOK_OVER)
    }

    /// Everything stopped cleanly: tell the undertaker it has nothing to do
    /// (the supervisor tears down itself), close the pipe, and return its
    /// pid so the caller can reap it. Without the word it would clean up
    /// as after a crash — and wait for the supervisor to leave its cgroup.
    pub(crate) fn dismiss(mut self) -> i32 {
        let _ = self.send(DISMISSED);
        self.pid
    }
}

/// A line on our stderr (the supervisor's), which may be gone.
fn say(message: &str) {
    let _ = writeln!(io::stderr(), "supervise undertaker: {message}");
}

/// Whether `fd` has something to read (or its end) before `deadline`.
fn readable_by(fd: std::os::fd::RawFd, deadline: std::time::Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut poll, 1, timeout) } {
            0 => return false,
            n if n > 0 => return true,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            // A poll that cannot work: read (and block) as before.
            _ => return true,
        }
    }
}

/// A close-on-exec pipe of [`PIPE_CAPACITY`] (or what the system allows),
/// non-blocking on our (write) side.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded; we own both fds.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a pipe we own; a refused size keeps the default.
    unsafe {
        libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_CAPACITY);
        let flags = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok((read, write))
}

/// The undertaker's main: read the pipe (fd `read`) until EOF, then kill.
pub fn serve(read: OwnedFd, orders: &Orders) {
    // SAFETY: plain system calls in our own, single-threaded process.
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut groups: BTreeSet<i32> = BTreeSet::new();
    let mut dismissed = false;
    let fd = read.as_raw_fd();
    let mut reader = BufReader::new(File::from(read));
    let mut line = String::new();
    // When an upgrade's new image must have said it runs, and how long it
    // was given.
    let mut takeover: Option<(std::time::Instant, u64)> = None;
    // SAFETY: getppid has no preconditions; our parent is the supervisor.
    let supervisor = unsafe { libc::getppid() };
    loop {
        if let Some((deadline, millis)) = takeover
            && reader.buffer().is_empty()
            && !readable_by(fd, deadline)
        {
            // A hung new image of the supervisor: it is killed, and what it
            // held goes below, as after a crash.
            // SAFETY: signalling our parent, the supervisor.
            unsafe {
                libc::kill(supervisor, libc::SIGKILL);
            }
            say(&format!(
                "the new binary of an upgrade (pid {supervisor}) did not take over within {millis} ms: killed it and every worker"
            ));
            break;
        }
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => {
                if takeover.is_some() {
                    say(&format!(
                        "the new binary of an upgrade (pid {supervisor}) ended before it took over: killing every worker"
                    ));
                }
                break;
            }
            Ok(_) => {
                let entry = line.trim();
                if entry == DISMISSED.trim() {
                    dismissed = true;
                    continue;
                }
                if entry == TOOK_OVER.trim() {
                    takeover = None;
                    continue;
                }
                if let Some(millis) = entry
                    .strip_prefix(EXPECT_TAKEOVER)
                    .and_then(|m| m.parse::<u64>().ok())
                {
                    takeover = Some((
                        std::time::Instant::now() + Duration::from_millis(millis),
                        millis,
                    ));
                    continue;
                }
                match (
                    entry.get(..1),
                    entry.get(1..).and_then(|n| n.parse::<i32>().ok()),
                ) {
                    (Some("+"), Some(pgid)) if pgid > 1 => {
                        groups.insert(pgid);
                    }
                    (Some("-"), Some(pgid)) => {
                        groups.remove(&pgid);
                    }
                    _ => {}
                }
            }
        }
    }
    if dismissed {
        return;
    }
    for pgid in groups {
        // SAFETY: signalling a process group; pgid > 1 was checked on insert.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    match orders {
        Orders::Cgroups { root, base } => clear_cgroups(root, base),
        Orders::Token(token) => {
            super::tracking::kill_carriers(&format!("SUPERVISE_RUN={token}."));
        }
    }
}

/// Kill every instance cgroup, remove the tree, and leave it ourselves.
fn clear_cgroups(root: &Path, base: &Path) {
    // A worker the spawner was cloning into its cgroup when the supervisor
    // died lands after the first look: look again until the tree is gone.
    let instances = root.join("instances");
    for _ in 0..CGROUP_ROUNDS {
        cgroup::clear(&instances);
        if !instances.exists() {
            break;
        }
        std::thread::sleep(CGROUP_ROUND_PAUSE);
    }
    // Out of the supervisor's leaf, so that it can go too.
    let _ = cgroup::enter(base, std::process::id());
    let supervisor = root.join("supervisor");
    for _ in 0..CGROUP_ROUNDS {
        if !cgroup::populated(&supervisor) {
            break;
        }
        std::thread::sleep(CGROUP_ROUND_PAUSE);
    }
    cgroup::remove_tree(root);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An undertaker that never reads: the supervisor's writes never block;
    /// once the pipe is full, the undertaker is killed.
    #[test]
    fn a_full_pipe_kills_the_undertaker_instead_of_blocking() {
        let (read, write) = pipe().unwrap();
        let mut stand_in = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut undertaker = Undertaker {
            pipe: File::from(write),
            pid: stand_in.id() as i32,
            orders: Orders::Token("t".into()),
            groups: BTreeSet::new(),
            records_groups: true,
        };
        let started = std::time::Instant::now();
        let mut failed = None;
        for pgid in 2..1_000_000 {
            if let Err(error) = undertaker.watch(pgid) {
                failed = Some(error);
                break;
            }
        }
        assert_eq!(failed.map(|e| e.kind()), Some(io::ErrorKind::WouldBlock));
        assert!(started.elapsed() < Duration::from_secs(5));
        let status = stand_in.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        drop(read);
    }

    #[test]
    fn with_cgroups_no_group_is_sent() {
        let (_read, write) = pipe().unwrap();
        let mut undertaker = Undertaker {
            pipe: File::from(write),
            // No such process: nothing may be signalled here.
            pid: i32::MAX,
            orders: Orders::Cgroups {
                root: "/nonexistent".into(),
                base: "/nonexistent".into(),
            },
            groups: BTreeSet::new(),
            records_groups: false,
        };
        undertaker.watch(1234).unwrap();
        undertaker.forget(1234).unwrap();
        assert!(undertaker.groups.is_empty());
    }
}
