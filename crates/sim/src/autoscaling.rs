//! Autoscaled apps in the simulation: the world sets each app's load (the
//! connections waiting, the CPU of each ready instance), an edit gives an
//! app a range or takes it away, and the invariants hold the core to its
//! rules whatever the load does:
//! - an autoscaled app's count is always within its range;
//! - it never steps down within `down_after` of a step up (no flapping);
//! - it only steps up on a load over a target, and only steps down on a
//!   load below half of every target (the world knows what it set);
//! - a slot a step down leaves behind holds nothing (the world drops its
//!   own holds there, and a later step up may start it).

use std::time::Instant;

use super::probe;
use super::{Violation, World};
use model::spec::{AppSpec, AutoscaleSpec, HealthCheck, Readiness};
use std::time::Duration;

/// How the world last saw an autoscaled app.
#[derive(Debug, Clone)]
pub(crate) struct Scaled {
    range: AutoscaleSpec,
    count: u32,
    /// When its count last went up.
    up_at: Option<Instant>,
}

/// The range an edit gives: targets 10 connections and 70 % of a CPU, a
/// second of overload to step up, three seconds of quiet to step down.
pub(crate) fn range(min: u32, max: u32) -> AutoscaleSpec {
    AutoscaleSpec {
        min,
        max: max.max(min).max(1),
        max_from_cpus: false,
        queue: Some(10),
        cpu_percent: Some(70),
        up_after: Duration::from_secs(1),
        down_after: Duration::from_secs(3),
    }
}

/// `Edit::Autoscale`: app `index` (not a scheduled one) follows its load
/// within `min..=max`, or (`max` 0) no longer does.
pub(crate) fn edit(apps: &mut [AppSpec], index: usize, min: u32, max: u32) -> bool {
    let Some(app) = apps.get_mut(index) else {
        return false;
    };
    if app.schedule.is_some() {
        return false;
    }
    if max == 0 {
        app.autoscale = None;
    } else {
        let range = range(min, max);
        // As the file is read: the count starts from `min`, and probes
        // have a target for every slot up to `max`.
        app.instances = range.min;
        if let Readiness::Probe(_) = app.ready {
            app.ready = probe(range.max);
        }
        if let Some(health) = app.health.as_mut()
            && let (HealthCheck::Probe(_), Readiness::Probe(targets)) =
                (&health.check, probe(range.max))
        {
            health.check = HealthCheck::Probe(targets);
        }
        app.autoscale = Some(range);
    }
    true
}

impl World {
    /// `Step::Load`: what app `index`'s samples find from now on.
    pub(crate) fn set_load(&mut self, index: usize, queue: u32, cpu_each: u32) {
        let names: Vec<String> = self.desired.apps.iter().map(|a| a.name.clone()).collect();
        if names.is_empty() {
            return;
        }
        let name = names[index % names.len()].clone();
        self.fake().load.insert(name, (queue, cpu_each));
    }

    /// The rules of `autoscale` against what the core did since the last look.
    pub(crate) fn autoscale_violation(&mut self) -> Option<Violation> {
        let now = self.now();
        let mut seen = std::collections::HashMap::new();
        let mut lowered = Vec::new();
        for app in self.supervisor.core().apps().filter(|a| !a.removed) {
            let Some(range) = app.spec.autoscale.clone() else {
                continue;
            };
            let name = app.spec.name.clone();
            let count = app.spec.instances;
            if count < range.min || count > range.max {
                return Some(Violation(format!(
                    "{name}: {count} instances, outside its range {}..{}",
                    range.min, range.max
                )));
            }
            let load = self.supervisor.effects().load.get(&name).copied();
            let mut scaled = match self.scaling.get(&name) {
                // The same range: what changed, the load did.
                Some(before) if before.range == range => before.clone(),
                // New, or an edit of the range (which clamps the count).
                _ => Scaled {
                    range: range.clone(),
                    count,
                    up_at: None,
                },
            };
            if count > scaled.count {
                // With none running, one connection waiting asks for one.
                let starved = scaled.count == 0 && load.is_some_and(|(queue, _)| queue > 0);
                let calm = load.is_none_or(|(queue, cpu)| {
                    range.queue.is_none_or(|t| queue <= t)
                        && range.cpu_percent.is_none_or(|t| cpu <= t)
                });
                if calm && !starved {
                    return Some(Violation(format!(
                        "{name}: scaled up from {} to {count} with no target exceeded (load {load:?})",
                        scaled.count
                    )));
                }
                scaled.up_at = Some(now);
            } else if count < scaled.count {
                lowered.push((name.clone(), count));
                if let Some(up) = scaled.up_at
                    && now.saturating_duration_since(up) < range.down_after
                {
                    return Some(Violation(format!(
                        "{name}: scaled down to {count} {:?} after a step up (down_after {:?})",
                        now.saturating_duration_since(up),
                        range.down_after
                    )));
                }
                // Spread over every instance it had, the queue was still at
                // least half the target (fewer were ready: more each).
                if let Some((queue, cpu)) = load
                    && (range
                        .queue
                        .is_some_and(|t| queue * 2 >= t * scaled.count.max(1))
                        || range.cpu_percent.is_some_and(|t| cpu * 2 >= t))
                {
                    return Some(Violation(format!(
                        "{name}: scaled down to {count} under a load of {queue} waiting and {cpu}% each"
                    )));
                }
            }
            scaled.count = count;
            seen.insert(name, scaled);
        }
        self.scaling = seen;
        // A slot the count no longer wants holds nothing, as after an edit.
        for (name, count) in lowered {
            if let Some(held) = self.holds.get_mut(&name) {
                held.retain(|slot| *slot < count);
            }
        }
        None
    }
}
