//! The mechanics of an upgrade that are effects: the exec itself, with the
//! fds that survive it and the signals held across it ([`exec`]), and the
//! conversation with the new binary's probe ([`probe`]). What the state
//! handed over holds, and whether the probe agreed, are the supervise
//! crate's.

pub mod exec;
pub mod probe;

use std::os::fd::RawFd;

/// A part of an upgrade's state that names fds: each must be kept open
/// across the exec, and is adopted by the new image.
pub trait KeptOpen {
    /// Every fd this part names.
    fn kept_open(&self) -> Vec<RawFd>;
}
