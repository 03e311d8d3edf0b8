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

mod errors;
mod fifo;
mod folders;
mod output;
mod rotation;

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

/// A worker that prints a line every 50 ms.
const TICKER: &str = r#"["python3", "-u", "-c", "import time\nwhile True:\n    print('tick')\n    time.sleep(0.05)"]"#;

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
