//! How every process an instance starts is tracked, waited for and stopped
//! — however it daemonizes — in one of two modes, chosen once at start:
//!
//! - **cgroups** (a writable cgroup v2 hierarchy: [`super::cgroup`]): each
//!   process the supervisor starts is born in a cgroup of its own, which its
//!   descendants cannot leave. Its stop signal reaches its process group and
//!   every member of its cgroup outside it; the stop ends when the cgroup is
//!   empty (watched with inotify); SIGKILL is `cgroup.kill`.
//! - **the environment** (no usable cgroups): each process started carries
//!   `SUPERVISE_RUN=<run token>.<spawn number>`, which its descendants
//!   inherit. An instance is its leader's process tree, whatever groups and
//!   sessions its members moved to, plus the trees of the orphans we adopted
//!   (as a subreaper) that carry its token; they are signalled, waited for
//!   and killed with it. At shutdown every adopted process and its tree is
//!   killed. When the supervisor is SIGKILLed, its tree is gone: the
//!   undertaker kills the recorded process groups and every carrier of the
//!   run's token. An orphan that cleared its environment is not attributed
//!   to its instance, and one that also left its process group survives a
//!   SIGKILL of the supervisor — the manual says so (docs/src/process-tracking.md).
//!
//! Either way, a run that dies with its undertaker is cleaned by the next
//! run of the same file: its cgroup tree is found by name, its token in the
//! runtime directory. A tree whose supervisor still runs is another live
//! run of the file (through a lock it cannot see): refused.
//!
//! `status` shows which mode is active, and why not cgroups when it is not.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cgroup;
use super::procfs;
use super::undertaker::Orders;

/// The most a token record may hold (a token is 16 hex digits).
const TOKEN_RECORD_BYTES: usize = 64;
/// How long a process whose environment cannot be read yet (see
/// [`procfs::Environ::Changing`]) is looked at again before it is taken for
/// one without a token.
pub(crate) const CHANGING_WAIT: Duration = Duration::from_secs(2);
/// Rounds of killing a run's token carriers: those forked while the last
/// round killed, and those not read yet, are found at a later one. At most
/// this many…
const CARRIER_ROUNDS: u32 = 60;
/// …this far apart (together longer than [`CHANGING_WAIT`]).
const CARRIER_ROUND_PAUSE: Duration = Duration::from_millis(50);

/// The run's cgroup tree (see [`super::cgroup`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CgroupRun {
    /// The cgroup the supervisor was started in.
    pub(crate) base: PathBuf,
    /// `base/supervise.<key>.<pid>`: this run's tree (`supervisor/`, where
    /// the supervisor itself is, and `instances/`).
    pub(crate) root: PathBuf,
    /// `root/instances`: one cgroup per process started, below.
    pub(crate) instances: PathBuf,
    /// Processes of a previous run of the same file that were found and killed.
    pub(crate) leftovers: usize,
}

/// Another supervisor runs the same file: its pid, and its cgroup tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("already supervised by pid {pid} (its cgroup tree is {}; another runtime directory?)", tree.display())]
pub struct AlreadyRunning {
    pub(crate) pid: i32,
    pub(crate) tree: PathBuf,
}

/// The mode, with what it needs.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Tracking {
    Cgroups(CgroupRun),
    /// `SUPERVISE_RUN` tokens; `why` there are no cgroups.
    Environment {
        token: String,
        why: String,
        /// Where the token is kept (the runtime directory), so that the
        /// next run of the file kills what this one leaves if it dies with
        /// its undertaker…
        record: PathBuf,
        /// …and what the previous run left: how many processes were killed.
        leftovers: usize,
    },
}

impl Tracking {
    /// Cgroups when allowed and possible, else the environment. `key` names
    /// the file's subtree (stable across edits of the file). Call while the
    /// process is single-threaded: it moves the whole process.
    ///
    /// Refused when the cgroup tree shows another live supervisor on the
    /// same file (one whose lock we could not see: another runtime
    /// directory).
    pub fn choose(key: &str, runtime: &Path, cgroups: bool) -> Result<Tracking, AlreadyRunning> {
        let why = if cgroups {
            match cgroup::detect() {
                Ok(base) => match CgroupRun::setup(&base, key)? {
                    Ok(run) => return Ok(Tracking::Cgroups(run)),
                    Err(why) => why,
                },
                Err(why) => why,
            }
        } else {
            "turned off with --cgroups off".to_string()
        };
        let token = random_token();
        let record = runtime.join(format!("{key}.run"));
        let leftovers = take_over(&record, &token);
        Ok(Tracking::Environment {
            token,
            why,
            record,
            leftovers,
        })
    }

    /// For the start log and `status`.
    pub fn describe(&self) -> String {
        match self {
            Tracking::Cgroups(run) => format!("cgroup v2 ({})", run.root.display()),
            Tracking::Environment { why, .. } => {
                format!("process environment (SUPERVISE_RUN; no cgroup: {why})")
            }
        }
    }

    /// What the undertaker cleans up when the supervisor dies.
    pub fn undertaker_orders(&self) -> Orders {
        match self {
            Tracking::Cgroups(run) => Orders::Cgroups {
                root: run.root.clone(),
                base: run.base.clone(),
            },
            Tracking::Environment { token, .. } => Orders::Token(token.clone()),
        }
    }

    /// Everything has stopped: remove the cgroup tree (leaving it first),
    /// or the token's record.
    pub fn teardown(&self) {
        match self {
            Tracking::Cgroups(run) => {
                cgroup::clear(&run.instances);
                let _ = cgroup::enter(&run.base, std::process::id());
                cgroup::remove_tree(&run.root);
            }
            Tracking::Environment { record, .. } => {
                let _ = std::fs::remove_file(record);
            }
        }
    }

    /// Processes of a previous run of this file that were found and killed.
    pub fn leftovers(&self) -> usize {
        match self {
            Tracking::Cgroups(run) => run.leftovers,
            Tracking::Environment { leftovers, .. } => *leftovers,
        }
    }
}

impl CgroupRun {
    /// Create `base/supervise.<key>.<pid>` after killing and removing what
    /// previous runs of the same file left in theirs, and move ourselves into
    /// its `supervisor/`. One tree per run, so that a previous run's
    /// undertaker, still cleaning up its own, never touches ours.
    /// A tree whose supervisor still runs (its pid, in the name, is in its
    /// `supervisor/` cgroup) is another live run: refused, untouched.
    fn setup(base: &Path, key: &str) -> Result<Result<CgroupRun, String>, AlreadyRunning> {
        let prefix = format!("supervise.{key}.");
        let root = base.join(format!("{prefix}{}", std::process::id()));
        let entries = match std::fs::read_dir(base) {
            Ok(entries) => entries,
            Err(e) => return Ok(Err(format!("cannot read {}: {e}", base.display()))),
        };
        let previous: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .map(|e| e.path())
            .filter(|p| *p != root)
            .collect();
        for tree in &previous {
            let owner = tree
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit('.').next())
                .and_then(|pid| pid.parse::<i32>().ok());
            if let Some(pid) = owner
                && cgroup::pids(&tree.join("supervisor")).contains(&pid)
            {
                return Err(AlreadyRunning {
                    pid,
                    tree: tree.clone(),
                });
            }
        }
        Ok(CgroupRun::create(base, root, &previous))
    }

    /// Kill and remove what the `previous` runs left, create `root`, move
    /// into its `supervisor/`.
    fn create(base: &Path, root: PathBuf, previous: &[PathBuf]) -> Result<CgroupRun, String> {
        let mut leftovers = 0;
        for previous in previous {
            // Its helpers first (an undertaker still cleaning up), then its
            // instances.
            cgroup::clear(&previous.join("supervisor"));
            leftovers += cgroup::clear(&previous.join("instances"));
            cgroup::remove_tree(previous);
        }
        let supervisor = root.join("supervisor");
        let instances = root.join("instances");
        for dir in [&root, &supervisor, &instances] {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    cgroup::remove_tree(&root);
                    return Err(format!("cannot create {}: {e}", dir.display()));
                }
            }
        }
        // An instance's cgroup can be made there (cgroup.max.depth and
        // cgroup.max.descendants may forbid it).
        let probe = instances.join("probe");
        if let Err(e) = std::fs::create_dir(&probe) {
            cgroup::remove_tree(&root);
            return Err(format!(
                "cannot create an instance's cgroup in {}: {e}",
                instances.display()
            ));
        }
        let _ = std::fs::remove_dir(&probe);
        // Not on a root cgroup, which never has one: on ours.
        if !root.join("cgroup.kill").exists() {
            cgroup::remove_tree(&root);
            return Err("the kernel has no cgroup.kill (Linux 5.14 or later has)".into());
        }
        if let Err(e) = cgroup::enter(&supervisor, std::process::id()) {
            cgroup::remove_tree(&root);
            return Err(format!("cannot move into {}: {e}", supervisor.display()));
        }
        // Memory per instance where the memory controller reaches our tree
        // (a pure v2 system, a delegated subtree): turned on in the part we
        // own, never above it. Without it, `status` counts RSS.
        for dir in [&root, &instances] {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory");
        }
        Ok(CgroupRun {
            base: base.to_path_buf(),
            root,
            instances,
            leftovers,
        })
    }
}

/// Kill every process that carries the token a previous run recorded in
/// `record` (it died with its undertaker: nothing else will), then record
/// `token`. How many were killed.
fn take_over(record: &Path, token: &str) -> usize {
    let previous = std::fs::read(record).unwrap_or_default();
    let previous = String::from_utf8_lossy(&previous);
    let previous = previous.trim();
    let mut killed = 0;
    if !previous.is_empty() && previous.len() <= TOKEN_RECORD_BYTES {
        killed = kill_carriers(&format!("SUPERVISE_RUN={previous}."));
    }
    let temporary = record.with_extension("run.new");
    if std::fs::write(&temporary, token).is_ok() {
        let _ = std::fs::rename(&temporary, record);
    }
    killed
}

/// SIGKILL every process whose environment has an entry that starts with
/// `prefix` (`SUPERVISE_RUN=<token>.`: a run's processes, wherever they
/// went), in rounds until a round finds no new one. The processes that could
/// not be read at the first round (within an `execve`) are waited for, up to
/// [`CHANGING_WAIT`]; one that begins an `execve` later was started by a
/// live process, whose own carriers the rounds go on finding. How many were
/// killed.
pub fn kill_carriers(prefix: &str) -> usize {
    let started = std::time::Instant::now();
    let mut killed = HashSet::new();
    // The processes not read at the first round.
    let mut first_unread: Option<HashSet<i32>> = None;
    for round in 0..CARRIER_ROUNDS {
        if round > 0 {
            std::thread::sleep(CARRIER_ROUND_PAUSE);
        }
        let look = procfs::carriers(prefix);
        let first = first_unread.get_or_insert_with(|| look.changing.iter().copied().collect());
        let waiting = started.elapsed() < CHANGING_WAIT
            && look.changing.iter().any(|pid| first.contains(pid));
        let new: Vec<i32> = look
            .found
            .into_values()
            .flatten()
            .filter(|pid| !killed.contains(pid))
            .collect();
        if new.is_empty() && !waiting {
            break;
        }
        for pid in new {
            // SAFETY: a process that carries a run's token (the caller's
            // own run, or a previous run of the same file).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed.insert(pid);
        }
    }
    killed.len()
}

/// 16 hex digits from the kernel's random source.
pub fn random_token() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom fills the buffer it is given.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if filled != bytes.len() as isize {
        // Unique enough for a token that only has to differ between runs.
        let seed = std::process::id() as u64
            ^ std::time::UNIX_EPOCH
                .elapsed()
                .map_or(0, |d| d.as_nanos() as u64);
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Our children that we did not start ourselves — adopted descendants of
/// workers, as a subreaper — read from /proc/self/task/*/children.
pub(crate) fn adopted(known: &HashSet<i32>) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return pids;
    };
    for task in tasks.flatten() {
        let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .filter(|p| !known.contains(p)),
        );
    }
    pids
}

/// What a process's environment says of the `SUPERVISE_RUN` it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunToken {
    Token(String),
    /// No token: its environment has none, or it has none to read.
    Nothing,
    /// Not known yet: it is within an `execve`
    /// ([`procfs::Environ::Changing`]).
    Changing,
}

/// The `SUPERVISE_RUN` process `pid` carries (`buffer` is scratch space,
/// reused across calls).
pub(crate) fn run_token(pid: i32, buffer: &mut Vec<u8>) -> RunToken {
    match procfs::environ(pid, buffer) {
        procfs::Environ::Absent => RunToken::Nothing,
        procfs::Environ::Changing => RunToken::Changing,
        procfs::Environ::Read => procfs::environ_entry(buffer, "SUPERVISE_RUN=")
            .map_or(RunToken::Nothing, |value| {
                RunToken::Token(String::from_utf8_lossy(value).into_owned())
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn a_child_we_did_not_start_is_adopted_and_its_token_is_read() {
        let child = Reaped(
            std::process::Command::new("sleep")
                .arg("5")
                .env("SUPERVISE_RUN", "abc.7")
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id() as i32;
        assert!(adopted(&HashSet::new()).contains(&pid));
        assert!(!adopted(&HashSet::from([pid])).contains(&pid));
        // `spawn` returns once the new program's memory is in place, which is
        // before the kernel has written its environment there.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while run_token(pid, &mut Vec::new()) == RunToken::Changing
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            run_token(pid, &mut Vec::new()),
            RunToken::Token("abc.7".into())
        );
    }

    /// A child of the test, killed and reaped however the test ends.
    struct Reaped(std::process::Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_program_run_without_an_environment_carries_nothing() {
        let child = Reaped(
            std::process::Command::new("env")
                .args(["-i", "sleep", "5"])
                .env("SUPERVISE_RUN", "abc.8")
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // `env` carries the token until it runs `sleep` with none; until it
        // sleeps, it may be writing that (empty) environment.
        let asleep = || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() == "sleep\n"
                && procfs::state(pid) == Some('S')
        };
        while !asleep() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(run_token(pid, &mut Vec::new()), RunToken::Nothing);
        drop(child);
        assert_eq!(run_token(pid, &mut Vec::new()), RunToken::Nothing);
    }

    /// A shell that does nothing but exec itself again (100,000 times: for
    /// longer than a test looks), with `variable` in its environment; its
    /// script is written into `dir`.
    fn execing(dir: &std::path::Path, variable: (&str, &str)) -> Reaped {
        let again = dir.join("again.sh");
        std::fs::write(
            &again,
            format!(
                "[ \"$1\" -gt 0 ] && exec /bin/sh {} $(($1 - 1))\n",
                again.display()
            ),
        )
        .unwrap();
        Reaped(
            std::process::Command::new("/bin/sh")
                .arg(&again)
                .arg("100000")
                .env(variable.0, variable.1)
                .spawn()
                .unwrap(),
        )
    }

    /// The race a probe's leftover lost in CI: a look that falls within the
    /// leftover's `execve` read no environment and took it for a process
    /// without a token. A process that does nothing but exec again (for
    /// longer than the test looks) is never read so.
    #[test]
    fn a_process_within_execve_is_never_taken_for_one_without_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let child = execing(dir.path(), ("SUPERVISE_RUN", "abc.9"));
        let pid = child.0.id() as i32;
        let (mut token, mut changing) = (0, 0);
        let mut buffer = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < deadline {
            match run_token(pid, &mut buffer) {
                RunToken::Token(t) => {
                    assert_eq!(t, "abc.9");
                    token += 1;
                }
                RunToken::Changing => changing += 1,
                RunToken::Nothing => panic!("read as carrying nothing ({token} reads before)"),
            }
        }
        assert!(token > 0, "never read its token ({changing} reads empty)");
    }

    #[test]
    fn every_carrier_is_killed_even_one_within_an_execve() {
        let mark = format!("SUPERVISE_TEST_MARK={}", random_token());
        let (name, value) = mark.split_once('=').unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut asleep = Reaped(
            std::process::Command::new("sleep")
                .arg("30")
                .env(name, value)
                .spawn()
                .unwrap(),
        );
        let mut exec_loop = execing(dir.path(), (name, value));
        assert_eq!(kill_carriers(&mark), 2);
        for child in [&mut asleep, &mut exec_loop] {
            let status = child.0.wait().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(libc::SIGKILL)
            );
        }
    }
}
