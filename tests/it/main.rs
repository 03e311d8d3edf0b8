//! The integration tests of the `supervise` binary, as one test binary
//! (one link instead of one per file): each module runs the real binary
//! against real processes, sockets and files, and waits on the event it
//! means ([`common::Supervised`]). Heavy ones (many instances, load, the
//! peers pm2, supervisord and Prometheus) are named in `.config/nextest.toml`
//! and run one at a time.

mod adversarial;
mod autoscale;
mod chaos;
mod check_fixtures;
mod cluster;
mod commands_hostile;
mod common;
mod control;
mod docs_reference;
mod edits;
mod escape;
mod examples;
mod exporting;
mod health;
mod importing;
mod inject;
mod install;
mod layers;
mod logfiles;
mod metrics;
mod oneshot;
mod pid1;
mod reload;
mod roundtrip;
mod scale;
mod schema;
mod spawner;
mod stack;
mod stack_hostile;
mod stall;
mod supervisor;
mod terminal;
mod top;
mod upgrade;
