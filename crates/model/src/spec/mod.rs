//! The validated, resolved model of an ecosystem file: what the rest of the
//! program works from.
//!
//! Everything here is already checked and interpreted: `defaults` merged,
//! `max` resolved to a count, paths absolute, durations and signals parsed,
//! addresses parsed, `env_file` read and merged under `env`. A value of these
//! types is always runnable as far as the file can tell.
//!
//! [`ProcessDefinition`] groups the fields a running process cannot pick up:
//! when it changes, instances are replaced; when only the [`AppSpec`]'s policy
//! fields change, running instances keep running (DESIGN.md §3, "fingerprint").

mod autoscale;
pub mod defaults;
mod dependency;
mod listen;
mod log;
mod readiness;
mod restart;
mod schedule;
mod serde_as;
mod template;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Signal;

pub use autoscale::AutoscaleSpec;
pub use dependency::{Condition, Dependency, OnDependencyRestart};
pub use listen::{ListenAddress, ListenSpec, SocketKey};
pub use log::{LOG_INSTANCE_PLACEHOLDER, LogFormat, LogSpec};
pub use readiness::{HealthCheck, HealthSpec, Probe, ProbeKind, ProbeSpec, Readiness};
pub use restart::{BackoffPolicy, MaxRestarts, ReloadLimits, RestartPolicy};
pub use schedule::{Overlap, ScheduleSpec, When, cron_parser};
pub use template::{Piece, Template, TemplateError};

/// Everything the file asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Desired {
    /// The ecosystem file, absolute.
    pub source: PathBuf,
    /// The apps in file order.
    pub apps: Vec<AppSpec>,
    /// How often the memory of instances with `max_memory` is measured.
    pub memory_check: Duration,
    /// Where `/metrics` is served (Prometheus), if anywhere.
    pub metrics: Option<SocketAddr>,
}

impl Desired {
    pub fn app(&self, name: &str) -> Option<&AppSpec> {
        self.apps.iter().find(|a| a.name == name)
    }
}

/// One app, resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSpec {
    pub name: String,
    /// The fields that need a new process to change.
    pub process: ProcessDefinition,
    pub instances: u32,
    /// Set when `instances: max` was written: the CPU count it resolved to.
    pub instances_from_max: bool,
    pub ready: Readiness,
    pub ready_timeout: Duration,
    pub restart: RestartPolicy,
    pub backoff: BackoffPolicy,
    pub max_restarts: Option<MaxRestarts>,
    pub stop_signal: Signal,
    pub kill_timeout: Duration,
    pub reload: ReloadLimits,
    /// Liveness checks after ready: an unhealthy instance is replaced.
    pub health: Option<HealthSpec>,
    /// Memory (bytes) an instance may use before it is replaced.
    pub max_memory: Option<u64>,
    /// The signal a missed watchdog deadline sends (then `kill_timeout`).
    pub watchdog_signal: Signal,
    /// Apps whose state must meet a condition before this one starts a
    /// process (in file order; no cycles, every name an app of the file).
    pub depends_on: Vec<Dependency>,
    /// What a dependency whose instances were all replaced does to this app.
    pub on_dependency_restart: OnDependencyRestart,
    /// Runs at times instead of for ever (then `instances` is 1).
    pub schedule: Option<ScheduleSpec>,
    /// The instance count follows the load within a range; `instances` is
    /// then the count the file starts from (`min`), and the core keeps the
    /// current one.
    pub autoscale: Option<AutoscaleSpec>,
    /// A file the output is written to as well (the core never reads it:
    /// a change is tuned, never a replacement).
    pub log: Option<LogSpec>,
}

impl AppSpec {
    /// An app with every default of DESIGN.md §2 (tests and simulations build on it).
    pub fn with_defaults(name: &str, argv: &[&str], instances: u32) -> AppSpec {
        AppSpec {
            name: name.to_string(),
            process: ProcessDefinition {
                argv: argv.iter().map(|a| Template::literal(*a)).collect(),
                program: None,
                shell: false,
                cwd: PathBuf::from("/"),
                env: Vec::new(),
                listen: Vec::new(),
                identity: None,
                watchdog: None,
            },
            instances,
            instances_from_max: false,
            ready: Readiness::Delay(defaults::READY_DELAY),
            ready_timeout: defaults::READY_TIMEOUT,
            restart: RestartPolicy::Always,
            backoff: BackoffPolicy {
                initial: defaults::BACKOFF_INITIAL,
                max: defaults::BACKOFF_MAX,
                factor: defaults::BACKOFF_FACTOR,
                reset_after: defaults::BACKOFF_RESET_AFTER,
            },
            max_restarts: None,
            stop_signal: Signal::SIGTERM,
            kill_timeout: defaults::KILL_TIMEOUT,
            reload: ReloadLimits {
                max_surge: defaults::MAX_SURGE,
                max_unavailable: defaults::MAX_UNAVAILABLE,
            },
            health: None,
            max_memory: None,
            watchdog_signal: Signal::SIGABRT,
            depends_on: Vec::new(),
            on_dependency_restart: OnDependencyRestart::Ignore,
            schedule: None,
            autoscale: None,
            log: None,
        }
    }
}

impl AppSpec {
    /// The sockets the app needs now: one per address, or one per slot with
    /// `reuseport`.
    pub fn socket_keys(&self) -> Vec<SocketKey> {
        let mut keys = Vec::new();
        for listen in &self.process.listen {
            if listen.reuseport {
                keys.extend((0..self.instances).map(|slot| SocketKey {
                    address: listen.address.clone(),
                    slot: Some(slot),
                }));
            } else {
                keys.push(SocketKey {
                    address: listen.address.clone(),
                    slot: None,
                });
            }
        }
        keys
    }
}

/// What makes a process what it is. Two equal definitions produce identical
/// processes; a changed one makes running instances outdated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessDefinition {
    /// The argv to execute; with `shell: true` it is `/bin/sh -c <command>`.
    pub argv: Vec<Template>,
    /// The program `argv[0]` names, found when the file was checked (along
    /// the app's `PATH`, from its `cwd`). `None` when it was not found then
    /// (or depends on the instance): the spawn looks for it itself.
    pub program: Option<PathBuf>,
    /// Whether `command` was given to `/bin/sh -c`.
    pub shell: bool,
    pub cwd: PathBuf,
    /// `env_file` entries, then `env` entries overriding them, in order.
    pub env: Vec<(String, Template)>,
    pub listen: Vec<ListenSpec>,
    pub identity: Option<Identity>,
    /// `watchdog`: the process gets `WATCHDOG_USEC` and `WATCHDOG_PID` and
    /// must send `WATCHDOG=1` at least this often once ready. Part of the
    /// definition because it is in the process's environment.
    pub watchdog: Option<Duration>,
}

impl ProcessDefinition {
    /// The addresses of its sockets with `inject` (none: it injects nothing).
    pub fn inject_addresses(&self) -> Vec<String> {
        self.listen
            .iter()
            .filter(|l| l.inject)
            .map(|l| l.address.to_string())
            .collect()
    }
}

/// The user and group a worker runs as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Every group the user belongs to (`getgrouplist`), looked up at check time.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

impl Identity {
    /// Whether the machine that checked the file has an entry for the uid.
    /// Without one, `user` is the uid's number (as validation names it; no
    /// account name is all digits: `useradd` refuses them, and systemd and
    /// we read them as uids).
    pub fn has_entry(&self) -> bool {
        self.user != self.uid.to_string()
    }
}
