//! Scheduled apps: one instance that runs at times instead of for ever.
//!
//! A scheduled app's gate is closed between runs: its worker waits in
//! `pending` (or rests `completed`, `exited`, `failed` after a run). A tick of
//! its schedule, `supervise trigger` or `run_on_start` *arms* a run: a worker
//! that ended is replaced by a fresh one, which reconcile starts like any
//! other (dependencies still gate it; `restart: on-failure` restarts within
//! the run). The run ends when its worker does; then the last run's result
//! is kept for `status`, and a queued run is armed.
//!
//! `every` counts on the monotonic clock from the time the app was started;
//! a cron expression is evaluated on the wall clock, which the shell gives
//! the core with each turn ([`Core::set_wall_clock`]): the core never reads
//! a clock.
//!
//! **The wall clock set.** Between two readings the wall clock moves as the
//! monotonic clock does, give or take NTP's slewing. When it moves more
//! than [`WALL_CLOCK_STEP_TOLERANCE`] further or less, it was set (stepped:
//! `date -s`, an NTP step, a resume from suspend, which the monotonic clock
//! does not count), and every cron schedule is re-armed: its next run is
//! its next match after the new time, as vixie cron does for a correction
//! and systemd re-arms its calendar timers on `TFD_TIMER_CANCEL_ON_SET`.
//! Set back an hour, a `* * * * *` job runs at the next minute, not an hour
//! later; set forward, the runs in the skipped time are not made up (as an
//! `every` schedule does not make up ticks missed while the machine
//! slept). The wall clock is UTC: a change of daylight saving time is no
//! step (the timezone's rules handle it), so every step is a correction,
//! and a daily job whose time comes round again on the corrected clock
//! runs then. The loop learns of a step at its next turn at the latest
//! ([`super::FULL_PASS_INTERVAL`]); the shell can wake it at once (Linux:
//! a timerfd with `TFD_TIMER_CANCEL_ON_SET`).

use std::time::{Duration, Instant, SystemTime};

use super::reconcile::{StopReason, Workers};
use super::worker::{AfterStop, State};
use super::{App, Core, Event, StopHow};
use model::spec::{Overlap, When};

/// How far the wall clock may move from what the monotonic clock says
/// between two readings before it counts as set (stepped). NTP slews at
/// most 500 ppm — 5 ms over the loop's longest sleep
/// ([`super::FULL_PASS_INTERVAL`], 10 s) — and the two clocks are read
/// microseconds apart: a second is far above drift and far below a step
/// that matters to a schedule of minutes.
pub(crate) const WALL_CLOCK_STEP_TOLERANCE: Duration = Duration::from_secs(1);

/// Runs waiting for the current one to end (`overlap: queue`): more ticks
/// meanwhile are skipped, so a job slower than its schedule cannot pile up
/// runs without end.
pub(crate) const MAX_QUEUED_RUNS: u32 = 1;

/// When the next tick is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Due {
    /// `every`: on the monotonic clock.
    At(#[serde(with = "model::monotonic::instant")] Instant),
    /// A cron time: on the wall clock.
    Wall(SystemTime),
}

/// How the last run of a scheduled app ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LastRun {
    /// `exit 0`, `exited with code 1`, `stopped (replaced by the next run)`.
    pub result: String,
    pub ok: bool,
    pub took: Duration,
    #[serde(with = "model::monotonic::instant")]
    pub ended: Instant,
}

/// The runs of one scheduled app.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Runs {
    /// `None` before the first look, and once a cron expression matches no
    /// time to come.
    next: Option<Due>,
    /// The first look was taken (`run_on_start` decided).
    scheduled: bool,
    /// `next` was worked out for the schedule as it is.
    ticking: bool,
    /// A run may start, or goes on.
    pub armed: bool,
    /// When the armed run's process was started.
    #[serde(with = "model::monotonic::option")]
    began: Option<Instant>,
    /// Runs waiting for the current one (at most [`MAX_QUEUED_RUNS`]).
    pub queued: u32,
    pub last: Option<LastRun>,
    /// When the next tick is due, on the monotonic clock (for a cron time,
    /// as the wall clock stood at the last look).
    #[serde(with = "model::monotonic::option")]
    pub next_at: Option<Instant>,
    /// The next cron time, for `status`.
    pub next_wall: Option<SystemTime>,
}

impl Runs {
    /// Whether the app's worker may start now: in a run, and while no other
    /// process of the app exists — what a replaced run left, or the run
    /// itself when an edit brought a new generation: one process at a time.
    pub(super) fn may_start(&self, workers: &Workers) -> bool {
        self.armed
            && !workers
                .values()
                .any(|w| w.state.pid().is_some() || w.state == State::Spawning)
    }

    /// The same runs under a new schedule: the next tick is computed anew.
    pub(super) fn rescheduled(self) -> Runs {
        Runs {
            next: None,
            ticking: false,
            next_at: None,
            next_wall: None,
            ..self
        }
    }

    /// A process of a run lives.
    pub fn running(&self, workers: &Workers) -> bool {
        workers.values().any(lives)
    }

    /// A run is armed or its process lives.
    pub(crate) fn going(&self, workers: &Workers) -> bool {
        self.armed || workers.values().any(lives)
    }
}

/// A worker whose run is not over: it has or will have a process.
fn lives(worker: &super::worker::Worker) -> bool {
    !matches!(
        worker.state,
        State::Pending | State::Completed { .. } | State::Exited | State::Failed | State::Held
    )
}

impl Core {
    /// The wall clock, as the shell read it at `at`: cron schedules are
    /// evaluated on it.
    pub fn set_wall_clock(&mut self, wall: SystemTime, at: Instant) {
        let expected = self.wall_at(at);
        let compared = std::mem::replace(&mut self.wall_clock_read, true);
        self.wall_clock = (wall, at);
        if !compared {
            // The first reading: nothing to compare with.
            return;
        }
        let (forward, by) = match wall.duration_since(expected) {
            Ok(ahead) => (true, ahead),
            Err(behind) => (false, behind.duration()),
        };
        if by > WALL_CLOCK_STEP_TOLERANCE {
            self.clock_stepped(forward, by);
        }
    }

    /// The wall clock was set: every cron schedule's next run is worked
    /// out anew from the new time (by [`Core::update_runs`], at the next
    /// convergence). A run that goes goes on.
    fn clock_stepped(&mut self, forward: bool, by: Duration) {
        let mut rearmed = Vec::new();
        for (name, app) in &mut self.apps {
            let cron = matches!(
                app.spec.schedule.as_ref().map(|s| &s.when),
                Some(When::Cron { .. })
            );
            if let (true, Some(runs)) = (cron, app.runs.as_mut()) {
                *runs = runs.clone().rescheduled();
                app.dirty = true;
                rearmed.push(name.clone());
            }
        }
        self.report(Event::ClockStepped {
            forward,
            by,
            rearmed,
        });
    }

    /// The wall clock at `now`.
    fn wall_at(&self, now: Instant) -> SystemTime {
        let (wall, at) = self.wall_clock;
        if now >= at {
            wall + (now - at)
        } else {
            wall - (at - now)
        }
    }

    /// A scheduled app's runs: the first look, a run that began or ended, a
    /// tick that is due. Returns whether anything changed.
    pub(super) fn update_runs(&mut self, name: &str, now: Instant) -> bool {
        let wall = self.wall_at(now);
        let Some(app) = self.apps.get_mut(name) else {
            return false;
        };
        let running = self.phase == super::Phase::Running;
        let Some(schedule) = app
            .spec
            .schedule
            .clone()
            .filter(|_| !app.removed && running)
        else {
            return std::mem::take(&mut app.runs).is_some();
        };
        let runs = app.runs.get_or_insert_with(Runs::default);
        let before = runs.clone();
        if !runs.ticking {
            runs.ticking = true;
            runs.next = first_tick(&schedule.when, now, wall);
        }
        if !runs.scheduled {
            runs.scheduled = true;
            if schedule.run_on_start {
                // Refused only when nothing can run: the event says so.
                let _ = self.fire(name, "start", now);
            }
        }
        self.run_progress(name, now);
        let Some(app) = self.apps.get_mut(name) else {
            return false;
        };
        let Some(runs) = app.runs.as_mut() else {
            return false;
        };
        let due = match runs.next {
            Some(Due::At(at)) => now >= at,
            Some(Due::Wall(at)) => wall >= at,
            None => false,
        };
        if due {
            runs.next = next_tick(&schedule.when, runs.next, now, wall);
            if App::paused_by_hold(app) {
                // Paused by `stop`: its ticks pass without a word each (an
                // `every: 1s` job would say so every second); `status`
                // says it is paused, and `trigger` why it cannot run.
            } else {
                // A skipped tick is reported as an event.
                let _ = self.fire(name, "schedule", now);
                self.run_progress(name, now);
            }
        }
        let Some(app) = self.apps.get_mut(name) else {
            return false;
        };
        let Some(runs) = app.runs.as_mut() else {
            return false;
        };
        (runs.next_at, runs.next_wall) = match runs.next {
            Some(Due::At(at)) => (Some(at), None),
            Some(Due::Wall(at)) => {
                let until = at.duration_since(wall).unwrap_or(Duration::ZERO);
                (Some(now + until), Some(at))
            }
            None => (None, None),
        };
        let changed = *runs != before;
        if changed {
            app.dirty = true;
        }
        changed
    }

    /// The armed run's process began, or its run ended (then a queued one
    /// is armed).
    fn run_progress(&mut self, name: &str, now: Instant) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let live = app.workers.values().any(lives);
        // Only the armed run's own process: what a replaced run left is
        // stopping, and the new one starts after it is gone.
        let started = app.workers.values().any(|w| {
            matches!(
                w.state,
                State::Spawning | State::Starting { .. } | State::Ready { .. }
            )
        });
        let ended = app
            .workers
            .values()
            .filter(|w| {
                matches!(
                    w.state,
                    State::Completed { .. } | State::Exited | State::Failed
                )
            })
            .map(|w| match (w.state.clone(), w.last_outcome) {
                (State::Completed { .. }, _) => ("exit 0".to_string(), true),
                (_, Some(outcome)) => (outcome.to_string(), false),
                (_, None) => ("ended".to_string(), false),
            })
            .next_back();
        let Some(runs) = app.runs.as_mut() else {
            return;
        };
        if !runs.armed {
            return;
        }
        let Some(began) = runs.began else {
            if started {
                runs.began = Some(now);
            }
            return;
        };
        if live {
            return;
        }
        let (result, ok) = ended.unwrap_or_else(|| ("stopped".to_string(), false));
        let took = now.saturating_duration_since(began);
        runs.armed = false;
        runs.began = None;
        runs.last = Some(LastRun {
            result: result.clone(),
            ok,
            took,
            ended: now,
        });
        let queued = runs.queued > 0;
        runs.queued = runs.queued.saturating_sub(1);
        self.report(Event::RunEnded {
            app: name.to_string(),
            result,
            ok,
            took,
        });
        if queued {
            let _ = self.fire(name, "queue", now);
        }
    }

    /// A tick, a `trigger` or the start: arm a run, or, while one goes,
    /// what `overlap` says. `Err` says why nothing was started.
    pub(super) fn fire(
        &mut self,
        name: &str,
        why: &'static str,
        now: Instant,
    ) -> Result<String, String> {
        let Some(app) = self.apps.get_mut(name) else {
            return Err(format!("no app `{name}`"));
        };
        let Some(overlap) = app.spec.schedule.as_ref().map(|s| s.overlap) else {
            return Err(format!("{name} has no schedule"));
        };
        if app.spec.instances == 0 {
            return Err(format!("{name} has instances: 0"));
        }
        if App::paused_by_hold(app) {
            let reason = format!("{name} is stopped (held): `supervise start {name}` releases it");
            self.report(Event::RunSkipped {
                app: name.to_string(),
                why,
                reason: reason.clone(),
            });
            return Err(reason);
        }
        // Armed, but nothing runs yet: its dependencies hold it.
        let waiting = !app.workers.values().any(lives);
        let going = match (waiting, app.gate.describe()) {
            (true, Some(gate)) => format!("a run waits to start ({gate})"),
            (true, None) => "a run is about to start".to_string(),
            (false, _) => "a run is going".to_string(),
        };
        let Some(runs) = app.runs.as_mut() else {
            return Err(format!("{name} has no schedule"));
        };
        if !runs.going(&app.workers) {
            return Ok(self.arm(name, why));
        }
        match overlap {
            Overlap::Skip => {
                let message = format!("{name}: {going}; overlap: skip");
                self.report(Event::RunSkipped {
                    app: name.to_string(),
                    why,
                    reason: format!("{going} (overlap: skip)"),
                });
                Err(message)
            }
            Overlap::Queue if runs.queued < MAX_QUEUED_RUNS => {
                runs.queued += 1;
                let queued = runs.queued;
                self.report(Event::RunQueued {
                    app: name.to_string(),
                    why,
                    queued,
                });
                Ok(format!("{name}: queued after the run that goes"))
            }
            Overlap::Queue => {
                self.report(Event::RunSkipped {
                    app: name.to_string(),
                    why,
                    reason: format!("{MAX_QUEUED_RUNS} run already queued (overlap: queue)"),
                });
                Err(format!("{name}: {going} and one is queued already"))
            }
            Overlap::Replace => {
                let running: Vec<_> = app
                    .workers
                    .values()
                    .filter(|w| w.state.is_running())
                    .map(|w| w.id)
                    .collect();
                if let Some(began) = runs.began {
                    runs.last = Some(LastRun {
                        result: "stopped (replaced by the next run)".to_string(),
                        ok: false,
                        took: now.saturating_duration_since(began),
                        ended: now,
                    });
                }
                for id in running {
                    let how = StopHow::default();
                    self.stop(name, id, StopReason::NextRun, how, AfterStop::Remove, now);
                }
                Ok(self.arm(name, why))
            }
        }
    }

    /// Arm a run: what the last one left goes; reconcile creates a fresh
    /// worker and starts it once nothing of the last run is left.
    fn arm(&mut self, name: &str, why: &'static str) -> String {
        let Some(app) = self.apps.get_mut(name) else {
            return String::new();
        };
        app.workers.retain(|_, w| {
            !matches!(
                w.state,
                State::Pending | State::Completed { .. } | State::Exited | State::Failed
            )
        });
        app.prune_definitions();
        app.dirty = true;
        if let Some(runs) = app.runs.as_mut() {
            runs.armed = true;
            runs.began = None;
        }
        self.report(Event::RunDue {
            app: name.to_string(),
            why,
        });
        format!("{name}: run started")
    }
}

/// The first tick after the app was started.
fn first_tick(when: &When, now: Instant, wall: SystemTime) -> Option<Due> {
    match when {
        When::Every(period) => Some(Due::At(now + *period)),
        When::Cron { .. } => when.next_cron_after(wall).map(Due::Wall),
    }
}

/// The tick after `due`: for `every`, the next multiple of the period
/// after now (ticks missed while the machine slept are not made up).
fn next_tick(when: &When, due: Option<Due>, now: Instant, wall: SystemTime) -> Option<Due> {
    match (when, due) {
        (When::Every(period), Some(Due::At(at))) if !period.is_zero() => {
            let behind = now.saturating_duration_since(at).as_nanos() / period.as_nanos();
            let steps = u32::try_from(behind + 1).unwrap_or(u32::MAX);
            Some(Due::At(at + period.saturating_mul(steps)))
        }
        (When::Every(period), _) => Some(Due::At(now + *period)),
        (When::Cron { .. }, _) => when.next_cron_after(wall).map(Due::Wall),
    }
}

#[cfg(test)]
mod tests;
