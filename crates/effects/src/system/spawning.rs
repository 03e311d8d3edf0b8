//! Spawning a worker and tracking it while it lives: its cgroup or run
//! token, the undertaker told of its group, its output pumps, the watch of
//! its exec status, its readiness probe; and forgetting it once it is gone.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tracing::{error, warn};

use super::{Exec, System, Tracked};
use crate::groups::Placement;
use crate::output::{self, Source, Stream};
use crate::spawn::{self, ExecStatus, SpawnRequest};
use crate::{SpawnFailure, Start};
use model::orders::SpawnOrder;
use model::process::{StartError, StartStage};
use model::spec::ListenAddress;

/// A start sent to the spawner whose pid is not known yet.
struct InFlight<'a> {
    order: &'a SpawnOrder,
    placement: Placement,
    sent: spawn::Sent,
}

impl System {
    /// [`crate::Effects::spawn`]: fork and exec the worker of each start,
    /// handed its sockets, and start what it gets besides. The spawner forks
    /// one while the next is prepared and sent: up to
    /// [`spawn::SPAWNS_IN_FLIGHT`] wait for their pid, in order.
    pub(super) fn spawn(&mut self, starts: &[Start]) -> Vec<Result<i32, SpawnFailure>> {
        let mut results = Vec::with_capacity(starts.len());
        let mut in_flight: VecDeque<(usize, InFlight)> = VecDeque::new();
        for (index, start) in starts.iter().enumerate() {
            if in_flight.len() == spawn::SPAWNS_IN_FLIGHT
                && let Some((done, sent)) = in_flight.pop_front()
            {
                results.push((done, self.received(sent)));
            }
            match self.send(start) {
                Ok(sent) => in_flight.push_back((index, sent)),
                Err(failure) => results.push((index, Err(failure))),
            }
        }
        while let Some((done, sent)) = in_flight.pop_front() {
            results.push((done, self.received(sent)));
        }
        results.sort_by_key(|(index, _)| *index);
        results.into_iter().map(|(_, result)| result).collect()
    }

    /// Place the worker of `start` and send its start to the spawner.
    fn send<'a>(&mut self, start: &Start<'a>) -> Result<InFlight<'a>, SpawnFailure> {
        let order = start.order;
        let fds: Vec<RawFd> = start.sockets.iter().map(|(fd, _)| *fd).collect();
        let injects = order.definition.listen.iter().any(|l| l.inject);
        if injects {
            // Checked before every start: a file removed or replaced since
            // is written again.
            self.inject_library = match crate::inject::install(&self.setup.runtime_dir) {
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
        let bound: Vec<ListenAddress> = start.sockets.iter().map(|(_, a)| a.clone()).collect();
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
        self.groups
            .limit_placement_memory(&placement, order.memory_max);
        request.run_token = placement.token.as_deref();
        let cgroup = placement.cgroup.as_ref().map(|(_, fd)| fd.as_raw_fd());
        match spawn::send(&request, &mut self.setup.spawner, cgroup) {
            Ok(sent) => Ok(InFlight {
                order,
                placement,
                sent,
            }),
            Err(e) => {
                self.groups.discard(placement);
                Err(SpawnFailure {
                    error: e.start_error(),
                    detail: e.to_string(),
                })
            }
        }
    }

    /// The pid of the oldest start sent, and what its worker gets besides.
    fn received(&mut self, in_flight: InFlight) -> Result<i32, SpawnFailure> {
        let InFlight {
            order,
            placement,
            sent,
        } = in_flight;
        let spawned = match spawn::received(sent, &mut self.setup.spawner) {
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
        self.fd_room.started();
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

    pub(super) fn start_pump(
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

    pub(super) fn untrack(&mut self, pid: i32) {
        if let Some(tracked) = self.processes.remove(&pid)
            && let Some(probe) = tracked.probe
        {
            probe.abort();
        }
    }

    /// Watch the exec-status pipe of `pid`; `Exec::Known` at once when it
    /// cannot be watched (then the program is taken to run).
    pub(super) fn watch_exec(&self, pid: i32, status: OwnedFd) -> Exec {
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
}
