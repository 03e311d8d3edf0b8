//! What instances use — CPU time and memory — measured off the loop thread,
//! for `status` and for `max_memory`.
//!
//! `status` is answered from a [`Sampling`]: every instance measured in the
//! background at a bounded rate while statuses are asked, so that a status
//! of thousands costs the read of the few started since the last sample,
//! not a pass over every cgroup (200 ms at 5,000 instances).
//!
//! An instance with a cgroup is measured by it: its CPU time from
//! `cpu.stat`, its memory from `memory.current` where the memory controller
//! is on in our subtree. Without the controller, `max_memory` sums the RSS
//! of every process in the cgroup (escaped ones too: a small read each),
//! while `status`, which must stay quick over thousands of instances, takes
//! the RSS of the process group from its one pass over /proc. An instance
//! without a cgroup is its process group.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::cgroup;
use super::procfs;
use model::usage::GroupUsage;

/// Whether the memory controller is on for the instance cgroups (they all
/// share one parent).
fn memory_controller<'a>(mut cgroups: impl Iterator<Item = &'a Path>) -> bool {
    cgroups
        .next()
        .and_then(Path::parent)
        .is_some_and(cgroup::memory_enabled)
}

/// The memory of the instance in `cgroup`: its `memory.current`, else the
/// RSS of every process in it.
fn cgroup_memory(cgroup: &Path, controller: bool) -> u64 {
    match controller.then(|| cgroup::memory_current(cgroup)).flatten() {
        Some(bytes) => bytes,
        None => cgroup::processes(cgroup)
            .into_iter()
            .filter_map(procfs::rss_bytes)
            .sum(),
    }
}

/// Every instance's CPU time and memory, by leader pid; `cgroups` are
/// those of the instances that have one.
///
/// For `status`, which must stay quick with thousands of instances: CPU
/// from `cpu.stat` (one read), memory from `memory.current` where the
/// memory controller is on, else the RSS of the process group from the one
/// pass over /proc (a process that left its group is not counted here;
/// `max_memory`'s [`memory`] counts it).
pub fn all(cgroups: &[(i32, PathBuf)]) -> HashMap<i32, GroupUsage> {
    let mut usage = procfs::group_usage();
    let ticks = procfs::ticks_per_second();
    let controller = memory_controller(cgroups.iter().map(|(_, c)| c.as_path()));
    for (pgid, cgroup) in cgroups {
        let entry = usage.entry(*pgid).or_default();
        entry.cpu_ticks = cgroup::cpu_usec(cgroup) * ticks / 1_000_000;
        if let Some(bytes) = controller.then(|| cgroup::memory_current(cgroup)).flatten() {
            entry.rss_bytes = bytes;
        }
    }
    usage
}

/// The memory (bytes) of each instance of `instances`: its leader's pid,
/// and its cgroup if it has one. /proc is read whole only when an instance
/// has no cgroup.
pub(crate) fn memory(instances: &[(i32, Option<PathBuf>)]) -> Vec<(i32, u64)> {
    let controller = memory_controller(instances.iter().filter_map(|(_, c)| c.as_deref()));
    let mut groups: Option<HashMap<i32, GroupUsage>> = None;
    instances
        .iter()
        .map(|(pid, cgroup)| {
            let bytes = match cgroup {
                Some(cgroup) => cgroup_memory(cgroup, controller),
                None => groups
                    .get_or_insert_with(procfs::group_usage)
                    .get(pid)
                    .map_or(0, |u| u.rss_bytes),
            };
            (*pid, bytes)
        })
        .collect()
}

/// The figures of every instance are sampled at least this often while any
/// instance runs and `status` was asked lately.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Sampling goes on this long after the last `status`: a supervisor nobody
/// asks reads nothing.
pub const SAMPLE_KEEP_FOR: Duration = Duration::from_secs(600);
/// A `status` that finds the last sample older than this has another taken
/// at once (after it is answered): one who watches sees figures about this
/// old.
pub const SAMPLE_FRESH_FOR: Duration = Duration::from_secs(1);
/// The sampler waits at least this many times as long as its last sample
/// took: its share of one core stays under 1 / this (1 % of a core), however
/// many instances there are.
const SAMPLE_IDLE_RATIO: u32 = 100;

/// Every instance's CPU time and memory, by leader pid, as measured at
/// `taken_at` (the start of the pass).
#[derive(Debug, Clone)]
pub struct Sample {
    pub usage: Arc<HashMap<i32, GroupUsage>>,
    pub taken_at: Instant,
}

/// The background sampling of [`all`]: the loop says when one is due
/// ([`Sampling::due_at`]) and hands it the instance cgroups; the pass runs
/// on a blocking thread, one at a time. It starts with the first `status`
/// and stops [`SAMPLE_KEEP_FOR`] after the last.
#[derive(Debug)]
pub struct Sampling {
    board: Arc<Mutex<Board>>,
    next_at: Instant,
    last_asked: Option<Instant>,
}

#[derive(Debug, Default)]
struct Board {
    latest: Option<Sample>,
    /// A pass is under way (there is never more than one).
    taking: bool,
    /// How long the last pass took.
    cost: Duration,
}

impl Sampling {
    /// Nothing sampled, nothing due until a `status` is asked.
    pub fn new(now: Instant) -> Sampling {
        Sampling {
            board: Arc::default(),
            next_at: now,
            last_asked: None,
        }
    }

    /// When the next sample is due: none when `status` was not asked in
    /// the [`SAMPLE_KEEP_FOR`] before.
    pub fn due_at(&self) -> Option<Instant> {
        self.last_asked
            .filter(|asked| self.next_at.saturating_duration_since(*asked) <= SAMPLE_KEEP_FOR)
            .map(|_| self.next_at)
    }

    /// The last sample taken, if any.
    pub fn latest(&self) -> Option<Sample> {
        self.board().latest.clone()
    }

    /// Take a sample of the instances, those with a cgroup being
    /// `cgroups`, off this thread (unless one is under way), and set when
    /// the next is due. With no instance at all, nothing is read.
    pub fn take(&mut self, instances: usize, cgroups: Vec<(i32, PathBuf)>, now: Instant) {
        let mut board = self.board.lock().unwrap_or_else(PoisonError::into_inner);
        self.next_at = now + SAMPLE_EVERY.max(board.cost * SAMPLE_IDLE_RATIO);
        if board.taking {
            return;
        }
        if instances == 0 {
            board.latest = None;
            return;
        }
        board.taking = true;
        drop(board);
        let shared = Arc::clone(&self.board);
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let usage = all(&cgroups);
            let mut board = shared.lock().unwrap_or_else(PoisonError::into_inner);
            board.latest = Some(Sample {
                usage: Arc::new(usage),
                taken_at: started,
            });
            board.cost = started.elapsed();
            board.taking = false;
        });
    }

    /// `status` was asked at `now`: a sample older than
    /// [`SAMPLE_FRESH_FOR`] (or none) makes the next one due at once.
    pub fn asked(&mut self, now: Instant) {
        self.last_asked = Some(now);
        let stale =
            self.board().latest.as_ref().is_none_or(|sample| {
                now.saturating_duration_since(sample.taken_at) > SAMPLE_FRESH_FOR
            });
        if stale {
            self.next_at = self.next_at.min(now);
        }
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Instances read one by one (without the memory controller, the RSS of
/// each process of a cgroup) while they are at most this many; more are
/// read as [`all`] reads them, with one pass over /proc.
const FEW_UNSAMPLED: usize = 64;

/// The CPU time and memory of `instances` (their leader's pid, and their
/// cgroup if they have one): for those a sample does not have yet. A few
/// with cgroups are read one by one, as for `max_memory` ([`memory`]);
/// /proc is read whole when one has no cgroup, or when there are many.
pub fn of(instances: &[(i32, Option<PathBuf>)]) -> HashMap<i32, GroupUsage> {
    let controller = memory_controller(instances.iter().filter_map(|(_, c)| c.as_deref()));
    let ticks = procfs::ticks_per_second();
    let pass = (instances.iter().any(|(_, c)| c.is_none())
        || (!controller && instances.len() > FEW_UNSAMPLED))
        .then(procfs::group_usage);
    instances
        .iter()
        .map(|(pid, cgroup)| {
            let group = pass
                .as_ref()
                .and_then(|groups| groups.get(pid))
                .copied()
                .unwrap_or_default();
            let usage = match cgroup {
                Some(cgroup) => GroupUsage {
                    cpu_ticks: cgroup::cpu_usec(cgroup) * ticks / 1_000_000,
                    rss_bytes: match (controller, &pass) {
                        (false, Some(_)) => group.rss_bytes,
                        _ => cgroup_memory(cgroup, controller),
                    },
                },
                None => group,
            };
            (*pid, usage)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Until the pass on the blocking thread has stored its sample.
    async fn sampled(sampling: &Sampling) -> Sample {
        for _ in 0..1000 {
            if let Some(sample) = sampling.latest() {
                return sample;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no sample after 5 s");
    }

    #[tokio::test]
    async fn a_sample_measures_our_group_and_the_next_is_due_a_period_later() {
        let start = Instant::now();
        let mut sampling = Sampling::new(start);
        assert_eq!(sampling.due_at(), None, "nothing is read before a status");
        sampling.asked(start);
        assert_eq!(sampling.due_at(), Some(start), "the first is due at once");
        sampling.take(1, Vec::new(), start);
        assert!(sampling.due_at() >= Some(start + SAMPLE_EVERY));
        let sample = sampled(&sampling).await;
        assert!(sample.taken_at >= start);
        // This test's own process group is one of those /proc shows.
        // SAFETY: getpgrp has no preconditions.
        let ours = unsafe { libc::getpgrp() };
        assert!(sample.usage.get(&ours).is_some_and(|u| u.rss_bytes > 0));
    }

    #[tokio::test]
    async fn a_status_of_a_stale_sample_has_the_next_taken_at_once() {
        let start = Instant::now();
        let mut sampling = Sampling::new(start);
        sampling.asked(start);
        assert_eq!(
            sampling.due_at(),
            Some(start),
            "nothing sampled: due at once"
        );
        sampling.take(1, Vec::new(), start);
        let sample = sampled(&sampling).await;
        let due = sampling.due_at();
        sampling.asked(sample.taken_at + SAMPLE_FRESH_FOR);
        assert_eq!(sampling.due_at(), due, "fresh enough: not sooner");
        let later = sample.taken_at + SAMPLE_FRESH_FOR + Duration::from_millis(1);
        sampling.asked(later);
        assert_eq!(sampling.due_at(), Some(later), "stale: due at once");
    }

    #[tokio::test]
    async fn sampling_stops_a_while_after_the_last_status() {
        let start = Instant::now();
        let mut sampling = Sampling::new(start);
        sampling.asked(start);
        let mut now = start;
        while let Some(due) = sampling.due_at() {
            assert!(due <= start + SAMPLE_KEEP_FOR, "{:?} after", due - start);
            now = due;
            sampling.take(0, Vec::new(), now);
        }
        assert!(now + SAMPLE_EVERY > start + SAMPLE_KEEP_FOR);
        sampling.asked(now);
        assert_eq!(sampling.due_at(), Some(now), "a status starts it again");
    }

    #[tokio::test]
    async fn with_no_instance_nothing_is_read_nor_kept() {
        let start = Instant::now();
        let mut sampling = Sampling::new(start);
        sampling.asked(start);
        sampling.take(1, Vec::new(), start);
        sampled(&sampling).await;
        sampling.take(0, Vec::new(), start + SAMPLE_EVERY);
        assert!(sampling.latest().is_none(), "no figures of instances gone");
        assert!(sampling.due_at() >= Some(start + SAMPLE_EVERY * 2));
    }
}
