//! Watching and reading the ecosystem file, however it is saved — on a
//! thread of its own, so that nothing about the file (a slow disk, a FIFO
//! put in its place, a slow user lookup while checking it) can stall the
//! loop that reaps children. What the watcher finds is [`FileNews`], handed
//! to the caller's `deliver` on that thread: what checking the bytes means
//! is the caller's (the supervise crate checks them there, off the loop).
//!
//! Editors and tools save in many ways: write in place, truncate and write,
//! write a temp file and rename it over (vim, `sed -i`, most IDEs), `cp` over,
//! delete and recreate, or — Kubernetes ConfigMaps, release directories —
//! swap a symlink (`..data → ..2026_11_30…`, `current → releases/2`). Watching
//! the file itself misses most of these, so we watch the *directory* of every
//! symlink met on the way to the file, and the file's own directory
//! (re-resolved after each change), and treat any event there as "maybe
//! changed": debounce, read, and compare a content hash. Only a real change is
//! reported, once per burst; SIGHUP re-reads even an unchanged
//! file (its `env_file`s may have changed). A file replaced by the same
//! content (`mv f f.bak; cp f.bak f`) is reported too, as
//! [`FileNews::Replaced`]: what the file *is* changed, and the supervisor's
//! claim in the runtime directory must follow it. A stat poll every
//! [`POLL_INTERVAL`] is the backstop for filesystems without inotify.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::runtime::{self, FileIdentity};

/// Quiet time that ends a burst of events.
pub(crate) const DEBOUNCE_QUIET: Duration = Duration::from_millis(30);
/// A burst never delays the read by more than this.
pub const DEBOUNCE_MAX: Duration = Duration::from_millis(100);
/// The stat poll for filesystems without inotify.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Symlink hops followed before giving up (as the kernel's ELOOP).
const MAX_HOPS: usize = 40;
/// Wake-ups waiting for the loader; one pending is enough (they coalesce).
const WAKE_QUEUE: usize = 1;

/// The content hash of a file.
pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// What the watcher found, for the caller's `deliver`.
#[derive(Debug)]
pub enum FileNews {
    /// New content (or a reread asked for): `bytes` of the file at `source`
    /// (its absolute path), with their content hash.
    Read {
        /// Why it was read: "the file changed", "SIGHUP".
        trigger: &'static str,
        source: PathBuf,
        bytes: Vec<u8>,
        hash: [u8; 32],
        /// What the file is now (for the supervisor's claim on the runtime
        /// directory).
        identity: Option<FileIdentity>,
    },
    /// It could not be read (permission denied, a FIFO, gone).
    Unreadable {
        trigger: &'static str,
        message: String,
        /// What the file is now; for a file that is not there, only its place.
        identity: Option<FileIdentity>,
    },
    /// The same content as the last version seen, in what is now another
    /// file (moved away and copied back, linked): only `identity` is news.
    Replaced { identity: FileIdentity },
}

/// The watching half, created (and watching) before the file's first read.
pub struct FileWatcher {
    path: PathBuf,
    watcher: Option<RecommendedWatcher>,
    watched: BTreeSet<PathBuf>,
    wake: SyncSender<()>,
    woken: Receiver<()>,
}

/// Asks a running loader to read the file again.
#[derive(Clone)]
pub struct Rereader {
    requested: Arc<AtomicBool>,
    wake: SyncSender<()>,
}

impl Rereader {
    /// Read and check the file even if unchanged (SIGHUP). Never blocks.
    pub fn reread(&self) {
        self.requested.store(true, Ordering::SeqCst);
        let _ = self.wake.try_send(());
    }

    /// Read the file, and apply it if it changed (after an upgrade: an
    /// edit made during the exec). Never blocks.
    pub fn look(&self) {
        let _ = self.wake.try_send(());
    }
}

impl FileWatcher {
    /// Start watching the directories of `path`'s symlink chain. Without
    /// inotify (or out of watches) it still works, through the poll.
    pub fn new(path: &Path) -> FileWatcher {
        let (wake, woken) = sync_channel(WAKE_QUEUE);
        let notify = wake.clone();
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
            wake,
            woken,
        };
        file_watcher.rewatch();
        file_watcher
    }

    /// The file watched, as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Watch exactly the directories of the current symlink chain. A
    /// directory that disappeared (a swapped-out release) is simply dropped:
    /// its watch went with it.
    fn rewatch(&mut self) {
        let wanted: BTreeSet<PathBuf> = watch_dirs(&self.path);
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        for gone in self.watched.difference(&wanted) {
            if gone.is_dir() {
                let _ = watcher.unwatch(gone);
            }
        }
        for dir in wanted.difference(&self.watched) {
            if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                debug!("cannot watch {}: {error}", dir.display());
            }
        }
        self.watched = wanted;
    }

    /// Run the loader thread: read the file whenever its content differs
    /// from the last seen (starting from `initial`) or a reread is asked
    /// for, and hand the news to `deliver` (on that thread) until it says
    /// `false`; say when only what the file is changed (starting from
    /// `identity`).
    pub fn spawn(
        self,
        initial: [u8; 32],
        identity: Option<FileIdentity>,
        deliver: impl FnMut(FileNews) -> bool + Send + 'static,
    ) -> std::io::Result<Rereader> {
        let rereader = Rereader {
            requested: Arc::new(AtomicBool::new(false)),
            wake: self.wake.clone(),
        };
        let requested = rereader.requested.clone();
        std::thread::Builder::new()
            .name("supervise-config".into())
            .spawn(move || self.run(initial, identity, &requested, deliver))?;
        Ok(rereader)
    }

    fn run(
        mut self,
        initial: [u8; 32],
        identity: Option<FileIdentity>,
        requested: &AtomicBool,
        mut deliver: impl FnMut(FileNews) -> bool,
    ) {
        let mut last_hash = initial;
        let mut last_identity = identity;
        let mut last_stat = stat_chain(&self.path);
        let mut last_problem: Option<String> = None;
        loop {
            match self.woken.recv_timeout(POLL_INTERVAL) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if stat_chain(&self.path) == last_stat {
                        continue;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.debounce();
            self.rewatch();
            last_stat = stat_chain(&self.path);
            let reread = requested.swap(false, Ordering::SeqCst);
            let trigger = if reread { "SIGHUP" } else { "the file changed" };
            let (source, bytes) = match config::read_file(&self.path) {
                Ok(read) => read,
                Err(unreadable) => {
                    let message = unreadable.to_string();
                    if last_problem.as_deref() == Some(&message) && !reread {
                        continue;
                    }
                    last_problem = Some(message.clone());
                    // Gone: only its place is left to it (its inode is
                    // another file's now, or free for reuse).
                    let identity = runtime::identify(&self.path)
                        .ok()
                        .or_else(|| runtime::identify_absent(&self.path));
                    if identity.is_some() {
                        last_identity.clone_from(&identity);
                    }
                    if !deliver(FileNews::Unreadable {
                        trigger,
                        message,
                        identity,
                    }) {
                        return;
                    }
                    continue;
                }
            };
            let hash = content_hash(&bytes);
            let identity = runtime::identify(&self.path).ok();
            if hash == last_hash && !reread && last_problem.is_none() {
                if let Some(replaced) = identity.filter(|now| Some(now) != last_identity.as_ref()) {
                    last_identity = Some(replaced.clone());
                    if !deliver(FileNews::Replaced { identity: replaced }) {
                        return;
                    }
                }
                continue;
            }
            last_hash = hash;
            last_problem = None;
            if identity.is_some() {
                last_identity.clone_from(&identity);
            }
            let news = FileNews::Read {
                trigger,
                source,
                bytes,
                hash,
                identity,
            };
            if !deliver(news) {
                return;
            }
        }
    }

    /// Wait until events stop for [`DEBOUNCE_QUIET`], at most [`DEBOUNCE_MAX`].
    fn debounce(&self) {
        let deadline = Instant::now() + DEBOUNCE_MAX;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.woken.recv_timeout(left.min(DEBOUNCE_QUIET)) {
                Ok(()) => continue,
                Err(_) => return,
            }
        }
    }
}

/// The directories to watch for `path`: the one holding each symlink met on
/// the way to the file (a swap of that link is a rename there), and the
/// file's own, resolved, directory.
pub(crate) fn watch_dirs(path: &Path) -> BTreeSet<PathBuf> {
    let mut dirs = BTreeSet::new();
    let mut hops = 0;
    let resolved = resolve(path, &mut dirs, &mut hops);
    if let Some(parent) = resolved.parent() {
        dirs.insert(parent.to_path_buf());
    }
    dirs
}

/// Resolve `path` component by component like the kernel does, recording
/// the directory of every symlink met; gives up (returning what it has) after
/// [`MAX_HOPS`] links.
fn resolve(path: &Path, dirs: &mut BTreeSet<PathBuf>, hops: &mut usize) -> PathBuf {
    let mut current = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                let next = current.join(name);
                match std::fs::read_link(&next) {
                    Ok(target) if *hops < MAX_HOPS => {
                        *hops += 1;
                        dirs.insert(current.clone());
                        let target = current.join(target);
                        current = resolve(&target, dirs, hops);
                    }
                    _ => current = next,
                }
            }
        }
    }
    current
}

/// What the poll compares: identity, size and times of every hop and of the
/// resolved file.
fn stat_chain(path: &Path) -> Vec<(u64, u64, i64, i64, u64)> {
    let mut dirs = BTreeSet::new();
    let mut hops = 0;
    resolve(path, &mut dirs, &mut hops);
    dirs.iter()
        .map(PathBuf::as_path)
        .chain(std::iter::once(path))
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| {
            (
                m.dev(),
                m.ino(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000,
                m.ctime(),
                m.size(),
            )
        })
        .collect()
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
    fn a_symlinked_directory_on_the_way_is_watched_where_it_can_be_swapped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("releases/1")).unwrap();
        std::fs::write(root.join("releases/1/ecosystem.yaml"), "apps: {}\n").unwrap();
        std::os::unix::fs::symlink("releases/1", root.join("current")).unwrap();
        let dirs = watch_dirs(&root.join("current/ecosystem.yaml"));
        assert!(dirs.contains(&root), "the link's directory: {dirs:?}");
        assert!(dirs.contains(&root.join("releases/1")), "{dirs:?}");
        assert!(!dirs.contains(&root.join("current")), "{dirs:?}");
    }

    #[test]
    fn a_plain_file_is_watched_through_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "apps: {}\n").unwrap();
        let dirs = watch_dirs(&file);
        assert!(dirs.contains(&dir.path().canonicalize().unwrap()));
    }

    #[test]
    fn a_symlink_loop_ends() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("b", root.join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.join("b")).unwrap();
        let dirs = watch_dirs(&root.join("a/ecosystem.yaml"));
        assert!(dirs.contains(&root));
    }
}
