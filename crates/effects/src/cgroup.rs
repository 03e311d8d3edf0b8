//! One cgroup v2 per instance, when the supervisor can have them — what
//! systemd does with `KillMode=control-group`: a process cannot leave its
//! cgroup by daemonizing (setsid, a double fork, setpgid), so an instance's
//! every process is found, waited for and killed through it.
//!
//! The supervisor's own cgroup is read from /proc/self/cgroup (the `0::`
//! line) and /proc/self/mountinfo (where cgroup2 is mounted: a pure v2
//! `/sys/fs/cgroup`, the `unified` hierarchy of a hybrid system, or a
//! delegated subtree under systemd with `Delegate=yes`). Under it, one
//! subtree per ecosystem file:
//!
//! ```text
//! <ours>/supervise.<key>.<pid>/      the run's root (key: the file's place)
//!     supervisor/                    supervise itself, the undertaker, the spawner
//!     instances/                     cgroup.kill here kills every instance at once
//!         web.0-17/                  one per process started (name.slot-spawn)
//! ```
//!
//! Instances are born in their cgroup (the spawner forks with
//! `CLONE_INTO_CGROUP`); a worker may make cgroups below its own, which are
//! walked (iteratively, bounded by [`MAX_SUBTREE`]) when signalling,
//! counting and removing. A stop ends when `cgroup.events` says
//! `populated 0`, which is watched with inotify; `cgroup.kill` is the
//! SIGKILL. CPU time comes from `cpu.stat` (always there), memory from
//! `memory.current` where the memory controller is on. When supervise starts
//! and finds the subtree of a previous run of the same file (killed by
//! SIGKILL, say), it kills what is left there first.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most cgroups one walk of a tree visits.
pub(crate) const MAX_SUBTREE: usize = 10_000;
/// How many times [`signal`] looks again for processes forked meanwhile.
pub(crate) const SIGNAL_PASSES: usize = 8;
/// How long to wait for a killed cgroup to empty before giving up on removing it.
pub(crate) const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// The path of our cgroup in the v2 hierarchy: the `0::` line of
/// /proc/self/cgroup.
pub(crate) fn own_cgroup(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::trim)
}

/// Where the cgroup2 mount that holds `cgroup` (a path in the hierarchy) is,
/// from /proc/self/mountinfo: its mount point joined with the part of
/// `cgroup` below the mount's root.
pub fn mounted_at(mountinfo: &str, cgroup: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        let (root, point) = (*fields.get(3)?, *fields.get(4)?);
        let below = if root == "/" {
            cgroup.strip_prefix('/').unwrap_or(cgroup)
        } else {
            cgroup
                .strip_prefix(root)?
                .strip_prefix('/')
                .or_else(|| cgroup.strip_prefix(root).filter(|r| r.is_empty()))?
        };
        Some(Path::new(&unescape(point)).join(below))
    })
}

/// mountinfo escapes spaces and the like as `\\040`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(index) = rest.find('\\') {
        out.push_str(&rest[..index]);
        let code = rest.get(index + 1..index + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[index + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[index + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Our cgroup's directory, or why there is none we can use.
pub(crate) fn detect() -> Result<PathBuf, String> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let ours = own_cgroup(&cgroup).ok_or("this system has no cgroup v2 hierarchy")?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let dir = mounted_at(&mountinfo, ours)
        .ok_or_else(|| format!("the cgroup v2 hierarchy holding {ours} is not mounted here"))?;
    if !dir.join("cgroup.procs").exists() {
        return Err(format!("{} is not a cgroup v2 directory", dir.display()));
    }
    Ok(dir)
}

/// Whether a cgroup has a live process (`populated 1` in `cgroup.events`).
/// A cgroup that is gone is not populated.
pub(crate) fn populated(cgroup: &Path) -> bool {
    std::fs::read_to_string(cgroup.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l.trim() == "populated 1"))
}

/// SIGKILL every process of a cgroup and its descendants (`cgroup.kill`).
pub(crate) fn kill(cgroup: &Path) -> io::Result<()> {
    std::fs::write(cgroup.join("cgroup.kill"), b"1")
}

/// Send `signal` to every process of a cgroup and its descendants, again
/// while a pass finds processes the last did not (forked meanwhile), at
/// most [`SIGNAL_PASSES`] times — what systemd does. Returns the
/// processes signalled.
pub(crate) fn signal(cgroup: &Path, signal: i32) -> std::collections::HashSet<i32> {
    let mut signalled = std::collections::HashSet::new();
    let cgroups = subtree(cgroup);
    for _ in 0..SIGNAL_PASSES {
        let fresh: Vec<i32> = cgroups
            .iter()
            .flat_map(|c| pids(c))
            .filter(|pid| !signalled.contains(pid))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            // SAFETY: a process in one of our instances' cgroups.
            unsafe {
                libc::kill(pid, signal);
            }
            signalled.insert(pid);
        }
    }
    signalled
}

/// The pids in a cgroup (not its descendants).
pub(crate) fn pids(cgroup: &Path) -> Vec<i32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|procs| {
            procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Move process `pid` into `cgroup`.
pub(crate) fn enter(cgroup: &Path, pid: u32) -> io::Result<()> {
    std::fs::write(cgroup.join("cgroup.procs"), pid.to_string())
}

/// CPU time (µs) of a cgroup, its descendants included (`cpu.stat`, there
/// without the cpu controller).
pub(crate) fn cpu_usec(cgroup: &Path) -> u64 {
    std::fs::read_to_string(cgroup.join("cpu.stat"))
        .ok()
        .and_then(|stat| {
            stat.lines().find_map(|l| {
                l.strip_prefix("usage_usec ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// The memory (bytes) of a cgroup, its descendants included, where the
/// memory controller is on ([`memory_enabled`]): `memory.current`.
pub(crate) fn memory_current(cgroup: &Path) -> Option<u64> {
    std::fs::read_to_string(cgroup.join("memory.current"))
        .ok()
        .and_then(|m| m.trim().parse().ok())
}

/// Set a cgroup's hard memory limit, `memory.max` (`None`: none), where the
/// memory controller is on for it ([`memory_enabled`] of its parent).
pub(crate) fn set_memory_max(cgroup: &Path, bytes: Option<u64>) -> io::Result<()> {
    let value = bytes.map_or_else(|| "max".to_string(), |b| b.to_string());
    std::fs::write(cgroup.join("memory.max"), value)
}

/// Whether the memory controller is on for the cgroups below `parent`.
pub(crate) fn memory_enabled(parent: &Path) -> bool {
    std::fs::read_to_string(parent.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
}

/// How many cgroups are below `cgroup` (`nr_descendants` in `cgroup.stat`;
/// dying ones count until they are gone).
fn descendants(cgroup: &Path) -> usize {
    std::fs::read_to_string(cgroup.join("cgroup.stat"))
        .ok()
        .and_then(|stat| {
            stat.lines().find_map(|l| {
                l.strip_prefix("nr_descendants ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(usize::MAX)
}

/// Kill what a cgroup tree holds, wait (at most [`EMPTY_WAIT`]) for it to
/// empty, and remove it, deepest first. Returns how many processes it held.
pub(crate) fn clear(root: &Path) -> usize {
    let count = count_processes(root);
    if count > 0 {
        let _ = kill(root);
        let deadline = Instant::now() + EMPTY_WAIT;
        while populated(root) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    remove_tree(root);
    count
}

/// How many processes a cgroup and its descendants hold.
pub(crate) fn count_processes(root: &Path) -> usize {
    processes(root).len()
}

/// The processes of a cgroup and of every cgroup below it.
pub(crate) fn processes(root: &Path) -> Vec<i32> {
    subtree(root).iter().flat_map(|c| pids(c)).collect()
}

/// A cgroup and its descendants, parents before children, at most
/// [`MAX_SUBTREE`] (a worker may nest cgroups below its own; no recursion,
/// so no depth can exhaust the stack).
fn subtree(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![root.to_path_buf()];
    // The usual case, in one small read instead of a directory listing.
    if descendants(root) == 0 {
        return found;
    }
    let mut next = 0;
    while next < found.len() && found.len() < MAX_SUBTREE {
        let below = std::fs::read_dir(&found[next])
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        found.extend(below);
        next += 1;
    }
    found.truncate(MAX_SUBTREE);
    found
}

/// Remove a cgroup tree that no longer holds processes, deepest first
/// (what still holds one stays).
pub(crate) fn remove_tree(root: &Path) {
    for cgroup in subtree(root).iter().rev() {
        let _ = std::fs::remove_dir(cgroup);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_cgroup_is_the_v2_line() {
        let hybrid = "9:name=systemd:/\n4:memory:/x\n0::/user.slice/session-1.scope\n";
        assert_eq!(own_cgroup(hybrid), Some("/user.slice/session-1.scope"));
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn the_mount_point_joins_the_path_below_the_mount_root() {
        let mountinfo = "\
25 1 0:22 / / rw - ext4 /dev/sda rw
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            mounted_at(mountinfo, "/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified/"))
        );
        assert_eq!(
            mounted_at(mountinfo, "/system.slice/app.service"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/app.service"
            ))
        );
        // A container sees its own cgroup as the mount's root.
        let container = "50 40 0:30 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mounted_at(container, "/docker/abc/inner"),
            Some(PathBuf::from("/sys/fs/cgroup/inner"))
        );
        assert_eq!(
            mounted_at(container, "/docker/abc"),
            Some(PathBuf::from("/sys/fs/cgroup/"))
        );
        assert_eq!(mounted_at(container, "/elsewhere"), None);
        assert_eq!(
            mounted_at("25 1 0:22 / / rw - ext4 /dev/sda rw\n", "/"),
            None
        );
    }

    #[test]
    fn escaped_mount_points() {
        let mountinfo = "41 31 0:38 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mounted_at(mountinfo, "/"),
            Some(PathBuf::from("/mnt/my cgroups/"))
        );
    }
}
