//! How a process ended, as `waitpid` reports it, and how a start failed:
//! the step that failed and its errno. The effects report these; the core
//! decides on them.

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
                let name = crate::Signal::describe(*signal);
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
        write!(f, "{}: {}", self.stage.name(), errno_text(self.errno))
    }
}

/// The C library's words for `errno` (`No such file or directory`).
pub fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let suffix = format!(" (os error {errno})");
    match text.strip_suffix(&suffix) {
        Some(words) => words.to_string(),
        None => text,
    }
}
