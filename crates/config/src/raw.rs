//! The ecosystem file exactly as written: serde types with no interpretation.
//!
//! These types are the one description of the file format. The JSON Schema
//! (`supervise schema`, `schemas/ecosystem.schema.json`) is generated from them,
//! the structural check in [`super::structure`] walks the parsed YAML against that
//! schema, and only a tree that passed the walk is deserialized into them. Nothing
//! here is resolved: durations are still text, `max` is still a word, paths are
//! still relative. [`super::validate`] turns them into the [`model::spec`] model.
//!
//! Source positions are not stored in these types: they live in the spanned node
//! tree ([`super::node`]), and diagnostics find them by path. That keeps the types
//! plain (comparable, serialisable, schema-friendly) while every value still has
//! its `line:column`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use model::spec::RestartPolicy;

/// The whole ecosystem file.
///
/// Top-level keys starting with `x-` are ignored, so shared blocks can be defined
/// there as YAML anchors and merged into apps with `<<: *name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "supervise ecosystem file",
    extend("patternProperties" = { "^x-": true })
)]
pub struct EcosystemFile {
    /// Settings merged under every app; an app's own keys win. `depends_on`
    /// and `schedule` belong to one app and cannot be here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("not" = { "anyOf": [
        { "required": ["depends_on"] },
        { "required": ["schedule"] }
    ] }))]
    pub defaults: Option<AppFields>,
    /// The apps, keyed by name (`[a-z0-9][a-z0-9_-]*`, not `all`).
    pub apps: IndexMap<String, AppFields>,
    /// How often the memory of instances with `max_memory` is measured. Default 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_check: Option<DurationText>,
    /// Serve Prometheus metrics on `GET /metrics` at this TCP address
    /// (`127.0.0.1:9464`, `[::1]:9464`, `:9464` for every IPv4 interface).
    /// Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// Every key an app (or `defaults`) may set. All are optional here; `command` is
/// required after `defaults` are merged, which the validation checks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppFields {
    /// What to run: a string split like a shell (no shell features), or a list (the exact argv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandLine>,
    /// Run `command` with `/bin/sh -c` (write `exec prog …` so the program gets LISTEN_PID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<bool>,
    /// Working directory; relative to the ecosystem file's folder. Default: that folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment variables; values may use `{instance}` / `{instance+N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<IndexMap<String, EnvValue>>,
    /// A file of `KEY=VALUE` lines; `env` wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<String>,
    /// How many instances: an integer >= 0, or `max` (one per CPU). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Instances>,
    /// Listening sockets shared by every instance (fd 3, 4, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<Listen>,
    /// When an instance counts as ready. Default `{delay: 1s}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Ready>,
    /// Not ready by then = a failed start. Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_timeout: Option<DurationText>,
    /// Which exits are restarted. Default `always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartPolicy>,
    /// Delay before restart n: min(initial * factor^(n-1), max).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Give up (state `failed`) after `count` restarts within `within`. Default: never give up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<MaxRestarts>,
    /// The signal sent to every process of an instance to stop it. Default SIGTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// Then SIGKILL to every process of the instance. Default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_timeout: Option<DurationText>,
    /// Rolling replacement limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload: Option<Reload>,
    /// Run as this user (only when the supervisor runs as root): a name, or
    /// a uid (a number, which needs no entry on the machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<AccountId>,
    /// Run with this group: a name, or a gid. Default: the user's primary
    /// group (for a uid the machine has no entry for, the same number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<AccountId>,
    /// A liveness check, run every `every` once an instance is ready: after
    /// `failures` consecutive failed checks the instance is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// The memory an instance may use before it is replaced: bytes, or a number
    /// with a unit: B; K, M, G (= KiB, MiB, GiB, 1024-based); KB, MB, GB
    /// (1000-based). Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<Size>,
    /// The instance must send `WATCHDOG=1` (systemd's protocol) at least this
    /// often once ready, or it gets `watchdog_signal`. Default: no watchdog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog: Option<DurationText>,
    /// The signal a missed watchdog deadline sends (then SIGKILL at
    /// `kill_timeout`). Default SIGABRT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog_signal: Option<String>,
    /// Apps that must meet a condition before this one starts: a list of
    /// names (each must be `ready`), or a mapping `{APP: started | ready |
    /// healthy | completed}`. Not in `defaults`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<DependsOn>,
    /// What this app does when a dependency's instances were all replaced:
    /// `ignore` (keep running) or `restart` (a rolling replacement). Default
    /// `ignore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dependency_restart: Option<OnDependencyRestart>,
    /// Run at times instead of for ever: a 5-field cron expression
    /// (`"0 3 * * *"`, or `@hourly`, `@daily`, `@weekly`, `@monthly`,
    /// `@yearly`), or `{every: DURATION}`. A scheduled app runs one instance
    /// and its `restart` defaults to `never`. Not in `defaults`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The IANA time zone a cron `schedule` is read in (`Europe/Paris`).
    /// Default: the machine's, else UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// What a scheduled run does when the previous one still runs: `skip` it,
    /// `queue` it (at most one waits), or `replace` the running one. Default
    /// `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// Run a scheduled app once as soon as it is started, before its first
    /// time comes. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_on_start: Option<bool>,
    /// Also write the app's output to a file, rotated by size. Default: only
    /// the in-memory rings `supervise logs` serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogFile>,
    /// Follow the load with the instance count, within `min`..`max`: up
    /// when a target (`queue`, `cpu`) is exceeded for `up_after`, down by one
    /// when below half of every target for `down_after`. Not with
    /// `instances`, `schedule`, nor in `defaults`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
}

/// `autoscale`: the range of the instance count and the targets it follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Autoscale {
    /// The fewest instances.
    pub min: u32,
    /// The most instances: an integer, or `max` (one per CPU).
    pub max: Instances,
    /// Target: connections waiting in the accept queue per ready instance
    /// (at least 1; apps with a TCP `listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
    /// Target: the average CPU of a ready instance, in percent of one CPU
    /// (`70%`; from 1% to 100% × the CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Percent>,
    /// A target exceeded this long: scale up. Default 2s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_after: Option<DurationText>,
    /// Below half of every target this long: scale down by one. Default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_after: Option<DurationText>,
}

/// A percentage: `70%`, or a number (70).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-expected" = "a percentage such as \"70%\""))]
pub enum Percent {
    Number(u32),
    Text(String),
}

/// `user` or `group`: a name, or a numeric id — a YAML integer, or a string
/// of digits (`"1000"`), which is read as the number, as systemd's `User=`
/// reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-expected" = "a name such as www-data, or a number such as 1000"))]
pub enum AccountId {
    Id(u32),
    Name(String),
}

impl AccountId {
    /// Whether a written `text` is read as a number rather than a name:
    /// digits only (no sign, no space), as systemd reads `User=`.
    pub fn is_number(text: &str) -> bool {
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
    }
}

/// `log`: a file the app's output is written to, rotated by size.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogFile {
    /// The file, relative to the ecosystem file's folder; `{app}` and
    /// `{instance}` are replaced (with `{instance}`, one file per instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The size at which the file is rotated (`app.log` → `app.log.1` …).
    /// Default 10MB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<Size>,
    /// How many rotated files are kept; the oldest is deleted. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u32>,
    /// `text` (a timestamp, the instance and the stream before each line)
    /// or `json` (one JSON object per line). Default `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<LogFileFormat>,
}

/// `log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFileFormat {
    /// `2026-12-01T03:00:00.123Z web.2 stdout | the line`.
    Text,
    /// `{"timestamp", "app", "instance", "stream", "line"}`.
    Json,
}

/// `depends_on`: names, or names with the condition each must meet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend(
    "x-expected" = "a list of app names such as [db, cache], or a mapping {APP: started | ready | healthy | completed}"
))]
pub enum DependsOn {
    /// Each app must be `ready`.
    Names(Vec<String>),
    /// Each app with its condition, in file order.
    Conditions(IndexMap<String, DependencyCondition>),
}

/// What a dependency must be before its dependent starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DependencyCondition {
    /// Every instance has a process that runs its program.
    Started,
    /// Every instance is ready.
    Ready,
    /// Every instance is ready and passed a `health` check since.
    Healthy,
    /// Every instance of a one-shot app exited 0.
    Completed,
}

/// `on_dependency_restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDependencyRestart {
    /// Keep running.
    Ignore,
    /// Replace this app's instances, rolling.
    Restart,
}

/// `schedule`: a cron expression or a period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend(
    "x-expected" = "a 5-field cron expression such as \"0 3 * * *\", or {every: DURATION}"
))]
pub enum Schedule {
    /// Minute, hour, day of month, month, day of week.
    Cron(String),
    Every(Every),
}

/// `{every: DURATION}`: runs every period, counted from when the app started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Every {
    /// From 1s to a year.
    pub every: DurationText,
}

/// `overlap`: a scheduled run whose time comes while the previous one still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// It does not run.
    Skip,
    /// It runs when the current one ends (at most one waits).
    Queue,
    /// The current run is stopped and it runs.
    Replace,
}

/// `command`: a string split like a shell, or the exact argv.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-expected" = "a command string or a list of arguments"))]
pub enum CommandLine {
    Line(String),
    Argv(Vec<String>),
}

/// An `env` value: scalars are accepted and turned into text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-expected" = "a string, number or boolean"))]
pub enum EnvValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

/// `instances`: a count or `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-expected" = "an integer >= 0 or \"max\""))]
pub enum Instances {
    Count(u32),
    Keyword(MaxKeyword),
}

/// The word `max`: one instance per available CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MaxKeyword {
    Max,
}

/// `listen`: one entry or a list of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("x-expected" = "an address, a {name, address} mapping, or a list of them"))]
pub enum Listen {
    // `Many` comes first: serde would also read a list as a `SocketEntry`
    // (derived structs accept sequences), so the list must win.
    Many(Vec<ListenEntry>),
    One(ListenEntry),
}

/// One listening socket: `host:port`, `[v6]:port`, `:port`, `unix:/path`, or a
/// mapping with more settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend(
    "x-expected" = "an address such as \"0.0.0.0:5000\" or an {address, name, reuseport, inject} mapping"
))]
pub enum ListenEntry {
    Address(String),
    Socket(SocketEntry),
}

/// A listening socket with settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SocketEntry {
    /// `host:port`, `[v6]:port`, `:port` or `unix:/path`.
    pub address: String,
    /// The name passed in `LISTEN_FDNAMES`. Default: the app's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// One socket per instance (SO_REUSEPORT) instead of one shared accept
    /// queue: the kernel spreads connections evenly even over workers with
    /// greedy accept loops. TCP only. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuseport: Option<bool>,
    /// For a program that binds its port itself: preload a library into it
    /// that hands it this socket when it binds the same address and port,
    /// so it serves from every instance without a code change. TCP with a
    /// fixed port only. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<bool>,
}

/// `ready`: a keyword or a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend(
    "x-expected" = "none, notify, {tcp: ADDRESS}, {http: URL} or {delay: DURATION}"
))]
pub enum Ready {
    Keyword(ReadyKeyword),
    Tcp(TcpProbe),
    Http(HttpProbe),
    Delay(DelayProbe),
}

/// `none` (ready at spawn) or `notify` (the sd_notify protocol, `READY=1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReadyKeyword {
    None,
    Notify,
}

/// Ready once a TCP connect to this address succeeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpProbe {
    pub tcp: String,
}

/// Ready once a GET of this URL answers 2xx.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpProbe {
    pub http: String,
}

/// Ready when still alive after this long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelayProbe {
    pub delay: DurationText,
}

/// `backoff` between restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    /// The first delay. Default 100ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<DurationText>,
    /// The longest delay. Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<DurationText>,
    /// Each delay is this many times the previous one. Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// Ready this long resets the attempt counter. Default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after: Option<DurationText>,
}

/// `max_restarts`: give up after `count` restarts within `within`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaxRestarts {
    pub count: u32,
    pub within: DurationText,
}

/// `reload`: rolling replacement limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reload {
    /// Extra instances allowed during a rollout. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<u32>,
    /// Instances allowed to be not ready during a rollout. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<u32>,
}

/// `health`: exactly one check (`http`, `tcp` or `exec`) and its timing. In
/// `defaults`, each key merges separately; an app's own check replaces the
/// one in `defaults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "x-expected" = "{http: URL}, {tcp: ADDRESS} or {exec: COMMAND}, optionally with every, timeout, failures and grace",
    "not" = { "anyOf": [
        { "required": ["http", "tcp"] },
        { "required": ["http", "exec"] },
        { "required": ["tcp", "exec"] }
    ] }
))]
pub struct Health {
    /// Healthy when a GET of this URL answers 2xx within `timeout`; may use
    /// `{instance}` / `{instance+N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// Healthy when a TCP connect to this address succeeds within `timeout`;
    /// may use `{instance}` / `{instance+N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    /// Healthy when this command exits 0 within `timeout`: a string (run with
    /// `/bin/sh -c`) or a list (the exact argv). It runs in the worker's cwd,
    /// environment and user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<CommandLine>,
    /// Time between the starts of two checks, from ready. Default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<DurationText>,
    /// A check that takes longer fails. Default 2s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationText>,
    /// Consecutive failed checks that make an instance unhealthy. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u32>,
    /// A failed check started within this long of ready does not count. Default 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationText>,
}

/// A size in bytes: an integer, or a number with a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend(
    "x-expected" = "a size such as \"300MB\", \"512K\" or \"1GiB\", or a number of bytes"
))]
pub enum Size {
    Bytes(u64),
    Text(String),
}

/// A humantime duration as written (`250ms`, `5s`, `1m30s`); parsed by validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(extend("x-expected" = "a duration such as \"250ms\", \"5s\" or \"1m30s\""))]
pub struct DurationText(pub String);
