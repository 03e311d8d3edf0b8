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
