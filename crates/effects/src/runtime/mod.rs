//! The runtime directory and the one-supervisor-per-file lock (DESIGN.md §4).
//!
//! The directory is `$XDG_RUNTIME_DIR/supervise`, else `/run/supervise` for root,
//! else `/tmp/supervise-$UID`; created 0700 and checked with lstat (ours, not a
//! symlink, not readable by others) — a directory in /tmp could be planted by
//! anyone. Names are derived from what the ecosystem file *is* — its inode,
//! and its place in its directory — not from how its path is spelled, so the
//! same file always maps to the same lock and socket ([`FileIdentity`]).
//! How a supervisor holds them is [`Claim`]'s part.

mod claim;

pub use claim::{Claim, ClaimState, LockError, try_lock};

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
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
/// A supervisor holds exactly its file's *current* keys, and follows them as
/// they change (an editor's save, a ConfigMap or release-directory swap, the
/// file moved away and copied back): a second supervisor for the same file is
/// refused, one for what is now another file is not, and a client finds the
/// supervisor of the file it names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    pub keys: Vec<String>,
}

/// The key of a place: the directory that really holds a file, and its name
/// there.
fn place_key(folder: &std::fs::Metadata, name: &str) -> String {
    key_of(&format!("place {} {} {name}", folder.dev(), folder.ino()))
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
            place_key(&folder, &name),
        ],
    })
}

/// The identity of a file that is not there (deleted, or moved away): only
/// its place, which is the same key [`identify`] gives the file that is put
/// there again. `None` when `path` names something (a dangling symlink, say)
/// or its directory is gone too.
pub(crate) fn identify_absent(path: &Path) -> Option<FileIdentity> {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        _ => return None,
    }
    let name = path.file_name()?.to_string_lossy().into_owned();
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let folder = std::fs::metadata(std::fs::canonicalize(parent).ok()?).ok()?;
    Some(FileIdentity {
        keys: vec![place_key(&folder, &name)],
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
        .unwrap_or_else(|| {
            let first = identity.keys.first().map_or("none", String::as_str);
            dir.join(format!("{first}.sock"))
        })
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
}
