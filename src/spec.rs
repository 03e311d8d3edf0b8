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

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

pub use crate::config::raw::RestartPolicy;

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
    #[serde(with = "serde_as::signal")]
    pub stop_signal: Signal,
    pub kill_timeout: Duration,
    pub reload: ReloadLimits,
    /// Liveness checks after ready: an unhealthy instance is replaced.
    pub health: Option<HealthSpec>,
    /// Memory (bytes) an instance may use before it is replaced.
    pub max_memory: Option<u64>,
    /// The signal a missed watchdog deadline sends (then `kill_timeout`).
    #[serde(with = "serde_as::signal")]
    pub watchdog_signal: Signal,
    /// Apps whose state must meet a condition before this one starts a
    /// process (in file order; no cycles, every name an app of the file).
    pub depends_on: Vec<Dependency>,
    /// What a dependency whose instances were all replaced does to this app.
    pub on_dependency_restart: OnDependencyRestart,
    /// Runs at times instead of for ever (then `instances` is 1).
    pub schedule: Option<ScheduleSpec>,
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
            log: None,
        }
    }

    /// The restart settings of this app, as a worker's decisions need them.
    pub fn restart_rules(&self) -> crate::core::worker::RestartRules {
        crate::core::worker::RestartRules {
            restart: self.restart,
            backoff: self.backoff,
            max_restarts: self.max_restarts,
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

/// What a listening socket is registered under: its address, and for
/// `reuseport` the slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SocketKey {
    pub address: ListenAddress,
    pub slot: Option<u32>,
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

/// A string with `{instance}` / `{instance+N}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Template {
    parts: Vec<TemplatePart>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum TemplatePart {
    Text(String),
    /// `{instance}` (offset 0) or `{instance+N}`.
    Instance(u32),
}

/// One piece of a [`Template`]: literal text, or the slot number plus an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    /// `{instance}` (0) or `{instance+N}` (N).
    Instance(u32),
}

/// Why a template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl Template {
    /// Parse placeholders. Braces that do not start `{instance` are literal text
    /// (so `${HOME}` in a shell command stays as it is).
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        const OPEN: &str = "{instance";
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find(OPEN) {
            let after = &rest[start + OPEN.len()..];
            let Some(end) = after.find('}') else {
                return Err(TemplateError(format!(
                    "unclosed placeholder `{}`",
                    &rest[start..]
                )));
            };
            let inner = &after[..end];
            let offset = if inner.is_empty() {
                0
            } else if let Some(number) = inner.strip_prefix('+') {
                number
                    .parse::<u32>()
                    .ok()
                    .filter(|_| number.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| {
                        TemplateError(format!(
                            "bad placeholder `{{instance{inner}}}`: expected `{{instance+N}}` with N a whole number"
                        ))
                    })?
            } else {
                return Err(TemplateError(format!(
                    "bad placeholder `{{instance{inner}}}`: use `{{instance}}` or `{{instance+N}}`"
                )));
            };
            if start > 0 {
                parts.push(TemplatePart::Text(rest[..start].to_string()));
            }
            parts.push(TemplatePart::Instance(offset));
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(TemplatePart::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// A template without placeholders.
    pub fn literal(text: impl Into<String>) -> Template {
        Template {
            parts: vec![TemplatePart::Text(text.into())],
        }
    }

    /// Whether the text depends on the instance number.
    pub fn uses_instance(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, TemplatePart::Instance(_)))
    }

    /// The template piece by piece, for writers that express placeholders
    /// in another language (`%i` for systemd, `$((N+%i))` for a shell).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        self.parts.iter().map(|part| match part {
            TemplatePart::Text(text) => Piece::Text(text),
            TemplatePart::Instance(offset) => Piece::Instance(*offset),
        })
    }

    /// The text for one slot.
    pub fn expand(&self, instance: u32) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                TemplatePart::Text(text) => out.push_str(text),
                TemplatePart::Instance(offset) => {
                    out.push_str(&(u64::from(instance) + u64::from(*offset)).to_string())
                }
            }
        }
        out
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                TemplatePart::Text(text) => f.write_str(text)?,
                TemplatePart::Instance(0) => f.write_str("{instance}")?,
                TemplatePart::Instance(n) => write!(f, "{{instance+{n}}}")?,
            }
        }
        Ok(())
    }
}

/// A listening socket shared by every instance of an app.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ListenSpec {
    /// The name passed in `LISTEN_FDNAMES`.
    pub name: String,
    pub address: ListenAddress,
    /// One SO_REUSEPORT socket per instance instead of one shared socket.
    pub reuseport: bool,
    /// Preload the library that hands this socket to a program binding the
    /// same address itself (effects::inject).
    pub inject: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ListenAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ListenAddress {
    /// Would binding both at once fail (same port on overlapping interfaces, or
    /// the same socket path)? Port 0 asks the kernel for a free port: never clashes.
    pub fn overlaps(&self, other: &ListenAddress) -> bool {
        match (self, other) {
            (ListenAddress::Unix(a), ListenAddress::Unix(b)) => a == b,
            (ListenAddress::Tcp(a), ListenAddress::Tcp(b)) => {
                a.port() != 0
                    && a.port() == b.port()
                    && (a.ip() == b.ip()
                        || (a.ip().is_unspecified() && (a.is_ipv6() || b.is_ipv4()))
                        || (b.ip().is_unspecified() && (b.is_ipv6() || a.is_ipv4())))
            }
            _ => false,
        }
    }

    /// Would a connection to `target` reach this listener? (A connection
    /// to `0.0.0.0` or `::` goes to this host, as Linux does it.)
    pub fn covers(&self, target: &SocketAddr) -> bool {
        match self {
            ListenAddress::Tcp(address) => {
                address.port() == target.port()
                    && (address.ip() == target.ip()
                        || address.ip().is_unspecified()
                        || target.ip().is_unspecified())
            }
            ListenAddress::Unix(_) => false,
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Tcp(address) => write!(f, "{address}"),
            ListenAddress::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

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

/// One entry of `depends_on`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub app: String,
    pub condition: Condition,
}

/// What a dependency must be before its dependent starts a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// Every wanted instance has a process that ran its program.
    Started,
    /// Every wanted instance is ready (the default).
    Ready,
    /// Every wanted instance is ready and passed a liveness check since.
    Healthy,
    /// Every wanted instance of a one-shot exited 0.
    Completed,
}

impl Condition {
    pub fn name(self) -> &'static str {
        match self {
            Condition::Started => "started",
            Condition::Ready => "ready",
            Condition::Healthy => "healthy",
            Condition::Completed => "completed",
        }
    }
}

/// `on_dependency_restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnDependencyRestart {
    /// Keep running.
    Ignore,
    /// Replace every instance, rolling, once the dependency meets its
    /// condition again with all of its instances replaced.
    Restart,
}

/// `schedule` with `overlap` and `run_on_start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub when: When,
    pub overlap: Overlap,
    /// Run once as soon as the app is started, before the first tick.
    pub run_on_start: bool,
}

/// When a scheduled app runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per scheduled app, read where it is: a box would only add a pointer"
)]
pub enum When {
    /// `{every: 10m}`: every period from the time the app was started.
    Every(Duration),
    /// A 5-field cron expression, evaluated in `timezone`.
    Cron {
        #[serde(with = "serde_as::cron")]
        cron: croner::Cron,
        #[serde(with = "serde_as::timezone")]
        timezone: chrono_tz::Tz,
    },
}

impl When {
    /// The first cron time strictly after `wall`, in the schedule's timezone
    /// (`None` for `every`, which counts on the monotonic clock, and for an
    /// expression that matches no time to come). A local time that a DST
    /// change skips or repeats is handled as croner documents it.
    pub fn next_cron_after(&self, wall: std::time::SystemTime) -> Option<std::time::SystemTime> {
        let When::Cron { cron, timezone } = self else {
            return None;
        };
        let utc: chrono::DateTime<chrono::Utc> = wall.into();
        // Whole seconds: croner keeps the fraction of its input in its answer
        // (a run at :00.498 instead of :00).
        let utc = chrono::Timelike::with_nanosecond(&utc, 0)?;
        let next = cron
            .find_next_occurrence(&utc.with_timezone(timezone), false)
            .ok()?;
        Some(next.with_timezone(&chrono::Utc).into())
    }
}

/// `log`: where an app's output is written and when the file is rotated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSpec {
    /// The absolute path, `{app}` already replaced; `{instance}` (when
    /// there) is replaced per instance: see [`LogSpec::path_for`].
    pub file: String,
    /// Rotate before a line would take the file past this many bytes.
    pub max_size: u64,
    /// Rotated files kept: `FILE.1` (the newest) … `FILE.{keep}`.
    pub keep: u32,
    pub format: LogFormat,
}

/// How each line of a log file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFormat {
    /// `2026-12-01T03:00:00.123Z web.2 stdout | the line`.
    Text,
    /// `{"timestamp":…,"app":…,"instance":…,"stream":…,"line":…}`.
    Json,
}

/// The placeholder of a log file's path replaced by the instance number.
pub const LOG_INSTANCE_PLACEHOLDER: &str = "{instance}";

impl LogSpec {
    /// The file instance `slot` writes to.
    pub fn path_for(&self, slot: u32) -> PathBuf {
        PathBuf::from(
            self.file
                .replace(LOG_INSTANCE_PLACEHOLDER, &slot.to_string()),
        )
    }
}

/// What a tick does while the previous run still goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Overlap {
    /// Nothing: the tick is skipped (the default).
    Skip,
    /// The run starts when the current one ends (one waits at most).
    Queue,
    /// The current run is stopped; the new one starts once it is gone.
    Replace,
}

/// Delays between restarts: `min(initial * factor^(n-1), max)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BackoffPolicy {
    pub initial: Duration,
    pub max: Duration,
    pub factor: f64,
    /// Ready this long resets the attempt counter.
    pub reset_after: Duration,
}

/// Give up after `count` restarts within `within`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaxRestarts {
    pub count: u32,
    pub within: Duration,
}

/// Rolling replacement limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadLimits {
    pub max_surge: u32,
    pub max_unavailable: u32,
}

/// The defaults DESIGN.md §2 marks.
pub mod defaults {
    use std::time::Duration;

    pub const INSTANCES: u32 = 1;
    pub const READY_DELAY: Duration = Duration::from_secs(1);
    pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
    pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
    pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
    pub const BACKOFF_FACTOR: f64 = 2.0;
    pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
    pub const KILL_TIMEOUT: Duration = Duration::from_secs(10);
    pub const MAX_SURGE: u32 = 1;
    pub const MAX_UNAVAILABLE: u32 = 0;
    pub const HEALTH_EVERY: Duration = Duration::from_secs(10);
    pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
    pub const HEALTH_FAILURES: u32 = 3;
    pub const HEALTH_GRACE: Duration = Duration::ZERO;
    pub const MEMORY_CHECK: Duration = Duration::from_secs(5);
    /// Bounds the file is held to: checks more often than this would keep
    /// the loop forking for them (50 instances every 10 ms starved it).
    pub const MIN_HEALTH_EVERY: Duration = Duration::from_millis(50);
    /// A memory measurement reads every instance's processes.
    pub const MIN_MEMORY_CHECK: Duration = Duration::from_millis(100);
    /// `WATCHDOG_USEC` must be at least 1 (systemd's `sd_watchdog_enabled`
    /// refuses 0) and fit its readers' 64 bits; a day is far beyond use.
    pub const MIN_WATCHDOG: Duration = Duration::from_millis(1);
    pub const MAX_WATCHDOG: Duration = Duration::from_secs(24 * 3600);
    /// The most instances one app may ask for.
    pub const MAX_INSTANCES: u32 = 4096;
    pub const LOG_MAX_SIZE: u64 = 10 * 1000 * 1000;
    pub const LOG_KEEP: u32 = 5;
    /// More rotated files than this is a typo, not a retention policy.
    pub const MAX_LOG_KEEP: u32 = 1000;
}

/// How the file's cron expressions are read: five fields (no seconds, no
/// year), as `check` and the state a re-exec hands over both read them.
pub fn cron_parser() -> croner::parser::CronParser {
    use croner::parser::{CronParser, Seconds, Year};
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// What has no `serde` of its own, written as the text it is read from
/// (for the state a re-exec hands over: [`crate::core::Core`]).
mod serde_as {
    /// A signal as its name (`"SIGTERM"`); an unknown name is refused.
    pub mod signal {
        use nix::sys::signal::Signal;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(signal: &Signal, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(signal.as_str())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Signal, D::Error> {
            let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
            name.parse::<Signal>()
                .map_err(|_| serde::de::Error::custom(format!("unknown signal `{name}`")))
        }
    }

    /// A cron expression as its pattern, parsed again as the file's are.
    pub mod cron {
        use croner::Cron;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(cron: &Cron, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(cron.pattern.as_str())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Cron, D::Error> {
            let pattern = std::borrow::Cow::<str>::deserialize(deserializer)?;
            super::super::cron_parser()
                .parse(&pattern)
                .map_err(|e| serde::de::Error::custom(format!("cron `{pattern}`: {e}")))
        }
    }

    /// A timezone as its IANA name (`Europe/Paris`).
    pub mod timezone {
        use chrono_tz::Tz;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(tz: &Tz, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(tz.name())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Tz, D::Error> {
            let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
            name.parse::<Tz>()
                .map_err(|_| serde::de::Error::custom(format!("unknown timezone `{name}`")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `at` as seconds since the epoch, from a UTC date and time.
    fn utc(text: &str) -> std::time::SystemTime {
        humantime::parse_rfc3339(text).unwrap()
    }

    fn cron(expression: &str, timezone: chrono_tz::Tz) -> When {
        When::Cron {
            cron: std::str::FromStr::from_str(expression).unwrap(),
            timezone,
        }
    }

    /// croner's documented DST rules, pinned on America/New_York in 2026
    /// (spring forward 2026-03-08 02:00 → 03:00, fall back 2026-11-01
    /// 02:00 → 01:00): a fixed time in the gap runs at the first time
    /// after it the same day; a fixed time in the repeated hour runs once.
    #[test]
    fn cron_times_across_daylight_saving_changes() {
        let new_york = chrono_tz::America::New_York;
        let gap = cron("30 2 * * *", new_york);
        // 03:00 EDT = 07:00 UTC: the first valid time after the gap.
        assert_eq!(
            gap.next_cron_after(utc("2026-03-08T05:00:00Z")),
            Some(utc("2026-03-08T07:00:00Z"))
        );
        // The day after, 02:30 EDT again.
        assert_eq!(
            gap.next_cron_after(utc("2026-03-08T07:00:00Z")),
            Some(utc("2026-03-09T06:30:00Z"))
        );
        let repeated = cron("30 1 * * *", new_york);
        // 01:30 EDT (05:30 UTC) runs; 01:30 EST an hour later does not.
        assert_eq!(
            repeated.next_cron_after(utc("2026-11-01T04:00:00Z")),
            Some(utc("2026-11-01T05:30:00Z"))
        );
        assert_eq!(
            repeated.next_cron_after(utc("2026-11-01T05:30:00Z")),
            Some(utc("2026-11-02T06:30:00Z"))
        );
        // `every` is not on the wall clock.
        assert_eq!(
            When::Every(Duration::from_secs(1)).next_cron_after(utc("2026-11-01T05:30:00Z")),
            None
        );
    }

    #[test]
    fn template_expands_instance_and_offsets() {
        let t = Template::parse("w{instance}-{instance+9000}").unwrap();
        assert_eq!(t.expand(0), "w0-9000");
        assert_eq!(t.expand(3), "w3-9003");
        assert!(t.uses_instance());
        assert_eq!(t.to_string(), "w{instance}-{instance+9000}");
    }

    #[test]
    fn template_leaves_other_braces_alone() {
        let t = Template::parse("echo ${HOME} {x}").unwrap();
        assert_eq!(t.expand(1), "echo ${HOME} {x}");
        assert!(!t.uses_instance());
    }

    #[test]
    fn template_rejects_bad_placeholders() {
        assert!(Template::parse("{instance-1}").is_err());
        assert!(Template::parse("{instance+x}").is_err());
        assert!(Template::parse("{instance+}").is_err());
        assert!(Template::parse("{instance").is_err());
        assert!(Template::parse("{instances}").is_err());
    }

    #[test]
    fn a_connection_to_any_address_reaches_a_listener_on_this_host() {
        let listen = ListenAddress::Tcp("127.0.0.1:8000".parse().unwrap());
        assert!(listen.covers(&"0.0.0.0:8000".parse().unwrap()));
        assert!(listen.covers(&"127.0.0.1:8000".parse().unwrap()));
        assert!(!listen.covers(&"127.0.0.2:8000".parse().unwrap()));
        assert!(!listen.covers(&"0.0.0.0:8001".parse().unwrap()));
    }

    #[test]
    fn overlapping_addresses() {
        let tcp = |s: &str| ListenAddress::Tcp(s.parse().unwrap());
        assert!(tcp("0.0.0.0:80").overlaps(&tcp("127.0.0.1:80")));
        assert!(tcp("127.0.0.1:80").overlaps(&tcp("0.0.0.0:80")));
        assert!(tcp("[::]:80").overlaps(&tcp("127.0.0.1:80")));
        assert!(!tcp("127.0.0.1:80").overlaps(&tcp("127.0.0.2:80")));
        assert!(!tcp("127.0.0.1:80").overlaps(&tcp("127.0.0.1:81")));
        assert!(!tcp("127.0.0.1:0").overlaps(&tcp("127.0.0.1:0")));
        assert!(!tcp("0.0.0.0:80").overlaps(&tcp("[::1]:80")));
    }
}
