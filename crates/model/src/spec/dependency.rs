//! `depends_on` and `on_dependency_restart`: what another app must be
//! before this one starts a process, and what its restart does to this one.

use serde::{Deserialize, Serialize};

/// One entry of `depends_on`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub app: String,
    pub condition: Condition,
}

/// What a dependency must be before its dependent starts a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// Every wanted instance has a process that ran its program.
    Started,
    /// Every wanted instance is ready (the default).
    Ready,
    /// Every wanted instance is ready and passed a liveness check since.
    Healthy,
    /// Every wanted instance of a one-shot exited 0.
    Completed,
}

impl Condition {
    pub fn name(self) -> &'static str {
        match self {
            Condition::Started => "started",
            Condition::Ready => "ready",
            Condition::Healthy => "healthy",
            Condition::Completed => "completed",
        }
    }
}

/// `on_dependency_restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnDependencyRestart {
    /// Keep running.
    Ignore,
    /// Replace every instance, rolling, once the dependency meets its
    /// condition again with all of its instances replaced.
    Restart,
}
