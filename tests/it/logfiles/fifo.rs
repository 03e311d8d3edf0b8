//! A FIFO as the log file: written and never rotated, and an error, not a
//! hang, without a reader.

use super::*;

/// Make a FIFO at `path`.
fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// A log file that is not a regular file (a FIFO with a reader, as a
/// device such as /dev/null would be) is written to, never rotated: a
/// rotation would rename it and put a regular file in its place.
#[test]
fn a_fifo_as_the_log_file_is_written_and_never_rotated() {
    let mut s = Supervised::start_dropping_output(
        &format!(
            "apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/fifo, max_size: 200B, keep: 2}}\n"
        ),
        |dir| {
            make_logs(dir);
            mkfifo(&dir.join("logs/fifo"));
        },
    );
    let fifo = s.path("logs/fifo");
    let (read, lines) = std::sync::mpsc::channel();
    let reader_path = fifo.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let Ok(file) = std::fs::File::open(reader_path) else {
            return;
        };
        for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
            if read.send(line).is_err() {
                return;
            }
        }
    });
    // More than max_size, a few times over.
    let mut taken = 0;
    while taken < 2_000 {
        let line = lines.recv_timeout(WAIT).expect("a line through the FIFO");
        taken += line.len() + 1;
    }
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO is still there: {kind:?}");
    assert!(!s.path("logs/fifo.1").exists(), "nothing was rotated");
    stop(&mut s);
}

/// A FIFO nobody reads: opening it for writing would wait for a reader for
/// ever (and with it every other log file): it is a failure, said once.
#[test]
fn a_fifo_without_a_reader_is_an_error_not_a_hang() {
    let mut s = Supervised::start_dropping_output(
        &format!(
            "apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/fifo}}\n  other:\n    command: {TICKER}\n    log: {{file: logs/other.log}}\n"
        ),
        |dir| {
            make_logs(dir);
            mkfifo(&dir.join("logs/fifo"));
        },
    );
    let error = s.wait_for("the error", |e| {
        e["event"] == "log_file_error" && e["app"] == "ticker"
    });
    assert!(
        error["error"].as_str().unwrap().contains("No such device"),
        "{error}"
    );
    assert!(
        eventually(WAIT, || ticked(&s.path("logs/other.log"))),
        "the other app's file is written"
    );
    stop(&mut s);
}
