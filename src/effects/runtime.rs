//! The runtime directory and the one-supervisor-per-file lock (DESIGN.md §4).
//!
//! The directory is `$XDG_RUNTIME_DIR/supervise`, else `/run/supervise` for root,
//! else `/tmp/supervise-$UID`; created 0700 and checked with lstat (ours, not a
//! symlink, not readable by others) — a directory in /tmp could be planted by
//! anyone. Names are derived from the ecosystem file's absolute path, so the
//! same file always maps to the same lock and socket.

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

/// `<first 16 hex of sha256(absolute path)>`: the base name of the lock and the
/// socket for one ecosystem file (short enough for sun_path's 108 bytes).
pub fn file_key(ecosystem_file: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(ecosystem_file.as_os_str().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The held lock: one supervisor per ecosystem file.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    pub path: PathBuf,
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

impl FileLock {
    /// Take the lock for `ecosystem_file` in `dir` and write our pid into it.
    pub fn acquire(dir: &Path, ecosystem_file: &Path) -> Result<FileLock, LockError> {
        let path = dir.join(format!("{}.lock", file_key(ecosystem_file)));
        let io_error = |e: io::Error| LockError::Io(path.display().to_string(), e);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_error)?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(LockError::Held {
                    file: ecosystem_file.display().to_string(),
                    pid: pid.trim().to_string(),
                    lock: path.display().to_string(),
                });
            }
            return Err(io_error(error));
        }
        file.set_len(0).map_err(io_error)?;
        file.rewind().map_err(io_error)?;
        writeln!(file, "{}", std::process::id()).map_err(io_error)?;
        Ok(FileLock { file, path })
    }

    /// Whether some live supervisor holds the lock for this file (used by clients).
    pub fn is_held(dir: &Path, ecosystem_file: &Path) -> bool {
        let path = dir.join(format!("{}.lock", file_key(ecosystem_file)));
        let Ok(file) = File::open(&path) else {
            return false;
        };
        // SAFETY: flock on an fd we own; released at once if we got it.
        unsafe {
            if libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) == 0 {
                libc::flock(file.as_raw_fd(), libc::LOCK_UN);
                return false;
            }
        }
        true
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_16_hex_and_stable() {
        let key = file_key(Path::new("/srv/app/ecosystem.yaml"));
        assert_eq!(key.len(), 16);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(key, file_key(Path::new("/srv/app/ecosystem.yaml")));
        assert_ne!(key, file_key(Path::new("/srv/other/ecosystem.yaml")));
    }

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
    fn the_lock_is_exclusive_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let file = Path::new("/srv/app/ecosystem.yaml");
        let lock = FileLock::acquire(dir.path(), file).unwrap();
        assert!(FileLock::is_held(dir.path(), file));
        match FileLock::acquire(dir.path(), file) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("{other:?}"),
        }
        drop(lock);
        assert!(!FileLock::is_held(dir.path(), file));
        FileLock::acquire(dir.path(), file).unwrap();
    }
}
