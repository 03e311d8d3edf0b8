//! The claim of one supervisor on one ecosystem file: lock files in the
//! runtime directory under the file's current keys, and links to the control
//! socket beside them (DESIGN.md §4).
//!
//! Two rules make it safe without a lock on the directory itself. A name is
//! unlinked only by the supervisor holding its lock, while it holds it; and a
//! starter, once it has flock'd a name, checks that the name still is the
//! file it locked — if not, an exiting owner unlinked it (or a starter
//! replaced a stale one) in between, and it tries again. So every name can go
//! as soon as it is not needed: a key the file no longer has, and all of them
//! on a clean exit.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{FileIdentity, key_of};

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{file} is already supervised by pid {pid} (lock {lock})")]
    Held {
        file: String,
        pid: String,
        lock: String,
    },
    #[error("cannot lock {0}: {1}")]
    Io(String, io::Error),
}

/// How often one name is tried while others change it under us. A retry
/// means someone else made progress (an exiting supervisor unlinked its lock,
/// a starter removed a stale one), so a few are plenty; past them the name is
/// given up with an error rather than spun on.
const NAME_ATTEMPTS: usize = 16;

/// Why a name could not be had.
#[derive(Debug)]
enum NameError {
    /// A live supervisor holds it: its pid, as its lock file says.
    Held(String),
    Io(io::Error),
}

impl From<io::Error> for NameError {
    fn from(error: io::Error) -> NameError {
        NameError::Io(error)
    }
}

fn replaced_too_often() -> NameError {
    NameError::Io(io::Error::other(format!(
        "it was replaced under us {NAME_ATTEMPTS} times in a row"
    )))
}

/// Open the lock file at `path` (never through a symlink).
fn open_lock(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// Try to flock `file` exclusively: `false` when someone else holds it.
/// (`scale` takes its edit lock with it too.)
pub fn try_lock(file: &File) -> io::Result<bool> {
    loop {
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

/// Whether the name `path` (not followed) is the file `file` is open on: a
/// lock file that was unlinked, or replaced, after it was opened is not.
fn names(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

/// The pid a lock file holds.
fn pid_in(file: &mut File) -> String {
    let mut pid = String::new();
    let _ = file.rewind().and_then(|()| file.read_to_string(&mut pid));
    pid.trim().to_string()
}

fn write_pid(file: &mut File) -> io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{}", std::process::id())
}

/// Lock the name `path`, creating the file when there is none — the
/// standard pattern against an owner that unlinks its lock file as it exits:
/// open, flock, then check that the name still is the file locked. If it is
/// not, the owner unlinked it (or a starter replaced a stale one) in between:
/// holding that lock would hold nothing, so the name is tried again.
fn lock_name(path: &Path) -> Result<File, NameError> {
    for _ in 0..NAME_ATTEMPTS {
        let mut file = open_lock(path, true)?;
        let locked = try_lock(&file)?;
        if !names(&file, path) {
            continue;
        }
        if !locked {
            return Err(NameError::Held(pid_in(&mut file)));
        }
        return Ok(file);
    }
    Err(replaced_too_often())
}

/// Give the name `to` to our lock file `ours` (which `from` names): a hard
/// link, made only where no live supervisor holds the name. A lock file
/// already there whose owner is gone (it was SIGKILLed) is locked first and
/// removed while locked, so that a starter that opened it at the same moment
/// finds its name gone and tries again.
fn link_name(ours: &File, from: &Path, to: &Path) -> Result<(), NameError> {
    for _ in 0..NAME_ATTEMPTS {
        match std::fs::hard_link(from, to) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error.into()),
        }
        if names(ours, to) {
            return Ok(());
        }
        let mut other = match open_lock(to, false) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error.into()),
        };
        let locked = try_lock(&other)?;
        if !names(&other, to) {
            continue;
        }
        if !locked {
            return Err(NameError::Held(pid_in(&mut other)));
        }
        match std::fs::remove_file(to) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error.into()),
        }
    }
    Err(replaced_too_often())
}

/// The claim of one supervisor on one file: a flock'd lock file (which holds
/// our pid), named `<key>.lock` for each key of the file's *current* identity
/// — hard links, all of them — and `<key>.sock`, a symlink to the control
/// socket, beside each.
///
/// A name is only ever unlinked by the supervisor that holds its lock, while
/// it holds it; a starter checks after locking that the name still is the
/// file it locked (see [`lock_name`]). So a key given up — the file was
/// moved away, or the supervisor exits — is free at once for another
/// supervisor, and never held by two. On a clean exit every name goes, so
/// the runtime directory does not grow; after a SIGKILL the lock file stays,
/// unlocked, and the next supervisor of the file takes it over.
#[derive(Debug)]
pub struct Claim {
    dir: PathBuf,
    /// The flock'd lock file; every name in `keys` is a hard link to it.
    lock: File,
    /// Lock files whose every name we gave up and then replaced by a new one
    /// (only when all of the file's keys were another's at once): kept open,
    /// so that the inode the socket is named after is not reused while we run.
    retired: Vec<File>,
    /// Where the control socket is (every key's `.sock` links there).
    socket: PathBuf,
    /// The keys held: `<key>.lock` is our lock file, `<key>.sock` links to
    /// the socket.
    keys: BTreeSet<String>,
}

impl Claim {
    /// Claim the file `shown` (whose identity is `identity`) in `dir`, with
    /// the control socket at `socket` (default: in `dir`, named after the
    /// lock file). Refused when another supervisor holds any of its keys;
    /// a refusal leaves no file behind.
    pub fn acquire(
        dir: &Path,
        identity: &FileIdentity,
        shown: &str,
        socket: Option<&Path>,
    ) -> Result<Claim, LockError> {
        let Some((first, others)) = identity.keys.split_first() else {
            return Err(LockError::Io(
                shown.to_string(),
                io::Error::other("the file has no identity"),
            ));
        };
        let error = |key: &str, error: NameError| {
            let lock = dir.join(format!("{key}.lock")).display().to_string();
            match error {
                NameError::Held(pid) => LockError::Held {
                    file: shown.to_string(),
                    pid,
                    lock,
                },
                NameError::Io(error) => LockError::Io(lock, error),
            }
        };
        let lock = lock_name(&dir.join(format!("{first}.lock"))).map_err(|e| error(first, e))?;
        let socket = match socket {
            Some(socket) => socket.to_path_buf(),
            None => {
                let metadata = lock
                    .metadata()
                    .map_err(|e| error(first, NameError::Io(e)))?;
                let name = key_of(&format!("socket {} {}", metadata.dev(), metadata.ino()));
                dir.join(format!("{name}.sock"))
            }
        };
        // From here on, dropping the claim gives back every name taken.
        let mut claim = Claim {
            dir: dir.to_path_buf(),
            lock,
            retired: Vec::new(),
            socket,
            keys: BTreeSet::from([first.clone()]),
        };
        write_pid(&mut claim.lock).map_err(|e| error(first, NameError::Io(e)))?;
        for key in others {
            claim.take(key).map_err(|e| error(key, e))?;
        }
        for key in claim.keys.clone() {
            claim.link_socket(&key);
        }
        Ok(claim)
    }

    /// Where the control socket goes.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The keys held now.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(String::as_str)
    }

    /// The file is now `identity` (edited, swapped, moved away and copied
    /// back): hold exactly its keys. The new ones are taken first (so the
    /// lock file always has a name to link from), then the stale ones are
    /// given back — a key the file no longer has (its old inode, now another
    /// file's or free for reuse) must not keep a second supervisor of that
    /// other file out, nor lead its clients here. A key another live
    /// supervisor holds is left to it, with a warning.
    pub fn follow(&mut self, identity: &FileIdentity) {
        let wanted: BTreeSet<String> = identity.keys.iter().cloned().collect();
        for key in wanted.difference(&self.keys.clone()) {
            match self.take(key) {
                Ok(()) => self.link_socket(key),
                Err(NameError::Held(pid)) => tracing::warn!(
                    "another supervisor (pid {pid}) holds {}; `status` through that name reaches it, not us",
                    self.lock_path(key).display()
                ),
                Err(NameError::Io(error)) => tracing::warn!(
                    "cannot lock {}: {error}; `status` through that name will not reach us",
                    self.lock_path(key).display()
                ),
            }
        }
        for key in self.keys.difference(&wanted).cloned().collect::<Vec<_>>() {
            tracing::debug!("the file is no longer {key}: giving its lock back");
            self.release(&key);
        }
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.lock"))
    }

    fn alias_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.sock"))
    }

    /// Hold `key` too: link our lock file there — or, when we hold no name
    /// any more, lock a new one there.
    fn take(&mut self, key: &str) -> Result<(), NameError> {
        let to = self.lock_path(key);
        match self.keys.first() {
            Some(held) => link_name(&self.lock, &self.lock_path(held), &to)?,
            None => {
                let mut lock = lock_name(&to)?;
                if let Err(error) = write_pid(&mut lock) {
                    // Ours, locked: unlink it before it unlocks.
                    let _ = std::fs::remove_file(&to);
                    return Err(error.into());
                }
                self.retired.push(std::mem::replace(&mut self.lock, lock));
            }
        }
        self.keys.insert(key.to_string());
        Ok(())
    }

    /// Point `<key>.sock` at the socket (whatever a dead supervisor left
    /// there is replaced: we hold the key).
    fn link_socket(&self, key: &str) {
        let alias = self.alias_path(key);
        if alias == self.socket || std::fs::read_link(&alias).is_ok_and(|to| to == self.socket) {
            return;
        }
        let _ = std::fs::remove_file(&alias);
        if let Err(error) = std::os::unix::fs::symlink(&self.socket, &alias) {
            tracing::debug!("cannot link {}: {error}", alias.display());
        }
    }

    /// Give `key` back: its socket link first (no client is led here by it),
    /// then its lock name — ours to unlink, since we hold the lock.
    fn release(&mut self, key: &str) {
        let alias = self.alias_path(key);
        if alias != self.socket && std::fs::read_link(&alias).is_ok_and(|to| to == self.socket) {
            let _ = std::fs::remove_file(&alias);
        }
        let lock = self.lock_path(key);
        if names(&self.lock, &lock) {
            let _ = std::fs::remove_file(&lock);
        }
        self.keys.remove(key);
    }
}

/// A claim as an upgrade hands it over: the lock files stay open (and so
/// locked: a `flock` belongs to the open file) across the exec.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ClaimState {
    pub(crate) dir: PathBuf,
    pub lock: std::os::fd::RawFd,
    pub retired: Vec<std::os::fd::RawFd>,
    pub(crate) socket: PathBuf,
    pub(crate) keys: BTreeSet<String>,
}

impl Claim {
    pub fn export(&self) -> ClaimState {
        ClaimState {
            dir: self.dir.clone(),
            lock: self.lock.as_raw_fd(),
            retired: self.retired.iter().map(AsRawFd::as_raw_fd).collect(),
            socket: self.socket.clone(),
            keys: self.keys.clone(),
        }
    }

    /// The claim the previous image held (the same process: the pid in the
    /// lock file is still right).
    pub fn restore(state: ClaimState) -> io::Result<Claim> {
        use crate::upgrade::exec::adopt_fd;
        let lock = File::from(adopt_fd(state.lock, "the lock file")?);
        let retired = state
            .retired
            .into_iter()
            .map(|fd| adopt_fd(fd, "a retired lock file").map(File::from))
            .collect::<io::Result<_>>()?;
        Ok(Claim {
            dir: state.dir,
            lock,
            retired,
            socket: state.socket,
            keys: state.keys,
        })
    }
}

impl Drop for Claim {
    /// Every name goes while the lock is still held (it is released when the
    /// file closes, after this): a starter that opened one of them a moment
    /// ago sees, once it has the lock, that the name is gone, and starts over.
    fn drop(&mut self) {
        for key in self.keys.clone() {
            self.release(&key);
        }
    }
}

#[cfg(test)]
mod tests;
