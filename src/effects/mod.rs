//! The effectful shell around the pure core: processes, signals, sockets,
//! files and output. Each piece is thin and behind a small interface; the
//! decisions are made in [`crate::reconcile`] and [`crate::worker`].

pub mod control;
pub mod logging;
pub mod notify;
pub mod output;
pub mod probe;
pub mod procfs;
pub mod runtime;
pub mod sockets;
pub mod spawn;
pub mod systemd;
pub mod undertaker;
pub mod watch;
