//! Inputs about processes: spawned or not, ran the program or not, exited,
//! group empty, ready, notify messages.
//!
//! Each finds its worker (by id for spawn results, by leader pid for the
//! rest), moves it through its state machine, and marks its app dirty. News
//! about a process the core no longer knows (a probe that answers after the
//! exit, a second datagram) is a no-op.

use std::time::Instant;

use model::Signal;

use super::worker::{RestartRules, StopEnd};
use super::{Action, App, Core, Event, INJECT_GRACE, Instance, Notice, ReadyVia};
use model::orders::WorkerId;
use model::process::{Exit, StartError};
use model::spec::Readiness;

impl Core {
    /// The worker of leader `pid`, with its app, mutably.
    pub(super) fn by_pid(&mut self, pid: i32) -> Option<(&mut App, WorkerId)> {
        let (name, id) = self.pids.get(&pid)?;
        let app = self.apps.get_mut(name)?;
        app.workers.contains_key(id).then_some((app, *id))
    }

    pub(super) fn spawned(&mut self, name: &str, id: WorkerId, pid: i32, now: Instant) {
        let worker = self
            .apps
            .get_mut(name)
            .and_then(|app| app.workers.get_mut(&id));
        let result = match worker {
            Some(worker) => worker.spawned(pid, now).map_err(|r| r.to_string()),
            None => Err(format!("{name}: spawned pid {pid} for unknown worker {id}")),
        };
        if let Err(error) = result {
            // A process nobody waits for must not live on.
            self.emit(Action::Signal {
                pgid: pid,
                signal: Signal::SIGKILL,
            });
            return self.anomaly(error);
        }
        self.pids.insert(pid, (name.to_string(), id));
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        app.dirty = true;
        let Some(worker) = app.workers.get(&id) else {
            return;
        };
        let instance = Instance::of(&app.spec.name, worker);
        self.report(Event::Spawned { instance, pid });
    }

    pub(super) fn spawn_failed(
        &mut self,
        name: &str,
        id: WorkerId,
        error: StartError,
        detail: String,
        now: Instant,
    ) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let rules = RestartRules::of(&app.spec);
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        match worker.spawn_failed(error, now, &rules) {
            Ok(decision) => {
                app.dirty = true;
                let instance = Instance::of(&app.spec.name, worker);
                self.report(Event::StartFailed {
                    instance,
                    pid: None,
                    error,
                    detail: Some(detail),
                    decision,
                });
            }
            Err(refused) => self.anomaly(refused.to_string()),
        }
    }

    pub(super) fn exec_succeeded(&mut self, pid: i32) {
        let Some((app, id)) = self.by_pid(pid) else {
            return;
        };
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        match worker.exec_succeeded() {
            Ok(changed) => app.dirty |= changed,
            Err(refused) => self.ignored(refused),
        }
    }

    pub(super) fn exited(
        &mut self,
        pid: i32,
        exit: Exit,
        start_error: Option<StartError>,
        now: Instant,
    ) {
        let Some((app, id)) = self.by_pid(pid) else {
            // An adopted descendant of a worker (we are a subreaper), or a
            // process whose worker is already gone: reaped, nothing else.
            return;
        };
        let rules = RestartRules::of(&app.spec);
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let started = worker.state.started();
        // A starting process of an app with `inject` that fails before the
        // library ever reached it: a static binary refused the port, most
        // likely (said once per version, as `inject_unseen` does).
        let unreached_start = matches!(worker.state, super::worker::State::Starting { .. })
            && !worker.injected
            && exit != Exit::Code(0)
            && start_error.is_none()
            && App::inject_unsaid(app.inject_warned, worker.generation)
            && !App::inject_addresses(&app.definitions, worker.generation).is_empty();
        let generation = worker.generation;
        let result = worker.exited(exit, start_error, now, &rules);
        let instance = Instance::of(&app.spec.name, worker);
        app.dirty = true;
        let addresses = if unreached_start && result.is_ok() {
            app.inject_warned = Some(generation);
            App::inject_addresses(&app.definitions, generation)
        } else {
            Vec::new()
        };
        match result {
            Ok(Some(decision)) => {
                // The run is over: its group goes with it.
                self.pids.remove(&pid);
                self.emit(Action::CancelProbe { pid });
                self.emit(Action::CancelCheck { pid });
                self.emit(Action::ReleaseGroup {
                    pgid: pid,
                    kill_leftovers: true,
                    instance: instance.clone(),
                });
                let ran =
                    started.map_or_else(Default::default, |t| now.saturating_duration_since(t));
                self.report(match start_error {
                    Some(error) => Event::StartFailed {
                        instance: instance.clone(),
                        pid: Some(pid),
                        error,
                        detail: None,
                        decision,
                    },
                    None => Event::Exited {
                        instance: instance.clone(),
                        pid,
                        exit,
                        ran,
                        decision,
                    },
                });
                if !addresses.is_empty() {
                    self.report(Event::NotInjected {
                        instance,
                        pid,
                        addresses,
                        before_ready: true,
                    });
                }
            }
            // Stopping: the stop ends when the whole group is empty.
            Ok(None) => {
                self.draining.insert(pid);
            }
            Err(refused) => self.ignored(refused),
        }
    }

    pub(super) fn group_empty(&mut self, pgid: i32, now: Instant) {
        let Some((app, id)) = self.by_pid(pgid) else {
            self.draining.remove(&pgid);
            return;
        };
        let rules = RestartRules::of(&app.spec);
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let stopping = worker.state.clone();
        let result = worker.group_empty(now, &rules);
        let instance = Instance::of(&app.spec.name, worker);
        let end = match result {
            Ok(end) => end,
            Err(refused) => return self.ignored(refused),
        };
        let slot = instance.slot;
        if end == StopEnd::Remove {
            app.workers.remove(&id);
            app.prune_definitions();
        }
        app.dirty = true;
        self.pids.remove(&pgid);
        self.draining.remove(&pgid);
        self.emit(Action::ReleaseGroup {
            pgid,
            kill_leftovers: false,
            instance: instance.clone(),
        });
        self.emit(Action::SweepSockets);
        if end == StopEnd::Remove {
            let name = instance.app.clone();
            self.slot_left(&name, slot);
        }
        if let super::worker::State::Stopping {
            since,
            killed,
            leader_exit,
            ..
        } = stopping
        {
            self.report(Event::Stopped {
                instance,
                pid: pgid,
                killed,
                leader_exit,
                took: now.saturating_duration_since(since),
                end,
            });
        }
    }

    /// Worker of process `pid` is ready (`via` says how we know).
    pub(super) fn ready(&mut self, pid: i32, via: ReadyVia, now: Instant) {
        let Some((app, id)) = self.by_pid(pid) else {
            return;
        };
        let watchdog = app
            .workers
            .get(&id)
            .and_then(|w| app.definitions.get(&w.generation))
            .and_then(|d| d.watchdog);
        let injects = app
            .workers
            .get(&id)
            .is_some_and(|w| !App::inject_addresses(&app.definitions, w.generation).is_empty());
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let started = worker.state.started();
        if let Err(refused) = worker.ready(now) {
            return self.ignored(refused);
        }
        worker.arm_watchdog(now, watchdog);
        app.dirty = true;
        let instance = Instance::of(&app.spec.name, worker);
        // A program the preload library did not reach (a static binary, raw
        // syscalls) serves nothing on the shared socket: looked at once it
        // is ready and has had INJECT_GRACE to bind (a slow start binds after
        // a short `ready: {delay}`).
        if injects && !worker.injected {
            let bound_by = started.map_or(now, |t| t + INJECT_GRACE).max(now);
            worker.inject_check_at = Some(bound_by);
        }
        self.report(Event::Ready {
            instance,
            pid,
            via,
            after: started.map_or_else(Default::default, |t| now.saturating_duration_since(t)),
        });
    }

    /// The preload library of `inject` never said it handed the program of
    /// worker `id` its socket, though it has been up INJECT_GRACE: said once
    /// per version of the app.
    pub(super) fn inject_unseen(&mut self, name: &str, id: WorkerId) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        worker.inject_check_at = None;
        let generation = worker.generation;
        let (Some(pid), false) = (worker.state.pid(), worker.injected) else {
            return;
        };
        if !App::inject_unsaid(app.inject_warned, generation) {
            return;
        }
        app.inject_warned = Some(generation);
        let addresses = App::inject_addresses(&app.definitions, generation);
        let instance = Instance::of(&app.spec.name, worker);
        self.report(Event::NotInjected {
            instance,
            pid,
            addresses,
            before_ready: false,
        });
    }

    /// A notify datagram from the group of leader `leader`, sent by `uid`.
    pub(super) fn notified(&mut self, leader: i32, uid: u32, notice: Notice, now: Instant) {
        let Notice {
            ready,
            status,
            watchdog,
            extend_timeout,
            injected,
        } = notice;
        let own_uid = self.own_uid;
        let Some((app, id)) = self.by_pid(leader) else {
            return;
        };
        let Some(worker) = app.workers.get(&id) else {
            return;
        };
        let expected = app
            .definitions
            .get(&worker.generation)
            .and_then(|d| d.identity.as_ref().map(|i| i.uid))
            .unwrap_or(own_uid);
        if uid != expected && uid != 0 {
            let event = Event::ForeignNotify {
                app: app.spec.name.clone(),
                pid: leader,
                uid,
                expected,
            };
            return self.report(event);
        }
        let notify_ready = app.spec.ready == Readiness::Notify;
        if injected && let Some(worker) = app.workers.get_mut(&id) {
            worker.injected = true;
            worker.inject_check_at = None;
        }
        if let Some(text) = status
            && let Some(worker) = app.workers.get_mut(&id)
        {
            worker.status_text = Some(text);
        }
        if let Some(by) = extend_timeout
            && let Some(worker) = app.workers.get_mut(&id)
        {
            match worker.extend_start(now, by) {
                Ok(()) => app.dirty = true,
                Err(refused) => self.ignored(refused),
            }
        }
        if ready && notify_ready {
            self.ready(leader, ReadyVia::Notify, now);
        }
        if let Some(message) = watchdog {
            self.watchdog_message(leader, message, now);
        }
    }
}
