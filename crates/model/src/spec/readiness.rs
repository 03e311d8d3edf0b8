//! `ready` and `health`: when a new instance counts as ready, and the
//! liveness checks that replace an unhealthy one once it is. Both share
//! the TCP/HTTP probe, parsed once per slot.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Template;

/// When a new instance counts as ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Readiness {
    /// Ready as soon as the program runs (`exec` succeeded).
    Immediate,
    /// Ready on `READY=1` over `NOTIFY_SOCKET`.
    Notify,
    /// Ready once a TCP connect or an HTTP GET (2xx) to the slot's target succeeds.
    Probe(ProbeSpec),
    /// Ready when still alive (and running the program) after this long.
    Delay(Duration),
}

/// What a readiness probe checks, for one slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Probe {
    Tcp(SocketAddr),
    Http { address: SocketAddr, path: String },
}

/// A probe as written (`127.0.0.1:{instance+8000}`), parsed once for every
/// slot when the file is checked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeSpec {
    /// `tcp` or `http`.
    pub kind: ProbeKind,
    /// The target as written: what a change of `ready` compares.
    pub written: Template,
    /// The parsed target of each slot, `0..instances`.
    pub targets: Vec<Probe>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProbeKind {
    Tcp,
    Http,
}

impl ProbeKind {
    /// The key it is written under: `tcp` or `http`.
    pub fn field(self) -> &'static str {
        match self {
            ProbeKind::Tcp => "tcp",
            ProbeKind::Http => "http",
        }
    }
}

impl ProbeSpec {
    /// The target of `slot` (`None` for a slot the file did not have).
    pub fn target(&self, slot: u32) -> Option<&Probe> {
        self.targets.get(slot as usize)
    }
}

/// Two probes are the same when written the same: scaling an app adds slots,
/// it does not change its readiness.
impl PartialEq for ProbeSpec {
    fn eq(&self, other: &ProbeSpec) -> bool {
        self.kind == other.kind && self.written == other.written
    }
}

impl Eq for ProbeSpec {}

/// `health`: a liveness check, run every `every` once an instance is ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSpec {
    pub check: HealthCheck,
    pub every: Duration,
    /// One check may take this long; longer is a failure (an `exec` check is
    /// killed).
    pub timeout: Duration,
    /// Consecutive failed checks that make an instance unhealthy.
    pub failures: u32,
    /// A failed check started within `grace` of ready does not count.
    pub grace: Duration,
}

/// What a liveness check does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthCheck {
    /// A TCP connect or an HTTP GET (2xx), per slot, as readiness probes.
    Probe(ProbeSpec),
    /// A command (argv) run in the worker's cwd, environment and user, in a
    /// process group of its own; exit 0 is healthy.
    Exec(Vec<Template>),
}
