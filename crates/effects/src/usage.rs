//! What instances use — CPU time and memory — measured off the loop thread,
//! for `status` and for `max_memory`.
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
