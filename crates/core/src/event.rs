//! What the core reports: one value per thing that happened, for the log.
//!
//! The core decides and says what it decided; the shell turns each [`Event`]
//! into a human line or a JSON event (`supervisor::report`). Keeping them as
//! data lets the simulation read the decisions without parsing text.

use std::time::Duration;

use model::Signal;

use super::reconcile::StopReason;
use super::worker::{Decision, Outcome, Refused, StopEnd, Worker};
use model::plan::AppChange;
use model::process::{Exit, StartError};

/// Which readiness signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyVia {
    /// `ready: none`: the program runs.
    Exec,
    /// `ready: {delay}` passed.
    Delay,
    /// A tcp or http probe answered.
    Probe,
    /// `READY=1` on the notify socket.
    Notify,
}

impl ReadyVia {
    pub fn name(self) -> &'static str {
        match self {
            ReadyVia::Exec => "exec",
            ReadyVia::Delay => "delay",
            ReadyVia::Probe => "probe",
            ReadyVia::Notify => "notify",
        }
    }
}

/// One instance, as events name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub app: String,
    pub slot: u32,
    pub generation: u64,
}

impl Instance {
    /// The instance `worker` of app `app` stands for.
    pub(crate) fn of(app: &str, worker: &Worker) -> Instance {
        Instance {
            app: app.to_string(),
            slot: worker.slot,
            generation: worker.generation,
        }
    }
}

/// Something the core did or noticed.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Spawned {
        instance: Instance,
        pid: i32,
    },
    /// No process, or no program: a failed start.
    StartFailed {
        instance: Instance,
        pid: Option<i32>,
        error: StartError,
        /// What the spawn said beyond the errno (which program, which address).
        detail: Option<String>,
        decision: Decision,
    },
    Ready {
        instance: Instance,
        pid: i32,
        via: ReadyVia,
        after: Duration,
    },
    /// Every wanted instance is ready (once per run).
    AllReady,
    /// Every wanted instance's start is decided but these (`app.slot`) are
    /// not ready: the supervisor has started (`READY=1` to systemd) without
    /// them (once per run, instead of `READY=1` with [`Event::AllReady`]).
    StartedPartly {
        not_ready: Vec<String>,
    },
    Exited {
        instance: Instance,
        pid: i32,
        exit: Exit,
        ran: Duration,
        decision: Decision,
    },
    Stopping {
        instance: Instance,
        pid: i32,
        reason: StopReason,
        /// For commands: which one.
        command: Option<&'static str>,
        signal: Signal,
        uptime: Duration,
    },
    Killing {
        instance: Instance,
        pid: i32,
        kill_timeout: Duration,
    },
    Stopped {
        instance: Instance,
        pid: i32,
        killed: bool,
        leader_exit: Option<Exit>,
        took: Duration,
        end: StopEnd,
    },
    RolloutHalted {
        instance: Instance,
    },
    /// One app's part of an applied edit.
    Plan(AppChange),
    /// A new version of the file is in force.
    Applied {
        trigger: String,
        file_version: u64,
    },
    /// An app's new sockets could not be bound: it keeps its last good version.
    BindFailed {
        app: String,
        error: String,
    },
    /// `supervise reload APP`.
    Reload {
        app: String,
        generation: u64,
        instances: u32,
    },
    Shutdown {
        why: &'static str,
        processes: usize,
    },
    /// A second SIGINT.
    KillAll,
    /// A notify datagram from a uid that is not the worker's.
    ForeignNotify {
        app: String,
        pid: i32,
        uid: u32,
        expected: u32,
    },
    /// An instance of an app whose `listen` has `inject` became ready and
    /// the preload library never said it handed the program a socket (once
    /// per version of the app).
    NotInjected {
        instance: Instance,
        pid: i32,
        /// The addresses with `inject`.
        addresses: Vec<String>,
        /// The process exited before it was ready (the program's own
        /// `bind()` was refused the port supervise holds, most likely).
        before_ready: bool,
    },
    /// A liveness check failed (`counted`: not within `grace` of ready).
    CheckFailed {
        instance: Instance,
        pid: i32,
        failures: u32,
        threshold: u32,
        counted: bool,
        detail: String,
    },
    /// A check passed after failed ones had counted.
    Healthy {
        instance: Instance,
        pid: i32,
    },
    /// `health.failures` consecutive checks failed.
    Unhealthy {
        instance: Instance,
        pid: i32,
        failures: u32,
        detail: String,
    },
    /// The instance used more than `max_memory`.
    MemoryExceeded {
        instance: Instance,
        pid: i32,
        rss_bytes: u64,
        limit_bytes: u64,
    },
    /// No `WATCHDOG=1` within `watchdog` (or `WATCHDOG=trigger`).
    WatchdogMissed {
        instance: Instance,
        pid: i32,
        period: Duration,
        /// Since the last ping (or since ready, without one).
        silent_for: Duration,
        triggered: bool,
        signal: Signal,
    },
    /// A live instance is replaced (unhealthy, over `max_memory`): a new one
    /// starts after `delay` (restart `attempt`), and this one serves until
    /// the new one is ready.
    Recycling {
        instance: Instance,
        pid: i32,
        why: Outcome,
        attempt: u32,
        delay: Duration,
    },
    /// An app's dependencies are not met: it starts nothing until they are.
    WaitingFor {
        app: String,
        /// `db (ready)`, in file order.
        on: Vec<String>,
    },
    /// Every dependency of the app is met: it may start.
    DependenciesMet {
        app: String,
    },
    /// A dependency will not meet its condition without a change (it gave
    /// up, or a one-shot failed): the app is held.
    DependencyFailed {
        app: String,
        dependency: String,
        reason: String,
    },
    /// Every instance of a dependency was replaced (`on_dependency_restart:
    /// restart`): the app is replaced, rolling, as generation `generation`.
    DependencyRestarted {
        app: String,
        dependency: String,
        generation: u64,
    },
    /// A run of a scheduled app is armed (`why`: `schedule`, `trigger`,
    /// `start`, `queue`).
    RunDue {
        app: String,
        why: &'static str,
    },
    /// A tick or trigger came while a run goes, and `overlap` skips it.
    RunSkipped {
        app: String,
        why: &'static str,
        reason: String,
    },
    /// A tick or trigger came while a run goes: it runs after (`overlap: queue`).
    RunQueued {
        app: String,
        why: &'static str,
        queued: u32,
    },
    /// A run of a scheduled app ended.
    RunEnded {
        app: String,
        result: String,
        ok: bool,
        took: Duration,
    },
    /// The wall clock was set: it moved `by` more (`forward`) or less than
    /// the monotonic clock between two readings. The cron schedules of
    /// `rearmed` run next at their next match after the new time.
    ClockStepped {
        forward: bool,
        by: Duration,
        rearmed: Vec<String>,
    },
    /// The load of an autoscaled app moved its count `from` → `to`
    /// (`why`: `queue 27/10 for 2.0s`).
    Autoscaled {
        app: String,
        from: u32,
        to: u32,
        why: String,
    },
    /// A settled app (debug).
    Reconciled {
        app: String,
        passes: usize,
    },
    /// An input the worker's state did not accept (debug: late, duplicate).
    Ignored(Refused),
    /// The supervisor did not run for this long past its wake-up time:
    /// deadlines that judge workers were moved by as much.
    Stalled {
        by: Duration,
    },
    /// Starts are held back: the shell has no file descriptors for them
    /// (they start as fds are freed; said at most once a minute).
    StartsWaitForRoom,
    /// A decision of the core's own that a worker refused: a bug (error).
    Anomaly(String),
}
