//! A new version of the file: the plan, app by app.
//!
//! [`model::plan::diff`] says what changed; here each change becomes state: an
//! added app gets an entry, a removed one winds down, a changed process
//! definition is a new generation (which reconcile rolls out), and changed
//! policy fields simply apply to the running workers. An app whose new sockets
//! could not be bound keeps its last good version — in the applied file too,
//! so the next edit is compared against what really runs.

use super::worker::{AfterStop, State};
use super::{Action, App, Core, Event, Phase};
use model::plan::{self, AppChange};
use model::spec::{Desired, SocketKey};

/// A version of the file waiting for its sockets: the binds asked for and
/// not answered yet, and the apps whose sockets could not be bound.
#[derive(Debug)]
pub(super) struct Binding {
    desired: Desired,
    trigger: String,
    awaited: usize,
    unbound: Vec<(String, String)>,
}

impl Core {
    /// A new version of the file: bind what it adds first, then apply it
    /// (at once when it adds no socket).
    pub(super) fn bind_then_apply(&mut self, mut desired: Desired, trigger: String) {
        if self.phase == Phase::ShuttingDown {
            return;
        }
        self.autoscaled_counts(&mut desired);
        if let Some(superseded) = self.binding.take() {
            self.anomaly(format!(
                "a version of the file ({}) was still waiting for {} binds",
                superseded.trigger, superseded.awaited
            ));
        }
        let keys = self.sockets_to_bind(&desired);
        if keys.is_empty() {
            return self.apply(desired, &[], trigger);
        }
        self.binding = Some(Binding {
            desired,
            trigger,
            awaited: keys.len(),
            unbound: Vec::new(),
        });
        for (app, key) in keys {
            self.emit(Action::Bind { app, key });
        }
    }

    /// A socket asked for was bound, or not: once every answer is in, the
    /// version applies, without the apps that could not bind.
    pub(super) fn bound(&mut self, app: String, key: SocketKey, error: Option<String>) {
        let Some(binding) = self.binding.as_mut() else {
            return self.anomaly(format!("{app}: a bind of {key:?} nobody waited for"));
        };
        if let Some(error) = error
            && !binding.unbound.iter().any(|(failed, _)| *failed == app)
        {
            binding.unbound.push((app, error));
        }
        binding.awaited = binding.awaited.saturating_sub(1);
        if binding.awaited > 0 {
            return;
        }
        let Some(Binding {
            desired,
            trigger,
            unbound,
            ..
        }) = self.binding.take()
        else {
            return;
        };
        self.apply(desired, &unbound, trigger);
        if !unbound.is_empty() {
            // What the apps that keep their old version bound is unwanted.
            self.emit(Action::SweepSockets);
        }
    }

    /// The sockets applying `new` binds first: those of added apps and of
    /// changed ones (an address that overlaps its old one binds later, once
    /// the old workers are gone).
    fn sockets_to_bind(&self, new: &Desired) -> Vec<(String, SocketKey)> {
        plan::diff(&self.desired, new)
            .into_iter()
            .filter_map(|change| match change {
                AppChange::Added { name, .. } => Some(name),
                AppChange::Changed(c) if c.overlapping_rebind.is_none() => Some(c.name),
                _ => None,
            })
            .filter_map(|name| new.app(&name))
            .flat_map(|spec| {
                spec.socket_keys()
                    .into_iter()
                    .map(|key| (spec.name.clone(), key))
            })
            .collect()
    }

    fn apply(&mut self, mut desired: Desired, unbound: &[(String, String)], trigger: String) {
        // Again: a sample may have moved a count while the binds were asked.
        self.autoscaled_counts(&mut desired);
        // Before the start is told (`READY=1`, see `startup`), an edit is
        // part of the start: systemd hears neither half of a reload.
        let reload_told = self.started_reported;
        if reload_told {
            self.emit(Action::Systemd("RELOADING=1"));
        }
        let mut applied = desired.clone();
        for change in plan::diff(&self.desired, &desired) {
            let name = change_app(&change).to_string();
            if let Some((_, error)) = unbound.iter().find(|(app, _)| *app == name) {
                // Keep what runs: the old version, or nothing for a new app.
                match self.desired.app(&name) {
                    Some(old) => {
                        if let Some(kept) = applied.apps.iter_mut().find(|a| a.name == name) {
                            *kept = old.clone();
                        }
                    }
                    None => applied.apps.retain(|a| a.name != name),
                }
                self.report(Event::BindFailed {
                    app: name,
                    error: error.clone(),
                });
                continue;
            }
            match &change {
                AppChange::Unchanged { .. } => continue,
                AppChange::Removed { .. } => {
                    if let Some(app) = self.apps.get_mut(&name) {
                        app.removed = true;
                        app.dirty = true;
                    }
                    self.emit(Action::SweepSockets);
                }
                AppChange::Added { .. } | AppChange::Changed(_) => {
                    let Some(spec) = desired.app(&name) else {
                        continue;
                    };
                    let overlapping =
                        matches!(&change, AppChange::Changed(c) if c.overlapping_rebind.is_some());
                    let app = self
                        .apps
                        .entry(name.clone())
                        .or_insert_with(|| App::new(spec));
                    if app.spec.schedule.as_ref().map(|s| &s.when)
                        != spec.schedule.as_ref().map(|s| &s.when)
                    {
                        // A new schedule counts from now; a run that goes
                        // goes on.
                        app.runs = app.runs.take().map(|runs| runs.rescheduled());
                    }
                    if (app.spec != *spec || app.removed) && spec.schedule.is_none() {
                        // A failed, exited or held worker gets a fresh start
                        // when its app's definition changes, and only then
                        // (a scheduled app's runs start on its schedule).
                        // So is a hold: the change, made after the `stop`,
                        // is the user's newer word.
                        app.held.clear();
                        for worker in app.workers.values_mut() {
                            if matches!(worker.state, State::Failed | State::Exited | State::Held) {
                                let _ = worker.revive();
                            } else if let State::Stopping {
                                then: AfterStop::Hold,
                                ..
                            } = worker.state
                            {
                                let _ = worker.after_stop(AfterStop::Restart);
                            }
                        }
                    }
                    // A slot the file no longer wants holds nothing.
                    app.held.retain(|slot| *slot < spec.instances);
                    if app.spec.process != spec.process {
                        app.bump_generation(spec.process.clone(), overlapping);
                    }
                    if app.spec.health != spec.health {
                        // Checks in flight were made for the old settings:
                        // they are cancelled, and counting starts afresh.
                        for worker in app.workers.values_mut() {
                            if let (Some(_), Some(pid)) =
                                (worker.health.in_flight, worker.state.pid())
                            {
                                self.outbox.push(Action::CancelCheck { pid });
                            }
                            worker.health = Default::default();
                        }
                    }
                    if app.spec.max_memory != spec.max_memory {
                        let bytes = spec.max_memory.map(model::limits::memory_ceiling);
                        for pgid in app.workers.values().filter_map(|w| w.state.pid()) {
                            self.outbox.push(Action::LimitMemory { pgid, bytes });
                        }
                    }
                    if app.spec.kill_timeout != spec.kill_timeout {
                        // Policy applies to what runs: stops in flight too.
                        for worker in app.workers.values_mut() {
                            if worker.state.is_stopping() {
                                let _ = worker.retime_stop(spec.kill_timeout);
                            }
                        }
                    }
                    match (&spec.autoscale, &app.autoscaler) {
                        // New to it, or back after a removal (which starts
                        // from `min`): no timer of before counts.
                        (Some(_), None) => app.autoscaler = Some(Default::default()),
                        (Some(_), Some(_)) if app.removed => {
                            app.autoscaler = Some(Default::default());
                        }
                        (None, Some(_)) => app.autoscaler = None,
                        _ => {}
                    }
                    app.spec = spec.clone();
                    app.removed = false;
                    app.dirty = true;
                }
            }
            self.report(Event::Plan(change));
        }
        self.desired = applied;
        self.emit(Action::RouteOutput);
        self.file_version += 1;
        self.report(Event::Applied {
            trigger,
            file_version: self.file_version,
        });
        if reload_told {
            self.emit(Action::Systemd("READY=1"));
        }
    }
}

impl Core {
    /// Every socket an app's current definition, or an older one a worker
    /// still runs, needs: what [`Action::SweepSockets`] keeps.
    pub fn wanted_sockets(&self) -> std::collections::HashSet<model::spec::SocketKey> {
        let mut wanted = std::collections::HashSet::new();
        for app in self.apps.values() {
            for (generation, definition) in &app.definitions {
                if app.removed && !app.workers.values().any(|w| w.generation == *generation) {
                    continue;
                }
                for listen in &definition.listen {
                    if listen.reuseport {
                        // Per slot: wanted slots, and slots with a worker.
                        let slots =
                            (0..app.spec.instances).chain(app.workers.values().map(|w| w.slot));
                        wanted.extend(slots.map(|slot| model::spec::SocketKey {
                            address: listen.address.clone(),
                            slot: Some(slot),
                        }));
                    } else {
                        wanted.insert(model::spec::SocketKey {
                            address: listen.address.clone(),
                            slot: None,
                        });
                    }
                }
            }
        }
        wanted
    }
}

fn change_app(change: &AppChange) -> &str {
    match change {
        AppChange::Added { name, .. }
        | AppChange::Removed { name, .. }
        | AppChange::Unchanged { name } => name,
        AppChange::Changed(changed) => &changed.name,
    }
}
