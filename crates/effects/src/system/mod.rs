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

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::Signal;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tracing::{error, warn};

mod handover;

pub use handover::{ExecState, SystemState};

use super::checks::{Checks, Launcher};
use super::groups::Groups;
use super::logfile::LogFiles;
use super::output::LogHub;
use super::output::{self, LogFormat, LogSink, Source, Stream};
use super::probe;
use super::sockets::{BindError, SocketRegistry};
use super::spawn::{self, ExecStatus, SpawnRequest, Spawner};
use super::systemd::SystemdNotifier;
use super::tracking::Tracking;
use super::transient::Transient;
use super::undertaker::Undertaker;
use super::usage;
use super::{CheckAnswer, Effects, Reaped, SpawnFailure};
use model::orders::{CheckOrder, SpawnOrder};
use model::process::{Exit, StartError, StartStage};
use model::spec::{ListenAddress, Readiness, SocketKey};

/// How long the last reap of killed adopted processes may take at shutdown.
const ADOPTED_REAP_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

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
        }
    }

    fn start_pump(
        &self,
        fd: OwnedFd,
        source: Source,
        stream: Stream,
        splitter: output::LineSplitter,
    ) {
        tokio::spawn(output::pump(
            fd,
            source,
            stream,
            output::Destinations {
                sink: self.setup.sink.clone(),
                logs: self.setup.logs.clone(),
                files: self.setup.files.clone(),
                format: self.setup.format,
            },
            splitter,
            self.pumps.clone(),
        ));
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

    /// Shutdown, every instance stopped: SIGKILL and reap whatever descendant
    /// of a worker is still around (an adopted daemon, a token carrier).
    pub fn kill_adopted(&mut self) {
        let mut known: HashSet<i32> = self.processes.keys().copied().collect();
        known.insert(self.setup.undertaker.pid());
        known.extend(self.setup.spawner.pid());
        let count = self.groups.kill_adopted(&known);
        if count > 0 {
            warn!(
                event = "adopted_killed",
                count, "killed {count} leftover descendants of workers"
            );
        }
        // Reap them: SIGKILL is quick, but bounded all the same.
        let deadline = Instant::now() + ADOPTED_REAP_WAIT;
        let mut left = self.groups.to_reap();
        while left > 0 && Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer; -1 = any child.
            match unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } {
                pid if pid > 0 => left = left.saturating_sub(1),
                0 => std::thread::sleep(std::time::Duration::from_millis(5)),
                _ => break,
            }
        }
    }

    /// Everything stopped: dismiss the undertaker and the spawner (each exits
    /// when its socket or pipe closes) and return their pids for a last reap,
    /// with the output queue and the tracking to tear down.
    /// At exit: until the stopped workers' last output is read (bounded by
    /// [`output::OUTPUT_DRAIN_WAIT`]).
    pub async fn output_finished(&self) {
        self.pumps.finished(output::OUTPUT_DRAIN_WAIT).await;
    }

    pub fn finish(self) -> (Vec<i32>, LogSink, Tracking) {
        let System { setup, .. } = self;
        let mut helpers: Vec<i32> = setup.spawner.pid().into_iter().collect();
        drop(setup.spawner);
        helpers.push(setup.undertaker.dismiss());
        (helpers, setup.sink, setup.tracking)
    }

    fn untrack(&mut self, pid: i32) {
        if let Some(tracked) = self.processes.remove(&pid)
            && let Some(probe) = tracked.probe
        {
            probe.abort();
        }
    }

    /// Watch the exec-status pipe of `pid`; `Exec::Known` at once when it
    /// cannot be watched (then the program is taken to run).
    fn watch_exec(&self, pid: i32, status: OwnedFd) -> Exec {
        let status = Arc::new(status);
        let kept = Arc::clone(&status);
        // SAFETY: an OwnedFd stays open and names the same pipe for as long
        // as the AsyncFd (which shares it) lives.
        match unsafe { AsyncFd::register_with_interest(status, Interest::READABLE) } {
            Ok(fd) => {
                let report = self.reports.exec.clone();
                tokio::spawn(async move {
                    let status = loop {
                        let Ok(mut guard) = fd.readable().await else {
                            break ExecStatus::Succeeded;
                        };
                        match spawn::read_status(fd.get_ref()) {
                            ExecStatus::Pending => guard.clear_ready(),
                            done => break done,
                        }
                    };
                    let _ = report.send((pid, status)).await;
                });
                Exec::Watching(kept)
            }
            Err(error) => {
                warn!("cannot watch the exec status of pid {pid}: {error}; taking it as running");
                Exec::Known(None)
            }
        }
    }

    fn start_probe(
        &self,
        app: &str,
        slot: u32,
        readiness: &Readiness,
        pid: i32,
    ) -> Option<tokio::task::AbortHandle> {
        let Readiness::Probe(spec) = readiness else {
            return None;
        };
        let Some(target) = spec.target(slot).cloned() else {
            error!(app, slot, "{app}.{slot}: no probe target for this slot");
            return None;
        };
        let report = self.reports.probes.clone();
        let task = tokio::spawn(async move {
            probe::until_ready(&target).await;
            let _ = report.send(pid).await;
        });
        Some(task.abort_handle())
    }
}

impl Effects for System {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_clock(&self) -> std::time::SystemTime {
        std::time::SystemTime::now()
    }

    fn spawn(
        &mut self,
        order: &SpawnOrder,
        sockets: &[(RawFd, ListenAddress)],
    ) -> Result<i32, SpawnFailure> {
        let fds: Vec<RawFd> = sockets.iter().map(|(fd, _)| *fd).collect();
        let injects = order.definition.listen.iter().any(|l| l.inject);
        if injects {
            // Checked before every start: a file removed or replaced since
            // is written again.
            self.inject_library = match super::inject::install(&self.setup.runtime_dir) {
                Ok(path) => {
                    self.inject_failure_said = false;
                    Some(path)
                }
                Err(e) => {
                    if !self.inject_failure_said {
                        error!(
                            "cannot write the preload library of `inject` into {}: {e}; programs that bind their port themselves will not be handed supervise's socket",
                            self.setup.runtime_dir.display()
                        );
                        self.inject_failure_said = true;
                    }
                    None
                }
            };
        }
        let inject_library = self.inject_library.as_deref().filter(|_| injects);
        let bound: Vec<ListenAddress> = sockets.iter().map(|(_, a)| a.clone()).collect();
        let mut request = SpawnRequest {
            app: &order.app,
            slot: order.slot,
            process: &order.definition,
            readiness: &order.readiness,
            listen_fds: &fds,
            listen_bound: &bound,
            notify_socket: self.notify_env.as_deref(),
            base_env: &self.setup.base_env,
            nofile_soft: self.setup.nofile_soft,
            run_token: None,
            inject_library,
        };
        let placement = self
            .groups
            .place(&order.app, order.slot)
            .map_err(|e| SpawnFailure {
                error: StartError {
                    stage: StartStage::Cgroup,
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                },
                detail: format!("cannot create the instance's cgroup: {e}"),
            })?;
        request.run_token = placement.token.as_deref();
        let cgroup = placement.cgroup.as_ref().map(|(_, fd)| fd.as_raw_fd());
        let spawned = match spawn::spawn(&request, &mut self.setup.spawner, cgroup) {
            Ok(spawned) => spawned,
            Err(e) => {
                self.groups.discard(placement);
                return Err(SpawnFailure {
                    error: e.start_error(),
                    detail: e.to_string(),
                });
            }
        };
        let pid = spawned.pid;
        self.groups.started(pid, placement);
        if let Err(error) = self.setup.undertaker.watch(pid) {
            warn!("cannot tell the undertaker about process group {pid}: {error}");
        }
        let source = Source {
            app: order.app.as_str().into(),
            slot: order.slot,
        };
        for (fd, stream) in [
            (spawned.stdout, Stream::Stdout),
            (spawned.stderr, Stream::Stderr),
        ] {
            self.start_pump(fd, source.clone(), stream, output::LineSplitter::default());
        }
        let exec = self.watch_exec(pid, spawned.exec_status);
        if let Exec::Known(error) = exec {
            let _ = self
                .reports
                .exec
                .try_send((pid, error.map_or(ExecStatus::Succeeded, ExecStatus::Failed)));
        }
        let probe = self.start_probe(&order.app, order.slot, &order.readiness, pid);
        self.processes.insert(pid, Tracked { exec, probe });
        Ok(pid)
    }

    fn signal_group(&mut self, pgid: i32, signal: Signal) {
        self.groups.signal(pgid, signal);
    }

    fn reap(&mut self) -> Option<Reaped> {
        if let Some(lost) = self.lost.pop() {
            self.untrack(lost.pid);
            self.groups.reaped();
            return Some(lost);
        }
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer; -1 = any child.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return None;
            }
            let exit = if libc::WIFEXITED(status) {
                Exit::Code(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                Exit::Signal {
                    signal: libc::WTERMSIG(status),
                    core: libc::WCOREDUMP(status),
                }
            } else {
                continue;
            };
            if self.probe_reaped(pid, exit) {
                self.groups.reaped();
                continue;
            }
            if pid == self.setup.undertaker.pid() {
                match self.setup.undertaker.restart() {
                    Ok(()) => error!(
                        event = "undertaker_restarted",
                        "the undertaker (pid {pid}) {exit}; started another (pid {})",
                        self.setup.undertaker.pid()
                    ),
                    Err(error) => error!(
                        event = "undertaker_died",
                        "the undertaker (pid {pid}) {exit} and cannot be started again ({error}); workers may outlive a crash of the supervisor"
                    ),
                }
                continue;
            }
            if self
                .checks
                .reaped(pid, exit, &mut self.groups, &mut self.setup.undertaker)
            {
                self.groups.reaped();
                continue;
            }
            if Some(pid) == self.setup.spawner.pid() {
                self.setup.spawner.lost();
                error!("the spawner (pid {pid}) {exit}; another starts with the next spawn");
                continue;
            }
            let start_error = match self.processes.get(&pid).map(|t| &t.exec) {
                // Not ours: an adopted descendant (we are a subreaper).
                None => None,
                Some(Exec::Known(error)) => *error,
                Some(Exec::Watching(_)) => {
                    self.deferred.insert(pid, exit);
                    continue;
                }
            };
            self.untrack(pid);
            self.groups.reaped();
            return Some(Reaped {
                pid,
                exit,
                start_error,
            });
        }
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
        if let Some(tracked) = self.processes.get_mut(&pid) {
            tracked.exec = Exec::Known(error);
        }
        let exit = self.deferred.remove(&pid)?;
        self.untrack(pid);
        Some(Reaped {
            pid,
            exit,
            start_error: error,
        })
    }

    fn cancel_probe(&mut self, pid: i32) {
        if let Some(probe) = self.processes.get_mut(&pid).and_then(|t| t.probe.take()) {
            probe.abort();
        }
    }

    fn check(&mut self, order: &CheckOrder) {
        let launcher = Launcher {
            groups: &mut self.groups,
            undertaker: &mut self.setup.undertaker,
            spawner: &mut self.setup.spawner,
            base_env: &self.setup.base_env,
            nofile_soft: self.setup.nofile_soft,
        };
        self.checks.start(order, launcher);
    }

    fn cancel_check(&mut self, pid: i32) {
        self.checks.cancel(pid);
    }

    fn take_check_answers(&mut self) -> Vec<CheckAnswer> {
        self.checks.take_answers()
    }

    fn measure_memory(&mut self, round: u64, pids: Vec<i32>) {
        let cgroups: HashMap<i32, std::path::PathBuf> = self.groups.cgroups().into_iter().collect();
        let instances: Vec<(i32, Option<std::path::PathBuf>)> = pids
            .into_iter()
            .map(|pid| (pid, cgroups.get(&pid).cloned()))
            .collect();
        let report = self.reports.memory.clone();
        tokio::task::spawn_blocking(move || {
            let _ = report.blocking_send((round, usage::memory(&instances)));
        });
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
