//! The runtime directory and the one-supervisor-per-file lock (DESIGN.md §4).
//!
//! The directory is `$XDG_RUNTIME_DIR/supervise`, else `/run/supervise` for root,
//! else `/tmp/supervise-$UID`; created 0700 and checked with lstat (ours, not a
//! symlink, not readable by others) — a directory in /tmp could be planted by
//! anyone. Names are derived from what the ecosystem file *is* — its inode,
//! and its place in its directory — not from how its path is spelled, so the
//! same file always maps to the same lock and socket ([`FileIdentity`]).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the runtime directory is, for this user.
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("supervise");
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        PathBuf::from("/run/supervise")
    } else {
        PathBuf::from(format!("/tmp/supervise-{uid}"))
    }
}

/// Create (0700) or check the runtime directory.
pub fn ensure_runtime_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", dir.display()),
            ));
        }
    }
    let metadata = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let refuse = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing to use {}: {why}", dir.display()),
        ))
    };
    if !metadata.file_type().is_dir() {
        return refuse("it is not a directory (a symlink?)");
    }
    if metadata.uid() != uid {
        return refuse(&format!("it is owned by uid {}, not {uid}", metadata.uid()));
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        return refuse(&format!(
            "its mode is {:o}; it must be 0700",
            metadata.permissions().mode() & 0o777
        ));
    }
    Ok(())
}

/// `<first 16 hex of sha256(text)>`: a name in the runtime directory (short
/// enough for sun_path's 108 bytes).
fn key_of(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// What an ecosystem file *is*, whatever path names it: the keys of its
/// runtime names.
///
/// Two keys, because editors save by renaming a new file over the old one:
/// - the file's device and inode: the same file through a symlink, a hard
///   link or a bind mount has the same one;
/// - its place: the device and inode of the directory that really holds it,
///   and its name there — which survives an editor's save (a new inode).
///
/// A supervisor holds its lock under both and keeps aliases for its file's
/// current keys as they change (a ConfigMap or release-directory swap), so a
/// second supervisor for the same file is refused and a client finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    pub keys: Vec<String>,
}

/// The identity of the file `path` names (following every symlink).
pub fn identify(path: &Path) -> io::Result<FileIdentity> {
    let file = std::fs::metadata(path)?;
    let real = std::fs::canonicalize(path)?;
    let name = real
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let folder = std::fs::metadata(real.parent().unwrap_or(Path::new("/")))?;
    Ok(FileIdentity {
        keys: vec![
            key_of(&format!("inode {} {}", file.dev(), file.ino())),
            key_of(&format!("place {} {} {name}", folder.dev(), folder.ino())),
        ],
    })
}

/// The control socket of the supervisor of `identity`, if one is there: the
/// first key with a socket, resolved to the socket itself (an alias goes away
/// when the file is edited, while a client may still be talking), else the
/// first key's path (for the message).
pub fn find_socket(dir: &Path, identity: &FileIdentity) -> PathBuf {
    identity
        .keys
        .iter()
        .map(|key| dir.join(format!("{key}.sock")))
        .find_map(|path| std::fs::canonicalize(path).ok())
        .unwrap_or_else(|| dir.join(format!("{}.sock", identity.keys[0])))
}

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

/// The claim of one supervisor on one file: the flock'd lock file (which
/// holds our pid) under the file's first key, and aliases — hard links to the
/// lock, symlinks to the control socket — under its other keys.
#[derive(Debug)]
pub struct Claim {
    dir: PathBuf,
    lock: File,
    lock_path: PathBuf,
    /// Where the control socket is (the aliases point there).
    socket: PathBuf,
    /// Keys that are aliases of ours (the first key is not one).
    aliases: BTreeSet<String>,
}

/// Whether the lock file at `path` is flock'd by someone.
fn held(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    // SAFETY: flock on an fd we own; released at once if we got it.
    unsafe {
        if libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) == 0 {
            libc::flock(file.as_raw_fd(), libc::LOCK_UN);
            return None;
        }
    }
    let mut pid = String::new();
    let _ = file.read_to_string(&mut pid);
    Some(pid.trim().to_string())
}

impl Claim {
    /// Claim the file `shown` (whose identity is `identity`) in `dir`, with
    /// the control socket at `socket` (default: next to the lock). Refused
    /// when another supervisor holds any of its keys.
    pub fn acquire(
        dir: &Path,
        identity: &FileIdentity,
        shown: &str,
        socket: Option<&Path>,
    ) -> Result<Claim, LockError> {
        let first = &identity.keys[0];
        let lock_path = dir.join(format!("{first}.lock"));
        let io_error = |e: io::Error| LockError::Io(lock_path.display().to_string(), e);
        let refused = |pid: String, lock: &Path| LockError::Held {
            file: shown.to_string(),
            pid,
            lock: lock.display().to_string(),
        };
        let open = |create_new: bool| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(create_new)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(&lock_path)
        };
        // Remember whether the lock file is ours, so a refusal leaves none.
        let (mut lock, created) = match open(true) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                (open(false).map_err(io_error)?, false)
            }
            Err(e) => return Err(io_error(e)),
        };
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut pid = String::new();
                let _ = lock.read_to_string(&mut pid);
                return Err(refused(pid.trim().to_string(), &lock_path));
            }
            return Err(io_error(error));
        }
        for key in &identity.keys[1..] {
            let other = dir.join(format!("{key}.lock"));
            if !same_file(&other, &lock_path)
                && let Some(pid) = held(&other)
            {
                if created {
                    let _ = std::fs::remove_file(&lock_path);
                }
                return Err(refused(pid, &other));
            }
        }
        lock.set_len(0).map_err(io_error)?;
        lock.rewind().map_err(io_error)?;
        writeln!(lock, "{}", std::process::id()).map_err(io_error)?;
        let mut claim = Claim {
            dir: dir.to_path_buf(),
            socket: socket
                .map(Path::to_path_buf)
                .unwrap_or_else(|| dir.join(format!("{first}.sock"))),
            lock,
            lock_path,
            aliases: BTreeSet::new(),
        };
        claim.follow(identity);
        Ok(claim)
    }

    /// Where the control socket goes.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The file is now `identity` (edited, swapped): hold exactly its keys.
    /// A key another live supervisor holds is left to it, with a warning.
    pub fn follow(&mut self, identity: &FileIdentity) {
        let first = self
            .lock_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let wanted: BTreeSet<String> = identity
            .keys
            .iter()
            .filter(|k| **k != first)
            .cloned()
            .collect();
        for gone in self
            .aliases
            .difference(&wanted)
            .cloned()
            .collect::<Vec<_>>()
        {
            self.remove_alias(&gone);
        }
        for key in wanted.difference(&self.aliases.clone()) {
            let lock = self.dir.join(format!("{key}.lock"));
            if !same_file(&lock, &self.lock_path) {
                if let Some(pid) = held(&lock) {
                    tracing::warn!(
                        "another supervisor (pid {pid}) holds {}; `status` through that name reaches it, not us",
                        lock.display()
                    );
                    continue;
                }
                let _ = std::fs::remove_file(&lock);
                if let Err(error) = std::fs::hard_link(&self.lock_path, &lock) {
                    tracing::debug!("cannot link {}: {error}", lock.display());
                    continue;
                }
            }
            let socket = self.dir.join(format!("{key}.sock"));
            let _ = std::fs::remove_file(&socket);
            if let Err(error) = std::os::unix::fs::symlink(&self.socket, &socket) {
                tracing::debug!("cannot link {}: {error}", socket.display());
            }
            self.aliases.insert(key.clone());
        }
    }

    fn remove_alias(&mut self, key: &str) {
        let _ = std::fs::remove_file(self.dir.join(format!("{key}.sock")));
        let lock = self.dir.join(format!("{key}.lock"));
        if same_file(&lock, &self.lock_path) {
            let _ = std::fs::remove_file(lock);
        }
        self.aliases.remove(key);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        for key in self.aliases.clone() {
            self.remove_alias(&key);
        }
        let _ = self.lock.set_len(0);
    }
}

/// Whether two paths name the same inode.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loose_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("rt");
        ensure_runtime_dir(&runtime).unwrap();
        assert_eq!(
            std::fs::metadata(&runtime).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ensure_runtime_dir(&runtime).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&runtime, &link).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(ensure_runtime_dir(&link).is_err(), "a symlink is refused");
    }

    #[test]
    fn a_file_is_the_same_through_a_symlink_and_a_hard_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "apps: {}\n").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link.yaml")).unwrap();
        std::fs::hard_link(&file, dir.path().join("hard.yaml")).unwrap();
        let identity = identify(&file).unwrap();
        assert_eq!(identity.keys.len(), 2);
        assert!(identity.keys.iter().all(|k| k.len() == 16));
        assert_eq!(identify(&dir.path().join("link.yaml")).unwrap(), identity);
        let hard = identify(&dir.path().join("hard.yaml")).unwrap();
        assert_eq!(hard.keys[0], identity.keys[0], "same inode");
        // An editor's save (a new file renamed over) keeps the place.
        std::fs::write(dir.path().join(".tmp"), "apps: {}\n").unwrap();
        std::fs::rename(dir.path().join(".tmp"), &file).unwrap();
        let saved = identify(&file).unwrap();
        assert_ne!(saved.keys[0], identity.keys[0]);
        assert_eq!(saved.keys[1], identity.keys[1]);
    }

    #[test]
    fn one_claim_per_file_under_any_of_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("rt");
        ensure_runtime_dir(&runtime).unwrap();
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "apps: {}\n").unwrap();
        let identity = identify(&file).unwrap();
        let mut claim = Claim::acquire(&runtime, &identity, "ecosystem.yaml", None).unwrap();
        match Claim::acquire(&runtime, &identity, "ecosystem.yaml", None) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("{other:?}"),
        }
        // Saved by rename: a new inode, the same place — still refused.
        std::fs::write(dir.path().join(".tmp"), "apps: {}\n").unwrap();
        std::fs::rename(dir.path().join(".tmp"), &file).unwrap();
        let saved = identify(&file).unwrap();
        assert!(matches!(
            Claim::acquire(&runtime, &saved, "ecosystem.yaml", None),
            Err(LockError::Held { .. })
        ));
        // Once the supervisor has followed the file, its new keys lead to it.
        claim.follow(&saved);
        std::os::unix::net::UnixListener::bind(claim.socket_path()).unwrap();
        assert_eq!(
            std::fs::canonicalize(find_socket(&runtime, &saved)).unwrap(),
            std::fs::canonicalize(claim.socket_path()).unwrap()
        );
        drop(claim);
        let _ = std::fs::remove_file(runtime.join(format!("{}.sock", identity.keys[0])));
        Claim::acquire(&runtime, &saved, "ecosystem.yaml", None).unwrap();
    }
}
