//! The undertaker: makes sure no worker outlives the supervisor, even when the
//! supervisor is SIGKILLed.
//!
//! `PR_SET_PDEATHSIG` kills a worker's leader when the supervisor dies, but not
//! the leader's children (a `sh -c` and its program, a server's own workers).
//! So at start the supervisor forks this tiny process. It holds the read end of
//! a close-on-exec pipe; the supervisor writes `+PGID` / `-PGID` lines as
//! worker process groups come and go. When the pipe reaches EOF — the
//! supervisor has exited, however it died — it SIGKILLs every group still
//! recorded and exits. It runs in its own session so a Ctrl-C on the terminal
//! does not reach it, and ignores the usual termination signals.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The supervisor's side of the pipe.
#[derive(Debug)]
pub struct Undertaker {
    pipe: File,
    pid: i32,
}

impl Undertaker {
    /// Fork the undertaker. Must be called while the process is still
    /// single-threaded (before the runtime and the log writer start): the child
    /// allocates and runs ordinary Rust code.
    pub fn start() -> io::Result<Undertaker> {
        let mut fds = [0; 2];
        // SAFETY: a valid array for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded; we own both fds.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: single-threaded at this point (documented precondition), so
        // the child may run ordinary code.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(write);
                run(read)
            }
            pid => {
                drop(read);
                Ok(Undertaker {
                    pipe: File::from(write),
                    pid,
                })
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Record a worker's process group.
    pub fn watch(&mut self, pgid: i32) -> io::Result<()> {
        writeln!(self.pipe, "+{pgid}")
    }

    /// Forget a worker's process group (it is empty).
    pub fn forget(&mut self, pgid: i32) -> io::Result<()> {
        writeln!(self.pipe, "-{pgid}")
    }

    /// Close the pipe (the undertaker then kills what is left and exits) and
    /// return its pid so the caller can reap it.
    pub fn dismiss(self) -> i32 {
        self.pid
    }
}

fn run(read: OwnedFd) -> ! {
    // SAFETY: plain system calls in our own, single-threaded child.
    unsafe {
        libc::setsid();
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        libc::prctl(
            libc::PR_SET_NAME,
            c"supervise-undo".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if devnull >= 0 {
            libc::dup2(devnull, 0);
            libc::dup2(devnull, 1);
            libc::dup2(devnull, 2);
        }
        // Nothing else of the supervisor's stays open here.
        let keep = read.as_raw_fd() as libc::c_uint;
        if keep > 3 {
            libc::close_range(3, keep - 1, 0);
        }
        libc::close_range(keep + 1, libc::c_uint::MAX, 0);
    }
    let mut groups: HashSet<i32> = HashSet::new();
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
    // SAFETY: leaving without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(0) }
}
