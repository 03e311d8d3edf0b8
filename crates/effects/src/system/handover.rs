//! The real effects' part of an upgrade (see [`crate::upgrade`]): what
//! [`System`] hands the next image — its sockets, its children and their
//! exec-status and output pipes, the undertaker, the tracked groups — and
//! how the next image takes them back; the probe, started and reaped apart
//! from the workers; and what an exec must stop or tell first.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use tracing::{error, warn};

use super::{Exec, Probing, Reports, Setup, System, Tracked};
use crate::Reaped;
use crate::groups::Groups;
use crate::output::{self, Source};
use crate::sockets::SocketRegistry;
use crate::spawn::{self, ExecStatus, Launch};
use crate::transient::Transient;
use crate::upgrade::probe::{self, ProbeEnd};
use model::process::{Exit, StartError};
use model::spec::Readiness;

/// What an upgrade's probe's cgroup is named after (`upgrade-probe-N`).
const PROBE_NAME: &str = "upgrade-probe";

/// A process's exec status as an upgrade hands it over.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum ExecState {
    /// Not reported yet: its status pipe, kept open across the exec.
    Watching(RawFd),
    Known(Option<StartError>),
}

/// The real effects' own state, as an upgrade hands it over (what they
/// are made of besides — the spawner, the log files, the output queue —
/// starts afresh in the new image).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SystemState {
    pub(crate) sockets: Vec<crate::sockets::SocketState>,
    pub undertaker: crate::undertaker::UndertakerState,
    pub groups: crate::groups::GroupsState,
    /// Every live child we started: its exec status.
    pub(crate) processes: Vec<(i32, ExecState)>,
    /// Reaped before their exec status was read.
    pub(crate) deferred: Vec<(i32, Exit)>,
    pub(crate) pumps: Vec<output::PumpState>,
    pub(crate) notify_env: Option<OsString>,
    /// The RLIMIT_NOFILE soft limit the first image started with.
    pub nofile_soft: libc::rlim_t,
}

impl crate::upgrade::KeptOpen for SystemState {
    fn kept_open(&self) -> Vec<RawFd> {
        let mut fds: Vec<RawFd> = self.sockets.iter().map(|s| s.fd).collect();
        fds.push(self.undertaker.pipe);
        fds.extend(self.processes.iter().filter_map(|(_, exec)| match exec {
            ExecState::Watching(fd) => Some(*fd),
            ExecState::Known(_) => None,
        }));
        fds.extend(self.pumps.iter().map(|p| p.fd));
        fds
    }
}

impl System {
    /// For an upgrade: everything the next image needs to go on where this
    /// one stops (nothing stops: if the exec fails, it all goes on).
    pub(crate) fn export(&self) -> SystemState {
        let processes = self
            .processes
            .iter()
            .map(|(pid, tracked)| {
                let exec = match &tracked.exec {
                    Exec::Watching(fd) => ExecState::Watching(fd.as_raw_fd()),
                    Exec::Known(error) => ExecState::Known(*error),
                };
                (*pid, exec)
            })
            .collect();
        SystemState {
            sockets: self.sockets.export(),
            undertaker: self.setup.undertaker.export(),
            groups: self.groups.export(),
            processes,
            deferred: self
                .deferred
                .iter()
                .map(|(pid, exit)| (*pid, *exit))
                .collect(),
            pumps: self.pumps.export(),
            notify_env: self.notify_env.clone(),
            nofile_soft: self.setup.nofile_soft,
        }
    }

    /// Right before the exec: the liveness checks that run are stopped,
    /// unanswered (the new image's core orders them again), and what the
    /// probes given up on left is cleared (their reap is the new image's,
    /// as a stranger's).
    pub(crate) fn abandon_transients(&mut self) {
        self.checks
            .abandon(&mut self.groups, &mut self.setup.undertaker);
        for process in self.abandoned_probes.drain(..) {
            process.ended(&mut self.groups, &mut self.setup.undertaker);
        }
    }

    /// The effects the previous image handed over: its sockets, its
    /// processes (their exec status watched again), their output pumped
    /// again from where it was. Readiness probes are started again by the
    /// caller, which knows which workers wait for one.
    pub fn restore(
        setup: Setup,
        state: SystemState,
        reports: Reports,
    ) -> std::io::Result<(System, Vec<output::PumpState>)> {
        let sockets = SocketRegistry::restore(state.sockets)?;
        let mut system = System::new(setup, sockets, reports.clone());
        system.groups = Groups::restore(state.groups, reports.groups.clone());
        system.notify_env = state.notify_env;
        for (pid, exec) in state.processes {
            let exec = match exec {
                ExecState::Known(error) => Exec::Known(error),
                ExecState::Watching(fd) => {
                    let fd = crate::upgrade::exec::adopt_fd(fd, "an exec-status pipe")?;
                    let exec = system.watch_exec(pid, fd);
                    if let Exec::Known(error) = &exec {
                        let status = error.map_or(ExecStatus::Succeeded, ExecStatus::Failed);
                        let _ = system.reports.exec.try_send((pid, status));
                    }
                    exec
                }
            };
            system.processes.insert(pid, Tracked { exec, probe: None });
        }
        system.deferred = state.deferred.into_iter().collect();
        system.find_lost();
        Ok((system, state.pumps))
    }

    /// A child the previous image started that is no longer our child: a
    /// program run in the exec window (a wrapper around the new binary)
    /// reaped it. Its exit is unknown; it is taken as killed, so that its
    /// instance is not waited for for ever.
    fn find_lost(&mut self) {
        let pids: Vec<i32> = self
            .processes
            .keys()
            .chain(self.deferred.keys())
            .copied()
            .collect();
        for pid in pids {
            // SAFETY: waitid into a zeroed siginfo; WNOWAIT leaves a
            // zombie to the normal reap.
            let gone = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                ) != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
            };
            if gone {
                error!(
                    event = "child_lost",
                    pid,
                    "pid {pid} is no longer a child of the supervisor: something run during the upgrade reaped it; taking it as killed"
                );
                self.deferred.remove(&pid);
                self.lost.push(Reaped {
                    pid,
                    exit: Exit::Signal {
                        signal: libc::SIGKILL,
                        core: false,
                    },
                    start_error: None,
                });
            }
        }
    }

    /// How many children of the previous image were found lost at the restore.
    pub fn lost_at_restore(&self) -> usize {
        self.lost.len()
    }

    /// Pump a worker's output again from the pipe the previous image kept.
    pub fn resume_pump(&mut self, pump: output::PumpState) -> std::io::Result<()> {
        let fd = crate::upgrade::exec::adopt_fd(pump.fd, "an output pipe")?;
        let source = Source {
            app: pump.app.as_str().into(),
            slot: pump.slot,
        };
        self.start_pump(fd, source, pump.stream, pump.splitter);
        Ok(())
    }

    /// The readiness probe of a worker that was starting when the previous
    /// image handed over.
    pub(crate) fn resume_probe(&mut self, app: &str, slot: u32, readiness: &Readiness, pid: i32) {
        let probe = self.start_probe(app, slot, readiness, pid);
        if let Some(tracked) = self.processes.get_mut(&pid) {
            tracked.probe = probe;
        }
    }

    /// Start an upgrade's probe, `binary --upgrade-probe` fed `state`, as
    /// an `exec` liveness check is started: through the spawner, in a
    /// process group and a cgroup (or with a token) of its own, so that what
    /// it leaves is killed once it is done ([`System::abandon_probe`], its
    /// reap) and by the undertaker if the supervisor dies meanwhile.
    pub(crate) fn start_upgrade_probe(
        &mut self,
        binary: &Path,
        state: Vec<u8>,
    ) -> Result<probe::RunningProbe, String> {
        let placement = self
            .groups
            .place_as(PROBE_NAME)
            .map_err(|e| format!("cannot create the probe's cgroup: {e}"))?;
        let launch = Launch::beside(
            binary,
            &[probe::PROBE_ARG],
            &self.setup.base_env,
            placement.token.as_deref(),
            self.setup.nofile_soft,
        );
        let cgroup = placement.cgroup.as_ref().map(|(_, fd)| fd.as_raw_fd());
        let piped = match spawn::spawn_piped(&launch, &mut self.setup.spawner, cgroup) {
            Ok(piped) => piped,
            Err(error) => {
                self.groups.discard(placement);
                return Err(format!("cannot run {}: {error}", binary.display()));
            }
        };
        self.probe = Some(Probing::Running(Transient::new(
            piped.pid,
            piped.exec_status,
            placement,
            &mut self.setup.undertaker,
        )));
        Ok(probe::converse(
            piped.pid,
            piped.stdin,
            piped.stdout,
            piped.stderr,
            state,
        ))
    }

    /// Child `pid` was reaped: if it was a probe's, how it ended is kept
    /// (its exit, or why it could not run) and what it left is killed.
    /// Whether it was one.
    pub(super) fn probe_reaped(&mut self, pid: i32, exit: Exit) -> bool {
        let running = matches!(&self.probe, Some(Probing::Running(p)) if p.pid == pid);
        if running && let Some(Probing::Running(process)) = self.probe.take() {
            let ended = match process.ended(&mut self.groups, &mut self.setup.undertaker) {
                ExecStatus::Failed(error) => ProbeEnd::CouldNotRun(error),
                ExecStatus::Succeeded | ExecStatus::Pending => ProbeEnd::Exited(exit),
            };
            self.probe = Some(Probing::Finished(ended));
            return true;
        }
        match self.abandoned_probes.iter().position(|p| p.pid == pid) {
            Some(index) => {
                self.abandoned_probes
                    .swap_remove(index)
                    .ended(&mut self.groups, &mut self.setup.undertaker);
                true
            }
            None => false,
        }
    }

    /// How the probe ended, once reaped; forgotten once taken.
    pub(crate) fn probe_ended(&mut self) -> Option<ProbeEnd> {
        match self.probe.take() {
            Some(Probing::Finished(ended)) => Some(ended),
            other => {
                self.probe = other;
                None
            }
        }
    }

    /// The probe is given up on (timed out, or the supervisor stops): if it
    /// still runs, it is killed with what it started; its reap clears the
    /// rest.
    pub(crate) fn abandon_probe(&mut self) {
        if let Some(Probing::Running(process)) = self.probe.take() {
            process.kill();
            self.abandoned_probes.push(process);
        }
    }

    /// For an upgrade: the output queue written out and the log files
    /// flushed (their writer ends; [`System::resume_log_files`] starts it
    /// again if the exec fails).
    pub(crate) fn flush_output(&self, wait: std::time::Duration) {
        self.setup.files.finish(wait);
        self.setup.sink.flush(wait);
    }

    /// The exec failed: write the log files again.
    pub(crate) fn resume_log_files(&self) {
        self.setup.files.restart();
    }

    /// The undertaker is told an exec comes (see
    /// [`super::undertaker::Undertaker::expect_takeover`]).
    pub(crate) fn expect_takeover(&mut self, within: std::time::Duration) {
        if let Err(error) = self.setup.undertaker.expect_takeover(within) {
            warn!("cannot tell the undertaker an upgrade comes: {error}");
        }
    }

    /// The new image runs, or the exec failed: the undertaker stops waiting.
    pub fn took_over(&mut self) {
        if let Err(error) = self.setup.undertaker.took_over() {
            warn!("cannot tell the undertaker the upgrade is done: {error}");
        }
    }
}
