//! Where the result goes: import refuses to replace a file (and says what it
//! cannot read), `--force` replaces a regular file and nothing else, and a
//! stdout that cannot take the result.

use super::*;

#[test]
fn import_refuses_to_replace_a_file_and_says_what_it_cannot_read() {
    let dir = copy_of("procfile");
    // Runs `supervise args`, which exits with `code` and says `says`.
    let refused = |args: &[&str], code: i32, says: &str| {
        let output = supervise(dir.path(), args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    };
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");

    write("ecosystem.yaml", "apps: {}\n");
    refused(
        &["import", "Procfile", "-o", "ecosystem.yaml"],
        2,
        "--force",
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ecosystem.yaml")).expect("kept"),
        "apps: {}\n"
    );

    let output = supervise(
        dir.path(),
        &["import", "Procfile", "-o", "ecosystem.yaml", "--force"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));

    write("notes.txt", "hello\n");
    refused(&["import", "notes.txt"], 2, "--from");

    write("broken.config.js", "module.exports = {apps: [\n");
    refused(
        &["import", "broken.config.js"],
        1,
        "node could not evaluate it",
    );

    // A hang that costs no CPU (node waits on a futex nobody wakes): the
    // bound is what is tested, not a core spun for 10 s beside the other
    // tests.
    write(
        "hangs.config.js",
        "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);\n",
    );
    let started = std::time::Instant::now();
    refused(&["import", "hangs.config.js"], 1, "did not finish");
    assert!(started.elapsed() < Duration::from_secs(20));

    write("ours.yaml", "apps:\n  web:\n    command: x\n");
    refused(&["import", "ours.yaml"], 1, "supervise file already");
}

/// How many apps the long Procfile has: its import is well over what a pipe
/// and `head`'s first read hold, so the import is still writing when `head`
/// leaves.
const LONG_PROCFILE_APPS: usize = 5000;

/// A stdout that cannot take the result (a full disk, a closed stdout) is an
/// error that says so, and no claim that the import passed; a reader that
/// leaves (`| head -1`) ends the import quietly.
#[test]
fn a_result_stdout_cannot_take_is_an_error_but_a_reader_that_left_is_not() {
    let dir = copy_of("procfile");
    let import = |file: &str| {
        let mut command = Command::new(binary());
        command.current_dir(dir.path()).args(["import", file]);
        command
    };
    for stderr in crate::common::assert_unwritable_stdout_is_an_error(|| import("Procfile")) {
        assert!(!stderr.contains("passes"), "{stderr}");
    }

    let long: String = (0..LONG_PROCFILE_APPS)
        .map(|i| format!("app{i}: sleep {i}\n"))
        .collect();
    std::fs::write(dir.path().join("Long"), long).expect("write");
    let mut command = import("Long");
    command.args(["--from", "procfile"]);
    let (code, stderr, first) = crate::common::into_head(command);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "", "no word once the reader left");
    assert!(first.starts_with("# Imported from Long"), "{first}");
}

/// `--force` replaces only a regular file, at once: something else in the
/// output's place (a FIFO, which would hang the write, a device, a folder)
/// is refused, and a file is replaced by a new one renamed over it (a new
/// inode: a supervisor watching it never reads it empty), with its mode, a
/// symlink to it staying a symlink; a file with hard links is written in
/// place, its names kept one file.
#[test]
fn force_replaces_a_regular_file_at_once_and_nothing_else() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let dir = copy_of("procfile");
    let path = |name: &str| dir.path().join(name);
    let import =
        |output: &str| supervise(dir.path(), &["import", "Procfile", "-o", output, "--force"]);
    assert!(
        Command::new("mkfifo")
            .arg(path("fifo.yaml"))
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::create_dir(path("folder.yaml")).expect("folder");
    std::os::unix::fs::symlink("/dev/null", path("null.yaml")).expect("symlink");
    std::os::unix::fs::symlink("fifo.yaml", path("to-fifo.yaml")).expect("symlink");
    std::os::unix::fs::symlink("nowhere.yaml", path("dangling.yaml")).expect("symlink");
    for (output, says) in [
        ("fifo.yaml", "fifo.yaml is a FIFO, not a regular file"),
        ("folder.yaml", "folder.yaml is a folder, not a regular file"),
        (
            "null.yaml",
            "null.yaml is a device (through a symbolic link), not a regular file",
        ),
        (
            "to-fifo.yaml",
            "to-fifo.yaml is a FIFO (through a symbolic link), not a regular file",
        ),
        (
            "dangling.yaml",
            "dangling.yaml is a symbolic link to nothing",
        ),
    ] {
        let started = std::time::Instant::now();
        let output = import(output);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{output:?}: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(started.elapsed() < WAIT, "{output:?} hung");
    }
    assert!(!path("nowhere.yaml").exists());
    assert!(
        std::fs::metadata(path("fifo.yaml"))
            .expect("kept")
            .file_type()
            .is_fifo()
    );

    std::fs::write(path("ecosystem.yaml"), "apps: {}\n").expect("write");
    std::fs::set_permissions(
        path("ecosystem.yaml"),
        std::fs::Permissions::from_mode(0o640),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("ecosystem.yaml", path("link.yaml")).expect("symlink");
    let before = std::fs::metadata(path("ecosystem.yaml")).expect("there");
    let output = import("link.yaml");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let after = std::fs::metadata(path("ecosystem.yaml")).expect("there");
    let written = std::fs::read_to_string(path("ecosystem.yaml")).expect("read");
    assert!(written.contains("  web:\n"), "{written}");
    assert_ne!(
        after.ino(),
        before.ino(),
        "written in place, not renamed over"
    );
    assert_eq!(after.mode() & 0o7777, 0o640);
    assert!(
        path("link.yaml")
            .symlink_metadata()
            .expect("there")
            .is_symlink()
    );
    // A file with two names (a hard link) is written in place: they stay one
    // file, and a supervisor watching the other name sees the import.
    std::fs::write(path("ecosystem.yaml"), "apps: {}\n").expect("write");
    std::fs::hard_link(path("ecosystem.yaml"), path("hard.yaml")).expect("link");
    let output = import("hard.yaml");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let written = std::fs::read_to_string(path("ecosystem.yaml")).expect("read");
    assert!(written.contains("  web:\n"), "{written}");
    let linked = std::fs::metadata(path("hard.yaml")).expect("there");
    assert_eq!((linked.ino(), linked.nlink()), (after.ino(), 2));
    assert_eq!(linked.mode() & 0o7777, 0o640);
    // A new file too; and no temporary file is left behind.
    let output = import("new.yaml");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
