//! Bounds that the file's checks and the effects must agree on: `check`
//! refuses a file beyond them, and the effects size their fixed arrays by
//! them (nothing is allocated after a fork).

/// The most listening sockets one app may pass (a fixed array in the child:
/// no allocation after fork). Far above any real use.
pub const MAX_LISTEN_FDS: usize = 64;

/// The most sockets of one app with `inject` (`MAX_INJECTED` in the preload
/// library, inject/supervise_inject.c).
pub const MAX_INJECTED_SOCKETS: usize = 16;
