//! The defaults DESIGN.md §2 marks, and the bounds validation holds the
//! file to.

use std::time::Duration;

pub const INSTANCES: u32 = 1;
pub const READY_DELAY: Duration = Duration::from_secs(1);
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
pub const BACKOFF_FACTOR: f64 = 2.0;
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
pub const KILL_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_SURGE: u32 = 1;
pub const MAX_UNAVAILABLE: u32 = 0;
pub const HEALTH_EVERY: Duration = Duration::from_secs(10);
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub const HEALTH_FAILURES: u32 = 3;
pub const HEALTH_GRACE: Duration = Duration::ZERO;
pub const MEMORY_CHECK: Duration = Duration::from_secs(5);
/// Bounds the file is held to: checks more often than this would keep
/// the loop forking for them (50 instances every 10 ms starved it).
pub const MIN_HEALTH_EVERY: Duration = Duration::from_millis(50);
/// A memory measurement reads every instance's processes.
pub const MIN_MEMORY_CHECK: Duration = Duration::from_millis(100);
/// `WATCHDOG_USEC` must be at least 1 (systemd's `sd_watchdog_enabled`
/// refuses 0) and fit its readers' 64 bits; a day is far beyond use.
pub const MIN_WATCHDOG: Duration = Duration::from_millis(1);
pub const MAX_WATCHDOG: Duration = Duration::from_secs(24 * 3600);
/// The most instances one app may ask for.
pub const MAX_INSTANCES: u32 = 4096;
pub const LOG_MAX_SIZE: u64 = 10 * 1000 * 1000;
pub const LOG_KEEP: u32 = 5;
/// More rotated files than this is a typo, not a retention policy.
pub const MAX_LOG_KEEP: u32 = 1000;
pub const AUTOSCALE_UP_AFTER: Duration = Duration::from_secs(2);
pub const AUTOSCALE_DOWN_AFTER: Duration = Duration::from_secs(60);
/// How often the shell samples an autoscaled app's accept queue and CPU;
/// `up_after` and `down_after` must span a sample at least.
pub const AUTOSCALE_SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The longest `up_after`/`down_after`: a day is far beyond use.
pub const MAX_AUTOSCALE_AFTER: Duration = Duration::from_secs(24 * 3600);
