//! Every process of every instance, in the mode [`Tracking`] chose: where a
//! new process goes (its cgroup, or its `SUPERVISE_RUN` token), who its
//! escaped descendants are, and when all of them are gone.
//!
//! An instance's processes are named by its leader's pid, which is also its
//! process group (the core's name for it). The stop signal goes to the
//! group, and to every process of the instance outside the group (escaped:
//! `setsid`, a double fork); the instance is gone when the group and every
//! escaped process are; SIGKILL takes them all (`cgroup.kill`).
//!
//! With cgroups, a change of a cgroup's `populated` is an inotify event on
//! its `cgroup.events`, which wakes the loop: nothing is polled. With
//! tokens, an instance is its leader's process tree plus the trees of the
//! processes we adopted (as a subreaper, every orphaned descendant of a
//! worker becomes our child) that carry its token: a walk of our own
//! process tree through `/proc/PID/task/*/children`, never a pass over all
//! of /proc. The adopted children and their tokens are read once for every
//! question asked within [`ADOPTED_SCAN_TTL`], and the loop polls. A child
//! whose environment cannot be read yet, most likely within an `execve` (see
//! [`RunToken::Changing`]), is looked at again, and holds back the verdict
//! that an instance is empty, for at most [`CHANGING_WAIT`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::Signal;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::cgroup;
use super::procfs;
use super::tracking::{CHANGING_WAIT, RunToken, Tracking};

mod adopted;
use adopted::tree;

/// How long one look at our adopted children and their tokens answers
/// questions.
pub(crate) const ADOPTED_SCAN_TTL: Duration = Duration::from_millis(20);
/// The most processes one walk of an instance's tree visits (a bound on
/// the work of one question, whatever a worker forks).
pub(crate) const MAX_TREE: usize = 100_000;
/// Without cgroups, how many times killing an instance's leftovers looks
/// again for processes forked before their parent got its SIGKILL.
pub(crate) const LEFTOVER_ROUNDS: usize = 32;
/// How many tokens of discarded processes (ended `exec` checks, probes) are
/// looked for again at each discard: a check's child that escaped the looks
/// of its own (it could not be read for longer than [`CHANGING_WAIT`], on a
/// machine under load) is found at one of the next, a check period later.
pub(crate) const DISCARDED_TOKENS: usize = 256;
/// How soon a discard that met an adopted child not read yet looks at it
/// again (for at most [`CHANGING_WAIT`]).
pub(crate) const CHANGING_RECHECK: Duration = Duration::from_millis(10);
/// How often an adopted child still not read after [`CHANGING_WAIT`] (it
/// execs on and on; under load most looks fall within an exec) is looked at
/// again, for the discarded token it may carry, until it reads or dies.
pub(crate) const LATE_RECHECK: Duration = Duration::from_millis(250);

/// Where a process about to be started goes.
#[derive(Debug)]
pub(crate) struct Placement {
    /// Its cgroup, and the directory's fd (for `CLONE_INTO_CGROUP`).
    pub(crate) cgroup: Option<(PathBuf, OwnedFd)>,
    /// Its `SUPERVISE_RUN`.
    pub(crate) token: Option<String>,
}

/// An instance's processes.
#[derive(Debug)]
struct Group {
    cgroup: Option<PathBuf>,
    watch: Option<WatchDescriptor>,
    token: Option<String>,
}

/// What [`Groups`] tracks, as an upgrade hands it over.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GroupsState {
    pub tracking: Tracking,
    pub(crate) groups: Vec<GroupState>,
    pub(crate) spawns: u64,
    pub(crate) dying: Vec<PathBuf>,
    pub(crate) killed: Vec<i32>,
    pub(crate) discarded: Vec<String>,
}

/// One instance's processes: its leader, its cgroup or its token.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct GroupState {
    pub(crate) pgid: i32,
    pub(crate) cgroup: Option<PathBuf>,
    pub(crate) token: Option<String>,
}

/// The inotify instance that watches `cgroup.events` files.
struct Watcher {
    inotify: Arc<Inotify>,
}

/// `AsRawFd` for the inotify fd shared with the reader task.
struct Shared(Arc<Inotify>);

impl AsRawFd for Shared {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

pub(crate) struct Groups {
    tracking: Tracking,
    groups: HashMap<i32, Group>,
    /// Counts the processes started (names cgroups, numbers tokens).
    spawns: u64,
    watcher: Option<Watcher>,
    /// Cgroups of forgotten groups still emptying: removed once empty.
    dying: Vec<(PathBuf, Option<WatchDescriptor>)>,
    /// Token → the children we adopted (did not start) that carry it…
    adopted: HashMap<String, Vec<i32>>,
    /// …as read at this moment.
    adopted_read: Option<Instant>,
    /// The adopted children that could not be read yet
    /// ([`RunToken::Changing`]), since when.
    changing: HashMap<i32, Instant>,
    /// The token groups that looked empty but for such a child, since when:
    /// past [`CHANGING_WAIT`] they count as empty all the same.
    held: HashMap<i32, Instant>,
    /// Scratch space for reading environments.
    buffer: Vec<u8>,
    /// Adopted processes killed at shutdown, to reap.
    reap_wait: usize,
    /// Instances sent SIGKILL (without cgroups): whatever is found of them
    /// later (forked meanwhile) is SIGKILLed too.
    killed: HashSet<i32>,
    /// Tokens of the last processes discarded (without cgroups): what
    /// carries one is killed whenever it is found.
    discarded: VecDeque<String>,
    /// A look at the children not read yet is due, for the discarded
    /// tokens; `changed` wakes the loop for it.
    recheck: bool,
    /// What wakes the loop: cgroup events, and [`CHANGING_RECHECK`].
    changed: mpsc::Sender<()>,
}

/// Write `memory.max` of `cgroup`, where the memory controller is on for it.
fn limit_memory(cgroup: &std::path::Path, bytes: Option<u64>) {
    if !cgroup.parent().is_some_and(cgroup::memory_enabled) {
        return;
    }
    if let Err(e) = cgroup::set_memory_max(cgroup, bytes) {
        warn!("cannot set memory.max of {}: {e}", cgroup.display());
    }
}

impl Groups {
    /// Track in `tracking`'s mode; with cgroups, changes are reported on
    /// `changed` (one pending is enough: they coalesce).
    pub(crate) fn new(tracking: Tracking, changed: mpsc::Sender<()>) -> Groups {
        let watcher = match &tracking {
            Tracking::Cgroups(_) => match start_watcher(changed.clone()) {
                Ok(watcher) => Some(watcher),
                Err(error) => {
                    warn!("cannot watch cgroups ({error}); checking them every 50 ms instead");
                    None
                }
            },
            Tracking::Environment { .. } => None,
        };
        Groups {
            tracking,
            groups: HashMap::new(),
            spawns: 0,
            watcher,
            dying: Vec::new(),
            adopted: HashMap::new(),
            adopted_read: None,
            changing: HashMap::new(),
            held: HashMap::new(),
            buffer: Vec::new(),
            reap_wait: 0,
            killed: HashSet::new(),
            discarded: VecDeque::new(),
            recheck: false,
            changed,
        }
    }

    /// For an upgrade: what is tracked (the inotify watches are made again).
    pub(crate) fn export(&self) -> GroupsState {
        GroupsState {
            tracking: self.tracking.clone(),
            groups: self
                .groups
                .iter()
                .map(|(pgid, group)| GroupState {
                    pgid: *pgid,
                    cgroup: group.cgroup.clone(),
                    token: group.token.clone(),
                })
                .collect(),
            spawns: self.spawns,
            dying: self.dying.iter().map(|(path, _)| path.clone()).collect(),
            killed: self.killed.iter().copied().collect(),
            discarded: self.discarded.iter().cloned().collect(),
        }
    }

    /// What the previous image tracked, watched again.
    pub(crate) fn restore(state: GroupsState, changed: mpsc::Sender<()>) -> Groups {
        let mut groups = Groups::new(state.tracking, changed);
        groups.spawns = state.spawns;
        groups.killed = state.killed.into_iter().collect();
        groups.discarded = state.discarded.into_iter().collect();
        for group in state.groups {
            let placement = Placement {
                cgroup: None,
                token: group.token,
            };
            groups.started(group.pgid, placement);
            if let Some(cgroup) = group.cgroup {
                groups.watch_cgroup(group.pgid, cgroup);
            }
        }
        for cgroup in state.dying {
            let watch = groups.add_watch(&cgroup);
            groups.dying.push((cgroup, watch));
        }
        groups.settle();
        // A look the previous image was to take again (a child of a discard
        // read empty just before the exec) is taken here.
        if !groups.discarded.is_empty() {
            groups.kill_discarded();
        }
        groups
    }

    fn add_watch(&self, cgroup: &std::path::Path) -> Option<WatchDescriptor> {
        let watcher = self.watcher.as_ref()?;
        watcher
            .inotify
            .add_watch(&cgroup.join("cgroup.events"), AddWatchFlags::IN_MODIFY)
            .inspect_err(|e| debug!("cannot watch {}: {e}", cgroup.display()))
            .ok()
    }

    fn watch_cgroup(&mut self, pgid: i32, cgroup: PathBuf) {
        let watch = self.add_watch(&cgroup);
        if let Some(group) = self.groups.get_mut(&pgid) {
            group.cgroup = Some(cgroup);
            group.watch = watch;
        }
    }

    pub(crate) fn tracking(&self) -> &Tracking {
        &self.tracking
    }

    /// Whether the loop must poll for emptied groups (nothing tells it).
    pub(crate) fn needs_polling(&self) -> bool {
        self.watcher.is_none()
    }

    /// Where the next process of `app.slot` goes.
    pub(crate) fn place(&mut self, app: &str, slot: u32) -> std::io::Result<Placement> {
        self.place_as(&format!("{app}.{slot}"))
    }

    /// Where the next process named `name` goes (its cgroup: `name-N`,
    /// below `instances/`, where the undertaker finds it).
    pub(crate) fn place_as(&mut self, name: &str) -> std::io::Result<Placement> {
        self.spawns += 1;
        match &self.tracking {
            Tracking::Cgroups(run) => {
                let path = run.instances.join(format!("{name}-{}", self.spawns));
                std::fs::create_dir(&path)?;
                let dir = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                    .open(&path)
                    .inspect_err(|_| {
                        let _ = std::fs::remove_dir(&path);
                    })?;
                Ok(Placement {
                    cgroup: Some((path, OwnedFd::from(dir))),
                    token: None,
                })
            }
            Tracking::Environment { token, .. } => Ok(Placement {
                cgroup: None,
                token: Some(format!("{token}.{}", self.spawns)),
            }),
        }
    }

    /// Give the process to be started in `placement` the hard memory
    /// ceiling `bytes` (its cgroup's `memory.max`). Where the memory
    /// controller is off, or without cgroups, there is none: the core stops
    /// an instance measured past it instead.
    pub(crate) fn limit_placement_memory(&self, placement: &Placement, bytes: Option<u64>) {
        if let (Some((path, _)), Some(_)) = (&placement.cgroup, bytes) {
            limit_memory(path, bytes);
        }
    }

    /// The ceiling of the running instance `pgid` is now `bytes` (an edit
    /// of `max_memory`).
    pub(crate) fn limit_memory(&self, pgid: i32, bytes: Option<u64>) {
        if let Some(path) = self.groups.get(&pgid).and_then(|g| g.cgroup.as_deref()) {
            limit_memory(path, bytes);
        }
    }

    /// The process placed by `placement` started: its leader is `pgid`.
    pub(crate) fn started(&mut self, pgid: i32, placement: Placement) {
        let cgroup = placement.cgroup.map(|(path, _)| path);
        let watch = cgroup.as_deref().and_then(|path| self.add_watch(path));
        self.groups.insert(
            pgid,
            Group {
                cgroup,
                watch,
                token: placement.token,
            },
        );
    }

    /// The process placed by `placement` is done with: it did not start (a
    /// spawner killed mid-request may have started it all the same), or it
    /// was an `exec` health check that ended. Kill whatever is in its cgroup
    /// or carries its token, and remove the cgroup once empty.
    pub(crate) fn discard(&mut self, placement: Placement) {
        if let Some((path, _)) = placement.cgroup {
            if cgroup::populated(&path) {
                let _ = cgroup::kill(&path);
            }
            self.dying.push((path, None));
            self.settle();
        }
        if let Some(token) = placement.token {
            self.remember_discarded(token);
            self.kill_discarded();
        }
    }

    /// Send `signal` to the instance `pgid`. With a cgroup, to the cgroup's
    /// processes alone (SIGKILL: `cgroup.kill`), wherever their process
    /// group is — a process of another instance that joined this group is
    /// not hit, and one of this instance that joined another is. Without,
    /// to its process group and the carriers of its token outside it.
    pub(crate) fn signal(&mut self, pgid: i32, signal: Signal) {
        if let Some(cgroup) = self.groups.get(&pgid).and_then(|g| g.cgroup.as_ref()) {
            let killed = signal == Signal::SIGKILL && cgroup::kill(cgroup).is_ok();
            let signalled = if killed {
                HashSet::new()
            } else {
                cgroup::signal(cgroup, signal.number())
            };
            // The leader is our child, so its pid is its own until we reap
            // it: reached even if it moved itself to another cgroup.
            if !signalled.contains(&pgid) && procfs::state(pgid).is_some_and(|s| s != 'Z') {
                // SAFETY: signalling our own child, not yet reaped.
                unsafe {
                    libc::kill(pgid, signal.number());
                }
            }
            return;
        }
        if signal == Signal::SIGKILL {
            self.killed.insert(pgid);
        }
        // Found before the group is signalled: once the leader is gone, its
        // children are orphans of ours, attributed only by their token.
        let escaped = self.escaped(pgid);
        killpg(pgid, signal.number());
        for pid in escaped {
            // SAFETY: signalling a process of one of our instances.
            unsafe {
                libc::kill(pid, signal.number());
            }
        }
    }

    /// Which of `pgids` have no process left.
    pub(crate) fn empty(&mut self, pgids: &[i32]) -> Vec<i32> {
        // One fresh look at what we adopted for this whole question.
        self.adopted_read = None;
        pgids
            .iter()
            .copied()
            .filter(|pgid| {
                let group_alive = group_alive(*pgid);
                let Some(group) = self.groups.get(pgid) else {
                    return !group_alive;
                };
                match (&group.cgroup, group.token.clone()) {
                    // Its process group may hold a stranger (a process of
                    // another instance can join it): the cgroup alone counts.
                    (Some(cgroup), _) => !cgroup::populated(cgroup),
                    (None, Some(_)) => {
                        let left = self.processes(*pgid);
                        if self.killed.contains(pgid) {
                            // Forked before its parent died: SIGKILL it too.
                            for pid in &left {
                                // SAFETY: a process of one of our instances.
                                unsafe {
                                    libc::kill(*pid, libc::SIGKILL);
                                }
                            }
                        }
                        !group_alive && left.is_empty() && !self.held_back(*pgid)
                    }
                    (None, None) => !group_alive,
                }
            })
            .collect()
    }

    /// The leader of `pgid` is gone: SIGKILL the rest of the instance; how
    /// many processes there were.
    pub(crate) fn kill_leftovers(&mut self, pgid: i32) -> usize {
        if let Some(cgroup) = self.groups.get(&pgid).and_then(|g| g.cgroup.as_ref()) {
            let left = cgroup::count_processes(cgroup);
            if left > 0 {
                self.signal(pgid, Signal::SIGKILL);
            }
            return left;
        }
        // Without cgroups, until a look finds nothing new: a process forked
        // before its parent's SIGKILL landed shows up only afterwards.
        let in_group = group_alive(pgid);
        let mut killed: HashSet<i32> = HashSet::new();
        for round in 0..LEFTOVER_ROUNDS {
            self.adopted_read = None;
            let left = self.processes(pgid);
            if left.iter().all(|pid| killed.contains(pid)) && (round > 0 || !in_group) {
                break;
            }
            killed.extend(left);
            self.signal(pgid, Signal::SIGKILL);
        }
        killed.len().max(usize::from(in_group))
    }

    /// The instance is gone for good: remove its cgroup (once empty). Its
    /// token is discarded: a child that could not be read when the instance
    /// was judged empty, and carries it, is killed once it reads.
    pub(crate) fn forget(&mut self, pgid: i32) {
        self.killed.remove(&pgid);
        self.held.remove(&pgid);
        let Some(group) = self.groups.remove(&pgid) else {
            return;
        };
        if let Some(cgroup) = group.cgroup {
            self.dying.push((cgroup, group.watch));
            self.settle();
        }
        if let Some(token) = group.token {
            // The look that judged it empty found no carrier it could read:
            // only the children it could not are looked at again (cheap,
            // with thousands of instances forgotten at once).
            self.remember_discarded(token);
            self.recheck_soon();
        }
    }

    /// Remove the cgroups of forgotten instances that have emptied.
    pub(crate) fn settle(&mut self) {
        let watcher = &self.watcher;
        self.dying.retain(|(cgroup, watch)| {
            if cgroup::populated(cgroup) {
                return true;
            }
            if let (Some(watcher), Some(watch)) = (watcher, watch) {
                let _ = watcher.inotify.rm_watch(*watch);
            }
            // With whatever cgroups a worker made below its own.
            cgroup::remove_tree(cgroup);
            false
        });
    }

    /// How many killed adopted processes are left to reap.
    pub(crate) fn to_reap(&self) -> usize {
        self.reap_wait
    }

    /// The cgroup of the group led by `pgid`, if it has one.
    pub(crate) fn cgroup_of(&self, pgid: i32) -> Option<&PathBuf> {
        self.groups.get(&pgid).and_then(|g| g.cgroup.as_ref())
    }

    /// How many groups are tracked (instances, checks and jobs running).
    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    /// The instance cgroups, for `status` (CPU time from `cpu.stat`).
    pub(crate) fn cgroups(&self) -> Vec<(i32, PathBuf)> {
        self.groups
            .iter()
            .filter_map(|(pgid, g)| g.cgroup.clone().map(|c| (*pgid, c)))
            .collect()
    }

    /// Shutdown: SIGKILL every process we were given as a subreaper that is
    /// still there (and, without cgroups, every carrier of our token).
    /// `known` are the children we started. How many were alive; how many to
    /// reap is in [`Groups::to_reap`].
    pub(crate) fn kill_adopted(&mut self, known: &HashSet<i32>) -> usize {
        // Their trees, too: every descendant of a worker that is still
        // around is below one of them.
        let victims: HashSet<i32> = tree(&super::tracking::adopted(known)).into_iter().collect();
        let mut alive = 0;
        for pid in &victims {
            // A zombie only waits to be reaped; the rest get SIGKILL.
            if procfs::state(*pid).is_some_and(|s| s != 'Z') {
                alive += 1;
            }
            // SAFETY: signalling a process that descends from our workers.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        self.reap_wait = victims.len();
        alive
    }
}

fn start_watcher(changed: mpsc::Sender<()>) -> std::io::Result<Watcher> {
    let inotify = Arc::new(Inotify::init(
        InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC,
    )?);
    // SAFETY: the Arc keeps the inotify fd open and the same for as long as
    // the AsyncFd holds it.
    let fd =
        unsafe { AsyncFd::register_with_interest(Shared(inotify.clone()), Interest::READABLE) }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable().await else {
                return;
            };
            match fd.get_ref().0.read_events() {
                Ok(_) => {
                    let _ = changed.try_send(());
                }
                Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
                Err(_) => return,
            }
        }
    });
    Ok(Watcher { inotify })
}

/// Send `signal` to process group `pgid` (ESRCH — already empty — is fine).
pub(crate) fn killpg(pgid: i32, signal: i32) {
    if pgid > 1 {
        // SAFETY: signalling a process group we created; pgid > 1 so never "all".
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Does process group `pgid` still have a member (`kill(-pgid, 0)` ≠ ESRCH)?
/// EPERM means it exists but belongs to another user.
pub(crate) fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pgid > 1
        && (unsafe { libc::kill(-pgid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}
