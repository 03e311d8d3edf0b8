//! The mechanics of an upgrade that are effects: the exec itself, with the
//! fds that survive it and the signals held across it ([`exec`]), and the
//! conversation with the new binary's probe ([`probe`]). What the state
//! handed over holds, and whether the probe agreed, are the supervise
//! crate's.

pub mod exec;
pub mod probe;
