//! Hearing at once that the wall clock was set (`date -s`, an NTP step, a
//! resume from suspend): a timerfd on CLOCK_REALTIME armed with
//! `TFD_TIMER_CANCEL_ON_SET` (Linux 3.0), as systemd's timers use. Its
//! `read` fails with ECANCELED when the clock is set discontinuously; the
//! loop then takes a turn, in which the core compares the new reading with
//! the monotonic clock and re-arms its cron schedules
//! (`supervise_core::schedule`). Without it (a kernel or a seccomp filter
//! that refuses the timerfd) the core still notices the step at the loop's
//! next turn, at most `supervise_core::FULL_PASS_INTERVAL` later: the watch
//! is a latency, not a correctness, matter.
//!
//! The timer itself is armed a year ahead ([`REARM_AHEAD`]) and never
//! meant to fire; if it does, it is armed again and nothing is said.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

/// How far ahead the timer is armed: only its cancellation matters.
pub(crate) const REARM_AHEAD: Duration = Duration::from_secs(365 * 24 * 3600);

/// The watch on the wall clock; inert (never wakes) when it could not be made.
pub struct ClockSet {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl ClockSet {
    /// A watch on the wall clock, registered with the current tokio
    /// runtime. When the timerfd cannot be made, the watch is inert and
    /// that is logged once (a clock step is then noticed at the next turn).
    pub fn new() -> ClockSet {
        match watch() {
            Ok(fd) => ClockSet { fd: Some(fd) },
            Err(error) => {
                tracing::warn!(
                    "cannot watch the wall clock for steps (timerfd: {error}); a step is noticed at the next turn of the loop instead"
                );
                ClockSet { fd: None }
            }
        }
    }

    /// Wait until the wall clock is set. Cancel-safe (for `select!`): what
    /// a cancelled wait saw is seen by the next.
    pub async fn changed(&mut self) {
        loop {
            let Some(fd) = self.fd.as_ref() else {
                return std::future::pending().await;
            };
            let Ok(mut ready) = fd.readable().await else {
                self.fd = None;
                continue;
            };
            let mut expirations = [0u8; 8];
            // SAFETY: the fd is a timerfd we own; `expirations` is 8 writable bytes.
            let read = unsafe {
                libc::read(
                    fd.get_ref().as_raw_fd(),
                    expirations.as_mut_ptr().cast(),
                    expirations.len(),
                )
            };
            let error = (read < 0).then(io::Error::last_os_error);
            match error.as_ref().and_then(io::Error::raw_os_error) {
                Some(libc::EAGAIN) => ready.clear_ready(),
                Some(libc::ECANCELED) | None => {
                    // Set (or, a year on, expired): armed again either way.
                    let set = error.is_some();
                    if let Err(error) = arm(fd.get_ref()) {
                        tracing::warn!(
                            "cannot re-arm the wall clock watch: {error}; a step is noticed at the next turn of the loop instead"
                        );
                        self.fd = None;
                    }
                    if set {
                        return;
                    }
                }
                Some(_) => {
                    tracing::warn!(
                        "the wall clock watch failed: {}; a step is noticed at the next turn of the loop instead",
                        error.map_or_else(String::new, |e| e.to_string())
                    );
                    self.fd = None;
                }
            }
        }
    }
}

impl Default for ClockSet {
    fn default() -> Self {
        ClockSet::new()
    }
}

/// A timerfd on CLOCK_REALTIME, armed to be cancelled when the clock is set.
fn watch() -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: timerfd_create has no memory preconditions.
    let raw = unsafe {
        libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    arm(&fd)?;
    // SAFETY: the OwnedFd owns the timerfd and keeps it open, unchanged, for
    // as long as the AsyncFd (which owns the OwnedFd) lives.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

/// Arm `fd` [`REARM_AHEAD`] of the wall clock now, cancelled on a set.
fn arm(fd: &OwnedFd) -> io::Result<()> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let ahead = libc::time_t::try_from(REARM_AHEAD.as_secs()).unwrap_or(libc::time_t::MAX);
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: now.tv_sec.saturating_add(ahead),
            tv_nsec: 0,
        },
    };
    let flags = libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET;
    // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
    let rc = unsafe { libc::timerfd_settime(fd.as_raw_fd(), flags, &spec, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch can be made here, and it does not wake without a step
    /// (a test cannot set the system clock: the core and the simulation
    /// prove what a step does).
    #[test]
    fn the_watch_is_armed_and_quiet_without_a_step() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let mut watch = ClockSet::new();
            assert!(watch.fd.is_some(), "timerfd with TFD_TIMER_CANCEL_ON_SET");
            let woke = tokio::time::timeout(Duration::from_millis(200), watch.changed()).await;
            assert!(woke.is_err(), "woke without a step of the clock");
        });
    }
}
