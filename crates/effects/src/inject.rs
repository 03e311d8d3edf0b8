//! The preload library of `listen: {inject: true}` (inject/supervise_inject.c,
//! built by build.rs), carried inside the binary so one file is still all
//! there is to install.
//!
//! At the first start of an app that injects, the library is written into
//! the runtime directory as `inject-HASH.so`, mode 0500, and its content is
//! checked against the hash before each use: a file someone replaced is
//! written anew (through a temporary file and a rename, so a worker starting
//! at that moment never loads half a library). Workers get it in
//! `LD_PRELOAD`, after any the user set, with `SUPERVISE_INJECT_FDS` (the fds
//! to hand over) and `SUPERVISE_INJECT_REPORT` (the notify socket, where
//! the library says each substitution).

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The library, as build.rs compiled it.
pub(crate) const LIBRARY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libsupervise_inject.so"));

/// The file's mode: read and map for its owner, nothing for others.
const LIBRARY_MODE: u32 = 0o500;

fn hash_of(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The library's path in `runtime_dir`, written there unless a file with
/// the right content already is.
pub(crate) fn install(runtime_dir: &Path) -> io::Result<PathBuf> {
    let hash = hash_of(LIBRARY);
    let path = runtime_dir.join(format!("inject-{hash}.so"));
    // The dynamic loader splits LD_PRELOAD at spaces and colons.
    if path.to_string_lossy().contains([' ', ':', '\t', '\n']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} has a space or a colon, which LD_PRELOAD cannot hold (set XDG_RUNTIME_DIR to a plain path)",
                path.display()
            ),
        ));
    }
    if std::fs::read(&path).is_ok_and(|bytes| hash_of(&bytes) == hash) {
        return Ok(path);
    }
    let temporary = runtime_dir.join(format!(".inject-{hash}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let written = (|| {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&temporary)?;
        file.write_all(LIBRARY)?;
        file.sync_all()?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(LIBRARY_MODE))?;
        std::fs::rename(&temporary, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map(|()| path)
}

/// `LD_PRELOAD` with the library after what `current` holds.
pub(crate) fn preload(current: Option<&std::ffi::OsStr>, library: &Path) -> std::ffi::OsString {
    let mut value = std::ffi::OsString::new();
    if let Some(current) = current.filter(|c| !c.is_empty()) {
        value.push(current);
        value.push(":");
    }
    value.push(library);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_written_once_and_rewritten_when_changed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = install(dir.path()).expect("installed");
        let mode = std::fs::metadata(&path)
            .expect("there")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, LIBRARY_MODE);
        assert_eq!(std::fs::read(&path).expect("readable"), LIBRARY);
        assert_eq!(install(dir.path()).expect("again"), path);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::write(&path, b"not the library").expect("replaced");
        assert_eq!(install(dir.path()).expect("rewritten"), path);
        assert_eq!(std::fs::read(&path).expect("readable"), LIBRARY);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("listed")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn a_runtime_directory_ld_preload_cannot_name_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spaced = dir.path().join("my run");
        std::fs::create_dir(&spaced).expect("mkdir");
        let error = install(&spaced).expect_err("refused");
        assert!(error.to_string().contains("LD_PRELOAD"), "{error}");
    }

    #[test]
    fn the_library_goes_after_what_the_user_preloads() {
        let lib = Path::new("/run/supervise/inject-ab.so");
        assert_eq!(preload(None, lib), "/run/supervise/inject-ab.so");
        assert_eq!(
            preload(Some("".as_ref()), lib),
            "/run/supervise/inject-ab.so"
        );
        assert_eq!(
            preload(Some("libjemalloc.so".as_ref()), lib),
            "libjemalloc.so:/run/supervise/inject-ab.so"
        );
    }
}
