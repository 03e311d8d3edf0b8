//! Liveness checks as the real effects run them: a tcp or http check is a
//! task that answers on a channel; an `exec` check is a process started
//! like the worker (its cwd, environment and user) in a process group and a
//! cgroup (or with a token) of its own ([`Transient`], as an upgrade's probe
//! is) — so it neither counts toward the instance's memory nor leaves
//! anything behind — with its output on /dev/null, answered when the loop
//! reaps it.
//!
//! One check runs per worker (the core never starts another before the
//! last is answered or cancelled); a cancelled one is killed and never
//! answered.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsRawFd;

use tokio::sync::mpsc;

use super::CheckAnswer;
use super::groups::Groups;
use super::probe;
use super::spawn::{self, ExecStatus, SpawnRequest, Spawner};
use super::transient::Transient;
use super::undertaker::Undertaker;
use model::orders::{CheckOrder, CheckTarget};
use model::process::Exit;
use model::spec::{ProcessDefinition, Readiness, Template};

/// A liveness check that runs.
enum Running {
    /// A tcp or http check: a task.
    Task(tokio::task::AbortHandle),
    /// An `exec` check: its process (answered when it is reaped).
    Process(i32),
}

/// The process of an `exec` liveness check.
struct CheckProcess {
    /// The leader of the worker checked, and the check's number.
    worker: i32,
    check: u64,
    /// Its own cgroup or token: what it leaves behind is killed with it.
    process: Transient,
    /// Cancelled (timed out, or its worker stops): killed, and not answered.
    cancelled: bool,
}

/// What starting an `exec` check's process needs from the effects.
pub(crate) struct Launcher<'a> {
    pub(crate) groups: &'a mut Groups,
    pub(crate) undertaker: &'a mut Undertaker,
    pub(crate) spawner: &'a mut Spawner,
    pub(crate) base_env: &'a [(OsString, OsString)],
    pub(crate) nofile_soft: libc::rlim_t,
}

/// The checks that run, and the answers of those that ended on the loop.
pub(crate) struct Checks {
    /// By the leader of the worker checked.
    running: HashMap<i32, Running>,
    /// The processes of `exec` checks, by their pid.
    processes: HashMap<i32, CheckProcess>,
    /// Answers of `exec` checks (reaped, or that could not start), for the
    /// loop to take.
    answers: Vec<CheckAnswer>,
    /// Where tcp and http checks answer.
    report: mpsc::Sender<CheckAnswer>,
}

impl Checks {
    pub(crate) fn new(report: mpsc::Sender<CheckAnswer>) -> Checks {
        Checks {
            running: HashMap::new(),
            processes: HashMap::new(),
            answers: Vec::new(),
            report,
        }
    }

    /// Start a check.
    pub(crate) fn start(&mut self, order: &CheckOrder, launcher: Launcher<'_>) {
        let running = match &order.target {
            CheckTarget::Probe(probe) => {
                let (probe, timeout, report) = (probe.clone(), order.timeout, self.report.clone());
                let (pid, check) = (order.pid, order.check);
                let task = tokio::spawn(async move {
                    let result = probe::check(&probe, timeout).await;
                    let answer = CheckAnswer {
                        pid,
                        check,
                        passed: result.is_ok(),
                        detail: result.err().unwrap_or_default(),
                    };
                    let _ = report.send(answer).await;
                });
                Running::Task(task.abort_handle())
            }
            CheckTarget::Exec { argv, definition } => {
                match self.start_process(order, argv, definition, launcher) {
                    Ok(pid) => Running::Process(pid),
                    Err(detail) => {
                        self.answers.push(CheckAnswer {
                            pid: order.pid,
                            check: order.check,
                            passed: false,
                            detail,
                        });
                        return;
                    }
                }
            }
        };
        self.running.insert(order.pid, running);
    }

    fn start_process(
        &mut self,
        order: &CheckOrder,
        argv: &[Template],
        definition: &ProcessDefinition,
        launcher: Launcher<'_>,
    ) -> Result<i32, String> {
        let process = ProcessDefinition {
            argv: argv.to_vec(),
            program: None,
            shell: false,
            listen: Vec::new(),
            watchdog: None,
            ..definition.clone()
        };
        let placement = launcher
            .groups
            .place(&order.app, order.slot)
            .map_err(|e| format!("cannot create the check's cgroup: {e}"))?;
        let request = SpawnRequest {
            app: &order.app,
            slot: order.slot,
            process: &process,
            readiness: &Readiness::Immediate,
            listen_fds: &[],
            listen_bound: &[],
            notify_socket: None,
            base_env: launcher.base_env,
            nofile_soft: launcher.nofile_soft,
            run_token: placement.token.as_deref(),
            inject_library: None,
        };
        let cgroup = placement.cgroup.as_ref().map(|(_, fd)| fd.as_raw_fd());
        match spawn::spawn_quiet(&request, launcher.spawner, cgroup) {
            Ok((pid, status)) => {
                let check = CheckProcess {
                    worker: order.pid,
                    check: order.check,
                    process: Transient::new(pid, status, placement, launcher.undertaker),
                    cancelled: false,
                };
                self.processes.insert(pid, check);
                Ok(pid)
            }
            Err(error) => {
                launcher.groups.discard(placement);
                Err(format!("cannot start the check: {error}"))
            }
        }
    }

    /// Stop the check of the worker led by `pid`, if one runs: a task is
    /// aborted, a process killed; neither answers.
    pub(crate) fn cancel(&mut self, pid: i32) {
        match self.running.remove(&pid) {
            Some(Running::Task(task)) => task.abort(),
            Some(Running::Process(process)) => {
                if let Some(running) = self.processes.get_mut(&process) {
                    running.cancelled = true;
                    // Not reaped yet (it is still in the map).
                    running.process.kill();
                }
            }
            None => {}
        }
    }

    /// Child `pid` was reaped: if it was a check's process, its answer
    /// (unless cancelled) and what it left go. Whether it was one.
    pub(crate) fn reaped(
        &mut self,
        pid: i32,
        exit: Exit,
        groups: &mut Groups,
        undertaker: &mut Undertaker,
    ) -> bool {
        let Some(process) = self.processes.remove(&pid) else {
            return false;
        };
        // Only if it is still this process that runs for the worker: one
        // killed at its timeout may be reaped after the next check started.
        if matches!(self.running.get(&process.worker), Some(Running::Process(p)) if *p == pid) {
            self.running.remove(&process.worker);
        }
        let status = process.process.ended(groups, undertaker);
        if !process.cancelled {
            let (passed, detail) = match (status, exit) {
                (ExecStatus::Failed(error), _) => (false, format!("could not run: {error}")),
                (_, Exit::Code(0)) => (true, String::new()),
                (_, exit) => (false, exit.to_string()),
            };
            self.answers.push(CheckAnswer {
                pid: process.worker,
                check: process.check,
                passed,
                detail,
            });
        }
        true
    }

    /// An upgrade: every check that runs is stopped, unanswered (the core
    /// of the new image orders them again). A check's process is killed and
    /// what it leaves goes with it; the new image reaps it as a stranger.
    pub(crate) fn abandon(&mut self, groups: &mut Groups, undertaker: &mut Undertaker) {
        for (_, running) in self.running.drain() {
            if let Running::Task(task) = running {
                task.abort();
            }
        }
        for (_, check) in self.processes.drain() {
            // Not reaped yet, so the pid is still its group's.
            check.process.kill();
            check.process.ended(groups, undertaker);
        }
        self.answers.clear();
    }

    /// The answers of `exec` checks since the last call.
    pub(crate) fn take_answers(&mut self) -> Vec<CheckAnswer> {
        std::mem::take(&mut self.answers)
    }
}
