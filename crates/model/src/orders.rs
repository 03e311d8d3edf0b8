//! What the core asks the shell to start, in the words both understand:
//! the orders for a worker's process and for a liveness check, and what a
//! worker may say of its watchdog.

use std::sync::Arc;
use std::time::Duration;

use crate::spec::{ProcessDefinition, Readiness};

/// Identifies a worker for the supervisor's whole life (never reused).
pub type WorkerId = u64;

/// Everything the shell needs to start one worker's process.
#[derive(Debug, Clone)]
pub struct SpawnOrder {
    pub app: String,
    pub id: WorkerId,
    pub slot: u32,
    pub generation: u64,
    pub definition: Arc<ProcessDefinition>,
    pub readiness: Readiness,
    /// The hard memory ceiling of the process (bytes, from `max_memory`:
    /// [`crate::limits::memory_ceiling`]), set as its cgroup's `memory.max`
    /// before it runs.
    pub memory_max: Option<u64>,
}

/// Everything the shell needs to run one liveness check.
#[derive(Debug, Clone)]
pub struct CheckOrder {
    pub app: String,
    pub slot: u32,
    /// The leader of the worker checked.
    pub pid: i32,
    /// The check's number, for its answer.
    pub check: u64,
    pub target: CheckTarget,
    pub timeout: Duration,
}

/// What one liveness check does.
#[derive(Debug, Clone)]
pub enum CheckTarget {
    /// A TCP connect or an HTTP GET.
    Probe(crate::spec::Probe),
    /// A command run like the worker (its cwd, environment and user).
    Exec {
        argv: Vec<crate::spec::Template>,
        definition: Arc<ProcessDefinition>,
    },
}

/// What a notify datagram said of the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogMessage {
    /// `WATCHDOG=1`: alive.
    Ping,
    /// `WATCHDOG=trigger`: fail now.
    Trigger,
}
