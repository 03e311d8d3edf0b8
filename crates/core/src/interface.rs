//! What goes into the core and what comes out: the facts, wishes and time
//! it is given ([`Input`]), and what it asks the shell to do ([`Action`]).

use std::time::Duration;

use super::{Event, Instance};
use model::Signal;
use model::orders::{CheckOrder, SpawnOrder, WatchdogMessage, WorkerId};
use model::process::{Exit, StartError};
use model::spec::{Desired, SocketKey};

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
    /// What a sample of an autoscaled app's load measured (the answer to
    /// [`Action::SampleLoad`]).
    LoadSampled {
        app: String,
        sample: crate::autoscale::LoadSample,
    },
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
    /// ([`crate::Core::wanted_sockets`]).
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
    /// Measure the load of autoscaled app `app` — its accept queue, the CPU
    /// of its ready instances ([`crate::Core::ready_leaders`]) — and answer
    /// with [`Input::LoadSampled`] at once.
    SampleLoad { app: String },
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
