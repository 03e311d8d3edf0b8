//! Replacing a file whole: through a temporary file in the same folder,
//! renamed over it, so that a reader — a supervisor watching its ecosystem
//! file — finds the old version or the new one, never an empty or a half
//! written file.
//!
//! Where a rename would not replace *the file*, it is written in place
//! instead ([`write_in_place`]): when it has more than one name (a hard
//! link: the rename would give the name edited a new inode, and every other
//! name would keep the old content — a supervisor watching one of them would
//! never see the edit), and when the rename is refused because the file is a
//! mount point (EBUSY: a single file bind-mounted, as Docker's `-v
//! file:file` or a Kubernetes `subPath` mount it) or is on another
//! filesystem (EXDEV, which some overlay and union filesystems answer).

use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of the temporary file that replaces an existing one, until it
/// takes that file's mode: readable by no one else meanwhile.
const PRIVATE_MODE: u32 = 0o600;
/// The bits of a mode that `chmod` sets (not the file's type).
const PERMISSION_BITS: u32 = 0o7777;
/// How many temporary names are tried before giving up (each taken one is
/// a leftover of a crashed writer of the same pid).
const TEMPORARY_NAMES: u32 = 16;
/// The first byte of a file while it is written in place: never valid UTF-8,
/// so that whatever a reader finds meanwhile is refused whole (an ecosystem
/// file must be UTF-8) rather than taken for a version of the file.
const INCOMPLETE_MARK: u8 = 0xFF;

/// Write `text` as the file at `path`, replaced at once. The real file is
/// replaced: a symlink to it stays a symlink. An existing file keeps its
/// mode, and its owner when we may change it (as root); a new one is
/// created as any file is (0666 less the umask). `writer` names the
/// temporary file (`.supervise-WRITER.PID.N.tmp`; short, since the file's
/// own name may already be as long as a name can be). A file with hard
/// links, or one a rename cannot replace (a bind mount), is written in
/// place, keeping its inode and so every name of it: see [`write_in_place`].
pub(crate) fn replace(path: &Path, text: &[u8], writer: &str) -> io::Result<()> {
    let target = match std::fs::canonicalize(path) {
        Ok(target) => target,
        // Nothing there (not even a dangling link): a new file.
        Err(e) if e.kind() == io::ErrorKind::NotFound && path.symlink_metadata().is_err() => {
            path.to_path_buf()
        }
        Err(e) => return Err(e),
    };
    let existing = match std::fs::metadata(&target) {
        Ok(metadata) => Some(metadata),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if existing.as_ref().is_some_and(|m| m.nlink() > 1) {
        return write_in_place(&target, text);
    }
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (temporary, mut file) = temporary_beside(dir, writer, existing.is_some())?;
    let mut write = || -> io::Result<()> {
        file.write_all(text)?;
        if let Some(existing) = &existing {
            // Keep the owner when we may; otherwise the file is ours anyway.
            // First: a change of owner clears the set-id bits of the mode.
            let _ = std::os::unix::fs::fchown(&file, Some(existing.uid()), Some(existing.gid()));
            file.set_permissions(std::fs::Permissions::from_mode(
                existing.mode() & PERMISSION_BITS,
            ))?;
        }
        file.sync_all()?;
        std::fs::rename(&temporary, &target)
    };
    let renamed = write();
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    match renamed {
        Err(e) if existing.is_some() && rename_cannot_replace(&e) => write_in_place(&target, text),
        renamed => renamed,
    }
}

/// Whether a rename over an existing file failed because no rename can
/// replace it there (a mount point; another filesystem), not for a reason
/// writing it in place would meet too (permissions, a full disk).
fn rename_cannot_replace(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EBUSY | libc::EXDEV))
}

/// Write `text` over the existing regular file `target` itself (its inode,
/// mode and owner stay): first [`INCOMPLETE_MARK`] as its first byte, then
/// the rest of the new bytes from offset 1, the file cut to the new length,
/// the real first byte last, and an fsync. A writer killed midway leaves a
/// file that starts with the mark: refused, never half applied. (Unlike the
/// rename, this is not atomic against a power cut before the fsync.)
///
/// What a reader may see meanwhile: for a moment, a mix of new and old bytes
/// (the old tail, or a write half done) behind the mark, which is not
/// UTF-8: the supervisor reads it as an invalid version (logged,
/// `config_error` in `status`) and keeps running the last good one, rather
/// than apply a mix that happens to parse. Never an empty file. (Only a read
/// already under way as the mark is written can get a mix without it.) Its
/// watcher then reads the complete version: each step is an inotify event in the
/// folder of the name written, it reads only after
/// [`DEBOUNCE_QUIET`](effects::watch::DEBOUNCE_QUIET) without one,
/// and an event while it reads makes it read again, so its last read follows
/// the last step (usually all the steps fall within one debounce, and it
/// never sees the mark). Through a name in another folder, only its stat
/// poll sees the change.
fn write_in_place(target: &Path, text: &[u8]) -> io::Result<()> {
    // O_NONBLOCK: should a FIFO have taken the file's place, opening it does
    // not wait for a reader (it is refused just below).
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(target)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", target.display()),
        ));
    }
    let Some((first, rest)) = text.split_first() else {
        file.set_len(0)?;
        return file.sync_all();
    };
    file.write_all_at(&[INCOMPLETE_MARK], 0)?;
    file.write_all_at(rest, 1)?;
    file.set_len(text.len() as u64)?;
    file.write_all_at(&[*first], 0)?;
    file.sync_all()
}

/// A new temporary file in `dir`, never one planted there nor through a
/// link: the first free name of [`TEMPORARY_NAMES`] (one a crashed writer
/// of the same pid left is passed over). `private`: made [`PRIVATE_MODE`].
fn temporary_beside(
    dir: &Path,
    writer: &str,
    private: bool,
) -> io::Result<(PathBuf, std::fs::File)> {
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_CLOEXEC);
    if private {
        options.mode(PRIVATE_MODE);
    }
    let pid = std::process::id();
    for attempt in 0..TEMPORARY_NAMES {
        let temporary = dir.join(format!(".supervise-{writer}.{pid}.{attempt}.tmp"));
        match options.open(&temporary) {
            Ok(file) => return Ok((temporary, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{TEMPORARY_NAMES} temporary files `.supervise-{writer}.{pid}.*.tmp` are already in {}; remove them",
            dir.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_file_a_crashed_writer_left_is_passed_over() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "old\n").expect("write");
        let left = dir
            .path()
            .join(format!(".supervise-test.{}.0.tmp", std::process::id()));
        std::fs::write(&left, "left by a crash\n").expect("write");
        replace(&file, b"new\n", "test").expect("replaced");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "new\n");
        assert_eq!(
            std::fs::read_to_string(&left).expect("still there"),
            "left by a crash\n"
        );
    }

    #[test]
    fn replaces_the_real_file_keeping_its_mode_and_the_link() {
        let dir = tempfile::tempdir().expect("temp dir");
        let real = dir.path().join("real.yaml");
        let link = dir.path().join("link.yaml");
        std::fs::write(&real, "old\n").expect("write");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        replace(&link, b"new\n", "test").expect("replaced");
        assert_eq!(std::fs::read_to_string(&real).expect("read"), "new\n");
        assert!(link.symlink_metadata().expect("there").is_symlink());
        let mode = std::fs::metadata(&real).expect("there").mode() & 0o7777;
        assert_eq!(mode, 0o640);
        // A new file, and nothing left behind.
        replace(&dir.path().join("new.yaml"), b"fresh\n", "test").expect("created");
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["link.yaml", "new.yaml", "real.yaml"]);
    }

    #[test]
    fn a_file_with_hard_links_is_written_in_place_keeping_every_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ecosystem.yaml");
        let other = dir.path().join("hard.yaml");
        std::fs::write(&file, "apps:\n  web: {command: sleep 1, instances: 10}\n").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        std::fs::hard_link(&file, &other).expect("link");
        let inode = std::fs::metadata(&file).expect("there").ino();
        // Shorter (no old tail left), then longer, through either name.
        for (name, text) in [
            (&file, "apps:\n  web: {command: sleep 1, instances: 9}\n"),
            (
                &other,
                "apps:\n  web: {command: sleep 1, instances: 4096}\n",
            ),
        ] {
            replace(name, text.as_bytes(), "test").expect("written");
            for each in [&file, &other] {
                assert_eq!(std::fs::read_to_string(each).expect("read"), text);
                let metadata = std::fs::metadata(each).expect("there");
                assert_eq!((metadata.ino(), metadata.nlink()), (inode, 2));
                assert_eq!(metadata.mode() & 0o7777, 0o640);
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 2);
    }

    #[test]
    fn a_failed_write_leaves_the_file_and_no_temporary() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "old\n").expect("write");
        // The folder is not there: nothing can be written.
        let error = replace(&dir.path().join("gone/ecosystem.yaml"), b"new\n", "test");
        assert!(error.is_err());
        // A folder in the file's place cannot be replaced by a file.
        std::fs::create_dir(dir.path().join("folder")).expect("mkdir");
        assert!(replace(&dir.path().join("folder"), b"new\n", "test").is_err());
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "old\n");
        assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 2);
    }
}
