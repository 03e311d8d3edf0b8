//! `autoscale`: the instance count of an app follows its load.
//!
//! The shell samples each autoscaled app every
//! [`AUTOSCALE_SAMPLE_EVERY`](model::spec::defaults::AUTOSCALE_SAMPLE_EVERY)
//! (asked by [`Action::SampleLoad`], answered by [`Input::LoadSampled`]):
//! the connections waiting in the accept queue of its listening sockets, and
//! the CPU each ready instance used since the last sample. The decision is
//! here, on the instants it is given, with Kubernetes' arithmetic
//! (`desired = ceil(current × metric / target)`, the largest over the
//! targets):
//! - a target exceeded (by more than [`TOLERANCE`]) for `up_after` scales
//!   up to what the overload asks, capped at `max`; the next step up needs
//!   another `up_after` of overload;
//! - every target below half for `down_after` scales down by one, and only
//!   once `down_after` has passed since the last step up: a step down never
//!   follows a step up within `down_after` (no flapping);
//! - a gap in the samples (a stall of ours, a sample lost) longer than
//!   [`SAMPLE_GAP`] starts both counts afresh: evidence must be continuous;
//! - a step down is held while the app's CPU would drive the instances left
//!   above [`SATURATED_HEADROOM`] of what one burned when requests were
//!   seen waiting ([`Saturation`]): a queue reads empty both when the app
//!   is idle and when its count is just enough, and only the CPU tells the
//!   two apart. Without this, an app at the edge of its load steps down
//!   until requests wait, steps back up, and so on, every `down_after`.
//!
//! The count is the app's `spec.instances` (so reconcile, status and the
//! rest see one number); the file only bounds it, and an edit clamps it
//! into the new range ([`Core::autoscaled_counts`]). It is state: an upgrade
//! hands it over with the timers.
//!
//! [`Action::SampleLoad`]: crate::Action::SampleLoad
//! [`Input::LoadSampled`]: crate::Input::LoadSampled

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Action, Core, Event};
use model::spec::defaults::AUTOSCALE_SAMPLE_EVERY;
use model::spec::{AutoscaleSpec, Desired};
pub use model::usage::LoadSample;

/// A metric within this fraction of its target changes nothing
/// (Kubernetes' default tolerance): noise around the target is not load.
pub const TOLERANCE: f64 = 0.1;
/// Samples further apart than this are not continuous evidence.
pub const SAMPLE_GAP: Duration = Duration::from_secs(1);
/// A step down must leave each remaining instance below this fraction of
/// the CPU of a saturated one: at 80 % busy, requests rarely wait long.
pub const SATURATED_HEADROOM: f64 = 0.8;
/// A saturated instance measured below this (percent of one CPU) says
/// nothing usable: its work is waiting, not computing.
pub const SATURATED_AT_LEAST: f64 = 1.0;
/// A saturation learned this many `down_after`s ago, and at least
/// [`SATURATION_KEPT_AT_LEAST`] ago, is forgotten, and learned again at the
/// next overload: a server whose idle CPU reads as busy still goes back to
/// `min`, only slower.
pub const SATURATION_KEPT_FOR: u32 = 10;
/// A load at the edge of the count stays there for minutes, whatever
/// `down_after` is: kept this long in any case.
pub const SATURATION_KEPT_AT_LEAST: Duration = Duration::from_secs(600);

/// Which target asked for a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Metric {
    Queue,
    Cpu,
}

/// The load of an app over time, as far as scaling is concerned.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Autoscaler {
    /// Since when a target is exceeded without a break.
    #[serde(with = "model::monotonic::option")]
    over_since: Option<Instant>,
    /// Since when every target is below half without a break.
    #[serde(with = "model::monotonic::option")]
    under_since: Option<Instant>,
    #[serde(with = "model::monotonic::option")]
    last_up: Option<Instant>,
    /// What one instance burns when requests wait for it.
    saturation: Option<Saturation>,
    #[serde(with = "model::monotonic::option")]
    last_sample_at: Option<Instant>,
    /// When the next sample is due.
    #[serde(with = "model::monotonic::option")]
    pub(super) sample_due: Option<Instant>,
    /// A sample was asked for and not answered yet.
    #[serde(skip)]
    pub(super) asked: bool,
    /// The last sample, per ready instance: for `status`.
    pub last: Option<PerInstance>,
}

/// A sample divided among the instances it is about.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerInstance {
    /// Connections waiting in all (`None`: no queue target, or unread).
    pub waiting: Option<u32>,
    /// Connections waiting per ready instance.
    pub queue: Option<f64>,
    /// The average CPU of a ready instance, in percent of one CPU.
    pub cpu_percent: Option<f64>,
}

/// The CPU of one instance when requests were waiting for every one: the
/// most it can do, measured on the app's own work.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    /// Percent of one CPU.
    pub cpu_percent: f64,
    #[serde(with = "model::monotonic::instant")]
    pub at: Instant,
}

/// A change of the count, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    pub to: u32,
    pub why: String,
}

impl Autoscaler {
    /// Take `sample` of an app running `current` instances (`ready` of them
    /// ready) at `now`: the new count, when it changes.
    pub fn sample(
        &mut self,
        range: &AutoscaleSpec,
        current: u32,
        ready: u32,
        sample: LoadSample,
        now: Instant,
    ) -> Option<Scaling> {
        if self
            .last_sample_at
            .is_none_or(|at| now.saturating_duration_since(at) > SAMPLE_GAP)
        {
            self.over_since = None;
            self.under_since = None;
        }
        self.last_sample_at = Some(now);
        self.last = Some(PerInstance {
            waiting: sample.queue.filter(|_| range.queue.is_some()),
            queue: sample
                .queue
                .filter(|_| range.queue.is_some())
                .map(|q| f64::from(q) / f64::from(ready.max(1))),
            cpu_percent: sample
                .cpu_percent
                .filter(|_| range.cpu_percent.is_some() && sample.measured > 0)
                .map(|c| f64::from(c) / f64::from(sample.measured)),
        });
        let mut over = ratios(range, ready, sample)
            .filter_map(|(metric, ratio)| ratio.map(|r| (metric, r)))
            .filter(|(_, ratio)| *ratio > 1.0 + TOLERANCE)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        // With no instance at all, one connection waiting is an overload.
        if current == 0
            && let (Some(target), Some(waiting @ 1..)) = (range.queue, sample.queue)
        {
            let ratio = (f64::from(waiting) / f64::from(target)).max(1.0);
            over = over.or(Some((Metric::Queue, ratio)));
        }
        // Below half of *every* target, each measured.
        let under = ratios(range, ready, sample).all(|(_, ratio)| ratio.is_some_and(|r| r < 0.5));
        if let Some((metric, ratio)) = over {
            self.under_since = None;
            let since = *self.over_since.get_or_insert(now);
            // Only a whole interval of waiting says every instance was
            // busy throughout: the first sample of an overload may cover
            // idle time before it began.
            if since < now {
                self.learn_saturation(range, ready, sample, now);
            }
            let lasted = now.saturating_duration_since(since);
            let rested = self
                .last_up
                .is_none_or(|up| now.saturating_duration_since(up) >= range.up_after);
            // The ratio is per ready instance, so the count it asks for is
            // of ready ones: instances still starting will take their share
            // once ready (a slow start must not double the count each step).
            let asked = desired(ready, ratio);
            let to = range.clamp(asked);
            if lasted >= range.up_after && rested && to > current {
                self.over_since = None;
                self.last_up = Some(now);
                return Some(Scaling {
                    to,
                    why: format!(
                        "{} for {}",
                        describe(metric, range, self.last),
                        seconds(lasted)
                    ),
                });
            }
            return None;
        }
        self.over_since = None;
        if !under {
            self.under_since = None;
            return None;
        }
        let since = *self.under_since.get_or_insert(now);
        let lasted = now.saturating_duration_since(since);
        let rested = self
            .last_up
            .is_none_or(|up| now.saturating_duration_since(up) >= range.down_after);
        if lasted >= range.down_after && rested && current > range.min {
            if self.too_busy_for(current - 1, range, ready, sample, now) {
                // Held, not restarted: the step comes once the load falls.
                return None;
            }
            // The next step down needs another `down_after`.
            self.under_since = Some(now);
            return Some(Scaling {
                to: current - 1,
                why: format!(
                    "below half of every target ({}) for {}",
                    [Metric::Queue, Metric::Cpu]
                        .into_iter()
                        .filter(|m| target(*m, range).is_some())
                        .map(|m| describe(m, range, self.last))
                        .collect::<Vec<_>>()
                        .join(", "),
                    seconds(lasted)
                ),
            });
        }
        None
    }
}

impl Autoscaler {
    /// With the queue over its target, each of the `ready` instances (all
    /// measured) burns what a saturated one does.
    fn learn_saturation(
        &mut self,
        range: &AutoscaleSpec,
        ready: u32,
        sample: LoadSample,
        now: Instant,
    ) {
        let queue_over = ratios(range, ready, sample).any(|(metric, ratio)| {
            metric == Metric::Queue && ratio.is_some_and(|r| r > 1.0 + TOLERANCE)
        });
        let (Some(total), true) = (
            sample.cpu_percent,
            queue_over && ready > 0 && sample.measured == ready,
        ) else {
            return;
        };
        let cpu_percent = f64::from(total) / f64::from(ready);
        if cpu_percent >= SATURATED_AT_LEAST {
            self.saturation = Some(Saturation {
                cpu_percent,
                at: now,
            });
        }
    }

    /// Would `fewer` instances be above [`SATURATED_HEADROOM`] of a
    /// saturated one with the CPU the app burns now? Unknown (nothing
    /// learned, or learned too long ago; nothing measured) is no.
    fn too_busy_for(
        &mut self,
        fewer: u32,
        range: &AutoscaleSpec,
        ready: u32,
        sample: LoadSample,
        now: Instant,
    ) -> bool {
        let Some(saturation) = self.saturation else {
            return false;
        };
        let kept_for = (range.down_after * SATURATION_KEPT_FOR).max(SATURATION_KEPT_AT_LEAST);
        if now.saturating_duration_since(saturation.at) >= kept_for {
            self.saturation = None;
            return false;
        }
        let (Some(total), 1..) = (sample.cpu_percent, sample.measured) else {
            return false;
        };
        // Going to none is the queue's to judge: any CPU at all would hold it.
        if fewer == 0 {
            return false;
        }
        // The instances not measured yet burn as the measured ones do.
        let app_percent =
            f64::from(total) / f64::from(sample.measured) * f64::from(ready.max(sample.measured));
        app_percent / f64::from(fewer) >= SATURATED_HEADROOM * saturation.cpu_percent
    }
}

/// Each target the app has, with its metric over the target: `None`
/// where it cannot be judged now (no socket read; no ready instance
/// measured).
fn ratios(
    range: &AutoscaleSpec,
    ready: u32,
    sample: LoadSample,
) -> impl Iterator<Item = (Metric, Option<f64>)> {
    let queue = range.queue.map(|target| {
        // With no instance ready, whatever waits waits for one.
        let ratio = sample
            .queue
            .map(|waiting| f64::from(waiting) / f64::from(ready.max(1)) / f64::from(target));
        (Metric::Queue, ratio)
    });
    let cpu = range.cpu_percent.map(|target| {
        let ratio = sample
            .cpu_percent
            .filter(|_| sample.measured > 0)
            .map(|total| f64::from(total) / f64::from(sample.measured) / f64::from(target));
        (Metric::Cpu, ratio)
    });
    queue.into_iter().chain(cpu)
}

/// `2.0s`, `61.3s`: how long a condition lasted, for the event's `why`.
fn seconds(lasted: Duration) -> String {
    format!("{:.1}s", lasted.as_secs_f64())
}

/// Kubernetes' `ceil(current × metric / target)`, from at least one.
fn desired(ready: u32, ratio: f64) -> u32 {
    let wanted = (f64::from(ready.max(1)) * ratio).ceil();
    if wanted >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        wanted as u32
    }
}

fn target(metric: Metric, range: &AutoscaleSpec) -> Option<u32> {
    match metric {
        Metric::Queue => range.queue,
        Metric::Cpu => range.cpu_percent,
    }
}

/// `queue 27/10`, `cpu 95%/70%`: a metric per instance over its target.
pub fn describe(metric: Metric, range: &AutoscaleSpec, last: Option<PerInstance>) -> String {
    let target = target(metric, range).unwrap_or(0);
    match metric {
        Metric::Queue => match last.and_then(|l| l.queue) {
            Some(q) => format!("queue {q:.0}/{target}"),
            None => format!("queue ?/{target}"),
        },
        Metric::Cpu => match last.and_then(|l| l.cpu_percent) {
            Some(c) => format!("cpu {c:.0}%/{target}%"),
            None => format!("cpu ?/{target}%"),
        },
    }
}

impl Core {
    /// The counts of autoscaled apps in a new version of the file: what
    /// runs now, clamped into the new range (`min` for an app new to it).
    /// The file bounds the count; it does not set it.
    pub(super) fn autoscaled_counts(&self, desired: &mut Desired) {
        for spec in &mut desired.apps {
            let Some(range) = &spec.autoscale else {
                continue;
            };
            let current = self
                .apps
                .get(&spec.name)
                .filter(|app| !app.removed)
                .map(|app| app.spec.instances);
            spec.instances = current.map_or(range.min, |count| range.clamp(count));
        }
    }

    /// Ask for the samples that are due: an autoscaled app is sampled every
    /// [`AUTOSCALE_SAMPLE_EVERY`], one sample in flight at a time.
    pub(super) fn sample_due_loads(&mut self, now: Instant) {
        if self.phase != super::Phase::Running {
            return;
        }
        let mut due = Vec::new();
        for (name, app) in &mut self.apps {
            let Some(scaler) = app.autoscaler.as_mut() else {
                continue;
            };
            // An answer comes at once; one lost (a bug) is asked again.
            let unanswered =
                scaler.asked && scaler.sample_due.is_some_and(|at| now < at + SAMPLE_GAP);
            if app.removed || unanswered || scaler.sample_due.is_some_and(|at| at > now) {
                continue;
            }
            scaler.asked = true;
            scaler.sample_due = Some(now + AUTOSCALE_SAMPLE_EVERY);
            due.push(name.clone());
        }
        for app in due {
            self.emit(Action::SampleLoad { app });
        }
    }

    /// When the next sample of an autoscaled app is due (or, with one
    /// asked for and not answered, when it is taken as lost and asked again).
    pub(super) fn sample_wake(&self) -> Option<Instant> {
        if self.phase != super::Phase::Running {
            return None;
        }
        self.apps
            .values()
            .filter(|app| !app.removed)
            .filter_map(|app| app.autoscaler.as_ref())
            .filter_map(|scaler| {
                let due = scaler.sample_due?;
                Some(if scaler.asked { due + SAMPLE_GAP } else { due })
            })
            .min()
    }

    /// The leaders of the ready instances of `app` the count wants: whose
    /// CPU a sample measures.
    pub fn ready_leaders(&self, app: &str) -> impl Iterator<Item = i32> + '_ {
        self.apps.get(app).into_iter().flat_map(|app| {
            app.workers
                .values()
                .filter(|w| w.slot < app.spec.instances && w.state.is_ready())
                .filter_map(|w| w.state.pid())
        })
    }

    /// A sample of `app` came: its count may change.
    pub(super) fn load_sampled(&mut self, name: &str, sample: LoadSample, now: Instant) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let (Some(range), Some(scaler)) = (app.spec.autoscale.clone(), app.autoscaler.as_mut())
        else {
            return;
        };
        scaler.asked = false;
        if app.removed || self.phase != super::Phase::Running {
            return;
        }
        let current = app.spec.instances;
        let ready = app
            .workers
            .values()
            .filter(|w| w.slot < current && w.state.is_ready())
            .count() as u32;
        let Some(scaling) = scaler.sample(&range, current, ready, sample, now) else {
            return;
        };
        app.spec.instances = scaling.to;
        // A slot the count no longer wants holds nothing (as after an
        // edit): were it held on, a later step up would count it and leave
        // it stopped, one short, with no `start` to reach it.
        app.held.retain(|slot| *slot < scaling.to);
        app.dirty = true;
        if let Some(applied) = self.desired.apps.iter_mut().find(|a| a.name == name) {
            applied.instances = scaling.to;
        }
        // `logs APP.N` and the log files know the instances by the count.
        self.emit(Action::RouteOutput);
        self.report(Event::Autoscaled {
            app: name.to_string(),
            from: current,
            to: scaling.to,
            why: scaling.why,
        });
    }
}

#[cfg(test)]
mod tests;
