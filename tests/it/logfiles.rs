//! Log files (`log:`), with real workers and real files: rotation by size
//! under a flood, no line lost without being counted or split, SIGUSR1 after
//! an external rename, errors said once while the worker runs on, JSON
//! lines, one file per instance, and `logs --since`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::common::*;
use effects::logfile::DROP_REPORT_INTERVAL;
use serde_json::Value;

/// A python worker that prints `count` numbered lines of `length` bytes
/// (with the newline) as fast as it can, then exits 0.
fn flood_app(count: usize, length: usize, log: &str) -> String {
    format!(
        r#"apps:
  flood:
    command: ["python3", "-c", "import sys\npad = 'x' * {pad}\nw = sys.stdout.write\nfor i in range({count}): w(f'{{i:08d}} {{pad}}\\n')\nsys.stdout.flush()"]
    restart: never
    ready: none
    log: {log}
"#,
        pad = length - 10,
    )
}

/// One line of a text log file, taken apart.
struct TextLine {
    source: String,
    stream: String,
    line: String,
}

fn parse_text_line(text: &str) -> TextLine {
    let (at, rest) = text.split_once(' ').expect("a timestamp first");
    let (source, rest) = rest.split_once(' ').expect("then the instance");
    let (stream, line) = rest.split_once(" | ").expect("then the stream and ` | `");
    assert!(
        at.ends_with('Z') && at.len() == "2026-12-01T03:00:00.123Z".len(),
        "an RFC 3339 UTC time with milliseconds: {at}"
    );
    humantime::parse_rfc3339(at).expect("the timestamp parses");
    TextLine {
        source: source.to_string(),
        stream: stream.to_string(),
        line: line.to_string(),
    }
}

/// `FILE.N … FILE.1, FILE`: every file of a rotated log, oldest first.
fn rotated_files(file: &Path) -> Vec<PathBuf> {
    let mut numbered: Vec<(u32, PathBuf)> = Vec::new();
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    for entry in std::fs::read_dir(file.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        let entry_name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(n) = entry_name
            .strip_prefix(&format!("{name}."))
            .and_then(|n| n.parse().ok())
        {
            numbered.push((n, path));
        }
    }
    numbered.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let mut files: Vec<PathBuf> = numbered.into_iter().map(|(_, p)| p).collect();
    if file.exists() {
        files.push(file.to_path_buf());
    }
    files
}

/// The sum of the `log_dropped` counts of `app`.
fn dropped(s: &Supervised, app: &str) -> u64 {
    s.events
        .iter()
        .filter(|e| e["event"] == "log_dropped" && e["app"] == app)
        .map(|e| e["count"].as_u64().expect("a count"))
        .sum()
}

/// Lines keep coming and keep failing for a while: still one
/// `log_file_error`, and the worker (`pid`) runs on.
fn said_once_and_the_worker_runs_on(s: &mut Supervised, pid: i32) {
    let more = s.next_within(Duration::from_millis(2500), |e| {
        e["event"] == "log_file_error"
    });
    assert!(more.is_none(), "said once: {more:?}");
    assert_eq!(
        process_state(pid).map(|c| c != 'Z'),
        Some(true),
        "the worker runs on"
    );
}

/// The folder the tests' log files go to.
fn make_logs(dir: &Path) {
    std::fs::create_dir(dir.join("logs")).unwrap();
}

/// SIGTERM, and wait until the supervisor has exited (its log files written).
fn stop(s: &mut Supervised) {
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
}

#[test]
fn a_flood_of_50_mb_rotates_at_max_size_and_every_line_is_whole_or_counted() {
    // 50 MB in lines of 1,000 bytes: long enough lines that a debug build
    // takes them in seconds.
    const LINES: usize = 50_000;
    const LENGTH: usize = 1000;
    const MAX_SIZE: u64 = 4_000_000;
    let mut s = Supervised::start_dropping_output(
        &flood_app(
            LINES,
            LENGTH,
            "{file: \"logs/{app}.log\", max_size: 4MB, keep: 20}",
        ),
        make_logs,
    );
    s.wait_event("exited", "flood");
    stop(&mut s);

    let files = rotated_files(&s.path("logs/flood.log"));
    assert!(files.len() > 10, "50 MB in 4 MB files: {files:?}");
    let mut numbers = Vec::with_capacity(LINES);
    let mut longest_line = 0;
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.ends_with('\n'), "{file:?} ends with a whole line");
        let size = text.len() as u64;
        for raw in text.lines() {
            longest_line = longest_line.max(raw.len() as u64 + 1);
            let line = parse_text_line(raw);
            assert_eq!(
                (line.source.as_str(), line.stream.as_str()),
                ("flood.0", "stdout")
            );
            let (number, pad) = line.line.split_once(' ').expect("a numbered line");
            assert_eq!(pad.len(), LENGTH - 10, "a whole line: {raw}");
            numbers.push(number.parse::<usize>().unwrap());
        }
        assert!(size <= MAX_SIZE, "{file:?} is {size} bytes");
        let last = i + 1 == files.len();
        if !last {
            assert!(
                size + longest_line > MAX_SIZE,
                "{file:?} was rotated only when the next line would not fit ({size} bytes)"
            );
        }
    }
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "lines in the order printed, none twice"
    );
    let lost = dropped(&s, "flood");
    assert_eq!(
        numbers.len() as u64 + lost,
        LINES as u64,
        "lines written + lines reported dropped = lines printed"
    );
}

#[test]
fn rotation_keeps_at_most_keep_old_files_and_the_newest_lines() {
    const LINES: usize = 20_000;
    let mut s = Supervised::start_dropping_output(
        &flood_app(
            LINES,
            100,
            "{file: \"logs/{app}.log\", max_size: 100kB, keep: 2}",
        ),
        |dir| {
            make_logs(dir);
            // A rotated file beyond `keep`, as a higher `keep` before would leave.
            std::fs::write(dir.join("logs/flood.log.3"), "old\n").unwrap();
        },
    );
    s.wait_event("exited", "flood");
    stop(&mut s);

    let mut names: Vec<String> = std::fs::read_dir(s.path("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["flood.log", "flood.log.1", "flood.log.2"]);
    let mut numbers = Vec::new();
    for file in rotated_files(&s.path("logs/flood.log")) {
        for raw in std::fs::read_to_string(file).unwrap().lines() {
            let line = parse_text_line(raw);
            numbers.push(line.line[..8].parse::<usize>().unwrap());
        }
    }
    if dropped(&s, "flood") == 0 {
        assert_eq!(
            numbers.last(),
            Some(&(LINES - 1)),
            "the newest line is kept"
        );
        assert!(
            numbers.windows(2).all(|w| w[1] == w[0] + 1),
            "what is kept is the end, without a gap"
        );
    }
}

#[test]
fn sigusr1_after_a_rename_writes_new_lines_to_a_new_file() {
    let mut s = Supervised::start_dropping_output(
        r#"apps:
  ticker:
    command: ["python3", "-u", "-c", "import time\ni = 0\nwhile True:\n    print(i)\n    i += 1\n    time.sleep(0.02)"]
    log: {file: logs/ticker.log}
"#,
        make_logs,
    );
    let file = s.path("logs/ticker.log");
    let lines_in = |path: &Path| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| parse_text_line(l).line.parse::<u64>().unwrap())
            .collect::<Vec<u64>>()
    };
    assert!(
        eventually(WAIT, || lines_in(&file).len() >= 5),
        "the ticker's lines reach its file\n{}",
        s.dump()
    );
    let moved = s.path("logs/ticker.log.moved");
    std::fs::rename(&file, &moved).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_for("the reopen", |e| e["event"] == "log_reopened");
    assert!(
        eventually(WAIT, || lines_in(&file).len() >= 3),
        "new lines go to a new file at the configured path"
    );
    stop(&mut s);
    let (old, new) = (lines_in(&moved), lines_in(&file));
    assert!(old.last() < new.first(), "{old:?} then {new:?}");
    let all: Vec<u64> = old.iter().chain(&new).copied().collect();
    assert_eq!(all[0], 0);
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "no line lost or doubled across the reopen"
    );
}

/// A worker that prints a line every 50 ms.
const TICKER: &str = r#"["python3", "-u", "-c", "import time\nwhile True:\n    print('tick')\n    time.sleep(0.05)"]"#;

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

/// A ticker whose log file is `file`, in the folder of a fresh supervisor.
fn ticker_logging_to(file: &str, prepare: impl FnOnce(&Path)) -> Supervised {
    Supervised::start_with(
        &format!("apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: \"{file}\"}}\n"),
        &[],
        prepare,
    )
}

/// Whether the file at `path` holds a line the ticker printed.
fn ticked(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.contains("tick"))
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

#[test]
fn json_lines_and_one_file_per_instance() {
    let mut s = Supervised::start_with(
        r#"apps:
  web:
    command: ["sh", "-c", "echo out $SUPERVISE_INSTANCE; echo err $SUPERVISE_INSTANCE >&2; exec sleep 100"]
    instances: 2
    log: {file: "logs/{app}.{instance}.log", format: json}
"#,
        &[],
        make_logs,
    );
    s.wait_count("ready", "web", 2);
    for slot in 0..2u64 {
        let file = s.path(&format!("logs/web.{slot}.log"));
        let records = || -> Vec<Value> {
            std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect()
        };
        assert!(eventually(WAIT, || records().len() == 2), "{file:?}");
        let mut by_stream: BTreeMap<String, String> = BTreeMap::new();
        for record in records() {
            assert_eq!(record["app"], "web");
            assert_eq!(record["instance"], slot);
            humantime::parse_rfc3339(record["timestamp"].as_str().unwrap()).unwrap();
            by_stream.insert(
                record["stream"].as_str().unwrap().to_string(),
                record["line"].as_str().unwrap().to_string(),
            );
        }
        assert_eq!(by_stream["stdout"], format!("out {slot}"));
        assert_eq!(by_stream["stderr"], format!("err {slot}"));
    }
}

#[test]
fn logs_since_shows_only_the_lines_printed_from_then_on() {
    let mut s = Supervised::start(
        r#"apps:
  web:
    command: ["sh", "-c", "echo early; while [ ! -e go ]; do sleep 0.02; done; echo late; exec sleep 100"]
"#,
    );
    s.wait_line("early");
    // A time after `early` was read, in whole milliseconds (the form the
    // client sends), and gone by before `late` can be printed.
    let since = SystemTime::now() + Duration::from_millis(1);
    let since = humantime::format_rfc3339_millis(since).to_string();
    let cut = humantime::parse_rfc3339(&since).unwrap();
    assert!(eventually(WAIT, || SystemTime::now() > cut));
    std::fs::write(s.path("go"), "").unwrap();
    s.wait_line("late");
    let lines = |args: &[&str]| {
        let output = run_client(&s, args);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(lines(&["logs", "web", "--since", &since]), "web.0 | late\n");
    assert_eq!(
        lines(&["logs", "web", "--since", "10m"]),
        "web.0 | early\nweb.0 | late\n"
    );
    let refused = run_client(&s, &["logs", "--since", "yesterday"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("neither a duration"));
}

#[test]
fn an_edit_of_the_log_key_restarts_nothing_and_moves_the_output() {
    let mut s = Supervised::start_with(
        &format!("apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/a.log}}\n"),
        &[],
        make_logs,
    );
    let pid = s.wait_event("spawned", "ticker")["pid"].clone();
    assert!(eventually(WAIT, || s.path("logs/a.log").exists()));
    save(
        &s,
        &format!(
            "apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/b.log, format: json}}\n"
        ),
    );
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    assert!(eventually(WAIT, || {
        std::fs::read_to_string(s.path("logs/b.log")).is_ok_and(|t| t.contains(r#""line":"tick""#))
    }));
    // Whatever the edit restarted, it did in the turn it was applied in.
    s.barrier();
    assert_eq!(s.count("spawned", "ticker"), 1, "a tuned key\n{}", s.dump());
    assert_eq!(s.running_pids("ticker"), [pid.as_i64().unwrap() as i32]);
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
