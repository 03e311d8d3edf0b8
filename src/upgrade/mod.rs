//! Self-upgrade: `supervise upgrade` (or SIGUSR2) replaces the running
//! supervisor's binary by a new one without touching a single worker.
//!
//! The running image serializes its whole state — the core's (every app,
//! worker, rollout, hold, timer) and the shell's (the fds of the sockets,
//! pipes and helpers, the output rings, what each process's exec status and
//! output pump were at) — as one versioned [`Handover`]. It first asks the
//! new binary whether it can read it ([`probe`]: `BINARY --upgrade-probe`
//! with the state on stdin, within [`PROBE_TIMEOUT`](effects::upgrade::probe::PROBE_TIMEOUT)); anything but a
//! clear yes refuses the upgrade and leaves everything as it was. Then it
//! writes the state into a memfd and `execve`s the new binary from the main
//! thread, keeping open exactly the fds the state names ([`effects::upgrade::exec`]). The new
//! image finds the memfd through `SUPERVISE_HANDOVER_FD`, restores every part,
//! reaps what exited in the window, re-reads the file, answers the client
//! that asked, and logs `upgraded`.
//!
//! The pid stays the same, so every worker stays our child, keeps its
//! `PR_SET_PDEATHSIG` and its process group; the listening sockets are the
//! same sockets, so no connection is refused; the undertaker keeps its pipe.

pub mod probe;

use std::os::fd::RawFd;

use effects::upgrade::KeptOpen;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The format of [`Handover`]; bumped when it changes incompatibly. A new
/// binary refuses (at the probe) a state of a format it does not read.
pub const FORMAT: u32 = 1;
/// The largest state read (the output rings dominate: 256 KiB per
/// instance at most).
pub(crate) const MAX_STATE_BYTES: usize = 1 << 30;
/// This binary's version, as `status` and the `upgraded` event show it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything one image hands the next. `S` is the supervisor's part: a
/// view of the running one when written, owned when read; `X` the effects'
/// and `L` the loop's (the real ones by default, the simulation's in it).
#[derive(Debug, Serialize, Deserialize)]
pub struct Handover<
    S = crate::supervisor::upgrade::SupervisorState,
    X = effects::system::SystemState,
    L = crate::supervisor::upgrading::ShellState,
> {
    pub(crate) format: u32,
    /// The format of the serialized core ([`supervise_core::STATE_VERSION`]).
    pub(crate) core_format: u32,
    /// The version of the image that wrote it.
    pub(crate) from_version: String,
    /// When the upgrade was asked for (CLOCK_MONOTONIC nanoseconds), for
    /// `took_ms`.
    pub(crate) requested_at: u64,
    pub supervisor: S,
    pub system: X,
    pub(crate) shell: L,
    /// The last lines of every instance (`supervise logs`).
    pub(crate) rings: effects::output::rings::RingsState,
}

/// Why a state cannot be handed over, or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the state is not a supervise state: {0}")]
    NotAState(String),
    #[error("the state is of format {found}; this binary ({VERSION}) reads format {FORMAT}")]
    Format { found: u32 },
    #[error(
        "the core's state is of format {found}; this binary ({VERSION}) reads format {}",
        supervise_core::STATE_VERSION
    )]
    CoreFormat { found: u32 },
    #[error("cannot read the state: {0}")]
    Unreadable(String),
    #[error("cannot write the state: {0}")]
    Unwritable(String),
    #[error("the state names fd {0}, one of stdio")]
    Stdio(RawFd),
    #[error("the state names fd {0} twice")]
    Twice(RawFd),
    #[error(
        "the state is {size} bytes, more than the {limit} a new image reads (the output rings take most of it)"
    )]
    TooLarge { size: usize, limit: usize },
}

/// Just the format, read first: a state of another format is refused with
/// that, not with whatever field it lacks.
#[derive(Deserialize)]
struct FormatOnly {
    format: u32,
    #[serde(default)]
    core_format: u32,
}

impl<S: DeserializeOwned, X: DeserializeOwned, L: DeserializeOwned> Handover<S, X, L> {
    /// Read a state, refusing another format clearly.
    pub fn decode(bytes: &[u8]) -> Result<Handover<S, X, L>, StateError> {
        let head: FormatOnly =
            serde_json::from_slice(bytes).map_err(|e| StateError::NotAState(e.to_string()))?;
        if head.format != FORMAT {
            return Err(StateError::Format { found: head.format });
        }
        if head.core_format != supervise_core::STATE_VERSION {
            return Err(StateError::CoreFormat {
                found: head.core_format,
            });
        }
        serde_json::from_slice(bytes).map_err(|e| StateError::Unreadable(e.to_string()))
    }
}

impl<S, X: KeptOpen, L: KeptOpen> Handover<S, X, L> {
    /// Every fd the state names; each once.
    pub(crate) fn fds(&self) -> Vec<RawFd> {
        let mut fds = self.system.kept_open();
        fds.extend(self.shell.kept_open());
        fds
    }

    /// What decoding cannot see: every fd named is one a process can keep
    /// (above stdio) and is named once.
    pub fn check(&self) -> Result<(), StateError> {
        let fds = self.fds();
        let mut seen = std::collections::HashSet::new();
        for fd in fds {
            if fd < 3 {
                return Err(StateError::Stdio(fd));
            }
            if !seen.insert(fd) {
                return Err(StateError::Twice(fd));
            }
        }
        Ok(())
    }
}

impl<S: Serialize, X: Serialize, L: Serialize> Handover<S, X, L> {
    /// The state as the next image reads it: refused when larger than it
    /// reads ([`MAX_STATE_BYTES`]), which it would find only after the exec,
    /// with nothing left to go back to.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, StateError> {
        let bytes = serde_json::to_vec(self).map_err(|e| StateError::Unwritable(e.to_string()))?;
        readable(bytes, MAX_STATE_BYTES)
    }
}

/// `bytes`, when a new image reads that many (at most `limit`).
fn readable(bytes: Vec<u8>, limit: usize) -> Result<Vec<u8>, StateError> {
    if bytes.len() > limit {
        return Err(StateError::TooLarge {
            size: bytes.len(),
            limit,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state the real loop hands over.
    type Real = Handover;

    #[test]
    fn a_state_of_another_format_is_refused_with_its_format() {
        let other = Real::decode(br#"{"format": 2, "core_format": 1}"#).unwrap_err();
        assert_eq!(other, StateError::Format { found: 2 });
        let other = other.to_string();
        assert!(
            other.contains("format 2") && other.contains("reads format 1"),
            "{other}"
        );
        let core = Real::decode(br#"{"format": 1, "core_format": 9}"#).unwrap_err();
        assert_eq!(core, StateError::CoreFormat { found: 9 });
        assert!(
            core.to_string().contains("core's state is of format 9"),
            "{core}"
        );
        let partial = Real::decode(br#"{"format": 1, "core_format": 1}"#).unwrap_err();
        assert!(matches!(partial, StateError::Unreadable(_)), "{partial}");
        let garbage = Real::decode(b"\xff\x00not json").unwrap_err();
        assert!(matches!(garbage, StateError::NotAState(_)), "{garbage}");
    }

    #[test]
    fn a_state_larger_than_a_new_image_reads_is_refused_before_the_exec() {
        assert_eq!(readable(vec![b'x'; 8], 8), Ok(vec![b'x'; 8]));
        let refused = readable(vec![b'x'; 9], 8).unwrap_err();
        assert_eq!(refused, StateError::TooLarge { size: 9, limit: 8 });
        let refused = refused.to_string();
        assert!(
            refused.contains("9 bytes") && refused.contains("the 8 a new image reads"),
            "{refused}"
        );
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_decoding_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = Real::decode(&bytes);
        }
    }
}
