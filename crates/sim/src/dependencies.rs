//! What the file's dependencies mean, worked out by the simulation itself
//! from the workers' states, and what `supervise check` refuses of
//! dependencies and schedules.
//!
//! The core keeps its own answer (each app's gate). The invariants hold the
//! two against each other after every event the supervisor handles, and
//! check every spawn against this one: a gate the core forgot to look at
//! again, or got wrong, is caught at the moment it lets a process start.
//!
//! Edits of the simulated file bypass `check`, so a file `check` would
//! refuse (a cycle, an unknown name, a scheduled app of 2 instances) would
//! test nothing real: [`refusal`] says when the simulation wrote one, and the
//! world reports it as a bug of the simulation.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use model::spec::{AppSpec, Condition, Dependency, RestartPolicy, When};
use supervise_core::dependencies::Gate;
use supervise_core::worker::{State, Worker};
use supervise_core::{App, Core};

/// `check` refuses a shorter `schedule: {every: …}`.
pub(crate) const SHORTEST_EVERY: Duration = Duration::from_secs(1);

/// How a dependency stands against its condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Met,
    /// Not yet.
    Unmet,
    /// Not without a change: an instance gave up (`failed`), or ended and is
    /// not restarted (`exited`).
    Blocked,
}

/// Whether `worker` of `app` meets `condition` for its slot: a process
/// that runs its program (`started`; one being stopped is on its way out),
/// ready (`ready`), ready with its last liveness check passed when the app
/// has checks (`healthy`); a completed one-shot meets all three, and only
/// one of the current definition meets `completed` — or of an older one
/// when the rollout of the current one halted (the old run stands, as old
/// instances of a service keep serving).
pub(crate) fn serves(worker: &Worker, condition: Condition, app: &App) -> bool {
    let completed = matches!(worker.state, State::Completed { .. });
    match condition {
        Condition::Completed => {
            completed && (worker.generation == app.generation || app.rollout_halted)
        }
        _ if completed => true,
        Condition::Started => matches!(
            worker.state,
            State::Starting {
                exec_confirmed: true,
                ..
            } | State::Ready { .. }
        ),
        Condition::Ready => worker.state.is_ready(),
        Condition::Healthy => {
            worker.state.is_ready()
                && (app.spec.health.is_none()
                    || (worker.health.answered && worker.health.failures == 0))
        }
    }
}

/// How `dependency` stands now: every wanted instance must serve; one
/// whose workers of the current definition (or, its rollout halted before
/// one started, the old ones kept) all gave up or ended blocks. An
/// app the core does not run (removed from the file) is not waited for.
pub(crate) fn standing(core: &Core, dependency: &Dependency) -> Standing {
    let Some(other) = core.app(&dependency.app).filter(|a| !a.removed) else {
        return Standing::Met;
    };
    let mut standing = Standing::Met;
    for slot in 0..other.spec.instances {
        let in_slot = other.workers.values().filter(|w| w.slot == slot);
        if in_slot
            .clone()
            .any(|w| serves(w, dependency.condition, other))
        {
            continue;
        }
        // Judged: the slot's workers of the current definition; when its
        // rollout halted before one started, the old ones it keeps. Blocked
        // once all of them ended and nothing else in the slot still runs.
        if in_slot
            .clone()
            .any(|w| !matches!(w.state, State::Failed | State::Exited))
        {
            standing = Standing::Unmet;
            continue;
        }
        let current: Vec<_> = in_slot
            .clone()
            .filter(|w| w.generation == other.generation)
            .collect();
        let judged = if current.is_empty() && other.rollout_halted {
            in_slot.collect()
        } else {
            current
        };
        if !judged.is_empty() {
            return Standing::Blocked;
        }
        standing = Standing::Unmet;
    }
    standing
}

/// What `app`'s gate should be: blocked when a dependency blocks, waiting
/// when one is not met yet, open otherwise.
pub(crate) fn expected_gate(core: &Core, app: &App) -> Standing {
    let standings: Vec<Standing> = app
        .spec
        .depends_on
        .iter()
        .map(|dependency| standing(core, dependency))
        .collect();
    if standings.contains(&Standing::Blocked) {
        Standing::Blocked
    } else if standings.contains(&Standing::Unmet) {
        Standing::Unmet
    } else {
        Standing::Met
    }
}

/// The core's gate in the same terms.
pub(crate) fn core_gate(gate: &Gate) -> Standing {
    match gate {
        Gate::Open => Standing::Met,
        Gate::Waiting(_) => Standing::Unmet,
        Gate::Blocked { .. } => Standing::Blocked,
    }
}

/// The apps whose `depends_on` names `name`.
pub(crate) fn dependents<'a>(core: &'a Core, name: &'a str) -> impl Iterator<Item = &'a App> + 'a {
    core.apps()
        .filter(move |a| a.spec.depends_on.iter().any(|d| d.app == name))
}

/// How `dependency`'s workers stand, for a violation's message.
pub(crate) fn describe(core: &Core, dependency: &Dependency) -> String {
    let Some(other) = core.app(&dependency.app) else {
        return format!("{} (not in the core)", dependency.app);
    };
    let mut workers: Vec<String> = other
        .workers
        .values()
        .map(|w| format!("{}: gen {} {}", w.slot, w.generation, w.state.name()))
        .collect();
    workers.sort();
    format!(
        "{} ({}, {} instances, gen {}): {workers:?}",
        dependency.app,
        dependency.condition.name(),
        other.spec.instances,
        other.generation
    )
}

/// The longest a shutdown may take along one chain of dependencies: each app
/// winds down only once its dependents are gone, so the stops of a chain
/// add up. `stage` is what one app's stop may take, with its kill_timeout.
pub(crate) fn longest_chain(core: &Core, stage: impl Fn(&App) -> Duration) -> Duration {
    fn from(
        name: &str,
        core: &Core,
        stage: &dyn Fn(&App) -> Duration,
        memo: &mut HashMap<String, Duration>,
    ) -> Duration {
        if let Some(known) = memo.get(name) {
            return *known;
        }
        let Some(app) = core.app(name) else {
            return Duration::ZERO;
        };
        // What waits for it stops first; the files are acyclic (see
        // `refusal`), so the walk ends.
        let before = dependents(core, name)
            .map(|d| d.spec.name.clone())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|d| from(&d, core, stage, memo))
            .max()
            .unwrap_or_default();
        let total = before + stage(app);
        memo.insert(name.to_string(), total);
        total
    }
    let mut memo = HashMap::new();
    let names: Vec<String> = core.apps().map(|a| a.spec.name.clone()).collect();
    names
        .iter()
        .map(|name| from(name, core, &stage, &mut memo))
        .max()
        .unwrap_or_default()
}

/// Why `supervise check` would refuse `apps` (as far as dependencies and
/// schedules go), if it would. The simulation keeps one rule stricter than
/// `check`: an app depends only on apps before it in the file, so no edit
/// can close a cycle.
pub(crate) fn refusal(apps: &[AppSpec]) -> Option<String> {
    for (index, app) in apps.iter().enumerate() {
        let name = &app.name;
        if let Some(schedule) = &app.schedule {
            if app.instances > 1 {
                return Some(format!(
                    "{name} is scheduled with {} instances",
                    app.instances
                ));
            }
            if app.restart == RestartPolicy::Always {
                return Some(format!("{name} is scheduled with restart: always"));
            }
            if let When::Every(period) = schedule.when
                && period < SHORTEST_EVERY
            {
                return Some(format!("{name} runs every {period:?}"));
            }
        }
        let mut named = HashSet::new();
        for dependency in &app.depends_on {
            let other_name = &dependency.app;
            if !named.insert(other_name) {
                return Some(format!("{name} names {other_name} twice"));
            }
            let Some(position) = apps.iter().position(|a| a.name == *other_name) else {
                return Some(format!("{name} depends on {other_name}, not in the file"));
            };
            if position >= index {
                return Some(format!(
                    "{name} depends on {other_name}, which comes after it"
                ));
            }
            let other = &apps[position];
            if other.schedule.is_some() {
                return Some(format!("{name} waits for {other_name}, which is scheduled"));
            }
            match dependency.condition {
                Condition::Healthy if other.health.is_none() => {
                    return Some(format!(
                        "{name} waits for {other_name} healthy, which has no health check"
                    ));
                }
                Condition::Completed if other.restart == RestartPolicy::Always => {
                    return Some(format!(
                        "{name} waits for {other_name} to complete, which restarts always"
                    ));
                }
                _ => {}
            }
        }
    }
    None
}
