//! Small reads of /proc.

use model::usage::GroupUsage;

/// Memory and CPU time per process group, from one pass over /proc (one
/// read per process into one reused buffer).
pub(crate) fn group_usage() -> std::collections::HashMap<i32, GroupUsage> {
    use std::io::Read;
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut usage = std::collections::HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return usage;
    };
    let mut path = String::with_capacity(32);
    let mut stat = String::with_capacity(512);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        path.clear();
        path.push_str("/proc/");
        path.push_str(pid);
        path.push_str("/stat");
        stat.clear();
        let read = std::fs::File::open(&path).and_then(|mut file| file.read_to_string(&mut stat));
        if read.is_err() {
            continue;
        }
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        // After the name: state(0) ppid(1) pgrp(2) … utime(11) stime(12) … rss(21)
        let mut fields = stat[close + 1..].split_whitespace();
        let mut number = |skip: usize| fields.nth(skip).and_then(|f| f.parse::<u64>().ok());
        let Some(pgrp) = number(2) else {
            continue;
        };
        let utime = number(8).unwrap_or(0);
        let stime = number(0).unwrap_or(0);
        let rss = number(8).unwrap_or(0);
        let group = usage.entry(pgrp as i32).or_insert_with(GroupUsage::default);
        group.rss_bytes += rss * page;
        group.cpu_ticks += utime + stime;
    }
    usage
}

/// The resident memory of process `pid` (`/proc/PID/statm`), if it exists.
pub fn rss_bytes(pid: i32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    Some(pages * page)
}

/// How much of a process's environment the first `read` takes. The kernel
/// serves one `read` from one program's memory, pinned when the file was
/// opened: a `read` after an `execve` finds that memory gone and ends the
/// file there (cut short, an entry can be missing). So a larger environment
/// is read again from a new open, into a buffer twice the size…
pub(crate) const ENVIRON_READ_BYTES: usize = 64 * 1024;
/// …up to this size (the kernel's own bound on arguments and environment
/// together is a quarter of the stack limit: 2 MiB by default). A larger one
/// is completed by further reads of the same open, which an `execve` in
/// between can cut short: only a process with a larger stack limit has one.
pub(crate) const ENVIRON_MAX_READ_BYTES: usize = 4 * 1024 * 1024;
/// How many times an empty read is tried again when the process's memory
/// layout does not settle it (an `execve` ended, or was writing the
/// environment, between the two looks).
const ENVIRON_LOOKS: usize = 3;

/// What a look at a process's environment found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Environ {
    /// Read into the buffer (not empty).
    Read,
    /// Most likely within an `execve`: the new program's memory is in place
    /// but its environment is not written there yet (`env_end` is 0, or the
    /// kernel is writing it while the process runs). Look again later: a
    /// program that runs without an environment all the time reads so too.
    Changing,
    /// None to read: gone, a zombie, a kernel thread, not ours to read, or a
    /// program asleep without one (`env -i`: `env_start == env_end`).
    Absent,
}

/// Read process `pid`'s environment into `buffer` (replaced). An empty read
/// is judged by the process's memory layout in `/proc/PID/stat` (which the
/// kernel does not show as one snapshot of a running process): `env_end` is
/// 0 only within an `execve`, whatever the state (it can sleep there: a page
/// fault on FUSE); `env_start == env_end` is a program without an
/// environment, or an `execve` writing it, which only a running one can be.
pub(crate) fn environ(pid: i32, buffer: &mut Vec<u8>) -> Environ {
    for _ in 0..ENVIRON_LOOKS {
        let read = read_environ(&format!("/proc/{pid}/environ"), buffer);
        if read.is_ok() && !buffer.is_empty() {
            return Environ::Read;
        }
        buffer.clear();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some(layout) = stat_layout(&stat) else {
            return Environ::Absent;
        };
        if layout.flags & PF_KTHREAD != 0 {
            return Environ::Absent;
        }
        if layout.state == 'Z' {
            // A leader that ended while its other threads run on (after
            // `pthread_exit`, or for a moment when another thread execs):
            // the process lives, and their memory is its own.
            return live_thread_environ(pid, buffer);
        }
        let running = matches!(layout.state, 'R' | 'D');
        match (read, layout.env_start, layout.env_end) {
            // Not ours to read (another user's): the layout reads 0 too.
            (Err(_), ..) => return Environ::Absent,
            (Ok(()), _, 0) => return Environ::Changing,
            (Ok(()), start, end) if start == end && !running => return Environ::Absent,
            // Being written, or written since the read: read again.
            _ => {}
        }
    }
    Environ::Changing
}

/// The environment of a thread of `pid` other than its (zombie) leader.
fn live_thread_environ(pid: i32, buffer: &mut Vec<u8>) -> Environ {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Environ::Absent;
    };
    for task in tasks.flatten() {
        if task.file_name().to_str() == Some(&pid.to_string()) {
            continue;
        }
        if read_environ(&format!("{}/environ", task.path().display()), buffer).is_ok()
            && !buffer.is_empty()
        {
            return Environ::Read;
        }
    }
    buffer.clear();
    Environ::Absent
}

/// An `environ` file (see [`ENVIRON_READ_BYTES`]) into `buffer`.
fn read_environ(path: &str, buffer: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Read;
    let mut size = ENVIRON_READ_BYTES;
    loop {
        let mut file = std::fs::File::open(path)?;
        buffer.resize(size, 0);
        let read = file.read(buffer)?;
        buffer.truncate(read);
        if read < size {
            return Ok(());
        }
        if size >= ENVIRON_MAX_READ_BYTES {
            file.read_to_end(buffer)?;
            return Ok(());
        }
        size *= 2;
    }
}

/// The value of the first entry of `environ` that starts with `prefix`
/// (`NAME=` and maybe the start of the value), after the `=`.
pub(crate) fn environ_entry<'a>(environ: &'a [u8], prefix: &str) -> Option<&'a [u8]> {
    let name_len = prefix.find('=').map_or(0, |i| i + 1);
    environ
        .split(|b| *b == 0)
        .find(|entry| entry.starts_with(prefix.as_bytes()))
        .map(|entry| &entry[name_len..])
}

/// What one pass over /proc found of a run's processes.
#[derive(Debug, Default)]
pub(crate) struct Carriers {
    /// The carriers, by the entry's value.
    pub(crate) found: std::collections::HashMap<String, Vec<i32>>,
    /// The processes whose environment read [`Environ::Changing`].
    pub(crate) changing: Vec<i32>,
}

/// Every process but this one whose environment has an entry starting with
/// `prefix` (`SUPERVISE_RUN=<token>.`), by the entry's value
/// (`<token>.<n>`): the processes a run started, wherever they went.
pub(crate) fn carriers(prefix: &str) -> Carriers {
    let mut carriers = Carriers::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return carriers;
    };
    let own = std::process::id() as i32;
    let mut buffer = Vec::new();
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| *pid != own)
    {
        match environ(pid, &mut buffer) {
            Environ::Absent => {}
            Environ::Changing => carriers.changing.push(pid),
            Environ::Read => {
                if let Some(value) = environ_entry(&buffer, prefix) {
                    let value = String::from_utf8_lossy(value).into_owned();
                    carriers.found.entry(value).or_default().push(pid);
                }
            }
        }
    }
    carriers
}

/// The children of `pid` (every thread's), from `/proc/PID/task/*/children`.
pub(crate) fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Clock ticks per second (for `cpu_ticks`).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100)
}

/// The state letter of `pid` (`R`, `S`, `Z`…), if it still exists.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The kernel's flag of a kernel thread, in `/proc/PID/stat`'s `flags`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What `/proc/PID/stat` says of a process's state and memory layout.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    state: char,
    flags: u64,
    /// Where its environment starts and ends in its memory (fields 50 and
    /// 51; 0 for a reader without the right to see them).
    env_start: u64,
    env_end: u64,
}

/// The [`Layout`] in a `/proc/PID/stat` line.
fn stat_layout(stat: &str) -> Option<Layout> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // After the name, the state is field 3 of the line: field N is at N - 3.
    let number = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    Some(Layout {
        state: fields.first()?.chars().next()?,
        flags: number(9)?,
        env_start: number(50).unwrap_or(0),
        env_end: number(51).unwrap_or(0),
    })
}

/// A live process (a zombie whose other threads run on counts): our child
/// not reaped yet, or any process, for the walks of a process tree.
pub(crate) fn alive(pid: i32) -> bool {
    match state(pid) {
        None => false,
        Some('Z') => std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| tasks.flatten().count() > 1)
            .unwrap_or(false),
        Some(_) => true,
    }
}

/// The process group of `pid`, if it still exists (zombies included).
pub(crate) fn pgrp(pid: i32) -> Option<i32> {
    stat_pgrp(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The process group field of a `/proc/PID/stat` line. The command name (field
/// 2) may contain spaces and parentheses, so parse after the *last* `)`.
pub(crate) fn stat_pgrp(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name: state, ppid, pgrp, …
    rest.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pgrp_even_with_odd_command_names() {
        assert_eq!(stat_pgrp("123 (sleep) S 1 456 456 0 -1"), Some(456));
        assert_eq!(stat_pgrp("123 (a) b) (c) S 1 789 789 0"), Some(789));
        assert_eq!(stat_pgrp("garbage"), None);
    }

    #[test]
    fn parses_the_layout_even_with_odd_command_names() {
        let mut fields: Vec<String> = (4..=52).map(|n| n.to_string()).collect();
        fields[9 - 4] = "4194560".into();
        let stat = format!("123 (a) b) S {}", fields.join(" "));
        assert_eq!(
            stat_layout(&stat),
            Some(Layout {
                state: 'S',
                flags: 4_194_560,
                env_start: 50,
                env_end: 51
            })
        );
        assert_eq!(stat_layout("123 (x) S 1"), None);
    }

    #[test]
    fn a_kernel_thread_has_no_environment_and_we_have_ours() {
        // Any kernel thread this pid namespace shows (none in some
        // containers: then only our own read is checked).
        let kernel_thread = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| stat_layout(&stat))
                    .is_some_and(|layout| layout.flags & PF_KTHREAD != 0)
            });
        if let Some(pid) = kernel_thread {
            assert_eq!(environ(pid, &mut Vec::new()), Environ::Absent);
        }
        let mut ours = Vec::new();
        assert_eq!(environ(std::process::id() as i32, &mut ours), Environ::Read);
        assert!(environ_entry(&ours, "PATH=").is_some());
    }

    #[test]
    fn an_environment_larger_than_one_read_is_read_whole() {
        // Three reads' worth, in entries the kernel takes (one may not
        // exceed 128 KiB).
        let mut command = std::process::Command::new("sleep");
        command.arg("5").env("SUPERVISE_RUN", "abc.3");
        for n in 0..6 {
            command.env(
                format!("SUPERVISE_LARGE_{n}"),
                "x".repeat(ENVIRON_READ_BYTES / 2),
            );
        }
        let mut child = command.spawn().unwrap();
        let pid = child.id() as i32;
        let mut buffer = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while environ(pid, &mut buffer) != Environ::Read && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            environ_entry(&buffer, "SUPERVISE_RUN="),
            Some(&b"abc.3"[..])
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn usage_of_our_own_group_has_our_memory() {
        // SAFETY: getpgrp has no preconditions.
        let pgid = unsafe { libc::getpgrp() };
        let ours = group_usage()[&pgid];
        assert!(ours.rss_bytes > 1024 * 1024, "{ours:?}");
    }

    #[test]
    fn our_children_are_listed() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(children(std::process::id() as i32).contains(&pid));
        assert!(children(pid).is_empty());
        let _ = child.kill();
        let _ = child.wait();
    }
}
