//! How a run of a worker's process ended: an exit, or a failed start with
//! the step that failed.

use std::fmt;

/// How a process ended, as `waitpid` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Exit {
    Code(i32),
    Signal { signal: i32, core: bool },
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Signal { signal, core } => {
                let name = nix::sys::signal::Signal::try_from(*signal)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {signal}"));
                write!(
                    f,
                    "killed by {name}{}",
                    if *core { " (core dumped)" } else { "" }
                )
            }
        }
    }
}

/// The step of starting a process that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StartStage {
    /// Before the fork: resolving the program, building the environment, a
    /// listening socket that could not be bound.
    Prepare,
    /// `fork` itself (EAGAIN, ENOMEM).
    Fork,
    /// Joining the instance's cgroup.
    Cgroup,
    /// `setgroups`/`setgid`/`setuid` for `user`.
    Identity,
    /// Moving stdio and the listening sockets into place.
    Descriptors,
    /// `chdir` into `cwd` (a deleted directory, say).
    Chdir,
    /// `execve` of the program.
    Exec,
}

impl StartStage {
    /// The code the child writes into its status pipe.
    pub fn code(self) -> i32 {
        match self {
            StartStage::Prepare => 0,
            StartStage::Fork => 1,
            StartStage::Cgroup => 2,
            StartStage::Identity => 3,
            StartStage::Descriptors => 4,
            StartStage::Chdir => 5,
            StartStage::Exec => 6,
        }
    }

    /// The stage a status-pipe code names (unknown codes read as `exec`).
    pub fn from_code(code: i32) -> StartStage {
        match code {
            0 => StartStage::Prepare,
            1 => StartStage::Fork,
            2 => StartStage::Cgroup,
            3 => StartStage::Identity,
            4 => StartStage::Descriptors,
            5 => StartStage::Chdir,
            _ => StartStage::Exec,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StartStage::Prepare => "prepare",
            StartStage::Fork => "fork",
            StartStage::Cgroup => "cgroup",
            StartStage::Identity => "setuid",
            StartStage::Descriptors => "dup2",
            StartStage::Chdir => "chdir",
            StartStage::Exec => "exec",
        }
    }
}

/// Why a process could not be started: the stage and its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StartError {
    pub stage: StartStage,
    pub errno: i32,
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            self.stage.name(),
            nix::errno::Errno::from_raw(self.errno).desc()
        )
    }
}

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
    pub fn is_failure(&self) -> bool {
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
