//! A stdout that cannot take the output (a full disk, a closed stdout, a
//! reader that leaves): an error said, or a follow that ends quietly.

use super::*;

/// `status --json` into a stdout that cannot take it (a full disk, a closed
/// stdout) is an error that says so; a follow ends, quietly, once its reader
/// leaves, though the app it follows prints nothing more.
#[test]
fn a_status_stdout_cannot_take_is_an_error_and_a_follow_ends_when_its_reader_leaves() {
    let s = quiet();
    let client_of = |args: &[&str]| {
        let mut command = std::process::Command::new(binary());
        command
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .args(args);
        command
    };
    crate::common::assert_unwritable_stdout_is_an_error(|| client_of(&["status", "--json"]));

    let mut follower = client_of(&["logs", "quiet", "-n", "1", "-f"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a follower starts");
    let mut line = String::new();
    BufReader::new(follower.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the tail line");
    assert_eq!(line, "quiet.0 | up\n");
    // The reader is dropped: the pipe has no reader any more.
    let ended = eventually(WAIT, || {
        follower.try_wait().is_ok_and(|exit| exit.is_some())
    });
    if !ended {
        terminate(vec![follower]);
        panic!("the follow went on after its reader left");
    }
    let output = follower.wait_with_output().expect("reaped");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    assert!(client(&s, &["status"]).status.success());
}

#[test]
fn help_and_version_stdout_cannot_take_are_an_error_too() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["status", "--help"],
        &["help"],
    ] {
        crate::common::assert_unwritable_stdout_is_an_error(|| {
            let mut command = std::process::Command::new(binary());
            command.args(args);
            command
        });
    }
    let mut help = std::process::Command::new(binary());
    help.arg("--help");
    let (code, stderr, first) = crate::common::into_head(help);
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "{first}");
    assert!(first.contains("supervisor"), "{first}");
}
