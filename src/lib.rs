//! `supervise`: a declarative process supervisor for Linux.
//!
//! The crate is laid out the way data flows (DESIGN.md §3):
//! [`config`] reads and checks the ecosystem file and resolves it into the
//! [`spec`] model, which is all the rest of the program ever sees.

pub mod backoff;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod effects;
pub mod plan;
pub mod reconcile;
pub mod scale;
pub mod spec;
pub mod supervisor;
pub mod worker;
