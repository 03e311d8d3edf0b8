//! One instance's lifecycle as an explicit state machine.
//!
//! ```text
//!            start              ready             stop
//! Pending ─────────▶ Starting ─────────▶ Ready ─────────▶ Stopping ──(group empty)──▶ gone
//!    ▲                  │ exit              │ exit                           │
//!    │                  ▼                   ▼                                │ then: restart
//!    └──(backoff over)─ Backoff ◀── restart policy ──▶ Failed | Exited      ▼
//! ```
//!
//! A *worker* is a slot's line of processes running one generation of the app's
//! definition: when its process crashes the same worker restarts it after a
//! backoff; when the definition changes a new worker replaces it. Transitions
//! are methods; an illegal one is a bug, so it panics in debug builds (tests)
//! and is refused with an error in release builds. Time is passed in: nothing
//! here reads a clock or touches a process.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use crate::backoff;
use crate::spec::{BackoffPolicy, MaxRestarts, RestartPolicy};

/// Identifies a worker for the supervisor's whole life (never reused).
pub type WorkerId = u64;

/// How a process ended, as `waitpid` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal { signal: i32, core: bool },
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Signal { signal, core } => {
                let name = nix::sys::signal::Signal::try_from(*signal)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {signal}"));
                write!(
                    f,
                    "killed by {name}{}",
                    if *core { " (core dumped)" } else { "" }
                )
            }
        }
    }
}

/// What ended a run of the worker's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The process exited (or was killed) on its own.
    Exited(Exit),
    /// The process could not be started (fork or exec failed with this errno).
    StartFailed { errno: i32 },
    /// It did not become ready within `ready_timeout` and was stopped.
    NotReady,
}

impl Outcome {
    /// Whether `restart: on-failure` restarts after this.
    pub fn is_failure(&self) -> bool {
        !matches!(self, Outcome::Exited(Exit::Code(0)))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Exited(exit) => exit.fmt(f),
            Outcome::StartFailed { errno } => {
                write!(
                    f,
                    "failed to start: {}",
                    nix::errno::Errno::from_raw(*errno).desc()
                )
            }
            Outcome::NotReady => f.write_str("was not ready in time"),
        }
    }
}

/// What happens once a stopping worker's process group is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The states of [`Worker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Created; its first process is about to be started.
    Pending,
    /// Running, not ready yet.
    Starting { pid: i32, since: Instant },
    /// Running and ready.
    Ready {
        pid: i32,
        started: Instant,
        since: Instant,
    },
    /// Told to stop; done when its whole process group is empty.
    Stopping {
        pid: i32,
        since: Instant,
        /// When SIGKILL goes to the group.
        deadline: Instant,
        killed: bool,
        /// How the leader ended, once reaped (the group may still have members).
        leader_exit: Option<Exit>,
        then: AfterStop,
    },
    /// Waiting to restart.
    Backoff { until: Instant },
    /// Gave up: `max_restarts` exceeded. Restarts only on a definition change or command.
    Failed,
    /// Stopped by `supervise stop`; starts again on `start` or a change of its app.
    Held,
    /// Ended and the restart policy says not to restart (`never`, or `on-failure` after exit 0).
    Exited,
}

impl State {
    /// The leader's pid while a process exists.
    pub fn pid(&self) -> Option<i32> {
        match self {
            State::Starting { pid, .. }
            | State::Ready { pid, .. }
            | State::Stopping { pid, .. } => Some(*pid),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Starting { .. } => "starting",
            State::Ready { .. } => "ready",
            State::Stopping { .. } => "stopping",
            State::Backoff { .. } => "backoff",
            State::Failed => "failed",
            State::Held => "stopped (held)",
            State::Exited => "exited",
        }
    }
}

/// The restart settings a decision needs (they may change while a worker runs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartRules {
    pub restart: RestartPolicy,
    pub backoff: BackoffPolicy,
    pub max_restarts: Option<MaxRestarts>,
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
}

/// A transition that the current state does not allow: a supervisor bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker {id}: cannot {transition} while {state}")]
pub struct IllegalTransition {
    pub id: WorkerId,
    pub transition: &'static str,
    pub state: &'static str,
}

/// One slot's line of processes for one generation of the app's definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Worker {
    pub id: WorkerId,
    pub slot: u32,
    pub generation: u64,
    pub state: State,
    /// Consecutive failed runs: the backoff attempt number of the last restart.
    pub attempt: u32,
    /// Restarts over the worker's life (shown by `status`).
    pub restarts: u32,
    /// When the restarts inside the `max_restarts` window happened (at most `count`).
    recent_restarts: VecDeque<Instant>,
    pub last_outcome: Option<Outcome>,
}

impl Worker {
    pub fn new(id: WorkerId, slot: u32, generation: u64) -> Worker {
        Worker {
            id,
            slot,
            generation,
            state: State::Pending,
            attempt: 0,
            restarts: 0,
            recent_restarts: VecDeque::new(),
            last_outcome: None,
        }
    }

    fn illegal(&self, transition: &'static str) -> IllegalTransition {
        let error = IllegalTransition {
            id: self.id,
            transition,
            state: self.state.name(),
        };
        debug_assert!(false, "{error}");
        error
    }

    /// Its process was started.
    pub fn started(&mut self, pid: i32, now: Instant) -> Result<(), IllegalTransition> {
        match self.state {
            State::Pending | State::Backoff { .. } => {
                self.state = State::Starting { pid, since: now };
                Ok(())
            }
            _ => Err(self.illegal("start")),
        }
    }

    /// Its process could not be started.
    pub fn start_failed(
        &mut self,
        errno: i32,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<Decision, IllegalTransition> {
        match self.state {
            State::Pending | State::Backoff { .. } => {
                Ok(self.run_ended(Outcome::StartFailed { errno }, now, rules))
            }
            _ => Err(self.illegal("fail to start")),
        }
    }

    /// Its process was forked but `exec` failed (the errno came back through
    /// the status pipe): a failed start, not an exit of the program.
    pub fn exec_failed(
        &mut self,
        errno: i32,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<Decision, IllegalTransition> {
        match self.state {
            State::Starting { .. } => {
                Ok(self.run_ended(Outcome::StartFailed { errno }, now, rules))
            }
            _ => Err(self.illegal("fail to exec")),
        }
    }

    /// It became ready.
    pub fn ready(&mut self, now: Instant) -> Result<(), IllegalTransition> {
        match self.state {
            State::Starting { pid, since } => {
                self.state = State::Ready {
                    pid,
                    started: since,
                    since: now,
                };
                Ok(())
            }
            _ => Err(self.illegal("become ready")),
        }
    }

    /// Its leader process was reaped. While running, this ends the run and
    /// returns the restart decision; while stopping, it is recorded and the stop
    /// completes when the group is empty ([`Worker::group_empty`]).
    pub fn exited(
        &mut self,
        exit: Exit,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<Option<Decision>, IllegalTransition> {
        match &mut self.state {
            State::Starting { .. } | State::Ready { .. } => {
                Ok(Some(self.run_ended(Outcome::Exited(exit), now, rules)))
            }
            State::Stopping { leader_exit, .. } if leader_exit.is_none() => {
                *leader_exit = Some(exit);
                Ok(None)
            }
            _ => Err(self.illegal("exit")),
        }
    }

    /// Begin stopping: the caller sends the stop signal to the group.
    pub fn stop(
        &mut self,
        now: Instant,
        kill_timeout: Duration,
        then: AfterStop,
    ) -> Result<(), IllegalTransition> {
        match self.state {
            State::Starting { pid, .. } | State::Ready { pid, .. } => {
                self.state = State::Stopping {
                    pid,
                    since: now,
                    deadline: now + kill_timeout,
                    killed: false,
                    leader_exit: None,
                    then,
                };
                Ok(())
            }
            _ => Err(self.illegal("stop")),
        }
    }

    /// `kill_timeout` passed: the caller sends SIGKILL to the group.
    pub fn killed(&mut self) -> Result<(), IllegalTransition> {
        match &mut self.state {
            State::Stopping { killed, .. } if !*killed => {
                *killed = true;
                Ok(())
            }
            _ => Err(self.illegal("kill")),
        }
    }

    /// The stopping worker's process group is empty and its leader reaped.
    /// Returns `None` when the worker is to be removed, else the restart decision.
    pub fn group_empty(
        &mut self,
        now: Instant,
        rules: &RestartRules,
    ) -> Result<StopEnd, IllegalTransition> {
        match self.state {
            State::Stopping {
                leader_exit: Some(_),
                then,
                ..
            } => Ok(match then {
                AfterStop::Remove => StopEnd::Remove,
                AfterStop::Failed(outcome) => {
                    // The run already ended; decide as if from a running state.
                    self.state = State::Starting { pid: 0, since: now };
                    StopEnd::Decided(self.run_ended(outcome, now, rules))
                }
                AfterStop::Restart => {
                    self.state = State::Pending;
                    self.attempt = 0;
                    self.recent_restarts.clear();
                    StopEnd::Restart
                }
                AfterStop::Hold => {
                    self.state = State::Held;
                    StopEnd::Held
                }
            }),
            _ => Err(self.illegal("finish stopping")),
        }
    }

    /// `supervise stop` on a worker without a process: hold it as it is.
    pub fn hold(&mut self) -> Result<(), IllegalTransition> {
        match self.state {
            State::Pending
            | State::Backoff { .. }
            | State::Failed
            | State::Exited
            | State::Held => {
                self.state = State::Held;
                Ok(())
            }
            _ => Err(self.illegal("hold")),
        }
    }

    /// Start over (a definition change or a command revives a failed, exited
    /// or held worker).
    pub fn revive(&mut self) -> Result<(), IllegalTransition> {
        match self.state {
            State::Failed | State::Exited | State::Held | State::Backoff { .. } => {
                self.state = State::Pending;
                self.attempt = 0;
                self.recent_restarts.clear();
                Ok(())
            }
            _ => Err(self.illegal("revive")),
        }
    }

    /// A run ended: apply the restart policy, backoff and `max_restarts`.
    fn run_ended(&mut self, outcome: Outcome, now: Instant, rules: &RestartRules) -> Decision {
        self.last_outcome = Some(outcome);
        // The attempt counter resets only after the worker was *ready* for
        // `reset_after`, never merely because it was started again.
        if let State::Ready { since, .. } = self.state
            && now.saturating_duration_since(since) >= rules.backoff.reset_after
        {
            self.attempt = 0;
        }
        let restart = match rules.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => outcome.is_failure(),
            RestartPolicy::Never => false,
        };
        if !restart {
            self.state = State::Exited;
            return Decision::Done;
        }
        if let Some(limit) = rules.max_restarts {
            while self
                .recent_restarts
                .front()
                .is_some_and(|at| now.saturating_duration_since(*at) >= limit.within)
            {
                self.recent_restarts.pop_front();
            }
            if self.recent_restarts.len() >= limit.count as usize {
                self.state = State::Failed;
                return Decision::GiveUp {
                    restarts: limit.count,
                    within: limit.within,
                };
            }
            self.recent_restarts.push_back(now);
        }
        self.attempt = self.attempt.saturating_add(1);
        self.restarts = self.restarts.saturating_add(1);
        let delay = backoff::delay(&rules.backoff, self.attempt);
        self.state = State::Backoff { until: now + delay };
        Decision::Restart {
            attempt: self.attempt,
            delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(restart: RestartPolicy) -> RestartRules {
        RestartRules {
            restart,
            backoff: BackoffPolicy {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(30),
                factor: 2.0,
                reset_after: Duration::from_secs(60),
            },
            max_restarts: None,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_crash_loop_follows_the_backoff_schedule() {
        let t0 = Instant::now();
        let r = rules(RestartPolicy::Always);
        let mut w = Worker::new(1, 0, 1);
        let mut now = t0;
        let mut delays = Vec::new();
        for pid in 100..106 {
            w.started(pid, now).unwrap();
            now += ms(10);
            match w.exited(Exit::Code(1), now, &r).unwrap() {
                Some(Decision::Restart { delay, attempt }) => {
                    assert_eq!(attempt as usize, delays.len() + 1);
                    assert_eq!(w.state, State::Backoff { until: now + delay });
                    delays.push(delay.as_millis());
                    now += delay;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200]);
        assert_eq!(w.restarts, 6);
    }

    #[test]
    fn the_attempt_counter_resets_only_after_being_ready_for_reset_after() {
        let t0 = Instant::now();
        let r = rules(RestartPolicy::Always);
        let mut w = Worker::new(1, 0, 1);
        w.started(1, t0).unwrap();
        w.exited(Exit::Code(1), t0, &r).unwrap();
        w.started(2, t0).unwrap();
        w.exited(Exit::Code(1), t0, &r).unwrap();
        assert_eq!(w.attempt, 2);

        // Running (not ready) for longer than reset_after does not reset.
        w.started(3, t0).unwrap();
        let late = t0 + Duration::from_secs(120);
        assert_eq!(
            w.exited(Exit::Code(1), late, &r).unwrap(),
            Some(Decision::Restart {
                attempt: 3,
                delay: ms(400)
            })
        );

        // Ready, but for less than reset_after: no reset.
        w.started(4, late).unwrap();
        w.ready(late).unwrap();
        let early = late + Duration::from_secs(59);
        assert_eq!(
            w.exited(Exit::Code(1), early, &r)
                .unwrap()
                .map(|d| matches!(d, Decision::Restart { attempt: 4, .. })),
            Some(true)
        );

        // Ready for reset_after: the next restart is attempt 1 again.
        w.started(5, early).unwrap();
        w.ready(early).unwrap();
        let later = early + Duration::from_secs(60);
        assert_eq!(
            w.exited(Exit::Code(1), later, &r).unwrap(),
            Some(Decision::Restart {
                attempt: 1,
                delay: ms(100)
            })
        );
    }

    #[test]
    fn restart_policies() {
        let t0 = Instant::now();
        let cases = [
            (RestartPolicy::Always, Exit::Code(0), true),
            (RestartPolicy::Always, Exit::Code(3), true),
            (
                RestartPolicy::Always,
                Exit::Signal {
                    signal: 9,
                    core: false,
                },
                true,
            ),
            (RestartPolicy::OnFailure, Exit::Code(0), false),
            (RestartPolicy::OnFailure, Exit::Code(1), true),
            (
                RestartPolicy::OnFailure,
                Exit::Signal {
                    signal: 15,
                    core: false,
                },
                true,
            ),
            (RestartPolicy::Never, Exit::Code(1), false),
            (
                RestartPolicy::Never,
                Exit::Signal {
                    signal: 9,
                    core: true,
                },
                false,
            ),
        ];
        for (policy, exit, restarts) in cases {
            let mut w = Worker::new(1, 0, 1);
            w.started(1, t0).unwrap();
            let decision = w.exited(exit, t0, &rules(policy)).unwrap().unwrap();
            assert_eq!(
                matches!(decision, Decision::Restart { .. }),
                restarts,
                "{policy:?} {exit:?}"
            );
            if !restarts {
                assert_eq!(decision, Decision::Done);
                assert_eq!(w.state, State::Exited);
            }
        }
    }

    #[test]
    fn start_failures_count_as_failures() {
        let t0 = Instant::now();
        let mut w = Worker::new(1, 0, 1);
        let decision = w
            .start_failed(libc::ENOENT, t0, &rules(RestartPolicy::OnFailure))
            .unwrap();
        assert_eq!(
            decision,
            Decision::Restart {
                attempt: 1,
                delay: ms(100)
            }
        );
        assert_eq!(
            w.last_outcome,
            Some(Outcome::StartFailed {
                errno: libc::ENOENT
            })
        );
        let mut never = Worker::new(2, 0, 1);
        assert_eq!(
            never
                .start_failed(libc::EACCES, t0, &rules(RestartPolicy::Never))
                .unwrap(),
            Decision::Done
        );
    }

    #[test]
    fn max_restarts_gives_up_after_exactly_count_restarts_in_the_window() {
        let t0 = Instant::now();
        let mut r = rules(RestartPolicy::Always);
        r.max_restarts = Some(MaxRestarts {
            count: 3,
            within: Duration::from_secs(10),
        });
        let mut w = Worker::new(1, 0, 1);
        let mut now = t0;
        let mut restarts = 0;
        loop {
            w.started(1, now).unwrap();
            now += ms(50);
            match w.exited(Exit::Code(1), now, &r).unwrap().unwrap() {
                Decision::Restart { delay, .. } => {
                    restarts += 1;
                    now += delay;
                }
                Decision::GiveUp {
                    restarts: count, ..
                } => {
                    assert_eq!(count, 3);
                    break;
                }
                Decision::Done => panic!("always restarts"),
            }
        }
        assert_eq!(restarts, 3);
        assert_eq!(w.state, State::Failed);
        w.revive().unwrap();
        assert_eq!((w.state.clone(), w.attempt), (State::Pending, 0));
    }

    #[test]
    fn restarts_outside_the_window_do_not_count() {
        let t0 = Instant::now();
        let mut r = rules(RestartPolicy::Always);
        r.backoff.factor = 1.0;
        r.max_restarts = Some(MaxRestarts {
            count: 2,
            within: Duration::from_secs(1),
        });
        let mut w = Worker::new(1, 0, 1);
        let mut now = t0;
        for _ in 0..10 {
            w.started(1, now).unwrap();
            now += ms(600);
            let decision = w.exited(Exit::Code(1), now, &r).unwrap().unwrap();
            assert!(matches!(decision, Decision::Restart { .. }), "{decision:?}");
            now += ms(100);
        }
    }

    #[test]
    fn a_stop_completes_only_when_the_group_is_empty() {
        let t0 = Instant::now();
        let r = rules(RestartPolicy::Always);
        let mut w = Worker::new(1, 0, 1);
        w.started(7, t0).unwrap();
        w.ready(t0).unwrap();
        w.stop(t0, Duration::from_secs(10), AfterStop::Remove)
            .unwrap();
        assert!(
            matches!(w.state, State::Stopping { deadline, .. } if deadline == t0 + Duration::from_secs(10))
        );
        // The leader exiting does not end the stop, and does not restart.
        assert_eq!(w.exited(Exit::Code(0), t0, &r).unwrap(), None);
        assert!(matches!(
            w.state,
            State::Stopping {
                leader_exit: Some(Exit::Code(0)),
                ..
            }
        ));
        w.killed().unwrap();
        assert_eq!(w.group_empty(t0, &r).unwrap(), StopEnd::Remove);
    }

    #[test]
    fn not_ready_in_time_is_a_failed_start_after_the_stop() {
        let t0 = Instant::now();
        let r = rules(RestartPolicy::Always);
        let mut w = Worker::new(1, 0, 1);
        w.started(7, t0).unwrap();
        w.stop(
            t0,
            Duration::from_secs(1),
            AfterStop::Failed(Outcome::NotReady),
        )
        .unwrap();
        w.exited(
            Exit::Signal {
                signal: 15,
                core: false,
            },
            t0,
            &r,
        )
        .unwrap();
        let decision = w.group_empty(t0, &r).unwrap();
        assert_eq!(
            decision,
            StopEnd::Decided(Decision::Restart {
                attempt: 1,
                delay: ms(100)
            })
        );
        assert_eq!(w.last_outcome, Some(Outcome::NotReady));
    }

    #[test]
    #[should_panic(expected = "cannot become ready while pending")]
    fn illegal_transitions_panic_in_tests() {
        let mut w = Worker::new(1, 0, 1);
        let _ = w.ready(Instant::now());
    }

    #[test]
    #[should_panic(expected = "cannot finish stopping")]
    fn a_stop_cannot_finish_before_the_leader_is_reaped() {
        let t0 = Instant::now();
        let mut w = Worker::new(1, 0, 1);
        w.started(7, t0).unwrap();
        w.stop(t0, Duration::from_secs(1), AfterStop::Remove)
            .unwrap();
        let _ = w.group_empty(t0, &rules(RestartPolicy::Always));
    }

    #[test]
    fn exits_read_like_sentences() {
        assert_eq!(Exit::Code(3).to_string(), "exited with code 3");
        assert_eq!(
            Exit::Signal {
                signal: 9,
                core: false
            }
            .to_string(),
            "killed by SIGKILL"
        );
        assert_eq!(
            Exit::Signal {
                signal: 11,
                core: true
            }
            .to_string(),
            "killed by SIGSEGV (core dumped)"
        );
        assert!(
            Outcome::StartFailed {
                errno: libc::ENOENT
            }
            .to_string()
            .contains("No such file")
        );
    }
}
