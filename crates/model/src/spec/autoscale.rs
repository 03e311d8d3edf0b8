//! `autoscale`: an app whose instance count follows its load, within a
//! range the file gives. The file is the truth of the range; the count in
//! it is state the core keeps (see supervise-core's `autoscale`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `autoscale: {min, max, queue, cpu, up_after, down_after}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoscaleSpec {
    /// The fewest instances (0 only with a `queue` target on a shared TCP
    /// socket: one connection waiting then starts one).
    pub min: u32,
    /// The most instances; `max_from_cpus` when written `max` (one per CPU).
    pub max: u32,
    pub max_from_cpus: bool,
    /// Target: connections waiting in the accept queue per ready instance.
    pub queue: Option<u32>,
    /// Target: the average CPU of a ready instance, in percent of one CPU.
    pub cpu_percent: Option<u32>,
    /// A target exceeded this long: scale up.
    pub up_after: Duration,
    /// Below half of every target this long: scale down by one.
    pub down_after: Duration,
}

impl AutoscaleSpec {
    /// `count` kept within the range.
    pub fn clamp(&self, count: u32) -> u32 {
        count.clamp(self.min, self.max)
    }
}
