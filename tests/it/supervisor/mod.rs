//! The supervisor core against real processes: restarts, backoff, stopping,
//! process groups, the undertaker, fd hygiene, LISTEN_PID, output floods.
//! Every wait is on an event (a log line, a file, /proc), never a lucky sleep.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common::*;

mod output;
mod restarts;
mod signals;
mod starting;
mod stopping;
mod workers;
