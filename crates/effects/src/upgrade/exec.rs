//! The exec itself: the state in a memfd, the fds that must survive kept
//! open across `execve` (their close-on-exec flag cleared only for it), the
//! signals that would kill the new image before it listens for them held
//! back, and `execve` of the new binary from the main thread.
//!
//! Why the main thread: a worker's `PR_SET_PDEATHSIG` fires when the
//! *thread* that forked it (its parent thread) ends. `execve` ends every
//! other thread of the process but not the calling one, which becomes the
//! new image's main thread. The spawner (which forks the workers with
//! `CLONE_PARENT`) and the undertaker were forked from the main thread, so
//! the workers' parent thread lives on across the exec.
//!
//! If `execve` fails, everything is put back as it was (close-on-exec, the
//! signal mask) and the error returned: the running supervisor goes on.

use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The environment variable that tells the new image where its state is
/// (the memfd's number). Removed from our environment at once.
pub(crate) const HANDOVER_ENV: &str = "SUPERVISE_HANDOVER_FD";

/// The signals held back from the last moment before `execve` until the new
/// image's handlers are in place (see [`release_held_signals`]): their
/// default action would kill it, and the workers with it. Pending ones are
/// delivered then; exec keeps both the mask and what is pending.
const HELD_SIGNALS: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCHLD,
];

fn held_set() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is filled by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in HELD_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Deliver what was held back across the exec (a no-op when nothing was):
/// call once the loop's signal handlers are installed.
pub fn release_held_signals() {
    let set = held_set();
    // SAFETY: unblocking signals of this thread, with a valid set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Whether this is the process's main thread (its tid is its pid).
pub(crate) fn on_main_thread() -> bool {
    // SAFETY: gettid and getpid have no preconditions.
    unsafe { libc::gettid() == libc::getpid() }
}

/// A close-on-exec memfd holding `bytes`, read from its start.
fn memfd_with(bytes: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: a valid NUL-terminated name; the flags are plain.
    let raw = unsafe { libc::memfd_create(c"supervise-handover".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd number; a closed one fails with EBADF.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        if libc::fcntl(fd, libc::F_SETFD, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Replace this process's image by `binary`, with `args` (argv, the first
/// included) and our environment plus [`HANDOVER_ENV`], keeping `kept` open
/// and handing `state` over in a memfd. Returns only on failure, with
/// everything as it was.
pub(crate) fn exec(binary: &Path, args: &[OsString], state: &[u8], kept: &[RawFd]) -> io::Error {
    match prepare_and_exec(binary, args, state, kept) {
        Ok(never) => match never {},
        Err(error) => error,
    }
}

fn prepare_and_exec(
    binary: &Path,
    args: &[OsString],
    state: &[u8],
    kept: &[RawFd],
) -> io::Result<std::convert::Infallible> {
    if !on_main_thread() {
        return Err(io::Error::other(
            "not on the main thread (the workers' parent-death signal follows it)",
        ));
    }
    let nul = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} holds a NUL byte"),
        )
    };
    let path = CString::new(binary.as_os_str().as_bytes()).map_err(|_| nul("the binary's path"))?;
    let argv: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| nul("an argument")))
        .collect::<io::Result<_>>()?;
    let memfd = memfd_with(state)?;
    let mut envp: Vec<CString> = std::env::vars_os()
        .filter(|(name, _)| name != HANDOVER_ENV)
        .filter_map(|(name, value)| {
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            CString::new(entry).ok()
        })
        .collect();
    envp.push(
        CString::new(format!("{HANDOVER_ENV}={}", memfd.as_raw_fd()))
            .map_err(|_| nul("the environment"))?,
    );
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());

    let mut all: Vec<RawFd> = kept.to_vec();
    all.push(memfd.as_raw_fd());
    let mut cleared = Vec::with_capacity(all.len());
    let mut failure = None;
    for fd in &all {
        match set_cloexec(*fd, false) {
            Ok(()) => cleared.push(*fd),
            Err(error) => {
                failure = Some(io::Error::new(
                    error.kind(),
                    format!("cannot keep fd {fd} open across exec: {error}"),
                ));
                break;
            }
        }
    }
    let set = held_set();
    // SAFETY: a zeroed sigset_t is a valid out-parameter.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    let error = match failure {
        Some(error) => error,
        None => {
            // SAFETY: blocking signals of this thread; valid sets. Then
            // execve with NUL-terminated arrays of valid C strings, which
            // outlive the call (it returns only on failure).
            unsafe {
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
                libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            }
            let error = io::Error::last_os_error();
            // SAFETY: restoring this thread's mask as it was.
            unsafe {
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            }
            error
        }
    };
    for fd in cleared {
        let _ = set_cloexec(fd, true);
    }
    Err(error)
}

/// The state the previous image handed over, if it did: read from the
/// memfd named by [`HANDOVER_ENV`] (at most `limit` bytes), which is closed,
/// and the variable removed. Call first thing, while single-threaded.
pub fn take_incoming(limit: usize) -> Option<io::Result<Vec<u8>>> {
    let value = std::env::var_os(HANDOVER_ENV)?;
    // SAFETY: called at start, before any other thread exists.
    unsafe { std::env::remove_var(HANDOVER_ENV) };
    let fd: RawFd = match value.to_str().and_then(|v| v.parse().ok()) {
        Some(fd) if fd > 2 => fd,
        _ => {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{HANDOVER_ENV}={} is not an fd number",
                    value.to_string_lossy()
                ),
            )));
        }
    };
    if let Err(error) = set_cloexec(fd, true) {
        return Some(Err(io::Error::new(
            error.kind(),
            format!("{HANDOVER_ENV}={fd}: {error}"),
        )));
    }
    // SAFETY: the previous image left this fd open for us alone.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    use std::io::Read;
    let mut bytes = Vec::new();
    Some(
        file.take(limit as u64 + 1)
            .read_to_end(&mut bytes)
            .and_then(|_| {
                if bytes.len() > limit {
                    Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the handed-over state is larger than {limit} bytes"),
                    ))
                } else {
                    Ok(bytes)
                }
            }),
    )
}

/// Own an fd the previous image kept open for us: it must be open; it is
/// made close-on-exec again.
pub fn adopt_fd(fd: RawFd, what: &str) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what}: fd {fd} is not one the previous image kept"),
        ));
    }
    set_cloexec(fd, true).map_err(|e| io::Error::new(e.kind(), format!("{what}: fd {fd}: {e}")))?;
    // SAFETY: the previous image kept this fd open for us, and nothing else
    // in this image has taken it (each kept fd is named once in the state).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfd_holds_the_state_from_its_start() {
        let fd = memfd_with(b"{\"format\":1}").unwrap();
        let mut text = String::new();
        use std::io::Read;
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        assert_eq!(text, "{\"format\":1}");
    }

    #[test]
    fn a_failed_exec_puts_every_flag_back() {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let args = [OsString::from("nothing")];
        let kept = [read.as_raw_fd(), write.as_raw_fd()];
        // Tests run on other threads: that refusal comes first, which also
        // leaves the flags untouched.
        let error = exec(Path::new("/nonexistent/supervise"), &args, b"{}", &kept);
        assert!(!error.to_string().is_empty());
        for fd in kept {
            // SAFETY: fcntl on an open fd.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "fd {fd}");
        }
    }
}
