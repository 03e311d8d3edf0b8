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
pub mod core;
pub mod effects;
pub mod host;
pub mod plan;
pub mod scale;
pub mod simulation;
pub mod spec;
pub mod supervisor;
