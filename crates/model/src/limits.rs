//! Bounds that the file's checks and the effects must agree on: `check`
//! refuses a file beyond them, and the effects size their fixed arrays by
//! them (nothing is allocated after a fork).

/// The most listening sockets one app may pass (a fixed array in the child:
/// no allocation after fork). Far above any real use.
pub const MAX_LISTEN_FDS: usize = 64;

/// The most sockets of one app with `inject` (`MAX_INJECTED` in the preload
/// library, inject/supervise_inject.c).
pub const MAX_INJECTED_SOCKETS: usize = 16;

/// How far past `max_memory` an instance may go while its replacement
/// starts (it serves on until then): the hard ceiling is `max_memory` ×
/// `MEMORY_CEILING_PERCENT` / 100. It is the cgroup's `memory.max` where the
/// memory controller reaches the instance's cgroup (the kernel reclaims, then
/// OOM-kills, beyond it), and the core stops an instance measured past it
/// at once everywhere.
pub const MEMORY_CEILING_PERCENT: u64 = 150;

/// The hard memory ceiling of an instance whose `max_memory` is `limit`.
pub fn memory_ceiling(limit: u64) -> u64 {
    let ceiling = u128::from(limit) * u128::from(MEMORY_CEILING_PERCENT) / 100;
    u64::try_from(ceiling).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_ceiling_is_half_again_the_limit_and_never_overflows() {
        assert_eq!(memory_ceiling(200 << 20), 300 << 20);
        assert_eq!(memory_ceiling(3), 4);
        assert_eq!(memory_ceiling(u64::MAX), u64::MAX);
    }
}
