//! The folders of log files: made 0755, said once while they cannot be made,
//! and the supervisor's for a worker of another user.

use super::*;

/// The umask of this process (which the supervisor it starts inherits),
/// read without changing it.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
        })
        .expect("the umask, from /proc/self/status")
}

#[test]
fn missing_folders_are_made_0755_and_the_file_written() {
    use std::os::unix::fs::PermissionsExt;
    let mut s = ticker_logging_to("missing/deeper/{app}.log", |_| {});
    let file = s.path("missing/deeper/ticker.log");
    assert!(eventually(WAIT, || ticked(&file)), "{}", s.dump());
    for folder in ["missing", "missing/deeper"] {
        let mode = std::fs::metadata(s.path(folder))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755 & !umask(), "{folder}: {mode:o}");
    }
    stop(&mut s);
    let said: Vec<&Value> = s
        .events
        .iter()
        .filter(|e| e["event"] == "log_file_error" || e["event"] == "log_dropped")
        .collect();
    assert!(said.is_empty(), "{said:?}");
}

#[test]
fn a_folder_that_cannot_be_made_is_said_once_and_the_worker_runs_on_until_it_can() {
    // A file where the folder should be: the folder cannot be made.
    let mut s = ticker_logging_to("blocked/ticker.log", |dir| {
        std::fs::write(dir.join("blocked"), "").unwrap()
    });
    let error = s.wait_for("the error", |e| e["event"] == "log_file_error");
    assert_eq!(error["app"], "ticker");
    assert!(
        error["error"].as_str().unwrap().contains("Not a directory"),
        "{error}"
    );
    let pid = s.wait_event("spawned", "ticker")["pid"].as_i64().unwrap() as i32;
    let status = status_json(&s);
    let log_error = app_status(&status, "ticker")["log_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(log_error.contains("blocked/ticker.log"), "{log_error}");
    said_once_and_the_worker_runs_on(&mut s, pid);
    let dropped_so_far = s.wait_for("a drop count", |e| e["event"] == "log_dropped");
    assert_eq!(dropped_so_far["app"], "ticker");

    // Out of the way: the folder is made the next time the file is tried.
    std::fs::remove_file(s.path("blocked")).unwrap();
    s.wait_for("the recovery", |e| e["event"] == "log_file_recovered");
    assert!(eventually(WAIT, || ticked(&s.path("blocked/ticker.log"))));
    let status = status_json(&s);
    assert!(app_status(&status, "ticker")["log_error"].is_null());
}

/// The folders of a log file are the supervisor's, as the file is, whatever
/// user the workers run as: a folder the worker owned would let it put a
/// symlink in the place of the file for root to append to.
#[test]
#[ignore = "needs root"]
fn folders_made_for_a_worker_of_another_user_are_the_supervisors() {
    use std::os::unix::fs::MetadataExt;
    require_root();
    let mut s = Supervised::start(
        "apps:\n  nobodys:\n    command: [sh, -c, \"while :; do echo tick; sleep 0.05; done\"]\n    user: nobody\n    cwd: /\n    log: {file: \"made/{app}.log\"}\n",
    );
    let file = s.path("made/nobodys.log");
    assert!(eventually(WAIT, || ticked(&file)), "{}", s.dump());
    for path in [s.path("made"), file] {
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!((metadata.uid(), metadata.gid()), (0, 0), "{path:?}");
    }
    stop(&mut s);
}
