//! Small reads of /proc.

/// What the processes of one group use together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUsage {
    pub rss_bytes: u64,
    /// utime + stime of the live members, in clock ticks.
    pub cpu_ticks: u64,
}

/// Memory and CPU time per process group, from one pass over /proc (one
/// read per process into one reused buffer).
pub fn group_usage() -> std::collections::HashMap<i32, GroupUsage> {
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

/// How much of a process's environment one `read` takes. The kernel serves
/// one `read` from one program's memory; a second `read` after an `execve`
/// finds the old memory gone and ends the file there (cut short, an entry
/// can be missing). An environment this large is read in one.
pub const ENVIRON_READ_BYTES: usize = 64 * 1024;

/// What a look at a process's environment found.
#[derive(Debug, PartialEq, Eq)]
pub enum Environ {
    /// Gone (or a zombie, or a kernel thread: no environment to have).
    None,
    /// It reads empty. Either the program runs with none (`env -i`), or it
    /// is within an `execve`: for a moment the kernel shows the new
    /// program's memory before the environment is written there, and a read
    /// begun before the switch ends empty. Only time tells them apart.
    Unread,
    /// Read into the buffer.
    Read,
}

/// Read process `pid`'s environment into `buffer` (replaced).
pub fn environ(pid: i32, buffer: &mut Vec<u8>) -> Environ {
    use std::io::Read;
    buffer.clear();
    let Ok(mut file) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return Environ::None;
    };
    buffer.resize(ENVIRON_READ_BYTES, 0);
    let Ok(read) = file.read(buffer) else {
        buffer.clear();
        return Environ::None;
    };
    buffer.truncate(read);
    if read == ENVIRON_READ_BYTES && file.read_to_end(buffer).is_err() {
        return Environ::None;
    }
    if !buffer.is_empty() {
        return Environ::Read;
    }
    match stat_state_and_flags(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default(),
    ) {
        Some((state, flags)) if state != 'Z' && flags & PF_KTHREAD == 0 => Environ::Unread,
        _ => Environ::None,
    }
}

/// The value of the first entry of `environ` that starts with `prefix`
/// (`NAME=` and maybe the start of the value), after the `=`.
pub fn environ_entry<'a>(environ: &'a [u8], prefix: &str) -> Option<&'a [u8]> {
    let name_len = prefix.find('=').map_or(0, |i| i + 1);
    environ
        .split(|b| *b == 0)
        .find(|entry| entry.starts_with(prefix.as_bytes()))
        .map(|entry| &entry[name_len..])
}

/// What one pass over /proc found of a run's processes.
#[derive(Debug, Default)]
pub struct Carriers {
    /// The carriers, by the entry's value.
    pub found: std::collections::HashMap<String, Vec<i32>>,
    /// The processes whose environment read empty ([`Environ::Unread`]).
    pub unread: Vec<i32>,
}

/// Every process whose environment has an entry starting with `prefix`
/// (`SUPERVISE_RUN=<token>.`), by the entry's value (`<token>.<n>`): the
/// processes a run started, wherever they went.
pub fn carriers(prefix: &str) -> Carriers {
    let mut carriers = Carriers::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return carriers;
    };
    let mut buffer = Vec::new();
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
    {
        match environ(pid, &mut buffer) {
            Environ::None => {}
            Environ::Unread => carriers.unread.push(pid),
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
pub fn children(pid: i32) -> Vec<i32> {
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

/// The state letter and the `flags` field of a `/proc/PID/stat` line.
fn stat_state_and_flags(stat: &str) -> Option<(char, u64)> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state: ppid, pgrp, session, tty_nr, tpgid, flags.
    let flags = fields.nth(5)?.parse().ok()?;
    Some((state, flags))
}

/// The process group of `pid`, if it still exists (zombies included).
pub fn pgrp(pid: i32) -> Option<i32> {
    stat_pgrp(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The process group field of a `/proc/PID/stat` line. The command name (field
/// 2) may contain spaces and parentheses, so parse after the *last* `)`.
pub fn stat_pgrp(stat: &str) -> Option<i32> {
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
    fn parses_state_and_flags() {
        let stat = "123 (a) b) S 1 2 3 4 5 4194560 0 0";
        assert_eq!(stat_state_and_flags(stat), Some(('S', 4_194_560)));
        assert_eq!(stat_state_and_flags("123 (x) S 1"), None);
    }

    #[test]
    fn a_kernel_thread_has_no_environment_and_we_have_ours() {
        // kthreadd is pid 2 in the initial pid namespace; elsewhere it is
        // not visible and the read finds nothing either.
        assert_eq!(environ(2, &mut Vec::new()), Environ::None);
        let mut ours = Vec::new();
        assert_eq!(environ(std::process::id() as i32, &mut ours), Environ::Read);
        assert!(environ_entry(&ours, "PATH=").is_some());
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
