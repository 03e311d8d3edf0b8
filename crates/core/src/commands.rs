//! Commands from the control socket that change workers: `reload`,
//! `restart`, `stop` (hold), `start` (release) and `trigger` (a run of a
//! scheduled app).
//!
//! Each is an input like any other: it moves workers through their state
//! machine (a running worker is stopped with what to do after the stop; one
//! without a process is held or revived at once) and marks the app dirty.

use std::time::Instant;

use super::reconcile::StopReason;
use super::worker::{AfterStop, State};
use super::{Core, Event, Phase};
use model::orders::WorkerId;

/// What a client asks of workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// A rolling replacement of an app, or of every app (`all`).
    Reload { app: String },
    /// Stop then start an app or one instance, all at once.
    Restart { target: String },
    /// Stop and hold until `start`.
    Hold { target: String },
    /// Start what `stop` held.
    Release { target: String },
    /// Start a run of a scheduled app now (`overlap` applies).
    Trigger { app: String },
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The apps whose rollout began.
    Reloading { apps: Vec<String> },
    /// A sentence for the user.
    Done { message: String },
}

impl Core {
    /// Carry out a command; `Err` is the message of a refusal.
    pub fn command(&mut self, order: Order, now: Instant) -> Result<Reply, String> {
        if self.phase == Phase::ShuttingDown {
            return Err("the supervisor is shutting down".to_string());
        }
        match order {
            Order::Reload { app } => self.reload(&app),
            Order::Restart { target } => self.on_workers(&target, "restart", now),
            Order::Hold { target } => self.on_workers(&target, "stop (held)", now),
            Order::Release { target } => self.on_workers(&target, "start", now),
            Order::Trigger { app } => {
                if self.apps.get(&app).is_none_or(|a| a.removed) {
                    return Err(format!("no app `{app}`"));
                }
                let message = self.fire(&app, "trigger", now)?;
                Ok(Reply::Done { message })
            }
        }
    }

    /// Bump the generation, which reconcile turns into a rolling replacement.
    fn reload(&mut self, target: &str) -> Result<Reply, String> {
        let names: Vec<String> = if target == "all" {
            self.apps
                .iter()
                .filter(|(_, a)| !a.removed)
                .map(|(n, _)| n.clone())
                .collect()
        } else if self.apps.get(target).is_some_and(|a| !a.removed) {
            vec![target.to_string()]
        } else {
            return Err(format!("no app `{target}`"));
        };
        for name in &names {
            let Some(app) = self.apps.get_mut(name) else {
                continue;
            };
            app.bump_generation(app.spec.process.clone(), false);
            let event = Event::Reload {
                app: name.clone(),
                generation: app.generation,
                instances: app.spec.instances,
            };
            self.report(event);
        }
        Ok(Reply::Reloading { apps: names })
    }

    /// `restart`, `stop` (`stop (held)`) and `start` of an app or one instance.
    ///
    /// `stop` holds the *slots* (see [`super::App::held`]): its running
    /// workers are stopped to be held, the others are held at once, and
    /// reconcile starts nothing in them until `start`. `restart` passes
    /// held slots by (and is refused when it names nothing else): a hold
    /// wins until `start`.
    fn on_workers(
        &mut self,
        target: &str,
        what: &'static str,
        now: Instant,
    ) -> Result<Reply, String> {
        let (name, slot) = model::protocol::parse_target(target)?;
        let app = self.apps.get_mut(name).filter(|a| !a.removed);
        model::protocol::check_target(name, slot, app.as_ref().map(|a| a.spec.instances))?;
        let Some(app) = app else {
            return Err(format!("no app `{name}`"));
        };
        let named: Vec<u32> = match slot {
            Some(slot) => vec![slot],
            None => (0..app.spec.instances).collect(),
        };
        // What `restart` leaves alone: the slots `stop` holds.
        let passed_by: Vec<u32> = match what {
            "restart" => named
                .iter()
                .copied()
                .filter(|s| app.held.contains(s))
                .collect(),
            _ => Vec::new(),
        };
        if what == "restart" && !passed_by.is_empty() && passed_by.len() == named.len() {
            return Err(held_note(name, &passed_by));
        }
        match what {
            "stop (held)" => app.held.extend(named.iter().copied()),
            "start" => app.held.retain(|s| !named.contains(s)),
            _ => {}
        }
        app.dirty = true;
        let mut stops: Vec<(WorkerId, AfterStop)> = Vec::new();
        // Instances, not workers: a slot may have two for a moment (one
        // being replaced), or none (its worker left in a rollout).
        let mut touched = std::collections::BTreeSet::new();
        if what == "stop (held)" {
            touched.extend(named.iter().copied());
        }
        let mut refusals = Vec::new();
        for worker in app
            .workers
            .values_mut()
            .filter(|w| slot.is_none_or(|s| w.slot == s) && !passed_by.contains(&w.slot))
        {
            let running = worker.state.is_running();
            let result = match (what, running) {
                ("restart", true) => {
                    stops.push((worker.id, AfterStop::Restart));
                    touched.insert(worker.slot);
                    continue;
                }
                ("stop (held)", true) => {
                    stops.push((worker.id, AfterStop::Hold));
                    continue;
                }
                ("start", true) => continue,
                ("stop (held)", false) => match worker.state {
                    State::Stopping {
                        then: AfterStop::Restart | AfterStop::Failed(_),
                        ..
                    } => worker.after_stop(AfterStop::Hold),
                    State::Stopping { .. } | State::Spawning => continue,
                    _ => worker.hold(),
                },
                _ => match worker.state {
                    State::Stopping {
                        then: AfterStop::Hold,
                        ..
                    } => worker.after_stop(AfterStop::Restart),
                    State::Failed | State::Exited | State::Held | State::Backoff { .. } => {
                        worker.revive()
                    }
                    // A one-shot that did its job runs again on `restart`
                    // only (`start` releases what `stop` held).
                    State::Completed { .. } if what == "restart" => worker.revive(),
                    _ => continue,
                },
            };
            match result {
                Ok(()) => {
                    touched.insert(worker.slot);
                }
                Err(refused) => refusals.push(refused),
            }
        }
        for refused in refusals {
            self.ignored(refused);
        }
        let touched = touched.len();
        for (id, then) in stops {
            let how = super::StopHow {
                command: Some(what),
                signal: None,
            };
            self.stop(name, id, StopReason::Command, how, then, now);
        }
        let note = if passed_by.is_empty() {
            String::new()
        } else {
            format!(" ({})", held_note(name, &passed_by))
        };
        Ok(Reply::Done {
            message: format!(
                "{target}: {what} {touched} instance{}{note}",
                if touched == 1 { "" } else { "s" }
            ),
        })
    }
}

/// Held instances named in one message at most (then `and N more`).
pub(crate) const MAX_HELD_NAMED: usize = 8;

/// What `restart` says of the held slots it passed by.
fn held_note(name: &str, slots: &[u32]) -> String {
    match slots {
        [slot] => format!("{name}.{slot} is held: `supervise start {name}.{slot}` releases it"),
        _ => {
            let mut names: Vec<String> = slots
                .iter()
                .take(MAX_HELD_NAMED)
                .map(|s| format!("{name}.{s}"))
                .collect();
            if slots.len() > MAX_HELD_NAMED {
                names.push(format!("and {} more", slots.len() - MAX_HELD_NAMED));
            }
            format!(
                "{} are held: `supervise start {name}` releases them",
                names.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests;
