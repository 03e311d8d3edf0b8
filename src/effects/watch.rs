//! Watching the ecosystem file, however it is saved.
//!
//! Editors and tools save in many ways: write in place, truncate and write,
//! write a temp file and rename it over (vim, `sed -i`, most IDEs), `cp` over,
//! delete and recreate, or — Kubernetes ConfigMaps — swap a symlink
//! (`..data → ..2026_11_30…`). Watching the file itself misses most of these, so
//! we watch the *directory* of every hop of its symlink chain (re-resolved after
//! each change) and treat any event there as "maybe changed": debounce, read,
//! and compare a content hash. Only a real change is reported, once per burst.
//! A stat poll every [`POLL_INTERVAL`] is the backstop for filesystems without
//! inotify.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Quiet time that ends a burst of events.
pub const DEBOUNCE_QUIET: Duration = Duration::from_millis(30);
/// A burst never delays the read by more than this.
pub const DEBOUNCE_MAX: Duration = Duration::from_millis(100);
/// The stat poll for filesystems without inotify.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Symlink hops followed before giving up (as the kernel's ELOOP).
const MAX_HOPS: usize = 40;

/// The content hash of a file.
pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The watching half, created (and watching) before the file's first read.
pub struct FileWatcher {
    path: PathBuf,
    watcher: Option<RecommendedWatcher>,
    watched: BTreeSet<PathBuf>,
    /// One pending "something happened" is enough: capacity 1, coalescing.
    events: mpsc::Receiver<()>,
}

impl FileWatcher {
    /// Start watching the directories of `path`'s symlink chain. Without
    /// inotify (or out of watches) it still works, through the poll.
    pub fn new(path: &Path) -> FileWatcher {
        let (notify, events) = mpsc::channel(1);
        let watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
            // Opening and reading a file is an event too — including our own
            // read of the ecosystem file, which would otherwise trigger the
            // next read, for ever. Only changes count.
            if let Ok(event) = result
                && !matches!(event.kind, notify::EventKind::Access(_))
            {
                let _ = notify.try_send(());
            }
        });
        let watcher = match watcher {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                warn!(
                    "cannot watch files ({error}); checking the file every {}s instead",
                    POLL_INTERVAL.as_secs()
                );
                None
            }
        };
        let mut file_watcher = FileWatcher {
            path: path.to_path_buf(),
            watcher,
            watched: BTreeSet::new(),
            events,
        };
        file_watcher.rewatch();
        file_watcher
    }

    /// Watch exactly the directories of the current symlink chain.
    fn rewatch(&mut self) {
        let wanted: BTreeSet<PathBuf> = watch_dirs(&self.path);
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        for gone in self.watched.difference(&wanted) {
            let _ = watcher.unwatch(gone);
        }
        for dir in wanted.difference(&self.watched) {
            if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                debug!("cannot watch {}: {error}", dir.display());
            }
        }
        self.watched = wanted;
    }

    /// Run until `changes` closes: send the file's bytes whenever its content
    /// differs from the last content seen (starting from `initial`).
    pub async fn run(mut self, initial: [u8; 32], changes: mpsc::Sender<Vec<u8>>) {
        let mut last_hash = initial;
        let mut last_stat = stat_chain(&self.path);
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = self.events.recv() => {
                    if event.is_none() {
                        return;
                    }
                }
                _ = poll.tick() => {
                    let stat = stat_chain(&self.path);
                    if stat == last_stat {
                        continue;
                    }
                }
            }
            self.debounce().await;
            self.rewatch();
            last_stat = stat_chain(&self.path);
            // Missing (deleted, to be recreated): the recreation is another event.
            let Ok(bytes) = std::fs::read(&self.path) else {
                continue;
            };
            let hash = content_hash(&bytes);
            if hash == last_hash {
                continue;
            }
            last_hash = hash;
            if changes.send(bytes).await.is_err() {
                return;
            }
        }
    }

    /// Wait until events stop for [`DEBOUNCE_QUIET`], at most [`DEBOUNCE_MAX`].
    async fn debounce(&mut self) {
        let deadline = Instant::now() + DEBOUNCE_MAX;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match tokio::time::timeout(left.min(DEBOUNCE_QUIET), self.events.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// The directory of every hop from `path` to the real file: the path itself,
/// each symlink target in turn, and the fully resolved file (which covers
/// symlinked directories on the way, like Kubernetes' `..data`).
pub fn watch_dirs(path: &Path) -> BTreeSet<PathBuf> {
    let mut dirs = BTreeSet::new();
    let mut current = path.to_path_buf();
    for _ in 0..MAX_HOPS {
        if let Some(parent) = current.parent() {
            dirs.insert(parent.to_path_buf());
        }
        match std::fs::read_link(&current) {
            Ok(target) => {
                current = match current.parent() {
                    Some(parent) => parent.join(target),
                    None => target,
                };
            }
            Err(_) => break,
        }
    }
    if let Some(parent) = std::fs::canonicalize(path)
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        dirs.insert(parent.to_path_buf());
    }
    dirs
}

/// What the poll compares: identity, size and times of the resolved file, and
/// where each link points.
fn stat_chain(path: &Path) -> Vec<(u64, u64, i64, i64, u64)> {
    let mut stats = Vec::new();
    let mut current = path.to_path_buf();
    for _ in 0..MAX_HOPS {
        match std::fs::symlink_metadata(&current) {
            Ok(m) => stats.push((
                m.dev(),
                m.ino(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000,
                m.ctime(),
                m.size(),
            )),
            Err(_) => break,
        }
        match std::fs::read_link(&current) {
            Ok(target) => current = current.parent().map_or(target.clone(), |p| p.join(&target)),
            Err(_) => break,
        }
    }
    if let Ok(m) = std::fs::metadata(path) {
        stats.push((
            m.dev(),
            m.ino(),
            m.mtime_nsec() + m.mtime() * 1_000_000_000,
            m.ctime(),
            m.size(),
        ));
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_dirs_follow_every_hop() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        // Kubernetes' layout: file → ..data/file, ..data → ..v1
        std::fs::create_dir(root.join("..v1")).unwrap();
        std::fs::write(root.join("..v1/ecosystem.yaml"), "apps: {}\n").unwrap();
        std::os::unix::fs::symlink("..v1", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/ecosystem.yaml", root.join("ecosystem.yaml")).unwrap();
        let dirs = watch_dirs(&root.join("ecosystem.yaml"));
        assert!(dirs.contains(&root), "{dirs:?}");
        assert!(dirs.contains(&root.join("..v1")), "{dirs:?}");
    }

    #[test]
    fn a_plain_file_is_watched_through_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "apps: {}\n").unwrap();
        let dirs = watch_dirs(&file);
        assert!(dirs.contains(dir.path()));
    }
}
