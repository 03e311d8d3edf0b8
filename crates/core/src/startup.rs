//! When the supervisor has started: `all_ready`, and the `READY=1` it
//! tells systemd.
//!
//! `all_ready` (every wanted instance ready) is what users wait for. But
//! under `Type=notify` systemd waits for `READY=1` only `TimeoutStartSec`
//! long, then kills the unit — every app with it — and, with `Restart=`,
//! starts it again: one app that never becomes ready (a typo in its
//! command, a crash at start) would take every other down, in a loop. So
//! `READY=1` goes once the start of every wanted slot is *decided*: ready
//! (or completed), or ended without becoming ready. From then on its
//! restarts are the supervisor's business, as they are later in its life,
//! and `started_partly` says which instances are not ready. An app held by
//! a dependency that failed, or waiting only on apps whose start is
//! decided, is decided too (it would wait for good); a scheduled app has
//! nothing to start.

use std::collections::BTreeSet;

use super::app::App;

/// How many instances `started_partly` names; the rest are counted.
const MAX_NOT_READY_NAMED: usize = 16;
use super::dependencies::Gate;
use super::{Action, Core, Event, Phase};

impl Core {
    /// Report `all_ready` once every wanted instance is ready, and tell
    /// systemd `READY=1` then, or once every start is decided (saying which
    /// instances are not ready), whichever comes first.
    pub(super) fn maybe_started(&mut self) {
        if self.phase != Phase::Running {
            return;
        }
        if !self.all_ready_reported && self.apps.values().all(App::all_ready) {
            self.all_ready_reported = true;
            self.report(Event::AllReady);
        }
        if self.started_reported {
            return;
        }
        if !self.all_ready_reported {
            if !self.every_start_decided() {
                return;
            }
            let not_ready = self.not_ready();
            self.report(Event::StartedPartly { not_ready });
        }
        self.started_reported = true;
        self.emit(Action::Systemd("READY=1"));
    }

    /// Every app's start is decided: by its own slots, by a failed
    /// dependency, or by waiting only on apps whose start is decided
    /// (followed along chains of dependencies).
    fn every_start_decided(&self) -> bool {
        let decided_alone = |app: &App| {
            app.removed
                || app.spec.schedule.is_some()
                || matches!(app.gate, Gate::Blocked { .. })
                || app.start_decided()
        };
        // An app undecided whose gate does not wait on others can only be
        // decided by its own slots: no chain of dependencies to follow.
        if self
            .apps
            .values()
            .any(|app| !matches!(app.gate, Gate::Waiting(_)) && !decided_alone(app))
        {
            return false;
        }
        let mut decided: BTreeSet<&str> = self
            .apps
            .iter()
            .filter(|(_, app)| decided_alone(app))
            .map(|(name, _)| name.as_str())
            .collect();
        // Each pass adds at least one app or ends: at most one per app.
        loop {
            let waiting_on_decided: Vec<&str> = self
                .apps
                .iter()
                .filter(|(name, app)| {
                    !decided.contains(name.as_str())
                        && matches!(app.gate, Gate::Waiting(_))
                        && app.spec.depends_on.iter().all(|d| {
                            // One the core does not have is no wait (as for
                            // the gate; `check` refuses it anyway).
                            decided.contains(d.app.as_str()) || !self.apps.contains_key(&d.app)
                        })
                })
                .map(|(name, _)| name.as_str())
                .collect();
            if waiting_on_decided.is_empty() {
                break;
            }
            decided.extend(waiting_on_decided);
        }
        decided.len() == self.apps.len()
    }

    /// The wanted instances without a ready (or completed) worker, nor
    /// held, in order: `app.slot`, the first [`MAX_NOT_READY_NAMED`], then `and N
    /// more` (an app of thousands that crashes at start is one line).
    fn not_ready(&self) -> Vec<String> {
        let mut all = self
            .apps
            .iter()
            .filter(|(_, app)| !app.removed && app.spec.schedule.is_none())
            .flat_map(|(name, app)| app.slots_not_ready().map(move |slot| (name, slot)));
        let mut named: Vec<String> = all
            .by_ref()
            .take(MAX_NOT_READY_NAMED)
            .map(|(name, slot)| format!("{name}.{slot}"))
            .collect();
        let more = all.count();
        if more > 0 {
            named.push(format!("and {more} more"));
        }
        named
    }
}

impl App {
    /// Every wanted slot has a worker whose start is decided: ready (or
    /// completed), or a run that ended without it (a crash, a failed exec,
    /// a readiness timeout), or given up, held or exited for good.
    pub(super) fn start_decided(&self) -> bool {
        self.every_slot(super::worker::Worker::start_decided)
    }

    /// The wanted slots without a ready (or completed) worker, nor one held
    /// by `stop` (not running on purpose: nothing to say of it), in order.
    fn slots_not_ready(&self) -> impl Iterator<Item = u32> {
        let ready = self
            .slots_with(|w| super::app::done_or_ready(w) || w.state == super::worker::State::Held);
        (0..self.spec.instances).filter(move |slot| !ready[*slot as usize])
    }

    /// Every wanted slot has a worker that `meets`. Asked of every app
    /// after every batch of news while the supervisor starts: most apps
    /// have a few slots, and their answer takes no allocation.
    pub(super) fn every_slot(&self, meets: impl Fn(&super::worker::Worker) -> bool) -> bool {
        let wanted = self.spec.instances;
        if wanted <= u64::BITS {
            let mut met = 0u64;
            for worker in self.workers.values() {
                if worker.slot < wanted && meets(worker) {
                    met |= 1 << worker.slot;
                }
            }
            return met.count_ones() == wanted;
        }
        self.slots_with(meets).iter().all(|met| *met)
    }

    /// For each wanted slot, whether a worker of it `meets`: one pass over
    /// the workers (an app of thousands is asked after every batch of news).
    fn slots_with(&self, meets: impl Fn(&super::worker::Worker) -> bool) -> Vec<bool> {
        let mut met = vec![false; self.spec.instances as usize];
        for worker in self.workers.values() {
            if let Some(slot) = met.get_mut(worker.slot as usize)
                && meets(worker)
            {
                *slot = true;
            }
        }
        met
    }
}

#[cfg(test)]
mod tests;
