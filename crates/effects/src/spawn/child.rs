//! The child's side of a spawn: what runs between `fork` and `execve`.
//!
//! Only async-signal-safe system calls, through `libc`, on memory prepared
//! before the fork ([`super::spawn`]): no allocation, no lock, no Rust
//! runtime, no tracing. A step that fails writes `(stage, errno)` — two
//! native-endian `i32`s — into the close-on-exec status pipe and exits 127;
//! on success `execve` closes the pipe, and the parent reads EOF.

use std::os::fd::RawFd;

use model::process::StartStage;

/// Signals are 1..NSIG on Linux.
const NSIG: libc::c_int = 65;

use model::limits::MAX_LISTEN_FDS;

/// The bytes a failed child writes into its status pipe: stage and errno.
pub(crate) const STATUS_BYTES: usize = 8;

/// The longest name of a variable whose value is the child's own pid
/// (`LISTEN_PID`, `WATCHDOG_PID`): the child writes the value itself.
pub(crate) const MAX_PID_VARIABLE: usize = 32;
/// `NAME=`, up to 20 digits (u64::MAX), and the terminating NUL.
pub(crate) const PID_VARIABLE_BUFFER: usize = MAX_PID_VARIABLE + 1 + 21;

/// Raw pointers into the prepared spawn and the fds, for the child.
pub(super) struct ChildPlan<'a> {
    pub(crate) program: *const libc::c_char,
    pub(crate) argv: *const *const libc::c_char,
    pub(crate) envp: *const *const libc::c_char,
    pub(crate) cwd: *const libc::c_char,
    pub(crate) groups: &'a [libc::gid_t],
    pub(crate) identity: Option<(libc::uid_t, libc::gid_t)>,
    pub(crate) stdin: RawFd,
    pub(crate) stdout: RawFd,
    pub(crate) stderr: RawFd,
    pub(crate) status: RawFd,
    pub(crate) listen_fds: &'a [RawFd],
    /// Where the child writes its pid, in each `NAME=` buffer of
    /// [`MAX_PID_VARIABLE`]s (just after the `=`).
    pub(crate) pid_values: &'a [*mut u8],
    pub(crate) nofile_soft: libc::rlim_t,
    pub(crate) parent: libc::pid_t,
    /// `PR_SET_PDEATHSIG`: die with the parent (every process but the
    /// undertaker, whose job is to outlive it).
    pub(crate) die_with_parent: bool,
}

impl ChildPlan<'_> {
    /// Become the worker: runs in the child between fork and exec.
    ///
    /// # Safety
    ///
    /// Call only in a freshly forked child of a process that prepared `self`
    /// before the fork (every pointer points into memory the fork copied, and
    /// nothing else runs in the child). Never returns.
    pub(super) unsafe fn exec(&self) -> ! {
        unsafe {
            libc::setpgid(0, 0);

            // Default dispositions, then unblock everything.
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            for signal in 1..NSIG {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    libc::sigaction(signal, &action, std::ptr::null_mut());
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());

            if let Some((uid, gid)) = self.identity
                && (libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0)
            {
                fail(self.status, StartStage::Identity);
            }
            // After any uid change (which clears it). If the supervisor died
            // before this line, we were already reparented: give up.
            if self.die_with_parent {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
            }
            if libc::getppid() != self.parent {
                libc::_exit(1);
            }

            if libc::dup2(self.stdin, 0) < 0
                || libc::dup2(self.stdout, 1) < 0
                || libc::dup2(self.stderr, 2) < 0
            {
                fail(self.status, StartStage::Descriptors);
            }
            // Listening sockets go to 3, 4, …: first move every source above
            // the targets (a source may sit on a target), then dup2 down, which
            // also clears FD_CLOEXEC on the targets.
            let count = self.listen_fds.len() as libc::c_int;
            let first_free = 3 + count;
            let status = libc::fcntl(self.status, libc::F_DUPFD_CLOEXEC, first_free);
            if status < 0 {
                fail(self.status, StartStage::Descriptors);
            }
            let mut moved: [libc::c_int; MAX_LISTEN_FDS] = [-1; MAX_LISTEN_FDS];
            for (i, &fd) in self.listen_fds.iter().take(MAX_LISTEN_FDS).enumerate() {
                moved[i] = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, first_free);
                if moved[i] < 0 {
                    fail(status, StartStage::Descriptors);
                }
            }
            for (i, &fd) in moved.iter().take(self.listen_fds.len()).enumerate() {
                if libc::dup2(fd, 3 + i as libc::c_int) < 0 {
                    fail(status, StartStage::Descriptors);
                }
            }
            // Anything else that leaked past O_CLOEXEC goes now; keep the status pipe.
            if status > first_free {
                libc::close_range(first_free as libc::c_uint, (status - 1) as libc::c_uint, 0);
            }
            libc::close_range((status + 1) as libc::c_uint, libc::c_uint::MAX, 0);

            if libc::chdir(self.cwd) != 0 {
                fail(status, StartStage::Chdir);
            }
            for value in self.pid_values {
                write_pid(*value, libc::getpid());
            }
            let mut limit: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur = self.nofile_soft.min(limit.rlim_max);
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            }
            libc::execve(self.program, self.argv, self.envp);
            fail(status, StartStage::Exec)
        }
    }
}

/// Report `stage` and errno through the status pipe and exit.
///
/// # Safety
///
/// Async-signal-safe; for the child only (it exits without unwinding).
unsafe fn fail(status: RawFd, stage: StartStage) -> ! {
    unsafe {
        let errno = *libc::__errno_location();
        let mut bytes = [0u8; STATUS_BYTES];
        bytes[..4].copy_from_slice(&stage.code().to_ne_bytes());
        bytes[4..].copy_from_slice(&errno.to_ne_bytes());
        libc::write(status, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// Write `pid` in decimal followed by NUL at `at`.
///
/// # Safety
///
/// `at` must have room for 21 bytes. Async-signal-safe (no allocation).
pub(super) unsafe fn write_pid(at: *mut u8, pid: libc::pid_t) {
    let mut digits = [0u8; 20];
    let mut n = pid as u64;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        unsafe { *at.add(i) = digits[len - 1 - i] };
    }
    unsafe { *at.add(len) = 0 };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_pid_writes_decimal_and_nul() {
        let mut buffer = [0xffu8; 12];
        unsafe { write_pid(buffer.as_mut_ptr(), 40213) };
        assert_eq!(&buffer[..6], b"40213\0");
        unsafe { write_pid(buffer.as_mut_ptr(), 7) };
        assert_eq!(&buffer[..2], b"7\0");
    }
}
