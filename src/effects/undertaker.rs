//! The undertaker: makes sure no worker outlives the supervisor, even when the
//! supervisor is SIGKILLed.
//!
//! `PR_SET_PDEATHSIG` kills a worker's leader when the supervisor dies, but not
//! the leader's children (a `sh -c` and its program, a server's own workers),
//! let alone a child that daemonized. So the supervisor starts this small
//! process of its own binary (`supervise __undertaker`, by fork+exec, so it can
//! be started again from the running supervisor if it dies). It holds the read
//! end of a close-on-exec pipe; the supervisor writes `+PGID` / `-PGID` lines
//! as worker process groups come and go. When the pipe reaches EOF — the
//! supervisor has exited, however it died — it SIGKILLs every group still
//! recorded, and then, depending on how instances are tracked:
//! - with cgroups, every instance cgroup at once (`cgroup.kill` on
//!   `instances/`), waits for them to empty and removes them;
//! - without, every process that still carries the run's `SUPERVISE_RUN`
//!   token in its environment, again and again until none is left (bounded).
//!
//! It runs in a process group of its own (a Ctrl-C on the terminal does not
//! reach it), ignores the usual termination signals, and has no
//! `PR_SET_PDEATHSIG`: outliving the supervisor is its job.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cgroup;
use super::spawn::{self, Launch};

/// The argument that makes our binary an undertaker.
pub const UNDERTAKER_ARG: &str = "__undertaker";
/// Rounds of killing the processes that carry the run token, at most…
const TOKEN_ROUNDS: usize = 20;
/// …this far apart.
const TOKEN_ROUND_PAUSE: Duration = Duration::from_millis(50);

/// What to clean up besides the recorded process groups.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// The supervisor's side of the pipe.
#[derive(Debug)]
pub struct Undertaker {
    pipe: File,
    pid: i32,
    orders: Orders,
    /// The groups recorded, to tell a new undertaker if this one dies.
    groups: BTreeSet<i32>,
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
            env: Vec::new(),
            listen_pid: false,
            identity: None,
            nofile_soft: libc::RLIM_INFINITY,
            die_with_parent: false,
        };
        let pid = spawn::start_helper(&launch, read)?;
        Ok(Undertaker {
            pipe: File::from(write),
            pid,
            orders,
            groups: BTreeSet::new(),
        })
    }

    /// Start a new undertaker (this one died) and tell it every group.
    pub fn restart(&mut self) -> io::Result<()> {
        let mut next = Undertaker::start(self.orders.clone())?;
        for pgid in &self.groups {
            writeln!(next.pipe, "+{pgid}")?;
        }
        next.groups = std::mem::take(&mut self.groups);
        *self = next;
        Ok(())
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Record a worker's process group.
    pub fn watch(&mut self, pgid: i32) -> io::Result<()> {
        self.groups.insert(pgid);
        writeln!(self.pipe, "+{pgid}")
    }

    /// Forget a worker's process group (it is empty).
    pub fn forget(&mut self, pgid: i32) -> io::Result<()> {
        self.groups.remove(&pgid);
        writeln!(self.pipe, "-{pgid}")
    }

    /// Close the pipe (the undertaker then cleans up and exits) and return its
    /// pid so the caller can reap it.
    pub fn dismiss(self) -> i32 {
        self.pid
    }
}

/// A close-on-exec pipe.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded; we own both fds.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
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
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut groups: BTreeSet<i32> = BTreeSet::new();
    let mut reader = BufReader::new(File::from(read));
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let entry = line.trim();
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
    for pgid in groups {
        // SAFETY: signalling a process group; pgid > 1 was checked on insert.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    match orders {
        Orders::Cgroups { root, base } => clear_cgroups(root, base),
        Orders::Token(token) => kill_token(token),
    }
}

/// Kill every instance cgroup, remove the tree, and leave it ourselves.
fn clear_cgroups(root: &Path, base: &Path) {
    cgroup::clear(&root.join("instances"));
    // Out of the supervisor's leaf, so that it can go too.
    let _ = cgroup::enter(base, std::process::id());
    let supervisor = root.join("supervisor");
    for _ in 0..TOKEN_ROUNDS {
        if !cgroup::populated(&supervisor) {
            break;
        }
        std::thread::sleep(TOKEN_ROUND_PAUSE);
    }
    cgroup::remove_tree(root);
}

/// Kill every process that carries the run token, until none is left.
fn kill_token(token: &str) {
    let marker = format!("SUPERVISE_RUN={token}.");
    for _ in 0..TOKEN_ROUNDS {
        let carriers: Vec<i32> = super::procfs::carriers(&marker)
            .into_values()
            .flatten()
            .collect();
        if carriers.is_empty() {
            return;
        }
        for pid in carriers {
            // SAFETY: signalling a process that carries our token.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(TOKEN_ROUND_PAUSE);
    }
}
