//! Errors said once while the worker runs on: a read-only folder, a full
//! disk (no half line), a directory in the place of the file, and a file that
//! becomes a directory.

use super::*;

/// Run the supervisor in its own mount namespace, where `logs` is a tmpfs
/// mounted with `options` (the namespace, and so the mount, ends with it).
fn start_on_tmpfs(yaml: &str, options: &str) -> Supervised {
    require_root();
    let script = format!("mount -t tmpfs -o {options} supervise-test logs && exec \"$@\"");
    Supervised::start_wrapped(
        yaml,
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ],
        &[],
        |dir| std::fs::create_dir(dir.join("logs")).unwrap(),
    )
}

#[test]
#[ignore = "needs root"]
fn a_read_only_log_folder_is_said_once_and_the_worker_runs_on() {
    let mut s = start_on_tmpfs(
        &format!("apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/ticker.log}}\n"),
        "ro",
    );
    let error = s.wait_for("the error", |e| e["event"] == "log_file_error");
    assert!(
        error["error"].as_str().unwrap().contains("Read-only"),
        "{error}"
    );
    let pid = s.wait_event("spawned", "ticker")["pid"].as_i64().unwrap() as i32;
    said_once_and_the_worker_runs_on(&mut s, pid);
    let output = run_client(&s, &["logs", "ticker", "-n", "3"]);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("ticker.0 | tick"),
        "the rings still serve `logs`"
    );
}

#[test]
#[ignore = "needs root"]
fn a_full_disk_is_said_once_and_leaves_no_half_line() {
    let mut s = start_on_tmpfs(
        &flood_app(20_000, 100, "{file: \"logs/{app}.log\", max_size: 10MB}"),
        "size=64k",
    );
    let error = s.wait_for("the error", |e| e["event"] == "log_file_error");
    assert!(
        error["error"].as_str().unwrap().contains("No space"),
        "{error}"
    );
    s.wait_event("exited", "flood");
    // The file as the supervisor sees it, in its mount namespace.
    let file = PathBuf::from(format!("/proc/{}/root", s.pid()))
        .join(s.path("logs/flood.log").strip_prefix("/").unwrap());
    // The writer is done with the flood once every line printed is in the
    // file or said dropped (it says so at most a second after the last
    // drop). Until then it may be between a write the full disk cut short
    // and taking that half line back: read then, the file ends in it.
    let whole_lines = |text: &str| {
        text.split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .count()
    };
    let handled = |s: &Supervised| {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        whole_lines(&text) as u64 + dropped(s, "flood") == 20_000
    };
    assert!(
        s.until(WAIT, handled),
        "not every line was written or said dropped\n{}",
        s.dump()
    );
    let text = std::fs::read_to_string(&file).expect("the full file is there");
    assert!(
        !text.is_empty() && text.ends_with('\n'),
        "no half line at the end"
    );
    for raw in text.lines() {
        assert_eq!(parse_text_line(raw).line.len(), 99, "a whole line: {raw}");
    }
    stop(&mut s);
    let errors = s
        .events
        .iter()
        .filter(|e| e["event"] == "log_file_error")
        .count();
    assert_eq!(errors, 1, "said once");
    let written = text.lines().count() as u64;
    assert_eq!(
        written + dropped(&s, "flood"),
        20_000,
        "written + dropped = printed"
    );
}

/// A python worker that prints `count` lines, one every millisecond or so
/// (a batch for the writer each time), then exits 0.
fn steady_app(count: usize, file: &str) -> String {
    format!(
        r#"apps:
  steady:
    command: ["python3", "-u", "-c", "import time\nfor i in range({count}):\n    print(i)\n    time.sleep(0.001)"]
    restart: never
    ready: none
    log: {{file: "{file}"}}
"#
    )
}

/// While a file fails on every line, `log_dropped` is said at most once a
/// [`DROP_REPORT_INTERVAL`] per file (and once more at the end), each time
/// with the lines dropped since the one before: together, every line.
fn dropped_is_said_once_a_second(file: &str, prepare: impl FnOnce(&Path), error: &str) {
    const LINES: usize = 2000;
    let mut s = Supervised::start_with(&steady_app(LINES, file), &[], prepare);
    let said = s.wait_for("the error", |e| e["event"] == "log_file_error");
    assert!(said["error"].as_str().unwrap().contains(error), "{said}");
    s.wait_event("exited", "steady");
    stop(&mut s);
    let reports: Vec<&Value> = s
        .events
        .iter()
        .filter(|e| e["event"] == "log_dropped")
        .collect();
    let lines = s.count("output", "steady");
    assert_eq!(lines, LINES, "every line reached the terminal");
    assert_eq!(dropped(&s, "steady"), LINES as u64, "every line is counted");
    let first = timestamp_ms(reports[0]);
    let last = timestamp_ms(reports[reports.len() - 1]);
    let seconds = (last - first) / 1000.0;
    println!("{} log_dropped in {seconds:.1} s", reports.len());
    assert!(
        reports.len() as f64 <= seconds + 2.0,
        "{} log_dropped in {seconds:.1} s",
        reports.len()
    );
    // Each but the last (said at the end, whenever that is) a second or
    // more after the one before (timestamps are taken as they are said).
    for pair in reports[..reports.len() - 1].windows(2) {
        let gap = timestamp_ms(pair[1]) - timestamp_ms(pair[0]);
        let least = DROP_REPORT_INTERVAL.as_secs_f64() * 1000.0 - 100.0;
        assert!(gap >= least, "{gap} ms between two log_dropped");
    }
}

#[test]
fn a_directory_in_the_place_of_the_file_is_reported_once_a_second() {
    dropped_is_said_once_a_second(
        "logs/steady.log",
        |dir| std::fs::create_dir_all(dir.join("logs/steady.log")).unwrap(),
        "Is a directory",
    );
}

#[test]
fn a_full_disk_is_reported_once_a_second() {
    dropped_is_said_once_a_second("/dev/full", |_| {}, "No space left");
}

/// The `log_dropped` of `s` from the `from`th event on.
fn drop_reports_since(s: &Supervised, from: usize) -> Vec<Value> {
    s.events[from..]
        .iter()
        .filter(|e| e["event"] == "log_dropped")
        .cloned()
        .collect()
}

/// A file that becomes a directory while it is written (removed, and a
/// directory made in its place): once the writer opens it again (SIGUSR1
/// here, a rotation below), it fails, is said once, its drops once a
/// second, and it works again once the directory is gone.
#[test]
fn a_file_that_becomes_a_directory_is_said_once_and_written_again_after() {
    let mut s = ticker_logging_to("logs/ticker.log", make_logs);
    let file = s.path("logs/ticker.log");
    assert!(eventually(WAIT, || ticked(&file)), "{}", s.dump());
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    s.signal(libc::SIGUSR1);
    let error = s.wait_for("the error", |e| e["event"] == "log_file_error");
    assert!(
        error["error"].as_str().unwrap().contains("Is a directory"),
        "{error}"
    );
    let from = s.events.len();
    let window = std::time::Instant::now();
    s.until(Duration::from_secs(3), |_| false);
    let seconds = window.elapsed().as_secs_f64();
    let reports = drop_reports_since(&s, from);
    assert!(
        !reports.is_empty() && reports.len() as f64 <= seconds + 1.0,
        "{} log_dropped in {seconds:.1} s",
        reports.len()
    );
    std::fs::remove_dir(&file).unwrap();
    s.wait_for("the recovery", |e| e["event"] == "log_file_recovered");
    assert!(eventually(WAIT, || ticked(&file)));
    let errors = s
        .events
        .iter()
        .filter(|e| e["event"] == "log_file_error")
        .count();
    assert_eq!(errors, 1, "said once");
}

/// The same, found by a rotation: the directory is not renamed as if it
/// were the file, nor written into.
#[test]
fn a_file_that_becomes_a_directory_before_a_rotation_is_left_alone() {
    let mut s = Supervised::start_dropping_output(
        &format!(
            "apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/ticker.log, max_size: 200B, keep: 2}}\n"
        ),
        make_logs,
    );
    let file = s.path("logs/ticker.log");
    assert!(eventually(WAIT, || s.path("logs/ticker.log.1").exists()));
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    std::fs::write(file.join("inside"), "mine\n").unwrap();
    let error = s.wait_for("the error", |e| e["event"] == "log_file_error");
    assert!(
        error["error"].as_str().unwrap().contains("directory"),
        "{error}"
    );
    s.until(Duration::from_secs(2), |_| false);
    assert!(file.is_dir(), "the directory stays where it was");
    assert_eq!(
        std::fs::read_to_string(file.join("inside")).unwrap(),
        "mine\n"
    );
    let names: Vec<String> = std::fs::read_dir(s.path("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for name in &names {
        let path = s.path("logs").join(name);
        assert!(
            name == "ticker.log" || path.is_file(),
            "{name} is a file: the directory was not rotated ({names:?})"
        );
    }
}
