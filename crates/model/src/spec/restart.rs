//! How instances are started again: the delays between restarts, when to
//! give up, and how many a rolling replacement may add or take down at once.
//! Whether to restart at all is [`RestartPolicy`], which the raw file
//! reads as it is.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `restart` policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Restart after any exit.
    Always,
    /// Restart after a non-zero exit or a death by signal.
    OnFailure,
    /// Never restart.
    Never,
}

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
