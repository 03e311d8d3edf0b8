//! The vocabulary every part of `supervise` speaks: the resolved model of an
//! ecosystem file ([`spec`]), what the core orders and the shell carries out
//! ([`orders`]), how a process ended or failed to start ([`process`]), the
//! signals, the bounds both sides must agree on ([`limits`]), the backoff
//! arithmetic, what changing the file does ([`plan`]), and the control
//! protocol's types ([`protocol`]).
//!
//! It sits at the bottom of the crate graph: the file's checks
//! (`supervise-config`), the pure core (`supervise-core`) and the effects
//! (`supervise-effects`) all depend on it, and it depends on none of them —
//! nor on the system's C library: nothing here touches a process, a file or
//! a clock.

pub mod backoff;
pub mod limits;
pub mod monotonic;
pub mod orders;
pub mod plan;
pub mod process;
pub mod protocol;
pub mod signal;
pub mod spec;
pub mod usage;

pub use signal::Signal;
