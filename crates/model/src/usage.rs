//! What an instance's processes use, as the effects measure it (from its
//! cgroup or a pass over /proc) and `status` and `/metrics` show it.

/// What the processes of one group use together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUsage {
    pub rss_bytes: u64,
    /// utime + stime of the live members, in clock ticks.
    pub cpu_ticks: u64,
}

/// What one sample of an autoscaled app's load measured (the effects
/// measure, the core decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadSample {
    /// Connections waiting in the accept queues of its sockets, summed
    /// (`None`: no socket could be read).
    pub queue: Option<u32>,
    /// The CPU of its ready instances measured, summed, in percent of one
    /// CPU (`None`: none measured yet).
    pub cpu_percent: Option<u32>,
    /// How many ready instances the CPU was measured over.
    pub measured: u32,
}

/// A byte count as `status`, `top` and the log write it, in binary units
/// (as `max_memory` and cgroups count, and as `K`, `M`, `G` are read in the
/// file): `1023 B`, `9.6 MiB`, `200.0 MiB`. One way everywhere, so a limit
/// reads the same in the table and in the log.
pub fn binary_size(count: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if count < 1024 {
        return format!("{count} B");
    }
    let mut value = count as f64 / 1024.0;
    let mut unit = 0;
    // 1023.95 MiB would print as 1024.0 MiB: the next unit reads better.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::binary_size;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(binary_size(0), "0 B");
        assert_eq!(binary_size(1023), "1023 B");
        assert_eq!(binary_size(1024), "1.0 KiB");
        assert_eq!(binary_size(200 << 20), "200.0 MiB");
        assert_eq!(binary_size((1 << 30) - 1), "1.0 GiB");
        assert_eq!(binary_size(1_500_000_000), "1.4 GiB");
        assert_eq!(binary_size(u64::MAX), "16384.0 PiB");
    }
}
