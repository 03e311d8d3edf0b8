//! What `/metrics` shows (the top-level `metrics` key), from the moment the
//! loop takes a [`Snapshot`] to the text a scraper reads.
//!
//! - [`tally`]: the counters the core does not keep (restarts and exits by
//!   reason, per slot; versions of the file), counted as the core reports.
//! - [`snapshot`]: the state of every app and slot, taken by the loop in one
//!   pass over the core, on request of the HTTP server; and [`measure`], the
//!   CPU time and memory, read off the loop thread.
//! - [`render`](mod@render): the text formats, encoded by `prometheus-client`.
//! - [`endpoint`]: the HTTP server.
//!
//! Series are per *slot* (`app`, `slot` = the instance number, as in
//! `SUPERVISE_INSTANCE` and the events' `slot`), never per pid or
//! generation: a replaced instance keeps its series, so graphs and alerts
//! follow the slot. The label is not called `instance`: Prometheus sets
//! `instance` on every scraped series to the target's address, and would
//! rename ours to `exported_instance` (or, with `honor_labels`, let ours
//! overwrite the address, mixing up two hosts' supervisors). The `_total`
//! counters never go down while the supervisor lives: a rollout starts the
//! worker's own restart count again, the tally does not; and a slot's CPU
//! time adds what its earlier processes had used when last measured (the CPU
//! a process burnt after the last scrape before it ended is not seen — an
//! undercount, never a drop that `rate()` would take for a reset).

pub mod endpoint;
pub(crate) mod render;
pub(crate) mod snapshot;
pub(crate) mod tally;

pub(crate) use render::{Format, render};
pub(crate) use snapshot::{CpuLedger, Snapshot, measure};
pub(crate) use tally::Tally;

#[cfg(test)]
mod tests;
