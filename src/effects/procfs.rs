//! Small reads of /proc.

/// How many processes are in process group `pgid` (zombies included).
pub fn group_members(pgid: i32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| stat_pgrp(&s))
                == Some(pgid)
        })
        .count()
}

/// What the processes of one group use together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUsage {
    pub rss_bytes: u64,
    /// utime + stime of the live members, in clock ticks.
    pub cpu_ticks: u64,
}

/// Memory and CPU time per process group, from one pass over /proc.
pub fn group_usage() -> std::collections::HashMap<i32, GroupUsage> {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut usage = std::collections::HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return usage;
    };
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After the name: state(0) ppid(1) pgrp(2) … utime(11) stime(12) … rss(21)
        let number = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let Some(pgrp) = fields.get(2).and_then(|f| f.parse::<i32>().ok()) else {
            continue;
        };
        let group = usage.entry(pgrp).or_insert_with(GroupUsage::default);
        group.rss_bytes += number(21) * page;
        group.cpu_ticks += number(11) + number(12);
    }
    usage
}

/// Clock ticks per second (for `cpu_ticks`).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100)
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
    fn counts_our_own_group() {
        // SAFETY: getpgrp has no preconditions.
        let pgid = unsafe { libc::getpgrp() };
        assert!(group_members(pgid) >= 1);
    }
}
