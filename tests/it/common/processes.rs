//! Processes, from /proc: their state, children and descendants, the ones
//! with a given argument, their memory; a SIGKILLed supervisor leaving none
//! of its tree; and polling a condition.

use super::*;

/// A process's state letter from /proc (`None` once it is gone).
pub fn process_state(pid: i32) -> Option<char> {
    effects::procfs::state(pid)
}

/// Whether `arg` is one of the arguments in `pid`'s command line.
pub fn has_argument(pid: i32, arg: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|a| a == arg))
}

/// Live (not zombie) processes with `arg` among their arguments: a test
/// marks its workers with a unique one, which forked descendants keep.
pub fn with_argument(arg: &str) -> std::collections::BTreeSet<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
                .filter(|pid| !is_gone(*pid) && has_argument(*pid, arg.as_bytes()))
                .collect()
        })
        .unwrap_or_default()
}

/// An app whose two instances each leave two `sleep`s in their group: what
/// [`sigkill_leaves_nothing`] kills the supervisor of.
pub const FAMILY: &str = r#"
apps:
  family:
    command: [sh, -c, "sleep 1000 & sleep 1000 & echo up; wait"]
    instances: 2
    ready: none
"#;

/// SIGKILL the supervisor of [`FAMILY`] (both instances up): every process
/// of its tree — the undertaker, the shells, their sleeps — must be gone
/// within 5 s.
pub fn sigkill_leaves_nothing(s: &mut Supervised) {
    let tree = descendants_of(s.pid());
    assert!(tree.len() >= 7, "undertaker, 2 shells, 4 sleeps: {tree:?}");
    s.signal(libc::SIGKILL);
    let start = Instant::now();
    let all_gone = eventually(Duration::from_secs(5), || tree.iter().all(|p| is_gone(*p)));
    println!(
        "the whole tree was gone {:?} after SIGKILL",
        start.elapsed()
    );
    let left: Vec<i32> = tree.iter().copied().filter(|p| !is_gone(*p)).collect();
    assert!(all_gone, "survivors: {left:?}");
}

/// The child of `pid` running with `arg` (a helper: `__spawner`, `__undertaker`).
pub fn child_with_argument(pid: i32, arg: &str) -> Option<i32> {
    children_of(pid)
        .into_iter()
        .find(|child| has_argument(*child, arg.as_bytes()))
}

/// Gone, or a zombie (this machine's PID 1 may not reap orphans).
pub fn is_gone(pid: i32) -> bool {
    matches!(process_state(pid), None | Some('Z'))
}

/// The children of `pid`, from /proc.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return children;
    };
    for entry in entries.flatten() {
        let Some(candidate) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{candidate}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(pid) {
            children.push(candidate);
        }
    }
    children
}

/// Every descendant of `pid`.
pub fn descendants_of(pid: i32) -> Vec<i32> {
    let mut all = Vec::new();
    let mut frontier = vec![pid];
    while let Some(next) = frontier.pop() {
        for child in children_of(next) {
            all.push(child);
            frontier.push(child);
        }
    }
    all
}

/// Poll `condition` every 10 ms for up to `limit`; true if it became true.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The resident memory of `pid`, in kB.
pub fn rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
