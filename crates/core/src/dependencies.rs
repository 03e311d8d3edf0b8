//! Dependencies between apps: who may start, who stops first, and who is
//! replaced when what it depends on was.
//!
//! An app's *gate* is open when every app in its `depends_on` meets its
//! condition now; while it is closed the app starts no process (neither a
//! first start nor a restart) and the processes it has keep running. A gate
//! is *blocked* when a dependency will not meet its condition without a
//! change: it gave up (`failed`), or it ended and is not restarted (a
//! one-shot that exited non-zero). Gates are looked at again after every
//! convergence (a state change of one app is what opens another's gate), and
//! each change is reported once.
//!
//! Shutdown goes in reverse: an app winds down only once every app that
//! depends on it has no worker left.

use std::collections::BTreeSet;
use std::time::Instant;

use super::worker::{State, Worker};
use super::{App, Core, Event, Phase};
use model::orders::WorkerId;
use model::spec::{Condition, OnDependencyRestart};

/// Whether an app may start processes, as its dependencies stand.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Gate {
    /// No dependency, or every one met.
    #[default]
    Open,
    /// Dependencies not met yet: `db (ready)`, in file order.
    Waiting(Vec<String>),
    /// A dependency will not meet its condition without a change.
    Blocked { dependency: String, reason: String },
}

impl Gate {
    pub fn is_open(&self) -> bool {
        *self == Gate::Open
    }

    /// What `status` says of it: `waiting for db (ready)`, `held: migrate
    /// exited with code 1`; `None` when open.
    pub fn describe(&self) -> Option<String> {
        match self {
            Gate::Open => None,
            Gate::Waiting(on) => Some(format!("waiting for {}", on.join(", "))),
            Gate::Blocked { reason, .. } => Some(format!("held: {reason}")),
        }
    }
}

/// One run of a dependency's worker, for `on_dependency_restart`: the
/// worker and its count of processes. A one-shot that completes is still the
/// same run; a restart, a revived worker or a new one is another.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub(crate) struct WorkerRun {
    worker: WorkerId,
    run: u32,
}

/// How a dependency stands against a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Met {
    Yes,
    No,
    /// Not without a change: why.
    Never(String),
}

/// Does `worker` meet `condition` for its slot? (`current`: the generation
/// a one-shot's run must be of to count as `completed`; `None` when any
/// counts — its rollout halted, so the old run stands, as old instances of
/// a service keep serving.)
fn meets(worker: &Worker, condition: Condition, current: Option<u64>, has_health: bool) -> bool {
    match (condition, &worker.state) {
        (Condition::Completed, State::Completed { .. }) => {
            current.is_none_or(|g| worker.generation == g)
        }
        (Condition::Completed, _) => false,
        (_, State::Completed { .. }) => true,
        (Condition::Started, State::Starting { exec_confirmed, .. }) => *exec_confirmed,
        (Condition::Started | Condition::Ready, State::Ready { .. }) => true,
        (Condition::Healthy, State::Ready { .. }) => {
            !has_health || (worker.health.answered && worker.health.failures == 0)
        }
        _ => false,
    }
}

/// The generation whose completed runs count for `completed`.
fn counted_generation(dependency: &App) -> Option<u64> {
    (!dependency.rollout_halted).then_some(dependency.generation)
}

/// Whether `dependency` meets `condition`: every wanted slot has a worker
/// that does. An app of 0 instances meets every condition.
fn standing(dependency: &App, condition: Condition) -> Met {
    let spec = &dependency.spec;
    let has_health = spec.health.is_some();
    let mut met = true;
    for slot in 0..spec.instances {
        let workers = dependency.workers.values().filter(|w| w.slot == slot);
        if workers
            .clone()
            .any(|w| meets(w, condition, counted_generation(dependency), has_health))
        {
            continue;
        }
        met = false;
        // Judged: the slot's workers of the current definition; when its
        // rollout halted before one started, the old ones it keeps. Blocked
        // once all of them ended and nothing else in the slot still runs (an
        // old run beside a new one that just failed is about to be kept by
        // the halt; one still stopping may yet be replaced).
        if workers.clone().any(|w| !has_ended(w)) {
            continue;
        }
        let current: Vec<&Worker> = workers
            .clone()
            .filter(|w| w.generation == dependency.generation)
            .collect();
        let judged: Vec<&Worker> = if current.is_empty() && dependency.rollout_halted {
            workers.collect()
        } else {
            current
        };
        let failed = judged.iter().find(|w| matches!(w.state, State::Failed));
        let Some(ended) = failed.or(judged.first()) else {
            continue;
        };
        return Met::Never(match (&ended.state, ended.last_outcome) {
            (State::Failed, outcome) => {
                let last = outcome.map_or(String::new(), |o| format!(": {o}"));
                format!("{} failed (gave up restarting{last})", spec.name)
            }
            (_, outcome) => {
                let how = outcome.map_or("ended".to_string(), |o| o.to_string());
                format!("{} {how}", spec.name)
            }
        });
    }
    if met { Met::Yes } else { Met::No }
}

/// A worker that will not run again without a change: it gave up, or
/// ended and is not restarted.
fn has_ended(worker: &Worker) -> bool {
    matches!(worker.state, State::Failed | State::Exited)
}

/// The processes (or completed runs) of `dependency` that meet `condition`.
fn worker_runs(dependency: &App, condition: Condition) -> BTreeSet<WorkerRun> {
    let has_health = dependency.spec.health.is_some();
    dependency
        .workers
        .values()
        .filter(|w| w.slot < dependency.spec.instances)
        .filter(|w| meets(w, condition, counted_generation(dependency), has_health))
        .map(|w| WorkerRun {
            worker: w.id,
            run: w.runs,
        })
        .collect()
}

impl Core {
    /// Look at every app's gate and wind-down again; an app whose gate or
    /// wind-down changed is dirty. Returns whether one changed.
    pub(super) fn update_gates(&mut self, now: Instant) -> bool {
        let mut changed = false;
        let running = self.phase == Phase::Running;
        // Most apps have no dependency and no schedule: nothing to look at
        // (this runs after every reconcile round).
        let names: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, app)| {
                let plain = app.spec.depends_on.is_empty()
                    && app.dependency_seen.is_empty()
                    && app.gate.is_open()
                    && app.spec.schedule.is_none()
                    && app.runs.is_none()
                    && running
                    && app.winding_down == app.removed;
                !plain
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in &names {
            changed |= self.update_gate(name);
            changed |= self.update_wind_down(name);
            changed |= self.update_runs(name, now);
        }
        changed | self.break_shutdown_cycle()
    }

    /// Shutting down with workers left but no app allowed to wind down:
    /// dependencies in a cycle (which `check` refuses). Everything winds
    /// down rather than waiting for ever.
    fn break_shutdown_cycle(&mut self) -> bool {
        // From the workers as they are now, not from the apps' flags (an app
        // whose last worker went later in this pass has not freed its
        // dependencies' flags yet).
        let stuck = self.phase == Phase::ShuttingDown
            && self.apps.values().any(|a| !a.workers.is_empty())
            && self
                .apps
                .iter()
                .filter(|(_, a)| !a.workers.is_empty())
                .all(|(name, _)| self.has_live_dependents(name));
        if stuck {
            for app in self.apps.values_mut() {
                app.winding_down = true;
                app.dirty = true;
            }
        }
        stuck
    }

    /// The gate of app `name`, from its dependencies' state now.
    pub(super) fn update_gate(&mut self, name: &str) -> bool {
        let Some(app) = self.apps.get(name) else {
            return false;
        };
        let mut waiting = Vec::new();
        let mut blocked = None;
        let mut fresh: Vec<(String, BTreeSet<WorkerRun>)> = Vec::new();
        for dependency in &app.spec.depends_on {
            let Some(other) = self.apps.get(&dependency.app).filter(|o| !o.removed) else {
                // `check` refuses unknown names: nothing to wait for.
                continue;
            };
            match standing(other, dependency.condition) {
                Met::Yes => {
                    if app.spec.on_dependency_restart == OnDependencyRestart::Restart {
                        fresh.push((
                            dependency.app.clone(),
                            worker_runs(other, dependency.condition),
                        ));
                    }
                }
                Met::No => waiting.push(format!(
                    "{} ({})",
                    dependency.app,
                    dependency.condition.name()
                )),
                Met::Never(reason) => {
                    blocked.get_or_insert((dependency.app.clone(), reason));
                }
            }
        }
        let gate = match (blocked, waiting.is_empty()) {
            (Some((dependency, reason)), _) => Gate::Blocked { dependency, reason },
            (None, false) => Gate::Waiting(waiting),
            (None, true) => Gate::Open,
        };
        let restarted = self.note_worker_runs(name, &gate, fresh);
        let Some(app) = self.apps.get_mut(name) else {
            return false;
        };
        if app.gate == gate && restarted.is_none() {
            return false;
        }
        app.dirty = true;
        if app.gate != gate {
            app.gate = gate.clone();
            if self.phase == Phase::ShuttingDown {
                // Dependencies stop one after another: no news in that.
                return true;
            }
            let event = match gate {
                Gate::Open => Event::DependenciesMet {
                    app: name.to_string(),
                },
                Gate::Waiting(on) => Event::WaitingFor {
                    app: name.to_string(),
                    on,
                },
                Gate::Blocked { dependency, reason } => Event::DependencyFailed {
                    app: name.to_string(),
                    dependency,
                    reason,
                },
            };
            self.report(event);
        }
        if let Some(dependency) = restarted {
            self.replace_for_dependency(name, dependency);
        }
        true
    }

    /// `on_dependency_restart: restart`: remember what each dependency's
    /// processes are while the gate is open; when every one remembered is
    /// gone and new ones meet the condition, the app is replaced (the name
    /// of that dependency is returned).
    fn note_worker_runs(
        &mut self,
        name: &str,
        gate: &Gate,
        fresh: Vec<(String, BTreeSet<WorkerRun>)>,
    ) -> Option<String> {
        let app = self.apps.get_mut(name)?;
        // What is no longer watched is forgotten: switched back on later,
        // an old replacement does not count.
        let watching = app.spec.on_dependency_restart == OnDependencyRestart::Restart;
        let depends_on = &app.spec.depends_on;
        app.dependency_seen
            .retain(|dependency, _| watching && depends_on.iter().any(|d| d.app == *dependency));
        if !gate.is_open() {
            return None;
        }
        let mut restarted = None;
        for (dependency, now_serving) in fresh {
            match app.dependency_seen.get(&dependency) {
                Some(seen)
                    if !seen.is_empty()
                        && !now_serving.is_empty()
                        && seen.is_disjoint(&now_serving) =>
                {
                    restarted.get_or_insert(dependency.clone());
                }
                Some(_) => continue,
                None => {}
            }
            app.dependency_seen.insert(dependency, now_serving);
        }
        // Only an app that runs something is replaced.
        restarted.filter(|_| app.workers.values().any(|w| w.state.pid().is_some()))
    }

    /// Replace every instance of `name`, rolling within its `reload` limits,
    /// because `dependency` was replaced.
    fn replace_for_dependency(&mut self, name: &str, dependency: String) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        app.bump_generation(app.spec.process.clone(), false);
        let event = Event::DependencyRestarted {
            app: name.to_string(),
            dependency,
            generation: app.generation,
        };
        self.report(event);
    }

    /// Shutting down, an app winds down once no app that depends on it has
    /// a worker left (a removed app at once).
    fn update_wind_down(&mut self, name: &str) -> bool {
        let Some(app) = self.apps.get(name) else {
            return false;
        };
        let winding_down =
            app.removed || (self.phase == Phase::ShuttingDown && !self.has_live_dependents(name));
        let Some(app) = self.apps.get_mut(name) else {
            return false;
        };
        if app.winding_down == winding_down {
            return false;
        }
        app.winding_down = winding_down;
        app.dirty = true;
        true
    }

    /// Some app that depends on `name` still has a worker.
    fn has_live_dependents(&self, name: &str) -> bool {
        self.apps.values().any(|other| {
            !other.workers.is_empty() && other.spec.depends_on.iter().any(|d| d.app == name)
        })
    }

    /// Whether app `name`'s instances may start now: its gate is open, it
    /// is not shutting down, and a scheduled app is in a run.
    pub(super) fn may_start(&self, app: &App) -> bool {
        self.phase == Phase::Running
            && app.gate.is_open()
            && app.runs.as_ref().is_none_or(|r| r.may_start(&app.workers))
    }
}

#[cfg(test)]
mod tests;
