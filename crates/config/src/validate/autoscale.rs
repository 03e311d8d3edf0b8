//! `autoscale`: the range an app's instance count follows its load in, and
//! the targets it follows (the accept queue, CPU). The count itself is the
//! core's state; the file only bounds it, so `instances` cannot stand beside
//! it, and an app that runs at times (`schedule`) cannot have it.

use std::time::Duration;

use super::{AppContext, key, parse_positive_duration, within};
use crate::diagnostic::Reporter;
use crate::raw::{self, EcosystemFile};
use model::spec::{AutoscaleSpec, ListenAddress, ListenSpec, defaults};

impl AppContext<'_> {
    /// The resolved `autoscale` of the app (`None` without one or after an
    /// error, which `reporter` then has).
    pub(super) fn resolve_autoscale(
        &self,
        listen: &[ListenSpec],
        reporter: &mut Reporter,
    ) -> Option<AutoscaleSpec> {
        let autoscale = self.fields.autoscale.as_ref()?;
        let path = self.app_path(&["autoscale"]);
        let at = |field: &str| {
            let mut at = path.clone();
            at.push(key(field));
            at
        };
        let errors_before = reporter.error_count();
        if self.fields.instances.is_some() {
            reporter
                .key_error(
                    &self.app_path(&["instances"]),
                    "`instances` cannot go with `autoscale`: the count follows the load",
                )
                .help("drop `instances`; `autoscale.min` is the count it starts from");
        }
        if self.fields.schedule.is_some() {
            reporter
                .key_error(&path, "`autoscale` cannot go with a `schedule`")
                .help("a scheduled app runs one instance at its times; drop one of the two");
        }
        let (max, max_from_cpus) = match autoscale.max {
            raw::Instances::Count(n) => (n, false),
            raw::Instances::Keyword(raw::MaxKeyword::Max) => (self.host.cpus, true),
        };
        if max > defaults::MAX_INSTANCES {
            reporter
                .error(
                    &at("max"),
                    format!(
                        "autoscale.max of {max} is more than the limit of {} instances",
                        defaults::MAX_INSTANCES
                    ),
                )
                .help("split the work over several apps if you really need this many processes");
        } else if max == 0 {
            reporter
                .error(&at("max"), "autoscale.max must be at least 1")
                .help("to run no instance, write `instances: 0` instead of `autoscale`");
        }
        if autoscale.min > max && max > 0 {
            reporter
                .error(
                    &at("min"),
                    format!(
                        "autoscale.min ({}) is more than autoscale.max ({max}{})",
                        autoscale.min,
                        if max_from_cpus { ", one per CPU" } else { "" }
                    ),
                )
                .help("make `min` at most `max`");
        }
        if autoscale.min == 0 && autoscale.queue.is_none() && autoscale.cpu.is_some() {
            reporter
                .error(
                    &at("min"),
                    "`autoscale.min: 0` needs a `queue` target: with no instance running there is no CPU to measure, and nothing would start one",
                )
                .help("write `min: 1`, or add `queue: N` (one connection waiting starts an instance)");
        }
        let shared_tcp = listen
            .iter()
            .any(|l| matches!(l.address, ListenAddress::Tcp(_)) && !l.reuseport);
        if autoscale.min == 0 && autoscale.queue.is_some() && !shared_tcp {
            reporter
                .error(
                    &at("min"),
                    "`autoscale.min: 0` needs a TCP `listen` without `reuseport`: with no instance, a reuseport app has no socket for a connection to wait on",
                )
                .help("write `min: 1`, or listen on a shared socket (drop `reuseport`)");
        }
        if autoscale.queue.is_none() && autoscale.cpu.is_none() {
            reporter
                .key_error(&path, "`autoscale` needs a target: `queue`, `cpu` or both")
                .help("e.g. `queue: 10` (connections waiting per instance) or `cpu: 70%`");
        }
        if let Some(queue) = autoscale.queue {
            if queue == 0 {
                reporter
                    .error(&at("queue"), "autoscale.queue must be at least 1")
                    .help("the target is the connections waiting per ready instance, e.g. 10");
            }
            let tcp = listen
                .iter()
                .any(|l| matches!(l.address, ListenAddress::Tcp(_)));
            if !tcp {
                reporter
                    .key_error(&at("queue"), "`autoscale.queue` needs a TCP `listen` address")
                    .help("the queue is the one of the app's listening socket: give the app `listen: 127.0.0.1:PORT`, or scale on `cpu` alone");
            }
        }
        let cpu_percent = autoscale
            .cpu
            .as_ref()
            .and_then(|cpu| self.resolve_cpu_target(cpu, &at("cpu"), reporter));
        let after = |field: &str,
                     text: Option<&raw::DurationText>,
                     default: Duration,
                     reporter: &mut Reporter| {
            let Some(text) = text else {
                return Some(default);
            };
            let bounds = (
                defaults::AUTOSCALE_SAMPLE_EVERY,
                defaults::MAX_AUTOSCALE_AFTER,
            );
            parse_positive_duration(text, &at(field), reporter).and_then(|d| {
                within(
                    d,
                    bounds,
                    &format!("autoscale.{field}"),
                    &at(field),
                    reporter,
                )
            })
        };
        let up_after = after(
            "up_after",
            autoscale.up_after.as_ref(),
            defaults::AUTOSCALE_UP_AFTER,
            reporter,
        );
        let down_after = after(
            "down_after",
            autoscale.down_after.as_ref(),
            defaults::AUTOSCALE_DOWN_AFTER,
            reporter,
        );
        if reporter.error_count() > errors_before {
            return None;
        }
        Some(AutoscaleSpec {
            min: autoscale.min,
            max,
            max_from_cpus,
            queue: autoscale.queue,
            cpu_percent,
            up_after: up_after?,
            down_after: down_after?,
        })
    }

    /// `cpu: 70%`: from 1% to 100% of every CPU of the machine.
    fn resolve_cpu_target(
        &self,
        cpu: &raw::Percent,
        path: &[crate::diagnostic::PathSeg],
        reporter: &mut Reporter,
    ) -> Option<u32> {
        let most = self.host.cpus.max(1).saturating_mul(100);
        let percent = match cpu {
            raw::Percent::Number(n) => Some(*n),
            raw::Percent::Text(text) => text
                .trim()
                .strip_suffix('%')
                .and_then(|n| n.trim().parse::<u32>().ok()),
        };
        match percent {
            Some(p) if (1..=most).contains(&p) => Some(p),
            Some(p) => {
                reporter
                    .error(
                        path,
                        format!("autoscale.cpu of {p}% is outside 1%..{most}%"),
                    )
                    .help(format!(
                        "the target is the average CPU of one instance, in percent of one CPU (this machine has {}), e.g. 70%",
                        self.host.cpus
                    ));
                None
            }
            None => {
                reporter
                    .error(path, "autoscale.cpu is not a percentage")
                    .help("write a whole percentage of one CPU, e.g. `cpu: 70%`");
                None
            }
        }
    }
}

/// `autoscale` belongs to one app: refused in `defaults`.
pub(super) fn check_defaults(file: &EcosystemFile, reporter: &mut Reporter) {
    if file
        .defaults
        .as_ref()
        .is_some_and(|d| d.autoscale.is_some())
    {
        reporter
            .key_error(
                &[key("defaults"), key("autoscale")],
                "`autoscale` cannot be in `defaults`",
            )
            .help("each app scales on its own load: move it under that app");
    }
}
