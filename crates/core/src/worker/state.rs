//! The states of a worker, with the data valid in each, and the table of the
//! transitions allowed between them.

use std::time::Instant;

use super::{AfterStop, Exit};

/// The states of [`Worker`](super::Worker), with the data valid in each.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum State {
    /// Created; its first process is about to be started.
    Pending,
    /// The spawn was ordered; its result (a pid or an error) comes next.
    Spawning,
    /// Running, not ready yet.
    Starting {
        pid: i32,
        #[serde(with = "model::monotonic::instant")]
        since: Instant,
        /// `exec` succeeded: the program, not a forked copy of us, runs.
        exec_confirmed: bool,
    },
    /// Running and ready.
    Ready {
        pid: i32,
        #[serde(with = "model::monotonic::instant")]
        started: Instant,
        #[serde(with = "model::monotonic::instant")]
        since: Instant,
    },
    /// Told to stop; done when every process of its instance is gone.
    Stopping {
        pid: i32,
        #[serde(with = "model::monotonic::instant")]
        since: Instant,
        /// When SIGKILL goes to the group.
        #[serde(with = "model::monotonic::instant")]
        deadline: Instant,
        killed: bool,
        /// How the leader ended, once reaped (the group may still have members).
        leader_exit: Option<Exit>,
        then: AfterStop,
    },
    /// Waiting to restart.
    Backoff {
        #[serde(with = "model::monotonic::instant")]
        until: Instant,
    },
    /// Gave up: `max_restarts` exceeded. Restarts only on a definition change or command.
    Failed,
    /// Stopped by `supervise stop`; starts again on `start` or a change of its app.
    Held,
    /// Ended and the restart policy says not to restart (`never` after a
    /// failure).
    Exited,
    /// Ran to its end with exit 0, not to be run again (`never`, or
    /// `on-failure`): a one-shot that did its job, at `at`. Runs again only
    /// when its definition changes, or on `restart`.
    Completed {
        #[serde(with = "model::monotonic::instant")]
        at: Instant,
    },
}

/// The name of a state, without its data: what [`ALLOWED`] is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Pending,
    Spawning,
    Starting,
    Ready,
    Stopping,
    Backoff,
    Failed,
    Held,
    Exited,
    Completed,
}

impl Kind {
    #[cfg(test)]
    pub(crate) const ALL: [Kind; 10] = [
        Kind::Pending,
        Kind::Spawning,
        Kind::Starting,
        Kind::Ready,
        Kind::Stopping,
        Kind::Backoff,
        Kind::Failed,
        Kind::Held,
        Kind::Exited,
        Kind::Completed,
    ];
}

/// `(A, [B, C])`: state A may be entered only from B or C. Staying in a state
/// with new data (a stop that records its leader's exit) is not a transition.
pub const ALLOWED: &[(Kind, &[Kind])] = &[
    (Kind::Spawning, &[Kind::Pending, Kind::Backoff]),
    (Kind::Starting, &[Kind::Spawning]),
    (Kind::Ready, &[Kind::Starting]),
    (Kind::Stopping, &[Kind::Starting, Kind::Ready]),
    (
        Kind::Backoff,
        &[Kind::Spawning, Kind::Starting, Kind::Ready, Kind::Stopping],
    ),
    (
        Kind::Failed,
        &[Kind::Spawning, Kind::Starting, Kind::Ready, Kind::Stopping],
    ),
    (
        Kind::Exited,
        &[Kind::Spawning, Kind::Starting, Kind::Ready, Kind::Stopping],
    ),
    (Kind::Completed, &[Kind::Starting, Kind::Ready]),
    (
        Kind::Held,
        &[
            Kind::Pending,
            Kind::Backoff,
            Kind::Failed,
            Kind::Exited,
            Kind::Completed,
            Kind::Stopping,
        ],
    ),
    (
        Kind::Pending,
        &[
            Kind::Backoff,
            Kind::Failed,
            Kind::Exited,
            Kind::Completed,
            Kind::Held,
            Kind::Stopping,
        ],
    ),
];

/// Whether [`ALLOWED`] lets a worker go from `from` to `to`.
pub fn allowed(from: Kind, to: Kind) -> bool {
    ALLOWED
        .iter()
        .any(|(target, sources)| *target == to && sources.contains(&from))
}

impl State {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            State::Pending => Kind::Pending,
            State::Spawning => Kind::Spawning,
            State::Starting { .. } => Kind::Starting,
            State::Ready { .. } => Kind::Ready,
            State::Stopping { .. } => Kind::Stopping,
            State::Backoff { .. } => Kind::Backoff,
            State::Failed => Kind::Failed,
            State::Held => Kind::Held,
            State::Exited => Kind::Exited,
            State::Completed { .. } => Kind::Completed,
        }
    }

    /// The leader's pid while a process exists.
    pub fn pid(&self) -> Option<i32> {
        match self {
            State::Starting { pid, .. }
            | State::Ready { pid, .. }
            | State::Stopping { pid, .. } => Some(*pid),
            _ => None,
        }
    }

    /// Starting or ready: a process that serves or is about to.
    pub fn is_running(&self) -> bool {
        matches!(self, State::Starting { .. } | State::Ready { .. })
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, State::Ready { .. })
    }

    pub fn is_stopping(&self) -> bool {
        matches!(self, State::Stopping { .. })
    }

    /// When the current process was started, while there is one.
    pub fn started(&self) -> Option<Instant> {
        match self {
            State::Starting { since, .. } => Some(*since),
            State::Ready { started, .. } => Some(*started),
            _ => None,
        }
    }

    /// The name `status` shows.
    pub fn name(&self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Spawning | State::Starting { .. } => "starting",
            State::Ready { .. } => "ready",
            State::Stopping { .. } => "stopping",
            State::Backoff { .. } => "backoff",
            State::Failed => "failed",
            State::Held => "stopped (held)",
            State::Exited => "exited",
            State::Completed { .. } => "completed",
        }
    }
}
