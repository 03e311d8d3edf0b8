//! What the world must come to: with healthy processes it converges (every
//! app runs what the file says, every rollout is done, every scheduled app
//! ran), and a shutdown ends in bounded time with nothing left behind.

use super::*;

impl World {
    /// With healthy processes and no more faults, the running system equals
    /// the file: every wanted slot has one ready worker of the current
    /// generation (unless it failed, exited, is held, or its rollout halted),
    /// and nothing runs beyond. Dependencies change what the file asks for:
    /// - an app whose gate is closed (the gate [`World::witness`] holds to
    ///   the dependencies' states: one failed or ended for good, or waits
    ///   itself) starts nothing, so it keeps what ran and the rest waits;
    /// - a scheduled app is not expected to run; but one whose gate is open
    ///   runs on its ticks, and a run it armed never waits while it may
    ///   start.
    ///
    /// The quiet time is long enough for the longest chain of dependencies
    /// to come up one app after the other.
    pub fn converges(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_some() {
            return Ok(());
        }
        self.fake().spawn_failure = None;
        self.fake().plans.clear();
        let round = Duration::from_millis(500);
        let chain = longest_chain(self.supervisor.core(), |_| COME_UP);
        let quiet = (round * QUIET_ROUNDS).max(chain + RUNS_WITHIN);
        let rounds = quiet.div_duration_f64(round).ceil() as u32;
        let watch_from = rounds - RUNS_WITHIN.div_duration_f64(round) as u32;
        let mut watched = Vec::new();
        for round_number in 0..rounds {
            if round_number == watch_from {
                watched = self.scheduled_and_open();
            }
            // What was due before the quiet time (a watchdog not pinged
            // since, a check not answered) may still fail: a fault.
            let broken = self.supervisor.core().broken();
            let began = self.now();
            self.advance(round);
            self.ready_everything();
            self.disruptive |=
                self.supervisor.core().broken() != broken || self.ended_on_their_own(began);
            self.check()?;
        }
        self.scheduled_apps_ran(watched)?;
        for app in self.supervisor.core().apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                if worker.slot >= app.spec.instances {
                    return Err(Violation(format!(
                        "{name}.{} runs beyond {} instances",
                        worker.slot, app.spec.instances
                    )));
                }
            }
            if app.spec.schedule.is_some() {
                armed_run_started(app)?;
                continue;
            }
            let open = app.gate.is_open();
            if !open {
                waits_for_a_reason(self.supervisor.core(), app)?;
            }
            for worker in app.workers.values() {
                let settled = match worker.state {
                    State::Ready { .. }
                    | State::Failed
                    | State::Exited
                    | State::Completed { .. }
                    | State::Held => true,
                    // Waits for its dependencies.
                    State::Pending | State::Backoff { .. } => !open,
                    _ => false,
                };
                if !settled {
                    let all = describe_workers(app);
                    return Err(Violation(format!(
                        "{name}.{} is {} after the quiet time; app gen {} halted {} instances {} gate {:?} workers {:?}",
                        worker.slot,
                        worker.state.name(),
                        app.generation,
                        app.rollout_halted,
                        app.spec.instances,
                        app.gate,
                        all
                    )));
                }
                if open
                    && worker.generation != app.generation
                    && !app.rollout_halted
                    && worker.state.is_ready()
                {
                    return Err(Violation(format!(
                        "{name}.{} still runs generation {} of {}",
                        worker.slot, worker.generation, app.generation
                    )));
                }
            }
            for slot in 0..app.spec.instances {
                let in_slot = || app.workers.values().filter(|w| w.slot == slot);
                let count = in_slot().count();
                let processes = in_slot().filter(|w| w.state.pid().is_some()).count();
                // A closed gate keeps what ran; a replacement may wait beside it.
                let expected = if open {
                    count == 1
                } else {
                    count >= 1 && processes <= 1
                };
                if !expected {
                    let all = describe_workers(app);
                    return Err(Violation(format!(
                        "{name}.{slot} has {count} workers after the quiet time; gen {} halted {} gate {:?} {:?}",
                        app.generation, app.rollout_halted, app.gate, all
                    )));
                }
            }
        }
        if self.supervisor.core().apps().count() != self.desired.apps.len() {
            return Err(Violation(
                "apps differ from the file after the quiet time".into(),
            ));
        }
        if !self.told.started {
            return Err(Violation(
                "every start is decided after the quiet time, and systemd was never told READY=1"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The scheduled apps that must run from now on: one instance, `every`
    /// ticks, the gate open; with whether a process of each lives now.
    fn scheduled_and_open(&self) -> Vec<(String, bool, i32)> {
        let fake = self.supervisor.effects();
        self.supervisor
            .core()
            .apps()
            .filter(|a| must_run(a))
            .map(|a| {
                let name = a.spec.name.clone();
                let lives = fake
                    .processes()
                    .any(|p| p.app == name && fake.group_exists(p.pid));
                (name, lives, self.unseen_pid)
            })
            .collect()
    }

    /// Each app [`World::scheduled_and_open`] watched, and that must still
    /// run, ran: a process of it lived when the watch began, or one was
    /// spawned since.
    fn scheduled_apps_ran(&self, watched: Vec<(String, bool, i32)>) -> Result<(), Violation> {
        let core = self.supervisor.core();
        for (name, lived, since) in watched {
            if !core.app(&name).is_some_and(must_run) || lived {
                continue;
            }
            let spawned = self
                .supervisor
                .effects()
                .spawned_since(since)
                .any(|p| p.app == name);
            if !spawned {
                let runs = core.app(&name).and_then(|a| a.runs.clone());
                return Err(Violation(format!(
                    "{name} is scheduled, its dependencies are met, and it did not run in the last {} s of the quiet time: {runs:?}",
                    RUNS_WITHIN.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// SIGTERM (if none came yet) and check that everything stops within the
    /// `kill_timeout`s of the longest chain of dependencies (each app stops
    /// only once what depends on it is gone; no dependency: the largest
    /// `kill_timeout`) plus a bound per app of the chain, leaving no process.
    pub fn shuts_down(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_none() {
            self.signal(News::Terminate);
        }
        let started = self.shutdown_at.unwrap_or_else(|| self.now());
        let slack = 3 * GROUP_POLL_INTERVAL;
        let desired = &self.desired;
        let bound = longest_chain(self.supervisor.core(), |app| {
            // An edit may have shortened it; the longer one counts.
            let written = desired
                .app(&app.spec.name)
                .map_or(Duration::ZERO, |a| a.kill_timeout);
            app.spec.kill_timeout.max(written) + slack
        })
        .max(slack)
            + self.stalled_in_shutdown;
        let limit = started + bound;
        while !self.supervisor.finished() && self.now() < limit {
            self.advance(Duration::from_millis(10));
            self.check()?;
        }
        if !self.supervisor.finished() {
            return Err(Violation(format!(
                "not finished {} ms after the shutdown began (bound {} ms): {:?}",
                (self.now() - started).as_millis(),
                bound.as_millis(),
                self.supervisor
                    .core()
                    .apps()
                    .map(|a| (a.spec.name.clone(), self.slots(&a.spec.name)))
                    .collect::<Vec<_>>()
            )));
        }
        if let Some(process) = self
            .supervisor
            .effects()
            .processes()
            .find(|p| p.life != Life::Reaped)
        {
            return Err(Violation(format!(
                "pid {} is {:?} after the shutdown",
                process.pid, process.life
            )));
        }
        Ok(())
    }
}

/// A scheduled app that must run on its ticks: one instance, an `every`
/// schedule (a cron time may be a minute away), its dependencies met, not
/// held by `stop`.
fn must_run(app: &App) -> bool {
    let every = matches!(
        app.spec.schedule.as_ref().map(|s| &s.when),
        Some(When::Every(_))
    );
    let held = app.workers.values().any(|w| w.state == State::Held);
    every && app.spec.instances == 1 && !app.removed && app.gate.is_open() && !held
}

/// After the quiet time, an app whose gate is closed waits for a reason the
/// rules give: each dependency that does not meet its condition blocks it
/// (gave up, or ended for good), waits itself, or has, in each wanted slot
/// that does not serve, a worker held by `stop` or one that runs (a run
/// not over yet: `completed` waits for it). A slot with none of these will
/// never serve without a change, and nothing says so.
fn waits_for_a_reason(core: &Core, app: &App) -> Result<(), Violation> {
    for dependency in &app.spec.depends_on {
        if standing(core, dependency) != Standing::Unmet {
            continue;
        }
        let Some(other) = core.app(&dependency.app) else {
            continue;
        };
        if !other.gate.is_open() {
            continue;
        }
        let stuck = (0..other.spec.instances).find(|slot| {
            let in_slot = || other.workers.values().filter(|w| w.slot == *slot);
            !in_slot().any(|w| serves(w, dependency.condition, other))
                && !in_slot().any(|w| w.state == State::Held || w.state.is_running())
        });
        if let Some(slot) = stuck {
            let current = other
                .workers
                .values()
                .any(|w| w.slot == slot && w.generation == other.generation);
            let halted = if other.rollout_halted && !current {
                " (its rollout halted: no worker of its current generation, and not held either)"
            } else {
                ""
            };
            return Err(Violation(format!(
                "{} waits for {}, whose instance {slot} will not serve without a change{halted}: {:?}",
                app.spec.name,
                describe(core, dependency),
                describe_workers(other)
            )));
        }
    }
    Ok(())
}

/// A scheduled app's armed run started, unless it may not start yet: its
/// dependencies are not met, or the run it replaces is still stopping.
fn armed_run_started(app: &App) -> Result<(), Violation> {
    let armed = app.runs.as_ref().is_some_and(|r| r.armed);
    let stopping = app.workers.values().any(|w| w.state.is_stopping());
    let waiting = app.workers.values().any(|w| w.state == State::Pending);
    if armed && app.gate.is_open() && !stopping && waiting {
        return Err(Violation(format!(
            "{}: a run is armed and its dependencies are met, but its worker waits: {:?}",
            app.spec.name,
            describe_workers(app)
        )));
    }
    Ok(())
}
