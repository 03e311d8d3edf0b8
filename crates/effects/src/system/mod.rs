//! The real [`Effects`]: fork+exec, `killpg`, `waitpid`, the socket registry,
//! and what each process gets besides: its output pumps, its exec-status
//! watch, its readiness probe, its place in the undertaker's list; liveness
//! checks ([`super::checks`]), an upgrade's probe (run as an `exec` check
//! is: [`crate::transient::Transient`]) and memory measurements.
//!
//! A child's exec status (EOF: the program runs; eight bytes: the stage and
//! errno that failed) is watched by a small task per spawn, which reports on
//! a channel the loop reads ([`ExecReport`]). A child can be reaped before its
//! report is read; its exit then waits ([`System::reap`] defers it) until the
//! report arrives — which it does at once, since a dead child's pipe is
//! readable — and comes back with it ([`Effects::exec_known`]), so the core
//! always learns *why* a process ended.
//!
//! What an upgrade hands over and takes back is in [`handover`].
//!
//! This file holds what the real effects are made of and where each call
//! of [`Effects`] goes: the short ones are answered here, the others in the
//! file of what they do: [`spawning`] (a worker and what it gets, tracked
//! while it lives), [`reaping`] (every child's end, sorted out),
//! [`probes`] (readiness probes, liveness checks, memory measurements) and
//! [`shutdown`] (what is killed, drained and handed back at the end).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::Signal;
use tokio::sync::mpsc;
use tracing::warn;

mod handover;
mod probes;
mod reaping;
mod shutdown;
mod spawning;

pub use handover::{ExecState, SystemState};

use super::checks::Checks;
use super::groups::Groups;
use super::logfile::LogFiles;
use super::output::LogHub;
use super::output::{self, LogFormat, LogSink};
use super::sockets::{BindError, SocketRegistry};
use super::spawn::{ExecStatus, Spawner};
use super::systemd::SystemdNotifier;
use super::tracking::Tracking;
use super::transient::Transient;
use super::undertaker::Undertaker;
use super::{CheckAnswer, Effects, Reaped, SpawnFailure, Start};
use model::orders::CheckOrder;
use model::process::{Exit, StartError};
use model::spec::{AppSpec, ListenAddress, Readiness, SocketKey};
use model::usage::LoadSample;

/// A process's exec status, as the watch task read it: `(pid, status)`.
pub type ExecReport = (i32, ExecStatus);

/// Where the tasks a spawn starts report to the loop.
#[derive(Clone)]
pub struct Reports {
    /// A readiness probe succeeded for this pid.
    pub probes: mpsc::Sender<i32>,
    pub exec: mpsc::Sender<ExecReport>,
    /// An instance's processes changed (a cgroup emptied).
    pub groups: mpsc::Sender<()>,
    /// A tcp or http liveness check answered.
    pub checks: mpsc::Sender<CheckAnswer>,
    /// What instances use in memory: the measurement's round, and
    /// `(leader pid, bytes)`.
    pub memory: mpsc::Sender<(u64, Vec<(i32, u64)>)>,
}

/// What the real effects need from the start-up.
pub struct Setup {
    pub sink: LogSink,
    pub format: LogFormat,
    pub logs: Arc<LogHub>,
    /// The log files apps name (`log`), written off the loop.
    pub files: Arc<LogFiles>,
    pub undertaker: Undertaker,
    /// Forks the workers (see [`super::spawn::Spawner`]).
    pub spawner: Spawner,
    /// The supervisor's environment minus `NOTIFY_SOCKET`, `LISTEN_*`, `WATCHDOG_*`.
    pub base_env: Vec<(OsString, OsString)>,
    /// The RLIMIT_NOFILE soft limit we started with (workers get it back).
    pub nofile_soft: libc::rlim_t,
    pub systemd: Option<SystemdNotifier>,
    /// How every process of an instance is tracked.
    pub tracking: Tracking,
    /// Where the preload library of `inject` is written.
    pub runtime_dir: std::path::PathBuf,
}

/// How far we know a process got.
enum Exec {
    /// The watch task will report; its status pipe (shared with the task,
    /// so that an upgrade can keep it and watch it again).
    Watching(Arc<OwnedFd>),
    /// Reported: `None` when it runs the program.
    Known(Option<StartError>),
}

/// An upgrade's probe (see [`crate::upgrade::probe`]).
enum Probing {
    Running(Transient),
    /// Reaped; what it left was killed.
    Finished(crate::upgrade::probe::ProbeEnd),
}

/// What is kept for a live child besides what the core knows.
struct Tracked {
    exec: Exec,
    probe: Option<tokio::task::AbortHandle>,
}

/// The real effects. Must live on the runtime's (only) thread: it forks.
pub struct System {
    setup: Setup,
    /// Every process of every instance, cgroups or tokens.
    groups: Groups,
    /// `NOTIFY_SOCKET` for workers with `ready: notify`, once bound.
    notify_env: Option<OsString>,
    sockets: SocketRegistry,
    processes: HashMap<i32, Tracked>,
    /// Reaped before their exec status was read: `pid → exit`.
    deferred: HashMap<i32, Exit>,
    reports: Reports,
    /// The liveness checks that run.
    checks: Checks,
    /// The preload library of `inject`, checked (and written if it is not
    /// right) before each start that needs it.
    inject_library: Option<std::path::PathBuf>,
    /// That it could not be written was said (once until it can again).
    inject_failure_said: bool,
    /// Every output pump that runs.
    pumps: output::Pumps,
    /// The new binary answering an upgrade's probe: running, or how it
    /// ended once reaped (the loop reaps every child), until taken.
    probe: Option<Probing>,
    /// Probes given up on and killed, not reaped yet: their reap cleans up
    /// after them.
    abandoned_probes: Vec<Transient>,
    /// After an upgrade: children of the previous image that are no longer
    /// ours to reap (something in the exec window reaped them), reaped first.
    lost: Vec<Reaped>,
    /// The fd limit, for [`Effects::start_room`].
    fd_room: crate::fd_room::FdRoom,
    /// What the samples of autoscaled apps keep between them.
    load: crate::load::LoadSampler,
}

impl System {
    pub fn new(setup: Setup, sockets: SocketRegistry, reports: Reports) -> System {
        System {
            groups: Groups::new(setup.tracking.clone(), reports.groups.clone()),
            setup,
            notify_env: None,
            sockets,
            processes: HashMap::new(),
            deferred: HashMap::new(),
            checks: Checks::new(reports.checks.clone()),
            reports,
            inject_library: None,
            inject_failure_said: false,
            pumps: output::Pumps::default(),
            probe: None,
            abandoned_probes: Vec::new(),
            lost: Vec::new(),
            fd_room: crate::fd_room::FdRoom::measure(),
            load: Default::default(),
        }
    }

    /// Workers with `ready: notify` get `NOTIFY_SOCKET=value` from now on.
    pub fn set_notify_socket(&mut self, value: OsString) {
        self.notify_env = Some(value);
    }

    /// The log files, for SIGUSR1, `status` and the end.
    pub fn log_files(&self) -> &Arc<LogFiles> {
        &self.setup.files
    }

    /// How instances are tracked, for `status`.
    pub fn tracking(&self) -> &Tracking {
        self.groups.tracking()
    }

    /// The instance cgroups, for `status` (CPU time from `cpu.stat`).
    pub fn cgroups(&self) -> Vec<(i32, std::path::PathBuf)> {
        self.groups.cgroups()
    }

    /// How many process groups are tracked, for the usage sampling.
    pub fn groups_tracked(&self) -> usize {
        self.groups.len()
    }

    /// The cgroup of the instance led by `pgid`, if it has one.
    pub fn cgroup_of(&self, pgid: i32) -> Option<std::path::PathBuf> {
        self.groups.cgroup_of(pgid).cloned()
    }
}

impl Effects for System {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_clock(&self) -> std::time::SystemTime {
        std::time::SystemTime::now()
    }

    fn spawn(&mut self, starts: &[Start]) -> Vec<Result<i32, SpawnFailure>> {
        System::spawn(self, starts)
    }

    fn signal_group(&mut self, pgid: i32, signal: Signal) {
        self.groups.signal(pgid, signal);
    }

    fn reap(&mut self) -> Option<Reaped> {
        System::reap(self)
    }

    fn empty_groups(&mut self, pgids: &[i32]) -> Vec<i32> {
        self.groups.empty(pgids)
    }

    fn needs_polling(&self) -> bool {
        self.groups.needs_polling()
    }

    fn kill_leftovers(&mut self, pgid: i32) -> usize {
        self.groups.kill_leftovers(pgid)
    }

    fn forget_group(&mut self, pgid: i32) {
        if let Err(error) = self.setup.undertaker.forget(pgid) {
            tracing::debug!("cannot tell the undertaker to forget {pgid}: {error}");
        }
        self.groups.forget(pgid);
    }

    fn settle_groups(&mut self) {
        self.groups.settle();
        self.groups.recheck();
    }

    fn exec_known(&mut self, pid: i32, error: Option<StartError>) -> Option<Reaped> {
        System::exec_known(self, pid, error)
    }

    fn cancel_probe(&mut self, pid: i32) {
        if let Some(probe) = self.processes.get_mut(&pid).and_then(|t| t.probe.take()) {
            probe.abort();
        }
    }

    fn check(&mut self, order: &CheckOrder) {
        System::check(self, order);
    }

    fn cancel_check(&mut self, pid: i32) {
        self.checks.cancel(pid);
    }

    fn take_check_answers(&mut self) -> Vec<CheckAnswer> {
        self.checks.take_answers()
    }

    fn sample_load(&mut self, app: &AppSpec, leaders: &[i32]) -> LoadSample {
        let sockets = &self.sockets;
        let groups = &self.groups;
        self.load.sample(
            app,
            leaders,
            |key| sockets.fd_of(key),
            |pid| groups.cgroup_of(pid).map(|c| c.as_path()),
            Instant::now(),
        )
    }

    fn measure_memory(&mut self, round: u64, pids: Vec<i32>) {
        System::measure_memory(self, round, pids);
    }

    fn start_room(&mut self) -> usize {
        self.fd_room.starts(self.processes.len())
    }

    fn limit_memory(&mut self, pgid: i32, bytes: Option<u64>) {
        self.groups.limit_memory(pgid, bytes);
    }

    fn bind(&mut self, key: &SocketKey, app: &str) -> Result<(RawFd, ListenAddress), BindError> {
        self.sockets.ensure(key, app)
    }

    fn retain_sockets(&mut self, wanted: &HashSet<SocketKey>) -> Vec<SocketKey> {
        self.sockets.retain(wanted)
    }

    fn notify_systemd(&mut self, state: &str) {
        if let Some(systemd) = &self.setup.systemd
            && let Err(error) = systemd.notify(state)
        {
            warn!("cannot notify systemd ({state}): {error}");
        }
    }

    fn forget_output(&mut self, app: &str, slot: Option<u32>) {
        self.setup.logs.forget(app, slot);
        self.setup.files.forget(app, slot);
    }

    fn route_output(&mut self, desired: &model::spec::Desired) {
        self.setup.files.route(desired);
        let apps = desired.apps.iter().map(|a| (a.name.clone(), a.instances));
        self.setup.logs.name_apps(apps);
        self.load
            .retain_apps(|name| desired.app(name).is_some_and(|a| a.autoscale.is_some()));
    }

    type Handover = SystemState;

    fn handover(&self) -> SystemState {
        self.export()
    }

    fn start_upgrade_probe(
        &mut self,
        binary: &std::path::Path,
        state: Vec<u8>,
    ) -> Result<crate::upgrade::probe::RunningProbe, String> {
        System::start_upgrade_probe(self, binary, state)
    }

    fn probe_ended(&mut self) -> Option<crate::upgrade::probe::ProbeEnd> {
        System::probe_ended(self)
    }

    fn abandon_probe(&mut self) {
        System::abandon_probe(self);
    }

    fn abandon_transients(&mut self) {
        System::abandon_transients(self);
    }

    fn prepare_exec(&mut self, takeover: Duration, flush: Duration) {
        self.expect_takeover(takeover);
        self.flush_output(flush);
    }

    fn exec(
        &mut self,
        binary: &std::path::Path,
        args: &[OsString],
        state: &[u8],
        fds: &[RawFd],
    ) -> std::io::Result<()> {
        Err(crate::upgrade::exec::exec(binary, args, state, fds))
    }

    fn exec_failed(&mut self) {
        self.took_over();
        self.resume_log_files();
    }

    fn resume_probe(&mut self, app: &str, slot: u32, readiness: &Readiness, pid: i32) {
        System::resume_probe(self, app, slot, readiness, pid);
    }
}
