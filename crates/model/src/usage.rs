//! What an instance's processes use, as the effects measure it (from its
//! cgroup or a pass over /proc) and `status` and `/metrics` show it.

/// What the processes of one group use together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUsage {
    pub rss_bytes: u64,
    /// utime + stime of the live members, in clock ticks.
    pub cpu_ticks: u64,
}
