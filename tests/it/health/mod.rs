//! Restarting what is alive but broken, with real processes and sockets:
//! HTTP and exec liveness checks, the memory limit and the watchdog.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Supervised, WAIT, eventually, free_ports, timestamp_ms};
use serde_json::Value;

mod exec;
mod memory;
mod probes;
mod watchdog;
