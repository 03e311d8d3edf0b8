//! What the world outside the core sees must agree with it: the counts of
//! `/metrics`, what systemd is told, and what programs reached by the
//! preload library are given.

use super::*;

impl World {
    /// `/metrics` counts restarts from the events the core reports: it must
    /// have seen at least the restarts each worker carries (a restart the
    /// core decided without saying so would be missing from
    /// `supervise_instance_restarts_total`, and a count that went down would
    /// break `rate()`).
    pub(super) fn metrics_violation(&self) -> Option<String> {
        let snapshot = self.supervisor.metrics_snapshot();
        let counted: HashMap<(&str, u32), u64> = snapshot
            .instances
            .iter()
            .map(|i| ((i.app.as_str(), i.slot), i.counts.restarts))
            .collect();
        for app in self.supervisor.core().apps().filter(|a| !a.removed) {
            for worker in app.workers.values() {
                let seen = counted
                    .get(&(app.spec.name.as_str(), worker.slot))
                    .copied()
                    .unwrap_or(0);
                if seen < u64::from(worker.restarts) {
                    return Some(format!(
                        "{}.{}: /metrics counts {seen} restarts, its worker {} carries {}",
                        app.spec.name, worker.slot, worker.id, worker.restarts
                    ));
                }
            }
        }
        None
    }

    /// What systemd was told since the last look keeps to `READY=1`
    /// (RELOADING=1 READY=1)*, each reload whole within one event; and when
    /// the start is told, every wanted slot of an app free to start has had
    /// its start decided: a ready or completed worker, or one whose run
    /// ended, or one given up, held or exited (from the workers, not the
    /// core's own account).
    pub(super) fn systemd_violation(&mut self) -> Option<String> {
        let told = &self.supervisor.effects().systemd;
        let unread: Vec<String> = told[self.told.read.min(told.len())..].to_vec();
        self.told.read = told.len();
        for message in unread {
            match (message.as_str(), self.told.started, self.told.reloading) {
                ("READY=1", false, _) => {
                    self.told.started = true;
                    if let Some(slot) = undecided(self.supervisor.core()) {
                        return Some(format!(
                            "systemd was told READY=1 while {slot} had not had its start"
                        ));
                    }
                }
                ("READY=1", true, true) => self.told.reloading = false,
                ("RELOADING=1", true, false) => self.told.reloading = true,
                ("READY=1" | "RELOADING=1", _, _) => {
                    return Some(format!(
                        "systemd was told {message} out of turn (started {}, reloading {}): {told:?}",
                        self.told.started, self.told.reloading
                    ));
                }
                _ => {}
            }
        }
        self.told
            .reloading
            .then(|| format!("a reload told to systemd was left open: {told:?}"))
    }

    /// An app said to serve without the socket `inject` hands over
    /// (`not_injected`) has, in the version named, a process the library
    /// did not reach that has been up INJECT_GRACE; and an app is said so
    /// at most once per version (a new value is always a later version).
    pub(super) fn inject_violation(&mut self) -> Option<String> {
        let core = self.supervisor.core();
        let fake = self.supervisor.effects();
        let now = fake.now();
        for app in core.apps() {
            let name = &app.spec.name;
            let warned = app.inject_warned();
            let before = self.inject_warned.get(name).copied().flatten();
            if warned == before {
                continue;
            }
            // None again: the app was removed and added anew.
            let Some(generation) = warned else {
                continue;
            };
            if before.is_some_and(|b| b >= generation) {
                return Some(format!(
                    "{name}: `not_injected` said for generation {generation} after {before:?}"
                ));
            }
            // Unreached for the whole grace, or ended before it was ready.
            let culprit = fake.processes().any(|p| {
                p.app == *name
                    && p.generation == generation
                    && p.injects
                    && !p.injected
                    && (now.saturating_duration_since(p.spawned_at) >= supervise_core::INJECT_GRACE
                        || !p.is_alive())
            });
            if !culprit {
                return Some(format!(
                    "{name}: `not_injected` said for generation {generation}, but no process of it went {:?} without the library's report, nor ended unreached",
                    supervise_core::INJECT_GRACE
                ));
            }
        }
        self.inject_warned = core
            .apps()
            .map(|a| (a.spec.name.clone(), a.inject_warned()))
            .collect();
        None
    }
}
