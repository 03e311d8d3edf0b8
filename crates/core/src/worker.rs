//! One instance's lifecycle as an explicit state machine.
//!
//! ```text
//!                     spawn ok            exec ok / ready          stop
//! Pending ─▶ Spawning ────────▶ Starting ───────────────▶ Ready ─────────▶ Stopping
//!    ▲           │ spawn failed    │ exit                   │ exit            │ group empty
//!    │           ▼                 ▼                        ▼                 ▼
//!    └─(backoff over)─ Backoff ◀────────── restart policy ──────────▶ Failed | Exited
//!                                                                     (or Held, Pending, gone)
//! ```
//!
//! A *worker* is a slot's line of processes running one generation of the
//! app's definition: when its process crashes the same worker restarts it
//! after a backoff; when the definition changes a new worker replaces it.
//!
//! Every state change goes through [`Worker::enter`], which checks it against
//! [`ALLOWED`], a table in the style of Horust's: `A ← [B, C]` means A may be
//! entered only from B or C. An input that the current state does not accept
//! (a probe result for a process that already exited, a second exit, a stop of
//! a worker without a process) is refused with a [`Refused`] value — the
//! caller logs it and nothing changes. It never panics and never leaves a
//! worker half-moved. Time is passed in: nothing here reads a clock or touches
//! a process.

mod liveness;
mod outcome;
mod state;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use liveness::{CheckVerdict, Health, Recycle, Verdict, Watchdog};
pub use outcome::Outcome;
pub use state::{ALLOWED, Kind, State, allowed};

use model::backoff;
use model::orders::WorkerId;
use model::process::{Exit, StartError};
use model::spec::{AppSpec, BackoffPolicy, MaxRestarts, RestartPolicy};

/// What happens once a stopping worker's process group is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AfterStop {
    /// The worker is no longer wanted (scale down, shutdown, replaced).
    Remove,
    /// The run failed (not ready in time): count it and back off.
    Failed(Outcome),
    /// `supervise restart`: start again at once, with a fresh backoff.
    Restart,
    /// `supervise stop`: stay stopped until `start` (or a change of the app).
    Hold,
}

/// How a stop ended, once the group is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopEnd {
    /// Forget the worker.
    Remove,
    /// The failed run was counted: the restart decision.
    Decided(Decision),
    /// Pending again (a restart command).
    Restart,
    /// Held (a stop command).
    Held,
}

/// The restart settings a decision needs (they may change while a worker runs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartRules {
    pub restart: RestartPolicy,
    pub backoff: BackoffPolicy,
    pub max_restarts: Option<MaxRestarts>,
}

impl RestartRules {
    /// The restart settings of an app, as a worker's decisions need them.
    pub fn of(spec: &AppSpec) -> RestartRules {
        RestartRules {
            restart: spec.restart,
            backoff: spec.backoff,
            max_restarts: spec.max_restarts,
        }
    }
}

/// What the restart policy decided when a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Restart number `attempt` after `delay`.
    Restart { attempt: u32, delay: Duration },
    /// `max_restarts` exceeded: now `Failed`.
    GiveUp { restarts: u32, within: Duration },
    /// The policy does not restart this: now `Exited`.
    Done,
    /// It was being replaced ([`Recycle`]): its replacement, already
    /// created, takes its slot. Now `Exited`.
    Replaced,
}

/// An input the worker's state does not accept: a logged no-op.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker {id}: {input} refused while {state}")]
pub struct Refused {
    pub id: WorkerId,
    pub input: &'static str,
    pub state: &'static str,
}

/// One slot's line of processes for one generation of the app's definition.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Worker {
    pub id: WorkerId,
    pub slot: u32,
    pub generation: u64,
    pub state: State,
    /// Consecutive failed runs: the backoff attempt number of the last restart.
    pub attempt: u32,
    /// Restarts over the worker's life (shown by `status`).
    pub restarts: u32,
    /// Processes started over the worker's life: with the worker's id, what
    /// tells one run from another (a one-shot that completes is the same
    /// run; a restart is a new one).
    pub runs: u32,
    /// When the restarts inside the `max_restarts` window happened (at most `count`).
    #[serde(with = "model::monotonic::deque")]
    recent_restarts: VecDeque<Instant>,
    pub last_outcome: Option<Outcome>,
    /// The last `STATUS=` the current process sent over the notify socket.
    pub status_text: Option<String>,
    /// The current process was handed a socket by the preload library of
    /// `inject` (it said `SUPERVISE_INJECTED=`).
    pub injected: bool,
    /// When to say the current process was not handed its socket, unless
    /// the library says it was before (set once it is ready).
    #[serde(with = "model::monotonic::option")]
    pub inject_check_at: Option<Instant>,
    /// The liveness checks of the current process.
    pub health: Health,
    /// The watchdog of the current process, once it is ready.
    pub watchdog: Option<Watchdog>,
    /// `EXTEND_TIMEOUT_USEC=`: not ready in time only after this.
    #[serde(with = "model::monotonic::option")]
    pub ready_extended_to: Option<Instant>,
    /// Being replaced while it serves (unhealthy, over its memory limit).
    pub recycle: Option<Recycle>,
}

impl Worker {
    /// Its start is decided (see `core::startup`): ready or completed, a run
    /// that ended (without becoming ready, or after), or given up, held or
    /// exited for good.
    pub fn start_decided(&self) -> bool {
        self.state.is_ready()
            || self.last_outcome.is_some()
            || matches!(
                self.state,
                State::Completed { .. } | State::Failed | State::Held | State::Exited
            )
    }

    pub fn new(id: WorkerId, slot: u32, generation: u64) -> Worker {
        Worker {
            id,
            slot,
            generation,
            state: State::Pending,
            attempt: 0,
            restarts: 0,
            runs: 0,
            recent_restarts: VecDeque::new(),
            last_outcome: None,
            status_text: None,
            injected: false,
            inject_check_at: None,
            health: Health::default(),
            watchdog: None,
            ready_extended_to: None,
            recycle: None,
        }
    }

    fn refuse(&self, input: &'static str) -> Refused {
        Refused {
            id: self.id,
            input,
            state: self.state.name(),
        }
    }

    /// Move to `next` if [`ALLOWED`] permits it from the current state.
    fn enter(&mut self, next: State, input: &'static str) -> Result<(), Refused> {
        if !allowed(self.state.kind(), next.kind()) {
            return Err(self.refuse(input));
        }
        self.state = next;
        Ok(())
    }

    /// Its process is being started (pending, or its backoff is over).
    pub fn begin_start(&mut self) -> Result<(), Refused> {
        self.enter(State::Spawning, "start")
    }

    /// The process exists.
    pub fn spawned(&mut self, pid: i32, now: Instant) -> Result<(), Refused> {
        if self.state != State::Spawning {
            return Err(self.refuse("spawned"));
        }
        self.runs = self.runs.saturating_add(1);
        self.status_text = None;
        self.injected = false;
        self.inject_check_at = None;
        // Check numbers go on across processes: a late answer meant for
        // the last one can never pass for one of this one.
        self.health = Health {
            checks: self.health.checks,
            ..Health::default()
        };
        self.watchdog = None;
        self.ready_extended_to = None;
        self.recycle = None;
        self.enter(
            State::Starting {
                pid,
                since: now,
                exec_confirmed: false,
            },
            "spawned",
        )
    }

    /// No process could be created.
    pub(crate) fn spawn_failed(
        &mut self,
        error: StartError,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<Decision, Refused> {
        if self.state != State::Spawning {
            return Err(self.refuse("spawn failure"));
        }
        self.run_ended(
            Outcome::StartFailed(error),
            None,
            now,
            rules,
            "spawn failure",
        )
    }

    /// `exec` succeeded: the program runs. Returns whether this changed anything.
    pub fn exec_succeeded(&mut self) -> Result<bool, Refused> {
        match &mut self.state {
            State::Starting { exec_confirmed, .. } => {
                let changed = !*exec_confirmed;
                *exec_confirmed = true;
                Ok(changed)
            }
            State::Ready { .. } | State::Stopping { .. } => Ok(false),
            _ => Err(self.refuse("exec success")),
        }
    }

    /// It became ready.
    pub fn ready(&mut self, now: Instant) -> Result<(), Refused> {
        let State::Starting { pid, since, .. } = self.state else {
            return Err(self.refuse("ready"));
        };
        self.enter(
            State::Ready {
                pid,
                started: since,
                since: now,
            },
            "ready",
        )
    }

    /// Its leader process was reaped (`start_error` when it never ran the
    /// program). While running, this ends the run and returns the restart
    /// decision; while stopping, it is recorded and the stop completes when
    /// the group is empty ([`Worker::group_empty`]).
    pub fn exited(
        &mut self,
        exit: Exit,
        start_error: Option<StartError>,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<Option<Decision>, Refused> {
        let outcome = match start_error {
            Some(error) => Outcome::StartFailed(error),
            None => Outcome::Exited(exit),
        };
        match &mut self.state {
            State::Starting { .. } => self.run_ended(outcome, None, now, rules, "exit").map(Some),
            State::Ready { .. } if self.recycle.is_some() => {
                // Counted as a restart when it was condemned: not again.
                self.enter(State::Exited, "exit")?;
                self.last_outcome = Some(outcome);
                Ok(Some(Decision::Replaced))
            }
            State::Ready { since, .. } => {
                let since = *since;
                self.run_ended(outcome, Some(since), now, rules, "exit")
                    .map(Some)
            }
            State::Stopping { leader_exit, .. } if leader_exit.is_none() => {
                *leader_exit = Some(exit);
                if start_error.is_some() {
                    self.last_outcome = Some(outcome);
                }
                Ok(None)
            }
            _ => Err(self.refuse("exit")),
        }
    }

    /// Begin stopping: the caller sends the stop signal to the group.
    pub(crate) fn stop(
        &mut self,
        now: Instant,
        kill_timeout: Duration,
        then: AfterStop,
    ) -> Result<(), Refused> {
        let Some(pid) = self.state.pid().filter(|_| self.state.is_running()) else {
            return Err(self.refuse("stop"));
        };
        self.enter(
            State::Stopping {
                pid,
                since: now,
                deadline: now + kill_timeout,
                killed: false,
                leader_exit: None,
                then,
            },
            "stop",
        )?;
        // The caller cancels the check in flight, if any.
        self.health.in_flight = None;
        Ok(())
    }

    /// Stop sooner: the deadline moves to `now` if it is later (a second SIGINT).
    pub(crate) fn hurry(&mut self, now: Instant) -> Result<(), Refused> {
        match &mut self.state {
            State::Stopping { deadline, .. } => {
                *deadline = (*deadline).min(now);
                Ok(())
            }
            _ => Err(self.refuse("hurry")),
        }
    }

    /// `kill_timeout` changed: a stop in flight gets the new deadline,
    /// counted from when it began.
    pub(crate) fn retime_stop(&mut self, kill_timeout: Duration) -> Result<(), Refused> {
        match &mut self.state {
            State::Stopping {
                since, deadline, ..
            } => {
                *deadline = *since + kill_timeout;
                Ok(())
            }
            _ => Err(self.refuse("retime stop")),
        }
    }

    /// `kill_timeout` passed: the caller sends SIGKILL to the group.
    pub(crate) fn killed(&mut self) -> Result<(), Refused> {
        match &mut self.state {
            State::Stopping { killed, .. } if !*killed => {
                *killed = true;
                Ok(())
            }
            _ => Err(self.refuse("kill")),
        }
    }

    /// The stopping worker's process group is empty and its leader reaped.
    pub(crate) fn group_empty(
        &mut self,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<StopEnd, Refused> {
        let State::Stopping {
            leader_exit: Some(_),
            then,
            ..
        } = self.state
        else {
            return Err(self.refuse("group empty"));
        };
        match then {
            AfterStop::Remove => Ok(StopEnd::Remove),
            AfterStop::Failed(outcome) => self
                .run_ended(outcome, None, now, rules, "group empty")
                .map(StopEnd::Decided),
            AfterStop::Restart => {
                self.enter(State::Pending, "group empty")?;
                self.attempt = 0;
                self.recent_restarts.clear();
                Ok(StopEnd::Restart)
            }
            AfterStop::Hold => {
                self.enter(State::Held, "group empty")?;
                Ok(StopEnd::Held)
            }
        }
    }

    /// A command while a stop is in flight: the last one wins — `start`
    /// (or `restart`) after `stop` starts the worker again once it has
    /// stopped; `stop` after those, or during the stop of a failed run (not
    /// ready in time, unhealthy, a missed watchdog), holds it.
    pub(crate) fn after_stop(&mut self, next: AfterStop) -> Result<(), Refused> {
        match &mut self.state {
            State::Stopping { then, .. }
                if matches!(
                    (*then, next),
                    (AfterStop::Hold, AfterStop::Restart)
                        | (AfterStop::Restart | AfterStop::Failed(_), AfterStop::Hold)
                ) =>
            {
                *then = next;
                Ok(())
            }
            _ => Err(self.refuse("after stop")),
        }
    }

    /// `supervise stop` on a worker without a process: hold it as it is.
    pub(crate) fn hold(&mut self) -> Result<(), Refused> {
        if self.state == State::Held {
            return Ok(());
        }
        if self.state.pid().is_some() {
            // A process must be stopped first; its stop then ends held.
            return Err(self.refuse("hold"));
        }
        self.enter(State::Held, "hold")
    }

    /// Start over (a definition change or a command revives a failed, exited,
    /// held or backing-off worker).
    pub(crate) fn revive(&mut self) -> Result<(), Refused> {
        if self.state.pid().is_some() {
            return Err(self.refuse("revive"));
        }
        self.enter(State::Pending, "revive")?;
        self.attempt = 0;
        self.recent_restarts.clear();
        Ok(())
    }

    /// A run ended: apply the restart policy, backoff and `max_restarts`.
    /// `ready_since` is when the run became ready, if it did.
    fn run_ended(
        &mut self,
        outcome: Outcome,
        ready_since: Option<Instant>,
        now: Instant,
        rules: &RestartRules,
        input: &'static str,
    ) -> Result<Decision, Refused> {
        let restart = match rules.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => outcome.is_failure(),
            RestartPolicy::Never => false,
        };
        if !restart {
            let done = if outcome == Outcome::Exited(Exit::Code(0)) {
                State::Completed { at: now }
            } else {
                State::Exited
            };
            self.enter(done, input)?;
            self.last_outcome = Some(outcome);
            return Ok(Decision::Done);
        }
        // The attempt counter resets only after the worker was *ready* for
        // `reset_after`, never merely because it was started again.
        if ready_since
            .is_some_and(|since| now.saturating_duration_since(since) >= rules.backoff.reset_after)
        {
            self.attempt = 0;
        }
        if let Some(limit) = rules.max_restarts {
            liveness::prune(&mut self.recent_restarts, now, limit.within);
            if self.recent_restarts.len() >= limit.count as usize {
                self.enter(State::Failed, input)?;
                self.last_outcome = Some(outcome);
                return Ok(Decision::GiveUp {
                    restarts: limit.count,
                    within: limit.within,
                });
            }
        }
        let attempt = self.attempt.saturating_add(1);
        let delay = backoff::delay(&rules.backoff, attempt);
        self.enter(State::Backoff { until: now + delay }, input)?;
        if rules.max_restarts.is_some() {
            self.recent_restarts.push_back(now);
        }
        self.last_outcome = Some(outcome);
        self.attempt = attempt;
        self.restarts = self.restarts.saturating_add(1);
        Ok(Decision::Restart { attempt, delay })
    }
}

#[cfg(test)]
mod tests;
