//! What ended a run of a worker's process: an exit, a failed start, or a
//! verdict of the core (not ready in time, unhealthy, over its memory, its
//! watchdog missed).

use std::fmt;

use model::process::{Exit, StartError};

/// What ended a run of the worker's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// The process exited (or was killed) on its own.
    Exited(Exit),
    /// The process could not be started.
    StartFailed(StartError),
    /// It did not become ready within `ready_timeout` and was stopped.
    NotReady,
    /// `health.failures` consecutive liveness checks failed.
    Unhealthy,
    /// It used more than `max_memory`.
    MemoryExceeded,
    /// It missed its watchdog deadline (or sent `WATCHDOG=trigger`).
    WatchdogMissed,
}

impl Outcome {
    /// Whether `restart: on-failure` restarts after this.
    pub(crate) fn is_failure(&self) -> bool {
        !matches!(self, Outcome::Exited(Exit::Code(0)))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Exited(exit) => exit.fmt(f),
            Outcome::StartFailed(error) => write!(f, "failed to start: {error}"),
            Outcome::NotReady => f.write_str("was not ready in time"),
            Outcome::Unhealthy => f.write_str("was unhealthy"),
            Outcome::MemoryExceeded => f.write_str("used more than max_memory"),
            Outcome::WatchdogMissed => f.write_str("missed its watchdog"),
        }
    }
}
