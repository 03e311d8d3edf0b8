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
pub mod autoscale;
pub mod commands;
mod converge;
pub mod dependencies;
pub mod event;
mod interface;
mod liveness;
pub mod process;
pub mod reconcile;
pub mod resume;
pub mod schedule;
mod shutdown;
mod startup;
pub mod worker;

pub use app::App;
pub use interface::{Action, Input, Notice};
pub use resume::STATE_VERSION;

use std::collections::{BTreeMap, BTreeSet};

use std::time::{Duration, Instant};
/// Rounds of looking at gates and reconciling within one convergence (a bug
/// guard: a chain of dependencies opens one gate per round).
pub(crate) const MAX_GATE_ROUNDS: usize = 256;

use indexmap::IndexMap;
use model::Signal;

pub use event::{Event, Instance, ReadyVia};
use model::orders::WorkerId;
use worker::{Refused, Worker};

use model::spec::Desired;

/// The guard: every app is reconciled at least this often.
pub(crate) const FULL_PASS_INTERVAL: Duration = Duration::from_secs(10);
/// How long after its start a program of an app with `inject` has to bind
/// its port before an instance ready without the preload library's report
/// is said to be unreached (`not_injected`).
pub const INJECT_GRACE: Duration = Duration::from_secs(10);
/// How much longer than its `timeout` the core waits for the answer of a
/// probe check the shell times itself ([`reconcile`]'s `answer_within`): a
/// bug guard for a lost answer.
pub(crate) const CHECK_ANSWER_GRACE: Duration = Duration::from_secs(1);
/// Reconcile passes for one app within one convergence (a bug guard: a
/// healthy app settles in a handful).
pub(crate) const MAX_PASSES: usize = 64;
/// How soon an app that did not settle within [`MAX_PASSES`] is looked at again.
const UNSETTLED_RETRY: Duration = Duration::from_millis(50);
/// A memory measurement not answered within this is taken as lost, and
/// another is ordered (a bug guard: the blocking thread answers in
/// milliseconds).
pub(crate) const MEMORY_ANSWER_LOST: Duration = Duration::from_secs(60);
/// Processes started per turn of the loop ([`Core::begin_turn`]). A spawn
/// takes about a millisecond: a scale-up of thousands goes on in turns of
/// this many, and signals, control requests and exits are handled between
/// them instead of waiting seconds for the whole batch.
pub const SPAWNS_PER_TURN: usize = 64;
/// How soon starts held back for want of file descriptors are tried again.
pub(crate) const NO_ROOM_RETRY: Duration = Duration::from_millis(250);
/// [`Event::StartsWaitForRoom`] is said at most this often.
pub(crate) const NO_ROOM_REPEAT: Duration = Duration::from_secs(60);

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
    /// The shell had no room for a start this turn ([`Core::begin_turn`]).
    #[serde(skip)]
    no_room: bool,
    /// When [`Event::StartsWaitForRoom`] was said last.
    #[serde(skip)]
    no_room_said: Option<Instant>,
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
            no_room: false,
            no_room_said: None,
            memory_due: now + desired.memory_check,
            measuring: None,
            memory_rounds: 0,
            wall_clock: (std::time::UNIX_EPOCH, now),
            binding: None,
            wall_clock_read: false,
        }
    }

    /// A new turn of the loop: up to [`SPAWNS_PER_TURN`] more starts may be
    /// decided, and no more than `room`, the starts the shell has file
    /// descriptors for. Starts left over wait for the next turn; with no
    /// room at all, [`NO_ROOM_RETRY`] later (nothing else tells when fds
    /// are freed), said once by [`Event::StartsWaitForRoom`].
    pub fn begin_turn(&mut self, room: usize) {
        self.spawn_budget = room.min(SPAWNS_PER_TURN);
        self.no_room = room == 0;
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
            .chain(self.sample_wake())
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
            Input::LoadSampled { app, sample } => self.load_sampled(&app, sample, now),
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
}

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;
