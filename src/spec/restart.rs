//! How instances are started again: the delays between restarts, when to
//! give up, and how many a rolling replacement may add or take down at once.
//! Whether to restart at all is [`RestartPolicy`](super::RestartPolicy),
//! shared with the raw file.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Delays between restarts: `min(initial * factor^(n-1), max)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BackoffPolicy {
    pub initial: Duration,
    pub max: Duration,
    pub factor: f64,
    /// Ready this long resets the attempt counter.
    pub reset_after: Duration,
}

/// Give up after `count` restarts within `within`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaxRestarts {
    pub count: u32,
    pub within: Duration,
}

/// Rolling replacement limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadLimits {
    pub max_surge: u32,
    pub max_unavailable: u32,
}
