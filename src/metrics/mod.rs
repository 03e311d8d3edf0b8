//! What `/metrics` shows (the top-level `metrics` key), from the moment the
//! loop takes a [`Snapshot`] to the text a scraper reads.
//!
//! - [`Tally`]: the counters the core does not keep — restarts and exits by
//!   reason, per slot; applied and rejected versions of the file. The shell
//!   counts them as the core reports its events (`supervisor::execute`,
//!   `supervisor::config`), so the core stays pure and the count is exactly
//!   what the event log says.
//! - [`Snapshot`]: the state of every app and slot, taken by the loop in one
//!   pass over the core (no I/O), on request of the HTTP server.
//! - [`CpuLedger`] and [`measure`]: CPU time and memory, read from /proc and
//!   the cgroups *off the loop thread* (the server runs them with
//!   `spawn_blocking`).
//! - [`render`]: the OpenMetrics or the Prometheus text format, encoded by
//!   `prometheus-client` from a [`Collector`] over the measured snapshot:
//!   every scrape is a fresh picture, so nothing in a registry has to be kept
//!   in step with the core.
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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use effects::GroupUsage;
use model::process::Exit;
use supervise_core::Event;
use supervise_core::event::Instance;
use supervise_core::worker::{Decision, StopEnd};

/// Every metric name starts with this.
const PREFIX: &str = "supervise";

/// Why a process of a slot ended: the `reason` label of
/// `supervise_instance_exits_total`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum ExitReason {
    /// It exited on its own with code 0.
    ExitZero,
    /// It exited on its own with another code.
    ExitNonzero,
    /// A signal it did not get from supervise killed it.
    Signal,
    /// It could not be started (exec failed, a socket could not be bound …).
    StartFailed,
    /// supervise stopped it and it ended within `kill_timeout`.
    Stopped,
    /// supervise stopped it and SIGKILLed it at `kill_timeout`.
    Killed,
}

impl ExitReason {
    pub const ALL: [ExitReason; 6] = [
        ExitReason::ExitZero,
        ExitReason::ExitNonzero,
        ExitReason::Signal,
        ExitReason::StartFailed,
        ExitReason::Stopped,
        ExitReason::Killed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ExitReason::ExitZero => "exit_zero",
            ExitReason::ExitNonzero => "exit_nonzero",
            ExitReason::Signal => "signal",
            ExitReason::StartFailed => "start_failed",
            ExitReason::Stopped => "stopped",
            ExitReason::Killed => "killed",
        }
    }
}

/// The counters of one slot.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlotCounts {
    /// Restarts decided (after an exit, a failed start, a failed run) and
    /// replacements of a live instance (unhealthy, over `max_memory`): what
    /// `status` counts in `restarts`, but never reset by a rollout.
    pub restarts: u64,
    pub exits: BTreeMap<ExitReason, u64>,
}

/// The counters the shell keeps from the core's events, for `/metrics`
/// (an upgrade hands them over: counters never go back).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    /// Versions of the file applied, the first one included.
    pub applies: u64,
    /// Edits refused (invalid or unreadable); the last good version ran on.
    pub rejected_edits: u64,
    /// As a list: JSON has no keys but strings.
    #[serde(with = "slot_list")]
    slots: HashMap<(String, u32), SlotCounts>,
}

mod slot_list {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::SlotCounts;

    pub fn serialize<S: Serializer>(
        slots: &HashMap<(String, u32), SlotCounts>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<(&(String, u32), &SlotCounts)> = slots.iter().collect();
        list.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<HashMap<(String, u32), SlotCounts>, D::Error> {
        let list: Vec<((String, u32), SlotCounts)> = Vec::deserialize(deserializer)?;
        Ok(list.into_iter().collect())
    }
}

impl Tally {
    /// Count what `event` says about restarts, exits and applied versions.
    pub fn count(&mut self, event: &Event) {
        match event {
            Event::Exited {
                instance,
                exit,
                decision,
                ..
            } => {
                let reason = match exit {
                    Exit::Code(0) => ExitReason::ExitZero,
                    Exit::Code(_) => ExitReason::ExitNonzero,
                    Exit::Signal { .. } => ExitReason::Signal,
                };
                self.ended(instance, reason, restarts(decision));
            }
            Event::StartFailed {
                instance, decision, ..
            } => self.ended(instance, ExitReason::StartFailed, restarts(decision)),
            Event::Stopped {
                instance,
                killed,
                end,
                ..
            } => {
                let reason = if *killed {
                    ExitReason::Killed
                } else {
                    ExitReason::Stopped
                };
                let restart = matches!(end, StopEnd::Decided(decision) if restarts(decision));
                self.ended(instance, reason, restart);
            }
            Event::Recycling { instance, .. } => self.slot_mut(instance).restarts += 1,
            Event::Applied { .. } => self.applies += 1,
            _ => {}
        }
    }

    /// The counters of slot `slot` of `app` (zero if nothing happened there).
    pub fn slot(&self, app: &str, slot: u32) -> SlotCounts {
        self.slots
            .get(&(app.to_string(), slot))
            .cloned()
            .unwrap_or_default()
    }

    fn ended(&mut self, instance: &Instance, reason: ExitReason, restart: bool) {
        let counts = self.slot_mut(instance);
        *counts.exits.entry(reason).or_default() += 1;
        if restart {
            counts.restarts += 1;
        }
    }

    fn slot_mut(&mut self, instance: &Instance) -> &mut SlotCounts {
        self.slots
            .entry((instance.app.clone(), instance.slot))
            .or_default()
    }
}

fn restarts(decision: &Decision) -> bool {
    matches!(decision, Decision::Restart { .. })
}

/// The supervisor's state for one scrape: taken by the loop, measured and
/// rendered elsewhere.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// How many versions of the file were applied (`status`' `version`).
    pub file_version: u64,
    pub applies: u64,
    pub rejected_edits: u64,
    pub apps: Vec<AppSeries>,
    pub instances: Vec<InstanceSeries>,
    /// The instances that have a cgroup (leader pid, cgroup): measured by it.
    pub cgroups: Vec<(i32, PathBuf)>,
}

/// One app's gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppSeries {
    pub name: String,
    /// `instances` in the file.
    pub desired: u32,
    /// Processes starting or ready.
    pub running: u32,
    /// Ready instances of the current generation.
    pub rollout_replaced: u32,
    pub rollout_size: u32,
    pub rollout_halted: bool,
}

/// One slot of an app: its state and counters.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSeries {
    pub app: String,
    pub slot: u32,
    /// A process of the slot runs (starting or ready).
    pub up: bool,
    pub ready: bool,
    /// With `health`: whether its last liveness check passed (`None` before
    /// the first answer, while not ready, or without `health`).
    pub healthy: Option<bool>,
    /// Seconds since the slot's newest running process started.
    pub uptime_s: Option<f64>,
    /// The leaders of its processes (two during a replacement).
    pub pids: Vec<i32>,
    pub counts: SlotCounts,
}

/// A slot's CPU time and memory, measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotUsage {
    /// The memory of its processes now (none without a process).
    pub rss_bytes: Option<u64>,
    /// CPU seconds used by the slot's processes, earlier ones included.
    pub cpu_seconds: f64,
}

/// A snapshot with its measurements, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub snapshot: Snapshot,
    /// One per `snapshot.instances`, in the same order.
    pub usage: Vec<SlotUsage>,
    /// The supervisor's own resident memory.
    pub supervisor_rss_bytes: Option<u64>,
}

/// The CPU time each slot's processes were last seen to have used, so a
/// slot's total keeps what its ended processes had used.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct CpuLedger {
    /// As a list: JSON has no keys but strings.
    #[serde(with = "cpu_list")]
    slots: HashMap<(String, u32), SlotCpu>,
}

mod cpu_list {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::SlotCpu;

    pub fn serialize<S: Serializer>(
        slots: &HashMap<(String, u32), SlotCpu>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<(&(String, u32), &SlotCpu)> = slots.iter().collect();
        list.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<HashMap<(String, u32), SlotCpu>, D::Error> {
        let list: Vec<((String, u32), SlotCpu)> = Vec::deserialize(deserializer)?;
        Ok(list.into_iter().collect())
    }
}

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct SlotCpu {
    /// What processes that ended had used when last seen.
    banked: f64,
    /// The most each live leader was seen to have used.
    live: HashMap<i32, f64>,
}

impl CpuLedger {
    /// Each slot's usage from `usage` (per leader pid; CPU in `ticks` per
    /// second), folding the processes no longer in a slot into its total.
    pub fn account(
        &mut self,
        instances: &[InstanceSeries],
        usage: &HashMap<i32, GroupUsage>,
        ticks: u64,
    ) -> Vec<SlotUsage> {
        let ticks = ticks.max(1) as f64;
        instances
            .iter()
            .map(|instance| {
                let cpu = self
                    .slots
                    .entry((instance.app.clone(), instance.slot))
                    .or_default();
                let ended: Vec<i32> = cpu
                    .live
                    .keys()
                    .copied()
                    .filter(|pid| !instance.pids.contains(pid))
                    .collect();
                for pid in ended {
                    cpu.banked += cpu.live.remove(&pid).unwrap_or(0.0);
                }
                let mut rss = 0;
                for pid in &instance.pids {
                    let group = usage.get(pid).copied().unwrap_or_default();
                    rss += group.rss_bytes;
                    let seen = cpu.live.entry(*pid).or_default();
                    *seen = seen.max(group.cpu_ticks as f64 / ticks);
                }
                SlotUsage {
                    rss_bytes: (!instance.pids.is_empty()).then_some(rss),
                    cpu_seconds: cpu.banked + cpu.live.values().sum::<f64>(),
                }
            })
            .collect()
    }
}

/// Measure `snapshot`: every instance's CPU time and memory (cgroups and a
/// pass over /proc: call it off the loop thread) and the supervisor's own.
pub fn measure(snapshot: Snapshot, ledger: &mut CpuLedger) -> Measured {
    let usage = effects::usage::all(&snapshot.cgroups);
    let ticks = effects::procfs::ticks_per_second();
    Measured {
        usage: ledger.account(&snapshot.instances, &usage, ticks),
        supervisor_rss_bytes: effects::procfs::rss_bytes(std::process::id() as i32),
        snapshot,
    }
}

/// The two text formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (what Prometheus asks for first).
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (curl, promtool, older scrapers).
    Prometheus,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names it,
    /// else the Prometheus text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// `measured` as the body of a `/metrics` reply.
pub fn render(measured: Measured, format: Format) -> Result<String, fmt::Error> {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(measured));
    let mut text = String::new();
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut text, &registry)?,
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?
        }
    }
    Ok(text)
}

/// The labels of one series: `app`, and for a slot `slot` (and `reason`).
struct Labels<'a> {
    app: &'a str,
    slot: Option<u32>,
    reason: Option<&'static str>,
}

impl<'a> Labels<'a> {
    fn app(app: &'a str) -> Labels<'a> {
        Labels {
            app,
            slot: None,
            reason: None,
        }
    }

    fn instance(instance: &'a InstanceSeries) -> Labels<'a> {
        Labels {
            app: &instance.app,
            slot: Some(instance.slot),
            reason: None,
        }
    }
}

impl EncodeLabelSet for Labels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        ("app", self.app).encode(encoder.encode_label())?;
        if let Some(slot) = self.slot {
            ("slot", slot).encode(encoder.encode_label())?;
        }
        if let Some(reason) = self.reason {
            ("reason", reason).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// One metric family: its name (without the prefix, the unit and `_total`),
/// help, unit and type.
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
}

const fn gauge(name: &'static str, help: &'static str, unit: Option<Unit>) -> Family {
    Family {
        name,
        help,
        unit,
        kind: MetricType::Gauge,
    }
}

const fn counter(name: &'static str, help: &'static str, unit: Option<Unit>) -> Family {
    Family {
        name,
        help,
        unit,
        kind: MetricType::Counter,
    }
}

/// A value of a series: a gauge or a counter, as its family says.
#[derive(Clone, Copy)]
enum Value {
    Integer(u64),
    Real(f64),
}

impl Value {
    fn flag(on: bool) -> Value {
        Value::Integer(u64::from(on))
    }

    fn encode(
        self,
        kind: &MetricType,
        encoder: prometheus_client::encoding::MetricEncoder,
    ) -> fmt::Result {
        match (kind, self) {
            (MetricType::Counter, Value::Integer(v)) => ConstCounter::new(v).encode(encoder),
            (MetricType::Counter, Value::Real(v)) => ConstCounter::new(v).encode(encoder),
            (_, Value::Integer(v)) => ConstGauge::new(v).encode(encoder),
            (_, Value::Real(v)) => ConstGauge::new(v).encode(encoder),
        }
    }
}

/// Encode `family` with its labelled `series`; a family without series is
/// left out.
fn labelled<'a>(
    encoder: &mut DescriptorEncoder,
    family: &Family,
    series: impl IntoIterator<Item = (Labels<'a>, Value)>,
) -> fmt::Result {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric =
        encoder.encode_descriptor(family.name, family.help, family.unit.as_ref(), family.kind)?;
    for (labels, value) in series {
        value.encode(&family.kind, metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encode `family` with one unlabelled value.
fn single(encoder: &mut DescriptorEncoder, family: &Family, value: Value) -> fmt::Result {
    let metric =
        encoder.encode_descriptor(family.name, family.help, family.unit.as_ref(), family.kind)?;
    value.encode(&family.kind, metric)
}

const INSTANCE_UP: Family = gauge(
    "instance_up",
    "Whether a process of the instance runs (starting or ready).",
    None,
);
const INSTANCE_READY: Family = gauge("instance_ready", "Whether the instance is ready.", None);
const INSTANCE_HEALTHY: Family = gauge(
    "instance_healthy",
    "Whether the last liveness check of the instance passed (apps with health, once answered).",
    None,
);
const INSTANCE_RESTARTS: Family = counter(
    "instance_restarts",
    "Restarts of the instance's slot: after an exit or a failed start, and replacements of a live instance.",
    None,
);
const INSTANCE_EXITS: Family = counter(
    "instance_exits",
    "Processes of the instance's slot that ended, by reason.",
    None,
);
const INSTANCE_RSS: Family = gauge(
    "instance_rss",
    "Memory of the instance's processes (its cgroup's memory.current, else the RSS of its process group).",
    Some(Unit::Bytes),
);
const INSTANCE_CPU: Family = counter(
    "instance_cpu",
    "CPU time used by the processes of the instance's slot, as last measured.",
    Some(Unit::Seconds),
);
const INSTANCE_UPTIME: Family = gauge(
    "instance_uptime",
    "Time since the instance's newest running process started.",
    Some(Unit::Seconds),
);
const APP_DESIRED: Family = gauge(
    "app_instances_desired",
    "Instances the file asks for.",
    None,
);
const APP_RUNNING: Family = gauge(
    "app_instances_running",
    "Processes of the app starting or ready.",
    None,
);
const APP_ROLLOUT_REPLACED: Family = gauge(
    "app_rollout_replaced",
    "Ready instances of the app's current generation.",
    None,
);
const APP_ROLLOUT_SIZE: Family = gauge(
    "app_rollout_size",
    "Instances a rollout of the app replaces.",
    None,
);
const APP_ROLLOUT_HALTED: Family = gauge(
    "app_rollout_halted",
    "Whether the app's rollout halted (a replacement failed).",
    None,
);
const CONFIG_APPLIES: Family = counter(
    "config_applies",
    "Versions of the ecosystem file applied, the first one included.",
    None,
);
const CONFIG_REJECTED: Family = counter(
    "config_rejected_edits",
    "Edits of the ecosystem file refused (invalid or unreadable).",
    None,
);
const CONFIG_VERSION: Family = gauge(
    "config_file_version",
    "The version of the ecosystem file in force (1 at start).",
    None,
);
const SUPERVISOR_RSS: Family = gauge(
    "rss",
    "Resident memory of the supervisor itself.",
    Some(Unit::Bytes),
);

impl Collector for Measured {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let instances = &self.snapshot.instances;
        let each = |value: fn(&InstanceSeries) -> Option<Value>| {
            instances
                .iter()
                .filter_map(move |i| value(i).map(|v| (Labels::instance(i), v)))
        };
        labelled(
            &mut encoder,
            &INSTANCE_UP,
            each(|i| Some(Value::flag(i.up))),
        )?;
        labelled(
            &mut encoder,
            &INSTANCE_READY,
            each(|i| Some(Value::flag(i.ready))),
        )?;
        labelled(
            &mut encoder,
            &INSTANCE_HEALTHY,
            each(|i| i.healthy.map(Value::flag)),
        )?;
        labelled(
            &mut encoder,
            &INSTANCE_RESTARTS,
            each(|i| Some(Value::Integer(i.counts.restarts))),
        )?;
        // Every reason of every slot, zeros included: a series that appears
        // only at its first exit makes `increase()` miss that exit.
        labelled(
            &mut encoder,
            &INSTANCE_EXITS,
            instances.iter().flat_map(|i| {
                ExitReason::ALL.into_iter().map(move |reason| {
                    let count = i.counts.exits.get(&reason).copied().unwrap_or(0);
                    let labels = Labels {
                        reason: Some(reason.label()),
                        ..Labels::instance(i)
                    };
                    (labels, Value::Integer(count))
                })
            }),
        )?;
        let usage = || instances.iter().zip(&self.usage);
        labelled(
            &mut encoder,
            &INSTANCE_RSS,
            usage().filter_map(|(i, u)| {
                u.rss_bytes
                    .map(|b| (Labels::instance(i), Value::Integer(b)))
            }),
        )?;
        labelled(
            &mut encoder,
            &INSTANCE_CPU,
            usage().map(|(i, u)| (Labels::instance(i), Value::Real(u.cpu_seconds))),
        )?;
        labelled(
            &mut encoder,
            &INSTANCE_UPTIME,
            each(|i| i.uptime_s.map(Value::Real)),
        )?;

        let apps = &self.snapshot.apps;
        let per_app = |value: fn(&AppSeries) -> Value| {
            apps.iter().map(move |a| (Labels::app(&a.name), value(a)))
        };
        labelled(
            &mut encoder,
            &APP_DESIRED,
            per_app(|a| Value::Integer(a.desired.into())),
        )?;
        labelled(
            &mut encoder,
            &APP_RUNNING,
            per_app(|a| Value::Integer(a.running.into())),
        )?;
        labelled(
            &mut encoder,
            &APP_ROLLOUT_REPLACED,
            per_app(|a| Value::Integer(a.rollout_replaced.into())),
        )?;
        labelled(
            &mut encoder,
            &APP_ROLLOUT_SIZE,
            per_app(|a| Value::Integer(a.rollout_size.into())),
        )?;
        labelled(
            &mut encoder,
            &APP_ROLLOUT_HALTED,
            per_app(|a| Value::flag(a.rollout_halted)),
        )?;

        let snapshot = &self.snapshot;
        single(
            &mut encoder,
            &CONFIG_APPLIES,
            Value::Integer(snapshot.applies),
        )?;
        single(
            &mut encoder,
            &CONFIG_REJECTED,
            Value::Integer(snapshot.rejected_edits),
        )?;
        single(
            &mut encoder,
            &CONFIG_VERSION,
            Value::Integer(snapshot.file_version),
        )?;
        if let Some(bytes) = self.supervisor_rss_bytes {
            single(&mut encoder, &SUPERVISOR_RSS, Value::Integer(bytes))?;
        }
        Ok(())
    }
}

pub mod endpoint;

#[cfg(test)]
mod tests;
