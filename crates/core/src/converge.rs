//! Carrying out what reconcile decides: every dirty app is reconciled until
//! it settles (dependencies first), and each step of its plan changes its
//! workers and emits the actions the shell carries out.

use std::time::Instant;

use super::reconcile::{self, Plan, Step, StopReason, Target};
use super::worker::{AfterStop, Worker};
use super::{
    Action, Core, Event, Instance, MAX_GATE_ROUNDS, MAX_PASSES, NO_ROOM_REPEAT, NO_ROOM_RETRY,
    Phase, ReadyVia, StopHow, UNSETTLED_RETRY,
};
use model::Signal;
use model::orders::{SpawnOrder, WorkerId};
use model::spec::Readiness;

impl Core {
    /// Reconcile every dirty app until it has nothing left to do, applying
    /// the steps (the actions they need go to the outbox), and look at the
    /// gates of dependencies and schedules after each round: what one app
    /// did may let another start.
    pub fn converge(&mut self, now: Instant) {
        self.sample_due_loads(now);
        for round in 1.. {
            self.update_gates(now);
            if !self.unsettled() {
                break;
            }
            if round > MAX_GATE_ROUNDS {
                self.anomaly(format!(
                    "gates did not settle after {MAX_GATE_ROUNDS} rounds"
                ));
                break;
            }
            self.reconcile_dirty(now);
        }
        let gone: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, app)| app.removed && app.workers.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            self.apps.shift_remove(&name);
            self.emit(Action::ForgetOutput {
                app: name,
                slot: None,
            });
            self.emit(Action::SweepSockets);
        }
        self.maybe_started();
    }

    /// Reconcile every dirty app until it has nothing left to do, applying
    /// the steps; an app's dependencies first.
    fn reconcile_dirty(&mut self, now: Instant) {
        let dirty: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| a.dirty)
            .map(|(n, _)| n.clone())
            .collect();
        for name in dirty {
            self.reconcile_after_dependencies(&name, now, &mut Vec::new());
        }
    }

    /// Reconcile `name` if it is dirty, once its dependencies are up to
    /// date: a dependency whose own gate changes now (replaced under
    /// `on_dependency_restart`, say) acts first, so what it stops counts
    /// for `name`'s gate before `name` starts anything. `path`: the apps
    /// on the way here (a cycle, which `check` refuses, ends the walk).
    fn reconcile_after_dependencies(&mut self, name: &str, now: Instant, path: &mut Vec<String>) {
        if path.iter().any(|on_the_way| on_the_way == name) {
            return;
        }
        let dependencies: Vec<String> = self.apps.get(name).map_or_else(Vec::new, |app| {
            app.spec.depends_on.iter().map(|d| d.app.clone()).collect()
        });
        path.push(name.to_string());
        for dependency in &dependencies {
            if self
                .apps
                .get(dependency)
                .is_some_and(|a| !a.spec.depends_on.is_empty())
            {
                self.update_gate(dependency);
            }
            if self.apps.get(dependency).is_some_and(|a| a.dirty) {
                self.reconcile_after_dependencies(dependency, now, path);
            }
        }
        path.pop();
        if self.apps.get(name).is_some_and(|a| a.dirty) {
            self.reconcile_app(name, now);
        }
    }

    /// Reconcile app `name` until it has nothing left to do, applying the
    /// steps.
    fn reconcile_app(&mut self, name: &str, now: Instant) {
        let name = name.to_string();
        for pass in 1.. {
            // What an app reconciled before in this round did (a
            // dependency stopping an instance) counts now.
            if self
                .apps
                .get(&name)
                .is_some_and(|a| !a.spec.depends_on.is_empty())
            {
                self.update_gate(&name);
            }
            let Some(app) = self.apps.get(&name) else {
                break;
            };
            let may_start = self.may_start(app);
            let Some(app) = self.apps.get_mut(&name) else {
                break;
            };
            app.dirty = false;
            let target = Target {
                spec: &app.spec,
                generation: app.generation,
                rollout_halted: app.rollout_halted,
                recreate: app.recreate,
                winding_down: app.winding_down,
                may_start,
                holding: self.phase == Phase::ShuttingDown && !app.winding_down,
                held: &app.held,
            };
            let Plan { mut steps, wake_at } = reconcile::reconcile(target, &app.workers, now);
            // Starts beyond this turn's budget wait for the next turn,
            // due at once.
            let before = steps.len();
            steps.retain(|step| match step {
                Step::Start { .. } if self.spawn_budget == 0 => false,
                Step::Start { .. } => {
                    self.spawn_budget -= 1;
                    true
                }
                _ => true,
            });
            let deferred = steps.len() < before;
            let said_lately = self
                .no_room_said
                .is_some_and(|at| now.saturating_duration_since(at) < NO_ROOM_REPEAT);
            if deferred && self.no_room && !said_lately {
                self.no_room_said = Some(now);
                self.outbox.push(Action::Report(Event::StartsWaitForRoom));
            }
            if steps.is_empty() {
                let retry = if self.no_room {
                    now + NO_ROOM_RETRY
                } else {
                    now
                };
                app.wake_at = if deferred { Some(retry) } else { wake_at };
                self.report(Event::Reconciled {
                    app: name.clone(),
                    passes: pass,
                });
                break;
            }
            if pass >= MAX_PASSES {
                app.wake_at = Some(now + UNSETTLED_RETRY);
                self.anomaly(format!(
                    "{name}: reconcile did not settle after {MAX_PASSES} passes: {steps:?}"
                ));
                break;
            }
            app.dirty = true;
            for step in steps {
                self.step(&name, step, now);
            }
        }
    }

    /// Carry out one step of a plan.
    fn step(&mut self, name: &str, step: Step, now: Instant) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        match step {
            Step::Create { slot, generation } => {
                let id = self.next_worker;
                self.next_worker += 1;
                // Taking the place of a recycled worker, it carries on its
                // restart count and waits for its backoff.
                let recycled = app
                    .workers
                    .values()
                    .rfind(|w| w.slot == slot && w.recycle.is_some());
                let worker = match recycled {
                    Some(old) => Worker::replacing(id, generation, old, now),
                    None => Worker::new(id, slot, generation),
                };
                app.workers.insert(id, worker);
            }
            Step::Start { id } => {
                let Some(worker) = app.workers.get_mut(&id) else {
                    return self.anomaly(format!("{name}: start of unknown worker {id}"));
                };
                if let Err(refused) = worker.begin_start() {
                    return self.anomaly(refused.to_string());
                }
                let Some(definition) = app.definitions.get(&worker.generation).cloned() else {
                    let error =
                        format!("{name}: no definition for generation {}", worker.generation);
                    return self.anomaly(error);
                };
                let order = SpawnOrder {
                    app: name.to_string(),
                    id,
                    slot: worker.slot,
                    generation: worker.generation,
                    definition,
                    readiness: app.spec.ready.clone(),
                    memory_max: app.spec.max_memory.map(model::limits::memory_ceiling),
                };
                self.emit(Action::Spawn(order));
            }
            Step::MarkReady { id } => {
                let via = match app.spec.ready {
                    Readiness::Immediate => ReadyVia::Exec,
                    _ => ReadyVia::Delay,
                };
                let Some(pid) = app.workers.get(&id).and_then(|w| w.state.pid()) else {
                    return self.anomaly(format!("{name}: ready without a process"));
                };
                self.ready(pid, via, now);
            }
            Step::Stop { id, reason, then } => {
                self.stop(name, id, reason, StopHow::default(), then, now)
            }
            Step::Check { id } => self.check(name, id, now),
            Step::CheckTimedOut { id } => self.check_timed_out(name, id, now),
            Step::WatchdogMissed { id } => self.watchdog_missed(name, id, false, now),
            Step::InjectUnseen { id } => self.inject_unseen(name, id),
            Step::Kill { id } => {
                let kill_timeout = app.spec.kill_timeout;
                let Some(worker) = app.workers.get_mut(&id) else {
                    return;
                };
                let Some(pid) = worker.state.pid() else {
                    return;
                };
                if let Err(refused) = worker.killed() {
                    return self.anomaly(refused.to_string());
                }
                let instance = Instance::of(&app.spec.name, worker);
                self.emit(Action::Signal {
                    pgid: pid,
                    signal: Signal::SIGKILL,
                });
                self.report(Event::Killing {
                    instance,
                    pid,
                    kill_timeout,
                });
            }
            Step::Hold { id } => {
                let Some(worker) = app.workers.get_mut(&id) else {
                    return self.anomaly(format!("{name}: hold of unknown worker {id}"));
                };
                if let Err(refused) = worker.hold() {
                    self.anomaly(refused.to_string());
                }
            }
            Step::Remove { id } => {
                if app
                    .workers
                    .get(&id)
                    .is_some_and(|w| w.state.pid().is_some())
                {
                    return self.anomaly(format!("{name}: remove of worker {id} with a process"));
                }
                app.workers.remove(&id);
                app.prune_definitions();
                self.emit(Action::SweepSockets);
            }
            Step::HaltRollout { generation, slot } => {
                app.rollout_halted = true;
                let instance = Instance {
                    app: name.to_string(),
                    slot,
                    generation,
                };
                self.report(Event::RolloutHalted { instance });
            }
        }
    }

    /// Stop worker `id`'s process: the stop signal now, SIGKILL at
    /// `kill_timeout`, `then` once its group is empty.
    pub(super) fn stop(
        &mut self,
        name: &str,
        id: WorkerId,
        reason: StopReason,
        how: StopHow,
        then: AfterStop,
        now: Instant,
    ) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let signal = how.signal.unwrap_or(app.spec.stop_signal);
        let (command, kill_timeout) = (how.command, app.spec.kill_timeout);
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let (Some(pid), Some(started)) = (worker.state.pid(), worker.state.started()) else {
            return self.anomaly(format!("{name}: stop of worker {id} without a process"));
        };
        if let Err(refused) = worker.stop(now, kill_timeout, then) {
            return self.anomaly(refused.to_string());
        }
        let instance = Instance::of(&app.spec.name, worker);
        app.dirty = true;
        self.emit(Action::CancelProbe { pid });
        self.emit(Action::CancelCheck { pid });
        self.emit(Action::Signal { pgid: pid, signal });
        self.report(Event::Stopping {
            instance,
            pid,
            reason,
            command,
            signal,
            uptime: now.saturating_duration_since(started),
        });
    }

    /// A worker of `slot` was forgotten: when no other stands for that slot
    /// and it is not wanted, its output goes too.
    pub(super) fn slot_left(&mut self, name: &str, slot: u32) {
        let Some(app) = self.apps.get(name) else {
            return;
        };
        let unwanted = app.removed || slot >= app.spec.instances;
        if unwanted && !app.workers.values().any(|w| w.slot == slot) {
            self.emit(Action::ForgetOutput {
                app: name.to_string(),
                slot: Some(slot),
            });
        }
    }
}
