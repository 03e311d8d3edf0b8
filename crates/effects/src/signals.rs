//! The signals that must not kill the supervisor before its event loop
//! listens for them.
//!
//! The default action of SIGHUP, SIGUSR1 and SIGUSR2 is to terminate the
//! process — and a supervisor that dies that way leaves its lock and socket
//! behind and its workers to `PR_SET_PDEATHSIG`. The event loop handles
//! them (SIGHUP re-reads the file; the other two mean nothing to supervise
//! and are logged), but it starts after the lock, the helpers, the first read
//! of the file and the runtime: a fraction of a second in which a `kill -HUP`
//! from a deploy script would be fatal. [`install`], the first thing `run`
//! does, puts a handler in place at once; the loop's own (tokio's) chains to
//! it later. A handler, not `SIG_IGN`: exec resets a handler to the default
//! but keeps an ignored signal ignored — and the spawn code resets every
//! disposition in the child anyway.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by a SIGHUP that came before the loop listened for it.
static EARLY_HANGUP: AtomicBool = AtomicBool::new(false);

/// The signals [`install`] handles.
pub(crate) const HANDLED: [libc::c_int; 3] = [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];

extern "C" fn early(signal: libc::c_int) {
    // Async-signal-safe: one atomic store.
    if signal == libc::SIGHUP {
        EARLY_HANGUP.store(true, Ordering::SeqCst);
    }
}

/// Handle [`HANDLED`] from now on: a SIGHUP is remembered (see
/// [`take_early_hangup`]), SIGUSR1 and SIGUSR2 are ignored.
pub fn install() -> std::io::Result<()> {
    for signal in HANDLED {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an
        // atomic (async-signal-safe); SA_RESTART keeps the blocking calls of
        // the start-up (reads, waits) from failing with EINTR.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = early as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if installed != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether a SIGHUP came before the loop listened for it (then the loop
/// re-reads the file once, as it would have). Clears the mark.
pub fn take_early_hangup() -> bool {
    EARLY_HANGUP.swap(false, Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_early_hangup_is_remembered_once() {
        install().unwrap();
        take_early_hangup();
        // SAFETY: raising a signal in this process, whose handler is ours.
        unsafe { libc::raise(libc::SIGHUP) };
        assert!(take_early_hangup());
        assert!(!take_early_hangup());
        // SAFETY: as above; the handler ignores it.
        unsafe {
            libc::raise(libc::SIGUSR1);
            libc::raise(libc::SIGUSR2);
        }
        assert!(!take_early_hangup());
    }
}
