//! Deterministic simulation of the real supervisor loop (FoundationDB and
//! TigerBeetle style): the real [`Supervisor`] over [`FakeEffects`], a clock
//! that only moves when told, and the invariants every state must satisfy.
//!
//! A [`World`] is driven by [`Step`]s — time passing, crashes, exec failures,
//! processes that ignore SIGTERM or drain slowly, readiness from probes and
//! the notify socket, control commands, edits of the file (valid or not) and
//! shutdown at any moment. A step names its target by an index taken modulo
//! what exists *then*, so any subsequence of a schedule is a valid schedule:
//! a failing one can be shrunk by dropping steps. After every step,
//! [`World::check`] checks the invariants:
//! - no worker is ready (or starting) without a live process behind it, and
//!   no worker waits in `Spawning` once an event is handled;
//! - no stop waits on a process that does not exist, and every live process
//!   belongs to a worker (nothing escapes the books);
//! - a rollout never has more than `N + max_surge` processes, and only a
//!   fault, a command, an edit or shutdown may take the ready count below
//!   `N − max_unavailable`;
//! - the core never refuses one of its own decisions (an anomaly).
//!
//! [`World::converges`] then lets time pass with healthy processes and checks
//! that the running system equals the file, and [`World::shuts_down`] that a
//! shutdown completes within the largest `kill_timeout` plus a bound.
//! `tests/simulation.rs` generates schedules from seeds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::control::Command;
use crate::core::Phase;
use crate::core::worker::{Exit, StartError, StartStage, State};
use crate::effects::Effects;
use crate::effects::fake::{Behaviour, FakeEffects, Life};
use crate::effects::notify::Notification;
use crate::effects::watch::{Load, Loaded};
use crate::spec::{
    AppSpec, Desired, Probe, ProbeKind, ProbeSpec, Readiness, ReloadLimits, Template,
};
use crate::supervisor::{Event, GROUP_POLL_INTERVAL, Supervisor};

/// The uid the simulated supervisor runs as.
pub const UID: u32 = 1000;
/// Time steps taken by one `advance` before it is called stuck (a liveness bug).
const MAX_TICKS: usize = 100_000;

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
    /// A control command on an app (or one instance).
    Command {
        kind: CommandKind,
        app: usize,
        slot: Option<u32>,
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
    /// A policy field: nothing restarts.
    KillTimeout {
        app: usize,
        millis: u64,
    },
    Add,
    Remove {
        app: usize,
    },
}

/// What an invariant found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

/// The simulated world: the real supervisor, its fake effects, the file.
pub struct World {
    pub supervisor: Supervisor<FakeEffects>,
    /// The file as the supervisor should be running it now.
    pub desired: Desired,
    /// The file's apps as written last, valid or not (edits build on it).
    written: Vec<AppSpec>,
    added: usize,
    /// Per app, the rollout being watched: (generation, instances, checked).
    rollouts: HashMap<String, (u64, u32, bool)>,
    /// Ready counts before the current step, per app.
    ready_before: HashMap<String, usize>,
    /// The last thing that may take workers away on purpose or by fault.
    disruptive: bool,
    pub shutdown_at: Option<Instant>,
    /// The steps taken, for a failure's report.
    pub trace: Vec<Step>,
}

/// An app for the simulation: `sleep`-like, small timeouts so simulated time
/// stays short, the readiness given.
pub fn app(name: &str, instances: u32, ready: Readiness) -> AppSpec {
    let mut spec = AppSpec::with_defaults(name, &["/bin/worker"], instances);
    spec.ready = match ready {
        Readiness::Probe(_) => probe(instances),
        other => other,
    };
    spec.ready_timeout = Duration::from_secs(3);
    spec.kill_timeout = Duration::from_secs(2);
    spec.backoff.max = Duration::from_secs(2);
    spec
}

/// A tcp probe on `127.0.0.1:{instance+9000}`, parsed for `instances` slots.
pub fn probe(instances: u32) -> Readiness {
    let written =
        Template::parse("127.0.0.1:{instance+9000}").unwrap_or_else(|_| Template::literal(""));
    Readiness::Probe(ProbeSpec {
        kind: ProbeKind::Tcp,
        targets: (0..instances.max(1))
            .map(|i| Probe::Tcp(([127, 0, 0, 1], 9000 + i as u16).into()))
            .collect(),
        written,
    })
}

impl World {
    /// A world running `apps`, started.
    pub fn new(apps: Vec<AppSpec>) -> World {
        let desired = Desired {
            source: "/sim/ecosystem.yaml".into(),
            apps: apps.clone(),
        };
        let fake = FakeEffects::new(Instant::now());
        let mut supervisor = Supervisor::new(&desired, "ecosystem.yaml", UID, fake);
        supervisor.start();
        let mut world = World {
            supervisor,
            desired,
            written: apps,
            added: 0,
            rollouts: HashMap::new(),
            ready_before: HashMap::new(),
            disruptive: false,
            shutdown_at: None,
            trace: Vec::new(),
        };
        world.deliver();
        world
    }

    pub fn now(&self) -> Instant {
        self.supervisor.effects().now()
    }

    /// What the fake effects did, in order.
    pub fn history(&self) -> &[String] {
        &self.supervisor.effects().history
    }

    pub fn fake(&mut self) -> &mut FakeEffects {
        self.supervisor.effects_mut()
    }

    /// Hand the supervisor what the fake world has for it now: exec
    /// statuses that are due, SIGCHLD for exited children.
    pub fn deliver(&mut self) {
        for _ in 0..MAX_TICKS {
            let reports = self.fake().due_exec_reports();
            if !reports.is_empty() {
                self.supervisor.handle_all(
                    reports
                        .into_iter()
                        .map(|(pid, status)| Event::ExecStatus { pid, status }),
                );
                continue;
            }
            if self.supervisor.effects().sigchld_pending() {
                let before = self.zombies();
                self.supervisor.handle(Event::ChildExited);
                if self.zombies() == before {
                    // Zombies the supervisor cannot reap yet (their exec status
                    // is still to come): nothing more now.
                    return;
                }
                continue;
            }
            return;
        }
        panic!("deliver: the world does not calm down");
    }

    fn zombies(&self) -> usize {
        self.supervisor
            .effects()
            .processes()
            .filter(|p| matches!(p.life, Life::Zombie(_)))
            .count()
    }

    /// Let `by` pass, stopping at every moment the supervisor or a process
    /// has something due.
    pub fn advance(&mut self, by: Duration) {
        let target = self.now() + by;
        for _ in 0..MAX_TICKS {
            self.deliver();
            let now = self.now();
            if self.supervisor.finished() {
                // The real loop has exited: time passes for the fake alone.
                self.fake().advance_to(target);
                return;
            }
            let wake = self.supervisor.next_wake();
            if wake <= now {
                self.supervisor.handle(Event::Timer);
                continue;
            }
            let next = self
                .supervisor
                .effects()
                .next_due()
                .filter(|t| *t > now)
                .map_or(wake, |t| t.min(wake));
            if next > target {
                self.fake().advance_to(target);
                self.deliver();
                return;
            }
            self.fake().advance_to(next);
            if next >= wake {
                // The loop's sleep until `wake` ended.
                self.deliver();
                self.supervisor.handle(Event::Timer);
            }
        }
        panic!("advance: no progress after {MAX_TICKS} steps: a busy loop");
    }

    /// Every probing process's probe succeeds and every notify process says
    /// READY=1.
    pub fn ready_everything(&mut self) {
        let probing: Vec<i32> = self.supervisor.effects().probing().collect();
        let probing: Vec<i32> = probing
            .into_iter()
            .filter(|pid| self.runs_program(*pid))
            .collect();
        if !probing.is_empty() {
            self.supervisor
                .handle_all(probing.into_iter().map(|pid| Event::ProbeSucceeded { pid }));
        }
        let notifying: Vec<i32> = self
            .supervisor
            .effects()
            .processes()
            .filter(|p| p.readiness == Readiness::Notify && p.runs_program())
            .map(|p| p.pid)
            .collect();
        for pid in notifying {
            self.notify(pid, UID);
        }
        self.deliver();
    }

    fn runs_program(&self, pid: i32) -> bool {
        self.supervisor
            .effects()
            .process(pid)
            .is_some_and(|p| p.runs_program())
    }

    /// Process `pid` sends `READY=1` as `uid`.
    pub fn notify(&mut self, pid: i32, uid: u32) {
        self.supervisor.handle(Event::Notified(Notification {
            sender_pid: pid,
            sender_uid: uid,
            sender_pgid: Some(pid),
            main_pid: None,
            ready: true,
            stopping: false,
            status: Some("serving".into()),
        }));
    }

    /// Apply a new version of the file (as the config loader would hand it).
    pub fn apply(&mut self, apps: Vec<AppSpec>) {
        self.written = apps.clone();
        let desired = Desired {
            source: self.desired.source.clone(),
            apps,
        };
        self.supervisor.handle(Event::Config(Loaded {
            trigger: "the file changed".into(),
            load: Load::Valid {
                desired: desired.clone(),
                diagnostics: String::new(),
            },
            identity: None,
        }));
        if self.supervisor.core().phase() == Phase::Running {
            self.desired = self.supervisor.core().desired().clone();
        }
    }

    /// A control command; its reply.
    pub fn command(&mut self, command: Command) -> serde_json::Value {
        self.supervisor.control(command)
    }

    /// The live processes (running or stopping), by pid.
    pub fn live(&self) -> Vec<i32> {
        self.supervisor
            .effects()
            .processes()
            .filter(|p| p.is_alive())
            .map(|p| p.pid)
            .collect()
    }

    /// `(slot, generation, state)` of an app's workers, sorted.
    pub fn slots(&self, app: &str) -> Vec<(u32, u64, &'static str)> {
        let mut slots: Vec<_> = self
            .supervisor
            .core()
            .app(app)
            .map(|a| {
                a.workers
                    .values()
                    .map(|w| (w.slot, w.generation, w.state.name()))
                    .collect()
            })
            .unwrap_or_default();
        slots.sort();
        slots
    }

    /// The pids of an app's workers, sorted.
    pub fn pids(&self, app: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .supervisor
            .core()
            .app(app)
            .map(|a| a.workers.values().filter_map(|w| w.state.pid()).collect())
            .unwrap_or_default();
        pids.sort();
        pids
    }

    /// Take one step of a schedule, then check the invariants.
    pub fn step(&mut self, step: Step) -> Result<(), Violation> {
        self.trace.push(step.clone());
        self.ready_before = self.ready_counts();
        self.disruptive = !matches!(
            step,
            Step::Wait(_) | Step::Probe { .. } | Step::Notify { .. } | Step::Plan(_)
        );
        match step {
            Step::Wait(millis) => self.advance(Duration::from_millis(millis)),
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
                    self.supervisor.handle(Event::ProbeSucceeded { pid });
                }
            }
            Step::Notify { process, foreign } => {
                let live = self.live();
                if !live.is_empty() {
                    let pid = live[process % live.len()];
                    self.notify(pid, if foreign { UID + 1 } else { UID });
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
                    };
                    self.command(command);
                }
            }
            Step::Edit(edit) => self.edit(edit),
            Step::InvalidEdit => self.supervisor.handle(Event::Config(Loaded {
                trigger: "the file changed".into(),
                load: Load::Invalid {
                    rendered: "ecosystem.yaml:1:1: error: simulated".into(),
                    summary: "1 error".into(),
                },
                identity: None,
            })),
            Step::Sigterm => self.signal(Event::Terminate),
            Step::Sigint => self.signal(Event::Interrupt),
        }
        self.deliver();
        self.check()
    }

    fn signal(&mut self, event: Event) {
        if self.shutdown_at.is_none() {
            self.shutdown_at = Some(self.now());
        }
        self.supervisor.handle(event);
    }

    fn edit(&mut self, edit: Edit) {
        let mut apps = self.written.clone();
        match edit {
            Edit::Scale { app, instances } if !apps.is_empty() => {
                let index = app % apps.len();
                apps[index].instances = instances;
                if let Readiness::Probe(_) = apps[index].ready {
                    apps[index].ready = probe(instances);
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
                apps.remove(index);
            }
            _ => return,
        }
        self.apply(apps);
    }

    /// Ready workers in wanted slots, per app.
    fn ready_counts(&self) -> HashMap<String, usize> {
        self.supervisor
            .core()
            .apps()
            .map(|a| {
                let ready = a
                    .workers
                    .values()
                    .filter(|w| w.state.is_ready() && w.slot < a.spec.instances)
                    .count();
                (a.spec.name.clone(), ready)
            })
            .collect()
    }

    /// The invariants of every state.
    pub fn check(&mut self) -> Result<(), Violation> {
        let fail = |what: String| Err(Violation(what));
        let core = self.supervisor.core();
        let fake = self.supervisor.effects();
        if core.anomalies() > 0 {
            return fail(format!("{} anomalies in the core", core.anomalies()));
        }
        for app in core.apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                let label = format!(
                    "{name}.{} (worker {}, gen {})",
                    worker.slot, worker.id, worker.generation
                );
                match &worker.state {
                    State::Spawning => {
                        return fail(format!("{label} is still spawning after an event"));
                    }
                    State::Starting { pid, .. } | State::Ready { pid, .. } => {
                        let Some(process) = fake.process(*pid) else {
                            return fail(format!("{label}: pid {pid} was never spawned"));
                        };
                        if process.life == Life::Reaped {
                            return fail(format!(
                                "{label} is {} with pid {pid}, which was reaped",
                                worker.state.name()
                            ));
                        }
                        if worker.state.is_ready() && process.is_alive() && !process.runs_program()
                        {
                            return fail(format!(
                                "{label} is ready but pid {pid} never ran the program"
                            ));
                        }
                    }
                    State::Stopping {
                        pid, leader_exit, ..
                    } => {
                        let exists = fake.process(*pid).is_some_and(|p| p.life != Life::Reaped);
                        if leader_exit.is_none() && !exists {
                            return fail(format!(
                                "{label} waits for pid {pid}, which no longer exists"
                            ));
                        }
                        if leader_exit.is_some() && !core.draining_groups().any(|g| g == *pid) {
                            return fail(format!(
                                "{label}: its leader is reaped but nobody watches its group"
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        for process in fake.processes() {
            if process.life != Life::Reaped && core.worker_of(process.pid).is_none() {
                return fail(format!(
                    "pid {} ({}.{}) is {:?} but no worker stands for it",
                    process.pid, process.app, process.slot, process.life
                ));
            }
        }
        self.check_rollouts()
    }

    /// `N + max_surge` processes at most during a rollout, and the ready
    /// count kept above `N − max_unavailable` by everything but faults,
    /// commands, edits and shutdown.
    fn check_rollouts(&mut self) -> Result<(), Violation> {
        let shutting_down = self.supervisor.core().phase() == Phase::ShuttingDown;
        let ready_now = self.ready_counts();
        let mut watched = HashMap::new();
        for app in self.supervisor.core().apps() {
            let name = app.spec.name.clone();
            let n = app.spec.instances;
            let processes = app
                .workers
                .values()
                .filter(|w| w.state.pid().is_some() || w.state == State::Spawning)
                .count();
            let ReloadLimits {
                max_surge,
                max_unavailable,
            } = app.spec.reload;
            let entry = match self.rollouts.get(&name) {
                Some(&(generation, instances, checked)) if generation == app.generation => {
                    (generation, instances, checked && instances == n)
                }
                // A new generation: watch it if nothing else is draining.
                _ => (app.generation, n, processes <= n as usize && !app.recreate),
            };
            let rolling = app.outdated() > 0 && !app.removed && !shutting_down;
            if rolling && entry.2 {
                if processes > (n + max_surge) as usize {
                    return Err(Violation(format!(
                        "{name}: {processes} processes during a rollout, more than {n} + max_surge {max_surge}"
                    )));
                }
                let floor = (n as usize).saturating_sub(max_unavailable as usize);
                let before = self.ready_before.get(&name).copied().unwrap_or(0);
                let after = ready_now.get(&name).copied().unwrap_or(0);
                if !self.disruptive && before >= floor && after < floor {
                    return Err(Violation(format!(
                        "{name}: ready went from {before} to {after} during a rollout, below {n} - max_unavailable {max_unavailable}, with no fault"
                    )));
                }
            }
            watched.insert(name, entry);
        }
        self.rollouts = watched;
        Ok(())
    }

    /// With healthy processes and no more faults, the running system equals
    /// the file: every wanted slot has one ready worker of the current
    /// generation (unless it failed, exited, is held, or its rollout halted),
    /// and nothing runs beyond.
    pub fn converges(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_some() {
            return Ok(());
        }
        self.fake().spawn_failure = None;
        self.fake().plans.clear();
        for _ in 0..40 {
            self.advance(Duration::from_millis(500));
            self.ready_everything();
            self.check()?;
        }
        for app in self.supervisor.core().apps() {
            let name = &app.spec.name;
            for worker in app.workers.values() {
                if worker.slot >= app.spec.instances {
                    return Err(Violation(format!(
                        "{name}.{} runs beyond {} instances",
                        worker.slot, app.spec.instances
                    )));
                }
                let settled = matches!(
                    worker.state,
                    State::Ready { .. } | State::Failed | State::Exited | State::Held
                );
                if !settled {
                    return Err(Violation(format!(
                        "{name}.{} is {} after the quiet time",
                        worker.slot,
                        worker.state.name()
                    )));
                }
                if worker.generation != app.generation
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
                let count = app.workers.values().filter(|w| w.slot == slot).count();
                if count != 1 {
                    return Err(Violation(format!(
                        "{name}.{slot} has {count} workers after the quiet time"
                    )));
                }
            }
        }
        if self.supervisor.core().apps().count() != self.desired.apps.len() {
            return Err(Violation(
                "apps differ from the file after the quiet time".into(),
            ));
        }
        Ok(())
    }

    /// SIGTERM (if none came yet) and check that everything stops within the
    /// largest `kill_timeout` plus a bound, leaving no process.
    pub fn shuts_down(&mut self) -> Result<(), Violation> {
        if self.shutdown_at.is_none() {
            self.signal(Event::Terminate);
        }
        let started = self.shutdown_at.unwrap_or_else(|| self.now());
        let longest = self
            .supervisor
            .core()
            .apps()
            .map(|a| a.spec.kill_timeout)
            .chain(self.desired.apps.iter().map(|a| a.kill_timeout))
            .max()
            .unwrap_or_default();
        let bound = longest + 3 * GROUP_POLL_INTERVAL;
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
