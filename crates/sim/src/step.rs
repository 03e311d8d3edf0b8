//! The steps a schedule is made of, and how the world takes each.

use std::time::Duration;

use super::dependencies::SHORTEST_EVERY;
use super::{UID, Violation, World, app, probe};
use crate::fake::Behaviour;
use model::orders::WatchdogMessage;
use model::process::{Exit, StartError, StartStage};
use model::protocol::Command;
use model::spec::{
    Condition, Dependency, HealthCheck, OnDependencyRestart, Overlap, Readiness, RestartPolicy,
    ScheduleSpec, Template, When,
};
use supervise::supervisor::News;
use supervise::supervisor::{Load, Loaded};

/// One thing that happens to the world. Indices are taken modulo the
/// candidates that exist when the step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Time passes (milliseconds), through every moment something is due.
    Wait(u64),
    /// A running process exits on its own, with a code or (odd) a signal.
    Crash {
        process: usize,
        code: i32,
    },
    /// The next processes spawned behave like this.
    Plan(Behaviour),
    /// Spawns fail (fork: EAGAIN) until the next `SpawnsWork`.
    SpawnsFail,
    SpawnsWork,
    /// A probing process's probe succeeds.
    Probe {
        process: usize,
    },
    /// A process sends `READY=1` (from a foreign uid when `foreign`).
    Notify {
        process: usize,
        foreign: bool,
    },
    /// A running liveness check is answered.
    CheckAnswer {
        check: usize,
        passed: bool,
    },
    /// The memory measurement asked for is answered: instance `over` (if
    /// any) is above its app's `max_memory` (and, with `past_ceiling`,
    /// above its hard ceiling too), the rest below.
    MemoryAnswer {
        over: Option<usize>,
        past_ceiling: bool,
    },
    /// A process sends `WATCHDOG=1` (or `WATCHDOG=trigger`).
    Watchdog {
        process: usize,
        trigger: bool,
    },
    /// A starting process sends `EXTEND_TIMEOUT_USEC=`.
    ExtendTimeout {
        process: usize,
        millis: u64,
    },
    /// A control command on an app (or one instance).
    Command {
        kind: CommandKind,
        app: usize,
        slot: Option<u32>,
    },
    /// The wall clock is set forward or back by `seconds` (the monotonic
    /// clock goes on); the loop wakes at once, as its timerfd with
    /// `TFD_TIMER_CANCEL_ON_SET` makes it.
    SetClock {
        forward: bool,
        seconds: u64,
    },
    /// The supervisor does not run for `millis` (stopped, paused): the
    /// world goes on, and every live process keeps pinging its watchdog and
    /// says it is ready (its datagrams wait in the socket); then the loop
    /// wakes late, says so first, and takes them in.
    Stall {
        millis: u64,
    },
    /// The shell has file descriptors for this many starts a turn from now
    /// on (`usize::MAX`: no bound). No turn starts more; the starts held
    /// back are said, and come once there is room.
    FdRoom {
        starts: usize,
    },
    /// What app `app`'s load samples find from now on: `queue` waiting,
    /// each ready instance at `cpu` % of a CPU.
    Load {
        app: usize,
        queue: u32,
        cpu: u32,
    },
    /// A new version of the file.
    Edit(Edit),
    /// An edit that does not check.
    InvalidEdit,
    Sigterm,
    Sigint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    Reload,
    Restart,
    Stop,
    Start,
    /// A run of a scheduled app now (refused for any other).
    Trigger,
}

/// How an edit changes the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    Scale {
        app: usize,
        instances: u32,
    },
    /// A new value of an `env` variable: a new generation, rolled out.
    Env {
        app: usize,
        value: u32,
    },
    /// Policy fields: nothing restarts. The app's `kill_timeout` becomes
    /// `millis`, and its output goes to a log file when `millis` is odd
    /// (else to none).
    KillTimeout {
        app: usize,
        millis: u64,
    },
    Add,
    /// The app goes, and so do the dependencies on it (an edit that kept
    /// them would be refused).
    Remove {
        app: usize,
    },
    /// An app (not the first) waits for one before it on `condition` (or
    /// `ready`, when the other cannot meet that one); `replace`:
    /// `on_dependency_restart: restart`.
    Depend {
        app: usize,
        on: usize,
        condition: Condition,
        replace: bool,
    },
    /// An app waits for nothing any more.
    Independent {
        app: usize,
    },
    /// An app follows its load within `min..=max` (`max` 0: no longer).
    Autoscale {
        app: usize,
        min: u32,
        max: u32,
    },
    /// A scheduled app's schedule changes.
    Reschedule {
        app: usize,
        every_millis: u64,
        overlap: Overlap,
        run_on_start: bool,
    },
}

/// A wait of a multiple of this many milliseconds is preceded by an upgrade.
const UPGRADE_EVERY_FIFTH: u64 = 5;

impl World {
    /// A stall of the supervisor (see [`Step::Stall`]). Nobody is blamed for
    /// it: no worker whose process lived through it and kept speaking is
    /// found broken or not ready in time by the turn after it.
    fn stall(&mut self, millis: u64) -> Result<(), Violation> {
        let stall = Duration::from_millis(millis);
        let broken = self.supervisor.core().broken();
        // Workers starting before the stall: none of them may be found not
        // ready in time by the turn after it.
        let starting: Vec<(String, u64, Option<supervise_core::worker::Outcome>)> = self
            .supervisor
            .core()
            .apps()
            .flat_map(|app| {
                app.workers
                    .values()
                    .filter(|w| matches!(w.state, supervise_core::worker::State::Starting { .. }))
                    .map(move |w| (app.spec.name.clone(), w.id, w.last_outcome))
            })
            .collect();
        if self.shutdown_at.is_some() {
            self.stalled_in_shutdown += stall;
        }
        let until = self.now() + stall;
        self.fake().advance_to(until);
        // As the loop says it: the lateness and a grace, before any news.
        let mut batch = vec![News::Stalled {
            by: stall + Duration::from_secs(1),
        }];
        for pid in self.live() {
            let Some((app, _)) = self.supervisor.core().worker_of(pid) else {
                continue;
            };
            let ready = app.spec.ready == model::spec::Readiness::Notify;
            let watchdog = app.spec.process.watchdog.map(|_| WatchdogMessage::Ping);
            if ready || watchdog.is_some() {
                batch.push(News::Notified(effects::notify::Notification {
                    sender_pid: pid,
                    sender_uid: UID,
                    sender_pgid: Some(pid),
                    ready,
                    stopping: false,
                    status: None,
                    watchdog,
                    extend_timeout: None,
                    injected: false,
                }));
            }
        }
        batch.push(News::ChildExited);
        batch.push(News::Timer);
        self.handle_all(batch);
        if self.supervisor.core().broken() > broken {
            return Err(Violation(format!(
                "a stall of {millis} ms found an instance broken that kept pinging through it"
            )));
        }
        use supervise_core::worker::{AfterStop, Outcome, State};
        for key in starting {
            let (app, id, before) = &key;
            let worker = self
                .supervisor
                .core()
                .app(app)
                .and_then(|app| app.workers.get(id));
            let stopped_not_ready = worker.is_some_and(|w| {
                matches!(
                    w.state,
                    State::Stopping {
                        then: AfterStop::Failed(Outcome::NotReady),
                        ..
                    }
                ) || (w.last_outcome != *before && w.last_outcome == Some(Outcome::NotReady))
            });
            if stopped_not_ready {
                return Err(Violation(format!(
                    "a stall of {millis} ms stopped {}#{} as not ready in time, though it said READY=1 through it",
                    key.0, key.1
                )));
            }
        }
        self.deliver();
        Ok(())
    }

    /// Take one step of a schedule, then check the invariants.
    pub fn step(&mut self, step: Step) -> Result<(), Violation> {
        self.trace.push(step.clone());
        self.ready_before = self.ready_counts();
        let began = self.now();
        let broken_before = self.supervisor.core().broken();
        let quiet = matches!(
            step,
            Step::Wait(_)
                | Step::Probe { .. }
                | Step::Notify { .. }
                | Step::Plan(_)
                | Step::Watchdog { trigger: false, .. }
                | Step::ExtendTimeout { .. }
                | Step::CheckAnswer { passed: true, .. }
                | Step::MemoryAnswer { over: None, .. }
                | Step::SetClock { .. }
                | Step::Stall { .. }
                | Step::FdRoom { .. }
                | Step::Load { .. }
        );
        match step {
            Step::Wait(millis) => {
                // One wait in five is preceded by an upgrade, decided from
                // the number already drawn: every seed replays its draws.
                if millis % UPGRADE_EVERY_FIFTH == 0 {
                    self.upgrade()?;
                }
                self.advance(Duration::from_millis(millis));
            }
            Step::Crash { process, code } => {
                let live = self.live();
                if !live.is_empty() {
                    let pid = live[process % live.len()];
                    let exit = if code % 2 == 1 {
                        Exit::Signal {
                            signal: libc::SIGSEGV,
                            core: code % 3 == 0,
                        }
                    } else {
                        Exit::Code(code)
                    };
                    self.fake().crash(pid, exit);
                    self.deliver();
                }
            }
            Step::Plan(behaviour) => self.fake().plans.push_back(behaviour),
            Step::SpawnsFail => {
                self.fake().spawn_failure = Some(StartError {
                    stage: StartStage::Fork,
                    errno: libc::EAGAIN,
                });
            }
            Step::SpawnsWork => self.fake().spawn_failure = None,
            Step::Probe { process } => {
                let probing: Vec<i32> = self.supervisor.effects().probing().collect();
                let mut probing: Vec<i32> = probing
                    .into_iter()
                    .filter(|pid| self.runs_program(*pid))
                    .collect();
                probing.sort();
                if !probing.is_empty() {
                    let pid = probing[process % probing.len()];
                    self.handle(News::ProbeSucceeded { pid });
                }
            }
            Step::Notify { process, foreign } => {
                let live = self.live();
                if !live.is_empty() {
                    let pid = live[process % live.len()];
                    self.notify(pid, if foreign { UID + 1 } else { UID });
                }
            }
            Step::CheckAnswer { check, passed } => {
                let running: Vec<(i32, u64)> = self.supervisor.effects().checks().collect();
                if !running.is_empty() {
                    let (pid, number) = running[check % running.len()];
                    self.answer_check(pid, number, passed);
                }
            }
            Step::MemoryAnswer { over, past_ceiling } => self.answer_memory(over, past_ceiling)?,
            Step::Watchdog { process, trigger } => {
                let live = self.live();
                if !live.is_empty() {
                    let pid = live[process % live.len()];
                    let message = if trigger {
                        WatchdogMessage::Trigger
                    } else {
                        WatchdogMessage::Ping
                    };
                    self.notify_with(pid, UID, false, Some(message), None);
                }
            }
            Step::ExtendTimeout { process, millis } => {
                let live = self.live();
                if !live.is_empty() {
                    let pid = live[process % live.len()];
                    let by = Some(Duration::from_millis(millis));
                    self.notify_with(pid, UID, false, None, by);
                }
            }
            Step::Command { kind, app, slot } => {
                let names: Vec<String> = self.desired.apps.iter().map(|a| a.name.clone()).collect();
                if !names.is_empty() {
                    let name = &names[app % names.len()];
                    let target = slot.map_or(name.clone(), |s| format!("{name}.{s}"));
                    let command = match kind {
                        CommandKind::Reload => Command::Reload { app: name.clone() },
                        CommandKind::Restart => Command::Restart { target },
                        CommandKind::Stop => Command::Stop { target },
                        CommandKind::Start => Command::Start { target },
                        CommandKind::Trigger => Command::Trigger { app: name.clone() },
                    };
                    self.command(command);
                }
            }
            Step::SetClock { forward, seconds } => {
                self.fake()
                    .set_wall_clock(forward, Duration::from_secs(seconds));
                self.handle(News::Timer);
            }
            Step::Stall { millis } => self.stall(millis)?,
            Step::FdRoom { starts } => {
                self.fake().start_room = starts;
                self.handle(News::Timer);
            }
            Step::Load { app, queue, cpu } => self.set_load(app, queue, cpu),
            Step::Edit(edit) => self.edit(edit),
            Step::InvalidEdit => self.handle(News::Config(Loaded {
                trigger: "the file changed".into(),
                load: Load::Invalid {
                    rendered: "ecosystem.yaml:1:1: error: simulated".into(),
                    summary: "1 error".into(),
                },
                identity: None,
                hash: None,
            })),
            Step::Sigterm => self.signal(News::Terminate),
            Step::Sigint => self.signal(News::Interrupt),
        }
        self.deliver();
        // A stop for a failed check, memory or a missed watchdog is a fault,
        // even when it comes with time passing; so is a program's own end.
        self.disruptive = !quiet
            || self.supervisor.core().broken() != broken_before
            || self.ended_on_their_own(began);
        self.check()
    }

    pub(super) fn signal(&mut self, event: News) {
        self.shutdown_turn = self.shutdown_at.is_none();
        if self.shutdown_at.is_none() {
            self.shutdown_at = Some(self.now());
        } else if matches!(event, News::Interrupt) {
            self.killed_all = true;
        }
        self.handle(event);
        self.shutdown_turn = false;
    }

    fn edit(&mut self, edit: Edit) {
        let mut apps = self.written.clone();
        match edit {
            Edit::Scale { app, instances } if !apps.is_empty() => {
                let index = app % apps.len();
                apps[index].instances = if apps[index].schedule.is_some() {
                    // Schedules run one instance.
                    instances.min(1)
                } else {
                    instances
                };
                if let Readiness::Probe(_) = apps[index].ready {
                    apps[index].ready = probe(instances);
                }
                // The file is checked again: probe targets for every slot.
                if let Some(health) = apps[index].health.as_mut()
                    && let (HealthCheck::Probe(_), Readiness::Probe(targets)) =
                        (&health.check, probe(instances))
                {
                    health.check = HealthCheck::Probe(targets);
                }
            }
            Edit::Env { app, value } if !apps.is_empty() => {
                let index = app % apps.len();
                apps[index].process.env =
                    vec![("VERSION".into(), Template::literal(value.to_string()))];
            }
            Edit::KillTimeout { app, millis } if !apps.is_empty() => {
                let index = app % apps.len();
                apps[index].kill_timeout = Duration::from_millis(millis.max(1));
                apps[index].log = (millis % 2 == 1).then(|| model::spec::LogSpec {
                    file: format!("/nonexistent/{}.log", apps[index].name),
                    max_size: millis,
                    keep: 1,
                    format: model::spec::LogFormat::Text,
                });
            }
            Edit::Add => {
                self.added += 1;
                let name = format!("added{}", self.added);
                apps.push(app(
                    &name,
                    1 + (self.added % 3) as u32,
                    Readiness::Immediate,
                ));
            }
            Edit::Remove { app } if !apps.is_empty() => {
                let index = app % apps.len();
                let removed = apps.remove(index);
                for other in &mut apps {
                    other.depends_on.retain(|d| d.app != removed.name);
                }
            }
            Edit::Depend {
                app,
                on,
                condition,
                replace,
            } if apps.len() > 1 => {
                let index = 1 + app % (apps.len() - 1);
                let other = &apps[on % index];
                if other.schedule.is_some() {
                    // Nothing can wait for a scheduled app.
                    return;
                }
                let condition = match condition {
                    Condition::Healthy if other.health.is_none() => Condition::Ready,
                    Condition::Completed if other.restart == RestartPolicy::Always => {
                        Condition::Ready
                    }
                    condition => condition,
                };
                let dependency = Dependency {
                    app: other.name.clone(),
                    condition,
                };
                let spec = &mut apps[index];
                spec.depends_on.retain(|d| d.app != dependency.app);
                spec.depends_on.push(dependency);
                spec.on_dependency_restart = if replace {
                    OnDependencyRestart::Restart
                } else {
                    OnDependencyRestart::Ignore
                };
            }
            Edit::Independent { app } if !apps.is_empty() => {
                let index = app % apps.len();
                if apps[index].depends_on.is_empty() {
                    return;
                }
                apps[index].depends_on.clear();
            }
            Edit::Reschedule {
                app,
                every_millis,
                overlap,
                run_on_start,
            } => {
                let scheduled: Vec<usize> = (0..apps.len())
                    .filter(|i| apps[*i].schedule.is_some())
                    .collect();
                if scheduled.is_empty() {
                    return;
                }
                let index = scheduled[app % scheduled.len()];
                apps[index].schedule = Some(ScheduleSpec {
                    when: When::Every(Duration::from_millis(every_millis).max(SHORTEST_EVERY)),
                    overlap,
                    run_on_start,
                });
            }
            Edit::Autoscale { app, min, max } if !apps.is_empty() => {
                let index = app % apps.len();
                if !crate::autoscaling::edit(&mut apps, index, min, max) {
                    return;
                }
            }
            _ => return,
        }
        self.apply(apps);
    }

    /// A process ended on its own since `since` (its command line said so).
    pub(super) fn ended_on_their_own(&self, since: std::time::Instant) -> bool {
        let now = self.now();
        self.supervisor
            .effects()
            .processes()
            .any(|p| p.ends.is_some_and(|(at, _)| at > since && at <= now))
    }
}
