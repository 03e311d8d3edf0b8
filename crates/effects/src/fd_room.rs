//! How many processes may start now without running out of file
//! descriptors. A worker holds [`FDS_PER_INSTANCE`] of the supervisor's
//! while it runs, and a start in flight [`FDS_PER_START`]; at the limit
//! (`RLIMIT_NOFILE`) a start would fail ("cannot create a pipe: Too many
//! open files") and be retried with backoff, so starts wait for room
//! instead, and [`FD_RESERVE`] is kept for everything else.

use std::path::Path;
use std::time::{Duration, Instant};

/// The supervisor's fds of a running worker: the read ends of its stdout
/// and stderr pipes.
pub const FDS_PER_INSTANCE: usize = 2;

/// The supervisor's fds while a worker starts: both ends of its stdout and
/// stderr pipes until the spawner has the write ends, the exec-status pipe
/// and its cgroup's directory.
pub const FDS_PER_START: usize = 7;

/// What a start holds once made, until its exec status is read: its
/// [`FDS_PER_INSTANCE`] and the exec-status pipe (the rest of
/// [`FDS_PER_START`] is closed before the start returns).
const HELD_AFTER_START: usize = FDS_PER_INSTANCE + 1;

/// Fds kept free for all but starts: the control socket's 64 commands and
/// 64 followers, the metrics endpoint's 32 connections, log files, `exec`
/// checks and the spawner's messages.
pub const FD_RESERVE: usize = 256;

/// Far from the limit by this many starts, the room is estimated from the
/// count of workers; nearer, what is open is counted (`/proc/self/fd`).
const COUNT_WITHIN_STARTS: usize = 256;

/// A count of what is open is taken again after this long (one takes ~10 ms
/// at 20,000 fds); meanwhile each start made counts [`HELD_AFTER_START`].
const RECOUNT_AFTER: Duration = Duration::from_millis(100);

/// The fd limit and what was open before any worker.
#[derive(Debug)]
pub(crate) struct FdRoom {
    limit: usize,
    base: usize,
    /// The last count of what is open, near the limit.
    counted: Option<Counted>,
}

#[derive(Debug)]
struct Counted {
    at: Instant,
    open: usize,
    starts_since: usize,
}

impl FdRoom {
    /// Read now: after the soft limit was raised, before any worker.
    pub(crate) fn measure() -> FdRoom {
        FdRoom {
            limit: soft_limit(),
            base: open_fds(Path::new("/proc/self/fd")).unwrap_or(0),
            counted: None,
        }
    }

    /// How many starts fit now, with `workers` processes running.
    pub(crate) fn starts(&mut self, workers: usize) -> usize {
        let limit = self.limit;
        // Starts one after the other: each needs FDS_PER_START free while
        // it is made, and keeps HELD_AFTER_START.
        let room = |open: usize| {
            let kept = open + FD_RESERVE + (FDS_PER_START - HELD_AFTER_START);
            limit.saturating_sub(kept) / HELD_AFTER_START
        };
        // One more fd per worker than it holds once settled: a busy loop
        // reads exec statuses late, and a pump may outlive its process.
        let estimated = room(self.base + workers.saturating_mul(HELD_AFTER_START));
        if estimated > COUNT_WITHIN_STARTS {
            self.counted = None;
            return estimated;
        }
        if let Some(counted) = &self.counted
            && counted.at.elapsed() < RECOUNT_AFTER
        {
            return room(counted.open + counted.starts_since * HELD_AFTER_START);
        }
        // Near the limit, what is open is counted: checks and connections
        // too. Out of fds, the count cannot even be taken: the estimate
        // stands.
        let Some(open) = open_fds(Path::new("/proc/self/fd")) else {
            return estimated;
        };
        self.counted = Some(Counted {
            at: Instant::now(),
            open,
            starts_since: 0,
        });
        room(open)
    }

    /// A start was made (it counts until the next count).
    pub(crate) fn started(&mut self) {
        if let Some(counted) = &mut self.counted {
            counted.starts_since += 1;
        }
    }
}

/// The soft `RLIMIT_NOFILE` (unlimited: `usize::MAX`).
fn soft_limit() -> usize {
    // SAFETY: getrlimit fills the struct it is given.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0
            || limit.rlim_cur == libc::RLIM_INFINITY
        {
            return usize::MAX;
        }
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    }
}

/// The fds open in `fd_dir` (a `/proc/PID/fd`), the one that reads it aside.
fn open_fds(fd_dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(fd_dir).ok()?;
    Some(entries.count().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_from_the_limit_the_room_is_estimated_and_near_it_counted() {
        let mut room = FdRoom {
            limit: 20_000,
            base: 20,
            counted: None,
        };
        let transient = FDS_PER_START - HELD_AFTER_START;
        assert_eq!(
            room.starts(0),
            (20_000 - 20 - FD_RESERVE - transient) / HELD_AFTER_START
        );
        // Near the limit, this test process's real fds count: a handful.
        let near = (20_000 - 20 - FD_RESERVE) / HELD_AFTER_START - 10;
        let counted = room.starts(near);
        assert!(counted > 2_000, "counted, not estimated");
        // Until the next count, each start made counts.
        room.started();
        assert_eq!(room.starts(near), counted - 1);
    }

    #[test]
    fn at_the_limit_no_start_fits() {
        let mut room = FdRoom {
            limit: 64,
            base: 20,
            counted: None,
        };
        assert_eq!(room.starts(0), 0, "the reserve is above the limit");
        let open = open_fds(Path::new("/proc/self/fd")).expect("readable");
        assert!(open >= 3, "stdin, stdout and stderr at least: {open}");
    }
}
