//! What a command prints: into a stdout that cannot take it, into a reader
//! that leaves after one line, and literal text for insta's filters.

use super::*;

/// `text` as a regex that matches it literally (for insta's path filters).
pub fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if "\\.+*?()|[]{}^$".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Run the command `make` builds with its stdout on /dev/full, then closed
/// (`>&-`): each run must exit 1 saying why (`cannot write to standard
/// output: …`), without a panic. Their stderr, to assert more on.
pub fn assert_unwritable_stdout_is_an_error(make: impl Fn() -> Command) -> Vec<String> {
    use std::os::unix::process::CommandExt;
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full opens");
    let mut on_full = make();
    on_full.stdout(full);
    let mut closed = make();
    // SAFETY: only close(2), async-signal-safe, between fork and exec.
    unsafe {
        closed.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    [
        (on_full, "No space left on device"),
        (closed, "Bad file descriptor"),
    ]
    .into_iter()
    .map(|(mut command, reason)| {
        let output = command.output().expect("the command runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(1), "{reason}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "error: cannot write to standard output: {reason}\n"
            )) && !stderr.contains("panicked"),
            "{stderr}"
        );
        stderr
    })
    .collect()
}

/// Run `command` into `head -1`, which leaves after the first line: its
/// exit code and stderr, and the line.
pub fn into_head(mut command: Command) -> (Option<i32>, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let stdout = child.stdout.take().expect("stdout");
    let head = Command::new("head")
        .arg("-1")
        .stdin(stdout)
        .output()
        .expect("head runs");
    let output = child.wait_with_output().expect("the command ends");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        String::from_utf8_lossy(&head.stdout).into_owned(),
    )
}
