//! The OpenMetrics or the Prometheus text format, encoded by
//! `prometheus-client` from a [`Collector`] over the measured snapshot:
//! every scrape is a fresh picture, so nothing in a registry has to be kept
//! in step with the core.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use super::snapshot::{AppSeries, AutoscaleSeries, InstanceSeries, Measured};
use super::tally::ExitReason;

/// Every metric name starts with this.
const PREFIX: &str = "supervise";

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
    pub(crate) fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// `measured` as the body of a `/metrics` reply.
pub(crate) fn render(measured: Measured, format: Format) -> Result<String, fmt::Error> {
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
    "Instances the file asks for (an autoscaled app's count now).",
    None,
);
const APP_AUTOSCALE_MIN: Family = gauge(
    "app_autoscale_min",
    "The fewest instances an autoscaled app runs.",
    None,
);
const APP_AUTOSCALE_MAX: Family = gauge(
    "app_autoscale_max",
    "The most instances an autoscaled app runs.",
    None,
);
const APP_ACCEPT_QUEUE: Family = gauge(
    "app_accept_queue",
    "Connections waiting in an autoscaled app's accept queues at its last sample.",
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
        let autoscaled = |value: fn(&AutoscaleSeries) -> Option<u32>| {
            apps.iter().filter_map(move |a| {
                let series = a.autoscale.as_ref()?;
                Some((Labels::app(&a.name), Value::Integer(value(series)?.into())))
            })
        };
        labelled(
            &mut encoder,
            &APP_AUTOSCALE_MIN,
            autoscaled(|s| Some(s.min)),
        )?;
        labelled(
            &mut encoder,
            &APP_AUTOSCALE_MAX,
            autoscaled(|s| Some(s.max)),
        )?;
        labelled(
            &mut encoder,
            &APP_ACCEPT_QUEUE,
            autoscaled(|s| s.accept_queue),
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
