//! Without cgroups: the children we adopted as a subreaper and the tokens
//! they carry (read once per [`ADOPTED_SCAN_TTL`]); the tokens of discarded
//! processes and forgotten instances, looked for again; the children that
//! could not be read yet (within an `execve`: [`RunToken::Changing`]), looked
//! at again every [`CHANGING_RECHECK`] and holding back the verdict that a
//! token group is empty, for at most [`CHANGING_WAIT`] (and after it, every
//! [`LATE_RECHECK`] until they read). With cgroups none
//! of this runs: a cgroup tells who belongs to an instance.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::{
    ADOPTED_SCAN_TTL, CHANGING_RECHECK, CHANGING_WAIT, DISCARDED_TOKENS, Groups, LATE_RECHECK,
    MAX_TREE, RunToken, Tracking, procfs,
};

impl Groups {
    /// The tokens of the last discards are looked for again at each one
    /// after, and at each [`Groups::recheck`] (a child that escaped its own
    /// looks).
    pub(super) fn remember_discarded(&mut self, token: String) {
        if self.discarded.len() == DISCARDED_TOKENS {
            self.discarded.pop_front();
        }
        self.discarded.push_back(token);
    }

    /// SIGKILL every adopted child that carries a discarded token, with its
    /// tree. While a child cannot be read yet, the loop is woken to look at
    /// it again ([`Groups::recheck`]).
    pub(super) fn kill_discarded(&mut self) {
        self.read_adopted();
        let discarded: HashSet<&String> = self.discarded.iter().collect();
        let roots: Vec<i32> = self
            .adopted
            .iter()
            .filter(|(token, _)| discarded.contains(token))
            .flat_map(|(_, pids)| pids.iter().copied())
            .collect();
        kill_trees(&roots);
        self.recheck_soon();
    }

    /// Ask the loop to wake if a child is not read yet (once: the flag
    /// stays up until [`Groups::recheck`]): in [`CHANGING_RECHECK`] while a
    /// verdict waits on it, else in [`LATE_RECHECK`] — a child that execs on
    /// and on past [`CHANGING_WAIT`] may carry the token of an instance
    /// judged empty meanwhile, and is killed once it reads.
    pub(super) fn recheck_soon(&mut self) {
        if self.changing.is_empty() || self.recheck {
            return;
        }
        self.recheck = true;
        let after = if self.undecided() {
            CHANGING_RECHECK
        } else {
            LATE_RECHECK
        };
        let changed = self.changed.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = changed.try_send(());
        });
    }

    /// The loop was woken: the children not read yet at the last look are
    /// read again, and those that carry a discarded token killed.
    pub(crate) fn recheck(&mut self) {
        if !std::mem::take(&mut self.recheck) {
            return;
        }
        let mut found = Vec::new();
        let pids: Vec<i32> = self.changing.keys().copied().collect();
        for pid in pids {
            match crate::tracking::run_token(pid, &mut self.buffer) {
                RunToken::Changing => continue,
                RunToken::Token(token) if self.discarded.contains(&token) => found.push(pid),
                RunToken::Token(_) | RunToken::Nothing => {}
            }
            self.changing.remove(&pid);
            // What it carries is known now: the next question reads afresh.
            self.adopted_read = None;
        }
        kill_trees(&found);
        self.recheck_soon();
    }

    /// Whether an adopted child could not be read at the last look, for less
    /// than [`CHANGING_WAIT`] (what it carries is not known yet). Not known,
    /// it may be any instance's: it holds back every token group.
    pub(super) fn undecided(&self) -> bool {
        self.changing
            .values()
            .any(|since| since.elapsed() < CHANGING_WAIT)
    }

    /// A process was reaped: what we adopted may have changed.
    pub(crate) fn reaped(&mut self) {
        self.adopted_read = None;
    }

    /// The children we adopted that carry `token` (read once per
    /// [`ADOPTED_SCAN_TTL`]; none with cgroups).
    pub(super) fn adopted_with(&mut self, token: &str) -> Vec<i32> {
        let fresh = self
            .adopted_read
            .is_some_and(|at| at.elapsed() < ADOPTED_SCAN_TTL);
        if !fresh {
            self.read_adopted();
        }
        self.adopted.get(token).cloned().unwrap_or_default()
    }

    /// Read the children we adopted and what they carry, now (without
    /// cgroups). The reading is dated when it ends: a long one still
    /// answers for [`ADOPTED_SCAN_TTL`].
    pub(super) fn read_adopted(&mut self) {
        if let Tracking::Environment { .. } = &self.tracking {
            let leaders: HashSet<i32> = self.groups.keys().copied().collect();
            let mut adopted: HashMap<String, Vec<i32>> = HashMap::new();
            let mut changing = HashMap::new();
            let now = Instant::now();
            for pid in crate::tracking::adopted(&leaders) {
                match crate::tracking::run_token(pid, &mut self.buffer) {
                    RunToken::Token(token) => adopted.entry(token).or_default().push(pid),
                    RunToken::Changing => {
                        let since = self.changing.get(&pid).copied().unwrap_or(now);
                        changing.insert(pid, since);
                    }
                    RunToken::Nothing => {}
                }
            }
            self.adopted = adopted;
            self.changing = changing;
            self.adopted_read = Some(Instant::now());
        }
    }

    /// Every live process of instance `pgid` without cgroups: its leader's
    /// tree (while the leader lives) and the trees of our adopted children
    /// that carry its token.
    pub(super) fn processes(&mut self, pgid: i32) -> Vec<i32> {
        let Some(token) = self.groups.get(&pgid).and_then(|g| g.token.clone()) else {
            return Vec::new();
        };
        let mut roots = self.adopted_with(&token);
        if procfs::alive(pgid) {
            roots.push(pgid);
        }
        tree(&roots)
            .into_iter()
            .filter(|pid| procfs::alive(*pid))
            .collect()
    }

    /// The instance's processes outside its process group (without cgroups).
    pub(super) fn escaped(&mut self, pgid: i32) -> Vec<i32> {
        self.processes(pgid)
            .into_iter()
            .filter(|pid| procfs::pgrp(*pid) != Some(pgid))
            .collect()
    }

    /// Group `pgid` has nothing left that can be seen: whether a child not
    /// read yet may still be one of its own (for at most [`CHANGING_WAIT`]
    /// from the first time it looked empty).
    pub(super) fn held_back(&mut self, pgid: i32) -> bool {
        if !self.undecided() {
            return false;
        }
        let since = *self.held.entry(pgid).or_insert_with(Instant::now);
        since.elapsed() < CHANGING_WAIT
    }
}

/// SIGKILL `roots` and all their descendants.
fn kill_trees(roots: &[i32]) {
    for pid in tree(roots) {
        // SAFETY: a process of a spawn of ours (our child carrying its
        // token, or one of its descendants).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// `roots` and all their descendants (from `/proc/PID/task/*/children`),
/// at most [`MAX_TREE`].
pub(super) fn tree(roots: &[i32]) -> Vec<i32> {
    let mut found: Vec<i32> = Vec::new();
    let mut seen: HashSet<i32> = HashSet::new();
    let mut next: Vec<i32> = roots.to_vec();
    while let Some(pid) = next.pop() {
        if found.len() >= MAX_TREE {
            break;
        }
        if seen.insert(pid) {
            found.push(pid);
            next.extend(procfs::children(pid));
        }
    }
    found
}
