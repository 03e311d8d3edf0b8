//! The pure core: every change to a worker is an [`Input`] here, and the core
//! answers with [`Action`]s for the shell to carry out. Nothing else mutates a
//! worker.
//!
//! The core owns the state of every app and worker. It never reads a clock
//! (time comes with each call), never touches a process, a file or a socket.
//! Inputs are facts: a process was spawned or could not be; it exited; its
//! group is empty; it ran the program; it is ready; it said something on the
//! notify socket; a new version of the file was checked; a command arrived;
//! shutdown began; time passed. Each changes at most a few workers through
//! their state machine ([`worker`]), marks their app *dirty*, and
//! [`Core::converge`] then reconciles every dirty app ([`reconcile`]) until
//! none is left, applying the steps it decides and emitting the actions they
//! need (spawn, signal a group, report).
//!
//! Spawning is the one action whose result matters to the next decision; the
//! worker waits in `Spawning` until the shell feeds back [`Input::Spawned`]
//! or [`Input::SpawnFailed`], which it always does before the next event.

mod app;
pub mod apply;
pub mod commands;
pub mod dependencies;
pub mod event;
mod liveness;
pub mod process;
pub mod reconcile;
pub mod resume;
pub mod schedule;
mod shutdown;
mod startup;
pub mod worker;

pub use app::App;
pub use resume::STATE_VERSION;

use std::collections::{BTreeMap, BTreeSet};

use std::time::{Duration, Instant};
/// Rounds of looking at gates and reconciling within one convergence (a bug
/// guard: a chain of dependencies opens one gate per round).
pub const MAX_GATE_ROUNDS: usize = 256;

use indexmap::IndexMap;
use model::Signal;

pub use event::{Event, Instance, ReadyVia};
use model::orders::{CheckOrder, SpawnOrder, WatchdogMessage, WorkerId};
use model::process::{Exit, StartError};
use reconcile::{Plan, Step, StopReason, Target};
use worker::{AfterStop, Refused, Worker};

use model::spec::{Desired, Readiness, SocketKey};

/// The guard: every app is reconciled at least this often.
pub const FULL_PASS_INTERVAL: Duration = Duration::from_secs(10);
/// How long after its start a program of an app with `inject` has to bind
/// its port before an instance ready without the preload library's report
/// is said to be unreached (`not_injected`).
pub const INJECT_GRACE: Duration = Duration::from_secs(10);
/// Reconcile passes for one app within one convergence (a bug guard: a
/// healthy app settles in a handful).
pub const MAX_PASSES: usize = 64;
/// How soon an app that did not settle within [`MAX_PASSES`] is looked at again.
const UNSETTLED_RETRY: Duration = Duration::from_millis(50);
/// A memory measurement not answered within this is taken as lost, and
/// another is ordered (a bug guard: the blocking thread answers in
/// milliseconds).
pub const MEMORY_ANSWER_LOST: Duration = Duration::from_secs(60);
/// Processes started per turn of the loop ([`Core::begin_turn`]). A spawn
/// takes about a millisecond: a scale-up of thousands goes on in turns of
/// this many, and signals, control requests and exits are handled between
/// them instead of waiting seconds for the whole batch.
pub const SPAWNS_PER_TURN: usize = 64;

/// An input to the core: a fact about a process, a user's wish, or time.
#[derive(Debug, Clone)]
pub enum Input {
    /// The process of worker `id` exists (the answer to [`Action::Spawn`]).
    Spawned { app: String, id: WorkerId, pid: i32 },
    /// No process could be created for worker `id`.
    SpawnFailed {
        app: String,
        id: WorkerId,
        error: StartError,
        detail: String,
    },
    /// `exec` succeeded in process `pid`: the program runs.
    ExecSucceeded { pid: i32 },
    /// Process `pid` was reaped. `start_error` when it never ran the program.
    Exited {
        pid: i32,
        exit: Exit,
        start_error: Option<StartError>,
    },
    /// The process group `pgid` of a stopping worker has no member left.
    GroupEmpty { pgid: i32 },
    /// A readiness probe of process `pid` succeeded.
    ProbeSucceeded { pid: i32 },
    /// A notify datagram, attributed to the worker whose leader is `leader`.
    Notified {
        leader: i32,
        uid: u32,
        ready: bool,
        status: Option<String>,
        watchdog: Option<WatchdogMessage>,
        /// `EXTEND_TIMEOUT_USEC=`.
        extend_timeout: Option<Duration>,
        /// `SUPERVISE_INJECTED=`: the preload library handed over a socket.
        injected: bool,
    },
    /// The answer to liveness check number `check` of the worker whose
    /// leader is `pid` (the answer to [`Action::Check`]).
    Checked {
        pid: i32,
        check: u64,
        passed: bool,
        /// Why it failed (`HTTP 500`, `exit code 1`, `timed out`).
        detail: String,
    },
    /// The memory of instances, `(leader pid, bytes)` (the answer to
    /// [`Action::MeasureMemory`] number `round`).
    MemoryMeasured { round: u64, usage: Vec<(i32, u64)> },
    /// A new, valid version of the file. The sockets it adds are bound
    /// first ([`Action::Bind`], each answered by [`Input::Bound`]); an app
    /// whose sockets could not be bound keeps its last good version.
    Apply { desired: Desired, trigger: String },
    /// The answer to [`Action::Bind`]: `error` says why the socket of `app`
    /// could not be bound.
    Bound {
        app: String,
        key: SocketKey,
        error: Option<String>,
    },
    /// SIGINT or SIGTERM: stop everything, then exit.
    Shutdown { why: &'static str },
    /// A second SIGINT: SIGKILL everything now.
    KillAll,
    /// The supervisor did not run for `by` past the time it asked to be
    /// woken at (it was stopped, its machine paused, or it was starved):
    /// what workers sent meanwhile may not be in yet, so every deadline
    /// that judges a worker moves by that much. Stops keep theirs: the
    /// processes had the time.
    Stalled { by: Duration },
    /// Time passed: deadlines may be due.
    Tick,
}

/// What the core asks the shell to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Start a process for a worker; answer with `Spawned` or `SpawnFailed`.
    Spawn(SpawnOrder),
    /// Send a signal to a process group.
    Signal { pgid: i32, signal: Signal },
    /// The leader of group `pgid` is gone: SIGKILL what is left of its group
    /// (when `kill_leftovers`), then forget the group (the undertaker too).
    ReleaseGroup {
        pgid: i32,
        kill_leftovers: bool,
        instance: Instance,
    },
    /// Stop the readiness probe of process `pid`, if one runs.
    CancelProbe { pid: i32 },
    /// Run a liveness check; answer with [`Input::Checked`].
    Check(CheckOrder),
    /// Stop the liveness check of the worker led by `pid`, if one runs
    /// (an `exec` check's process group is killed).
    CancelCheck { pid: i32 },
    /// Measure the memory of the instances led by `pids`; answer with
    /// [`Input::MemoryMeasured`] with the same `round`.
    MeasureMemory { round: u64, pids: Vec<i32> },
    /// `max_memory` was edited: the hard ceiling of the running instance
    /// led by `pgid` is now `bytes` (`None`: no ceiling), as a new one's
    /// [`SpawnOrder::memory_max`].
    LimitMemory { pgid: i32, bytes: Option<u64> },
    /// Sockets may be unwanted now: close those no app needs
    /// ([`Core::wanted_sockets`]).
    SweepSockets,
    /// Bind (or find) a listening socket a new version of the file needs
    /// before it applies; answer with [`Input::Bound`] at once.
    Bind { app: String, key: SocketKey },
    /// A version of the file was applied: each app's output goes to the log
    /// file its `log` names from now on (a change restarts nothing).
    RouteOutput,
    /// Tell systemd (when it supervises us): `READY=1`, `STOPPING=1` …
    Systemd(&'static str),
    /// No worker stands for this slot (or, `None`, this app) any more: its
    /// kept output can go.
    ForgetOutput { app: String, slot: Option<u32> },
    /// Log what happened.
    Report(Event),
}

/// What one notify datagram said (the fields of [`Input::Notified`] the
/// worker acts on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub ready: bool,
    pub status: Option<String>,
    pub watchdog: Option<WatchdogMessage>,
    pub extend_timeout: Option<Duration>,
    pub injected: bool,
}

/// Where the supervisor is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    Running,
    /// Stopping everything (SIGINT/SIGTERM); done when no worker is left.
    ShuttingDown,
}

/// How a stop is sent, beyond the app's `stop_signal`.
#[derive(Debug, Clone, Copy, Default)]
struct StopHow {
    /// For commands: which one (for the log).
    command: Option<&'static str>,
    /// Instead of `stop_signal` (a missed watchdog sends `watchdog_signal`).
    signal: Option<Signal>,
}

/// The state of every app and worker, and the rules that change it.
///
/// It serializes whole (a re-exec hands it to the new image; instants go
/// as CLOCK_MONOTONIC nanoseconds, [`model::monotonic`]); the restored core
/// is [`Core::resumed`] before use.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Core {
    apps: IndexMap<String, App>,
    /// Leader pid → (app, worker), for every worker with a process.
    pids: BTreeMap<i32, (String, WorkerId)>,
    /// Leaders of stopping workers that were reaped while their group was not
    /// yet empty: the shell reports when each group empties.
    draining: BTreeSet<i32>,
    next_worker: WorkerId,
    phase: Phase,
    /// The last good version of the file, as applied.
    desired: Desired,
    /// Counts the applied versions of the file.
    file_version: u64,
    all_ready_reported: bool,
    /// `READY=1` was told to systemd (see [`startup`]). A state handed over
    /// without it is of an image that told it with `all_ready`: `resumed`
    /// takes it from there.
    #[serde(default)]
    started_reported: bool,
    /// The supervisor's effective uid (a notify sender must be the worker's or root).
    own_uid: u32,
    #[serde(with = "model::monotonic::instant")]
    last_full_pass: Instant,
    /// Decisions of the core that a worker refused: bugs, counted for tests.
    anomalies: u64,
    /// Instances found broken while running: unhealthy, over `max_memory`,
    /// silent past their watchdog.
    broken: u64,
    /// Not kept across a re-exec: the shell takes and carries out every
    /// action before the core is handed over, so it is empty then.
    #[serde(skip)]
    outbox: Vec<Action>,
    /// Starts left in this turn of the loop. Not kept across a re-exec: a
    /// turn does not outlive its image, and the new one begins afresh.
    #[serde(skip, default = "spawns_per_turn")]
    spawn_budget: usize,
    /// When the memory of instances with `max_memory` is measured next.
    #[serde(with = "model::monotonic::instant")]
    memory_due: Instant,
    /// The measurement out, not answered yet (its round, since when): never
    /// two at once, and the answer of one given up as lost is not taken.
    #[serde(with = "model::monotonic::option_pair")]
    measuring: Option<(u64, Instant)>,
    /// Counts the memory measurements ordered.
    memory_rounds: u64,
    /// The wall clock and the instant it was read at (cron schedules).
    #[serde(with = "model::monotonic::wall_pair")]
    wall_clock: (std::time::SystemTime, Instant),
    /// A version of the file whose sockets are being bound. Not kept across
    /// a re-exec: the binds are answered within the event that asked.
    #[serde(skip)]
    binding: Option<apply::Binding>,
    /// `wall_clock` is a reading (not the placeholder of a new core): the
    /// next one is compared with it for a step of the clock. Absent from an
    /// older image's state: its first reading here is taken as it is.
    #[serde(default)]
    wall_clock_read: bool,
}

/// A new turn's budget of starts (the default of a restored core).
fn spawns_per_turn() -> usize {
    SPAWNS_PER_TURN
}

impl Core {
    /// The core for the first version of the file (whose sockets are bound).
    pub fn new(desired: &Desired, own_uid: u32, now: Instant) -> Core {
        let apps = desired
            .apps
            .iter()
            .map(|spec| (spec.name.clone(), App::new(spec)))
            .collect();
        Core {
            apps,
            pids: BTreeMap::new(),
            draining: BTreeSet::new(),
            next_worker: 1,
            phase: Phase::Running,
            desired: desired.clone(),
            file_version: 1,
            all_ready_reported: false,
            started_reported: false,
            own_uid,
            last_full_pass: now,
            anomalies: 0,
            broken: 0,
            outbox: Vec::new(),
            spawn_budget: SPAWNS_PER_TURN,
            memory_due: now + desired.memory_check,
            measuring: None,
            memory_rounds: 0,
            wall_clock: (std::time::UNIX_EPOCH, now),
            binding: None,
            wall_clock_read: false,
        }
    }

    /// A new turn of the loop: [`SPAWNS_PER_TURN`] more starts may be decided.
    pub fn begin_turn(&mut self) {
        self.spawn_budget = SPAWNS_PER_TURN;
    }

    pub fn apps(&self) -> impl Iterator<Item = &App> {
        self.apps.values()
    }

    pub fn app(&self, name: &str) -> Option<&App> {
        self.apps.get(name)
    }

    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    pub fn file_version(&self) -> u64 {
        self.file_version
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn anomalies(&self) -> u64 {
        self.anomalies
    }

    /// How many times an instance was found broken while it ran (unhealthy,
    /// over `max_memory`, its watchdog missed).
    pub fn broken(&self) -> u64 {
        self.broken
    }

    /// The worker whose process leads group `pid`, if any.
    pub fn worker_of(&self, pid: i32) -> Option<(&App, &Worker)> {
        let (app, id) = self.pids.get(&pid)?;
        let app = self.apps.get(app)?;
        Some((app, app.workers.get(id)?))
    }

    /// Process groups whose leader is reaped but whose stop waits for the
    /// rest of the group.
    pub fn draining_groups(&self) -> impl Iterator<Item = i32> + '_ {
        self.draining.iter().copied()
    }

    /// Shut down and nothing left to stop.
    pub fn finished(&self) -> bool {
        self.phase == Phase::ShuttingDown && self.apps.values().all(|a| a.workers.is_empty())
    }

    /// When the core wants a [`Input::Tick`] at the latest.
    pub fn next_wake(&self) -> Instant {
        let memory = self.memory_wake();
        let runs = self
            .apps
            .values()
            .filter_map(|a| a.runs.as_ref().and_then(|r| r.next_at));
        self.apps
            .values()
            .filter_map(|a| a.wake_at)
            .chain(runs)
            .chain(memory)
            .fold(self.last_full_pass + FULL_PASS_INTERVAL, Instant::min)
    }

    /// The actions decided since the last call.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.outbox)
    }

    /// Whether an app still needs reconciling.
    pub fn unsettled(&self) -> bool {
        self.apps.values().any(|a| a.dirty)
    }

    fn emit(&mut self, action: Action) {
        self.outbox.push(action);
    }

    fn report(&mut self, event: Event) {
        self.outbox.push(Action::Report(event));
    }

    /// An input a worker did not accept: late or duplicate news, a no-op.
    fn ignored(&mut self, refused: Refused) {
        self.report(Event::Ignored(refused));
    }

    /// A decision of our own that a worker refused: a bug, never a panic.
    fn anomaly(&mut self, what: String) {
        self.anomalies += 1;
        self.report(Event::Anomaly(what));
    }

    /// Take in one input. Call [`Core::converge`] after a batch of them.
    pub fn input(&mut self, input: Input, now: Instant) {
        match input {
            Input::Spawned { app, id, pid } => self.spawned(&app, id, pid, now),
            Input::SpawnFailed {
                app,
                id,
                error,
                detail,
            } => self.spawn_failed(&app, id, error, detail, now),
            Input::ExecSucceeded { pid } => self.exec_succeeded(pid),
            Input::Exited {
                pid,
                exit,
                start_error,
            } => self.exited(pid, exit, start_error, now),
            Input::GroupEmpty { pgid } => self.group_empty(pgid, now),
            Input::ProbeSucceeded { pid } => self.ready(pid, ReadyVia::Probe, now),
            Input::Notified {
                leader,
                uid,
                ready,
                status,
                watchdog,
                extend_timeout,
                injected,
            } => self.notified(
                leader,
                uid,
                Notice {
                    ready,
                    status,
                    watchdog,
                    extend_timeout,
                    injected,
                },
                now,
            ),
            Input::Checked {
                pid,
                check,
                passed,
                detail,
            } => self.checked(pid, check, passed, detail, now),
            Input::MemoryMeasured { round, usage } => self.memory_measured(round, usage, now),
            Input::Apply { desired, trigger } => self.bind_then_apply(desired, trigger),
            Input::Bound { app, key, error } => self.bound(app, key, error),
            Input::Shutdown { why } => self.shutdown(why),
            Input::KillAll => self.kill_all(now),
            Input::Stalled { by } => self.stalled(by),
            Input::Tick => self.tick(now),
        }
    }

    /// Time passed: the apps whose deadlines are due (or all, every
    /// [`FULL_PASS_INTERVAL`]) are looked at again.
    fn tick(&mut self, now: Instant) {
        let full = now >= self.last_full_pass + FULL_PASS_INTERVAL;
        if full {
            self.last_full_pass = now;
        }
        for app in self.apps.values_mut() {
            if full || app.wake_at.is_some_and(|at| at <= now) {
                app.dirty = true;
            }
        }
        self.measure_memory(now);
    }

    /// Reconcile every dirty app until it has nothing left to do, applying
    /// the steps (the actions they need go to the outbox), and look at the
    /// gates of dependencies and schedules after each round: what one app
    /// did may let another start.
    pub fn converge(&mut self, now: Instant) {
        for round in 1.. {
            self.update_gates(now);
            if !self.unsettled() {
                break;
            }
            if round > MAX_GATE_ROUNDS {
                self.anomaly(format!(
                    "gates did not settle after {MAX_GATE_ROUNDS} rounds"
                ));
                break;
            }
            self.reconcile_dirty(now);
        }
        let gone: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, app)| app.removed && app.workers.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            self.apps.shift_remove(&name);
            self.emit(Action::ForgetOutput {
                app: name,
                slot: None,
            });
            self.emit(Action::SweepSockets);
        }
        self.maybe_started();
    }

    /// Reconcile every dirty app until it has nothing left to do, applying
    /// the steps; an app's dependencies first.
    fn reconcile_dirty(&mut self, now: Instant) {
        let dirty: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| a.dirty)
            .map(|(n, _)| n.clone())
            .collect();
        for name in dirty {
            self.reconcile_after_dependencies(&name, now, &mut Vec::new());
        }
    }

    /// Reconcile `name` if it is dirty, once its dependencies are up to
    /// date: a dependency whose own gate changes now (replaced under
    /// `on_dependency_restart`, say) acts first, so what it stops counts
    /// for `name`'s gate before `name` starts anything. `path`: the apps
    /// on the way here (a cycle, which `check` refuses, ends the walk).
    fn reconcile_after_dependencies(&mut self, name: &str, now: Instant, path: &mut Vec<String>) {
        if path.iter().any(|on_the_way| on_the_way == name) {
            return;
        }
        let dependencies: Vec<String> = self.apps.get(name).map_or_else(Vec::new, |app| {
            app.spec.depends_on.iter().map(|d| d.app.clone()).collect()
        });
        path.push(name.to_string());
        for dependency in &dependencies {
            if self
                .apps
                .get(dependency)
                .is_some_and(|a| !a.spec.depends_on.is_empty())
            {
                self.update_gate(dependency);
            }
            if self.apps.get(dependency).is_some_and(|a| a.dirty) {
                self.reconcile_after_dependencies(dependency, now, path);
            }
        }
        path.pop();
        if self.apps.get(name).is_some_and(|a| a.dirty) {
            self.reconcile_app(name, now);
        }
    }

    /// Reconcile app `name` until it has nothing left to do, applying the
    /// steps.
    fn reconcile_app(&mut self, name: &str, now: Instant) {
        let name = name.to_string();
        for pass in 1.. {
            // What an app reconciled before in this round did (a
            // dependency stopping an instance) counts now.
            if self
                .apps
                .get(&name)
                .is_some_and(|a| !a.spec.depends_on.is_empty())
            {
                self.update_gate(&name);
            }
            let Some(app) = self.apps.get(&name) else {
                break;
            };
            let may_start = self.may_start(app);
            let Some(app) = self.apps.get_mut(&name) else {
                break;
            };
            app.dirty = false;
            let target = Target {
                spec: &app.spec,
                generation: app.generation,
                rollout_halted: app.rollout_halted,
                recreate: app.recreate,
                winding_down: app.winding_down,
                may_start,
                holding: self.phase == Phase::ShuttingDown && !app.winding_down,
                held: &app.held,
            };
            let Plan { mut steps, wake_at } = reconcile::reconcile(target, &app.workers, now);
            // Starts beyond this turn's budget wait for the next turn,
            // due at once.
            let before = steps.len();
            steps.retain(|step| match step {
                Step::Start { .. } if self.spawn_budget == 0 => false,
                Step::Start { .. } => {
                    self.spawn_budget -= 1;
                    true
                }
                _ => true,
            });
            let deferred = steps.len() < before;
            if steps.is_empty() {
                app.wake_at = if deferred { Some(now) } else { wake_at };
                self.report(Event::Reconciled {
                    app: name.clone(),
                    passes: pass,
                });
                break;
            }
            if pass >= MAX_PASSES {
                app.wake_at = Some(now + UNSETTLED_RETRY);
                self.anomaly(format!(
                    "{name}: reconcile did not settle after {MAX_PASSES} passes: {steps:?}"
                ));
                break;
            }
            app.dirty = true;
            for step in steps {
                self.step(&name, step, now);
            }
        }
    }

    /// Carry out one step of a plan.
    fn step(&mut self, name: &str, step: Step, now: Instant) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        match step {
            Step::Create { slot, generation } => {
                let id = self.next_worker;
                self.next_worker += 1;
                // Taking the place of a recycled worker, it carries on its
                // restart count and waits for its backoff.
                let recycled = app
                    .workers
                    .values()
                    .rfind(|w| w.slot == slot && w.recycle.is_some());
                let worker = match recycled {
                    Some(old) => Worker::replacing(id, generation, old, now),
                    None => Worker::new(id, slot, generation),
                };
                app.workers.insert(id, worker);
            }
            Step::Start { id } => {
                let Some(worker) = app.workers.get_mut(&id) else {
                    return self.anomaly(format!("{name}: start of unknown worker {id}"));
                };
                if let Err(refused) = worker.begin_start() {
                    return self.anomaly(refused.to_string());
                }
                let Some(definition) = app.definitions.get(&worker.generation).cloned() else {
                    let error =
                        format!("{name}: no definition for generation {}", worker.generation);
                    return self.anomaly(error);
                };
                let order = SpawnOrder {
                    app: name.to_string(),
                    id,
                    slot: worker.slot,
                    generation: worker.generation,
                    definition,
                    readiness: app.spec.ready.clone(),
                    memory_max: app.spec.max_memory.map(model::limits::memory_ceiling),
                };
                self.emit(Action::Spawn(order));
            }
            Step::MarkReady { id } => {
                let via = match app.spec.ready {
                    Readiness::Immediate => ReadyVia::Exec,
                    _ => ReadyVia::Delay,
                };
                let Some(pid) = app.workers.get(&id).and_then(|w| w.state.pid()) else {
                    return self.anomaly(format!("{name}: ready without a process"));
                };
                self.ready(pid, via, now);
            }
            Step::Stop { id, reason, then } => {
                self.stop(name, id, reason, StopHow::default(), then, now)
            }
            Step::Check { id } => self.check(name, id, now),
            Step::CheckTimedOut { id } => self.check_timed_out(name, id, now),
            Step::WatchdogMissed { id } => self.watchdog_missed(name, id, false, now),
            Step::InjectUnseen { id } => self.inject_unseen(name, id),
            Step::Kill { id } => {
                let kill_timeout = app.spec.kill_timeout;
                let Some(worker) = app.workers.get_mut(&id) else {
                    return;
                };
                let Some(pid) = worker.state.pid() else {
                    return;
                };
                if let Err(refused) = worker.killed() {
                    return self.anomaly(refused.to_string());
                }
                let instance = Instance::of(&app.spec.name, worker);
                self.emit(Action::Signal {
                    pgid: pid,
                    signal: Signal::SIGKILL,
                });
                self.report(Event::Killing {
                    instance,
                    pid,
                    kill_timeout,
                });
            }
            Step::Hold { id } => {
                let Some(worker) = app.workers.get_mut(&id) else {
                    return self.anomaly(format!("{name}: hold of unknown worker {id}"));
                };
                if let Err(refused) = worker.hold() {
                    self.anomaly(refused.to_string());
                }
            }
            Step::Remove { id } => {
                if app
                    .workers
                    .get(&id)
                    .is_some_and(|w| w.state.pid().is_some())
                {
                    return self.anomaly(format!("{name}: remove of worker {id} with a process"));
                }
                app.workers.remove(&id);
                app.prune_definitions();
                self.emit(Action::SweepSockets);
            }
            Step::HaltRollout { generation, slot } => {
                app.rollout_halted = true;
                let instance = Instance {
                    app: name.to_string(),
                    slot,
                    generation,
                };
                self.report(Event::RolloutHalted { instance });
            }
        }
    }

    /// Stop worker `id`'s process: the stop signal now, SIGKILL at
    /// `kill_timeout`, `then` once its group is empty.
    fn stop(
        &mut self,
        name: &str,
        id: WorkerId,
        reason: StopReason,
        how: StopHow,
        then: AfterStop,
        now: Instant,
    ) {
        let Some(app) = self.apps.get_mut(name) else {
            return;
        };
        let signal = how.signal.unwrap_or(app.spec.stop_signal);
        let (command, kill_timeout) = (how.command, app.spec.kill_timeout);
        let Some(worker) = app.workers.get_mut(&id) else {
            return;
        };
        let (Some(pid), Some(started)) = (worker.state.pid(), worker.state.started()) else {
            return self.anomaly(format!("{name}: stop of worker {id} without a process"));
        };
        if let Err(refused) = worker.stop(now, kill_timeout, then) {
            return self.anomaly(refused.to_string());
        }
        let instance = Instance::of(&app.spec.name, worker);
        app.dirty = true;
        self.emit(Action::CancelProbe { pid });
        self.emit(Action::CancelCheck { pid });
        self.emit(Action::Signal { pgid: pid, signal });
        self.report(Event::Stopping {
            instance,
            pid,
            reason,
            command,
            signal,
            uptime: now.saturating_duration_since(started),
        });
    }

    /// A worker of `slot` was forgotten: when no other stands for that slot
    /// and it is not wanted, its output goes too.
    fn slot_left(&mut self, name: &str, slot: u32) {
        let Some(app) = self.apps.get(name) else {
            return;
        };
        let unwanted = app.removed || slot >= app.spec.instances;
        if unwanted && !app.workers.values().any(|w| w.slot == slot) {
            self.emit(Action::ForgetOutput {
                app: name.to_string(),
                slot: Some(slot),
            });
        }
    }
}

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;
