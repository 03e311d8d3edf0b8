//! A deterministic process table: the [`Effects`] the simulation runs the
//! real [`supervise::supervisor::Supervisor`] on (`tests/simulation.rs`).
//!
//! Nothing here is random and nothing reads a clock: the driver sets the
//! time ([`FakeEffects::advance_to`]), says how the next processes behave
//! ([`FakeEffects::plans`]: a failing exec, a stop signal ignored, a slow
//! drain, children that outlive their leader) and makes things happen
//! ([`FakeEffects::crash`]). It models what the supervisor relies on: a
//! process is a zombie until reaped; its group lives while a member does;
//! SIGKILL always kills; a process reaped before its exec status was read
//! waits for it, as on the real system.
//!
//! A program ends on its own when its command line says so, as a one-shot
//! or a scheduled job does: `--exit-after-ms=N` ([`EXIT_AFTER_MS`]) exits N
//! ms after the spawn, with code 1 for the first `--fail-runs=K`
//! ([`FAIL_RUNS`]) processes of its instance and 0 after (a job that fails
//! until it is retried or fixed).
//!
//! The fake also keeps what the invariants need to know about the moment
//! something happened, which a look after the event could no longer tell:
//! which apps had processes when a signal was sent ([`Signalled`]), and
//! which other processes of its app lived when a process was spawned.
//!
//! Two ways of learning that an instance's processes are gone are modelled,
//! as the two tracking modes have them: polled (process groups, the
//! environment: the loop looks on a timer) and announced (cgroups: the
//! kernel says so through `cgroup.events`, and the driver delivers
//! [`supervise::supervisor::News::GroupsChanged`] when
//! [`FakeEffects::take_emptied_groups`] says one emptied).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use model::Signal;

use effects::spawn::ExecStatus;
use effects::upgrade::KeptOpen;
use effects::upgrade::probe::{ProbeEnd, ProbeOutput, RunningProbe};
use effects::{BindError, CheckAnswer, Effects, Reaped, SpawnFailure, Start};
use model::orders::{CheckOrder, SpawnOrder};
use model::process::{Exit, StartError};
use model::spec::{AppSpec, ListenAddress, Readiness, SocketKey};
use model::usage::LoadSample;

/// How a fake process behaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behaviour {
    /// `exec` fails with this.
    pub exec_error: Option<StartError>,
    /// The stop signal is ignored (only SIGKILL ends it).
    pub ignores_stop: bool,
    /// From the stop signal to the exit.
    pub stop_delay: Duration,
    /// Members of its group that outlive the leader…
    pub leftovers: u32,
    /// …by this long (unless SIGKILLed).
    pub leftover_delay: Duration,
}

/// Where a fake process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    Running,
    /// Told to stop; exits at `at`.
    Exiting {
        at: Instant,
        exit: Exit,
    },
    /// Exited, not reaped yet.
    Zombie(Exit),
    Reaped,
}

/// The argument that makes a fake program end on its own, this many
/// milliseconds after its spawn: `--exit-after-ms=800`.
pub(crate) const EXIT_AFTER_MS: &str = "--exit-after-ms=";
/// The argument that makes the first K processes of each instance of a
/// program that ends on its own exit 1 (0 after): `--fail-runs=1`.
pub(crate) const FAIL_RUNS: &str = "--fail-runs=";

/// One signal sent, and the apps that had a process (a live group: a
/// member running, stopping, or a zombie not reaped yet) at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signalled {
    pub(crate) pgid: i32,
    pub(crate) signal: Signal,
    /// The app of the group signalled (`None`: a pid never spawned).
    pub(crate) app: Option<String>,
    pub(crate) live_apps: BTreeSet<String>,
}

/// One process the supervisor started.
#[derive(Debug, Clone)]
pub struct FakeProcess {
    pub(crate) pid: i32,
    pub(crate) app: String,
    pub(crate) slot: u32,
    pub(crate) generation: u64,
    pub(crate) readiness: Readiness,
    pub(crate) behaviour: Behaviour,
    pub(crate) life: Life,
    /// The exec status was reported to the driver (and is due to the supervisor).
    pub(crate) exec_reported: bool,
    /// The supervisor was told the exec status (`exec_known`).
    exec_known: bool,
    /// What the exec status said, once reported.
    start_error: Option<StartError>,
    /// Group members left behind by the leader, and when they exit.
    pub(crate) leftovers: u32,
    pub(crate) leftovers_until: Option<Instant>,
    pub(crate) spawned_at: Instant,
    /// When and how it ends on its own (its command line said so).
    pub(crate) ends: Option<(Instant, Exit)>,
    /// The other processes of its app whose group lived when it was spawned.
    pub(crate) beside_at_spawn: Vec<i32>,
    /// A socket of its definition has `inject`.
    pub(crate) injects: bool,
    /// The preload library said it handed the program its socket.
    pub(crate) injected: bool,
}

impl FakeProcess {
    /// Whether the preload library reaches its program: every third
    /// process (by pid) of an app with `inject` stands for a static binary
    /// it does not.
    pub fn reached_by_preload(&self) -> bool {
        self.injects && self.pid % 3 != 0
    }

    /// Running or stopping: not yet exited.
    pub fn is_alive(&self) -> bool {
        matches!(self.life, Life::Running | Life::Exiting { .. })
    }

    /// Its group still has a member (the leader, even as a zombie, or a leftover).
    fn group_alive(&self, now: Instant) -> bool {
        !matches!(self.life, Life::Reaped)
            || (self.leftovers > 0 && self.leftovers_until.is_some_and(|t| t > now))
    }

    /// Runs the program (exec succeeded).
    pub(crate) fn runs_program(&self) -> bool {
        self.is_alive() && self.exec_reported && self.behaviour.exec_error.is_none()
    }

    fn exit(&mut self, exit: Exit, now: Instant) {
        if self.is_alive() {
            self.life = Life::Zombie(exit);
            if self.leftovers > 0 {
                self.leftovers_until = Some(now + self.behaviour.leftover_delay);
            }
        }
    }
}

/// The fake world.
#[derive(Debug)]
pub struct FakeEffects {
    /// When the fake was made, and the wall clock then: the wall clock
    /// advances with `now`.
    started: Instant,
    wall_at_start: std::time::SystemTime,
    now: Instant,
    next_pid: i32,
    processes: BTreeMap<i32, FakeProcess>,
    /// How the next spawned processes behave, in order (then the default).
    pub plans: VecDeque<Behaviour>,
    /// While set, spawns fail with this (fork: EAGAIN, say).
    pub(crate) spawn_failure: Option<StartError>,
    sockets: HashMap<SocketKey, RawFd>,
    next_fd: RawFd,
    /// Addresses whose bind fails.
    pub(crate) busy: HashSet<ListenAddress>,
    /// Every signal sent, in order: `(pgid, signal)`.
    pub signals: Vec<(i32, Signal)>,
    /// The same signals, with what lived when each was sent.
    pub(crate) signalled: Vec<Signalled>,
    /// What was done, in order: `spawn web.0 g2 pid 1004`, `SIGTERM 1001`.
    pub history: Vec<String>,
    /// What systemd was told.
    pub(crate) systemd: Vec<String>,
    probes: HashSet<i32>,
    /// Emptied groups are announced (cgroup mode), not polled.
    announces_empty_groups: bool,
    /// Processes spawned per instance `(app, slot)`, for `--fail-runs`.
    runs: HashMap<(String, u32), u32>,
    /// Groups that had a member when last looked at (announced mode).
    populated: BTreeSet<i32>,
    /// Liveness checks running, by the leader of the worker checked.
    checks: BTreeMap<i32, CheckOrder>,
    /// A memory measurement asked for and not answered yet: the leaders.
    pub(crate) measuring: Option<(u64, Vec<i32>)>,
    /// An upgrade's probe: its answer, taken once ([`Effects::probe_ended`]).
    probe: Option<ProbeEnd>,
    /// How the next upgrade's probe answers: agreeing, or refusing.
    pub(crate) probe_refuses: bool,
    /// Execs of a new image that took place.
    pub(crate) execs: u64,
    /// The starts there are file descriptors for, each turn.
    pub(crate) start_room: usize,
    /// The load of autoscaled apps, as the world sets it: the connections
    /// waiting, and the CPU of each ready instance (percent of one CPU).
    pub(crate) load: HashMap<String, (u32, u32)>,
}

/// What the simulated effects hand the next image: the listening sockets
/// (the same fds), and the processes whose exec status is known. The
/// processes themselves are the world's, as they are the kernel's: an exec
/// changes nothing about them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FakeHandover {
    pub(crate) sockets: Vec<(SocketKey, RawFd)>,
}

impl KeptOpen for FakeHandover {
    fn kept_open(&self) -> Vec<RawFd> {
        self.sockets.iter().map(|(_, fd)| *fd).collect()
    }
}

/// The fake wall clock's start, in seconds since the epoch: 2026-03-08
/// 06:00 UTC, one hour before daylight saving time begins in
/// America/New_York (07:00 UTC).
pub(crate) const FAKE_WALL_CLOCK_AT_START: u64 = 1_772_949_600;

impl FakeEffects {
    pub fn new(now: Instant) -> FakeEffects {
        FakeEffects {
            now,
            started: now,
            wall_at_start: std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(FAKE_WALL_CLOCK_AT_START),
            next_pid: 1000,
            processes: BTreeMap::new(),
            plans: VecDeque::new(),
            spawn_failure: None,
            sockets: HashMap::new(),
            next_fd: 100,
            busy: HashSet::new(),
            signals: Vec::new(),
            signalled: Vec::new(),
            history: Vec::new(),
            systemd: Vec::new(),
            probes: HashSet::new(),
            announces_empty_groups: false,
            runs: HashMap::new(),
            populated: BTreeSet::new(),
            checks: BTreeMap::new(),
            measuring: None,
            start_room: usize::MAX,
            load: HashMap::new(),
            probe: None,
            probe_refuses: false,
            execs: 0,
        }
    }

    /// Emptied groups are announced, as `cgroup.events` does in cgroup mode:
    /// the supervisor no longer polls for them.
    pub(crate) fn announcing_empty_groups(mut self) -> FakeEffects {
        self.announces_empty_groups = true;
        self
    }

    /// Announced mode: whether a group emptied since the last call (the
    /// driver then delivers `GroupsChanged`). Always `false` when polled.
    pub(crate) fn take_emptied_groups(&mut self) -> bool {
        if !self.announces_empty_groups {
            return false;
        }
        let emptied: Vec<i32> = self
            .populated
            .iter()
            .copied()
            .filter(|pgid| !self.group_exists(*pgid))
            .collect();
        for pgid in &emptied {
            self.populated.remove(pgid);
        }
        !emptied.is_empty()
    }

    /// Move time to `now`: stopping processes whose time came exit.
    /// The wall clock is set `by` forward or back (`date -s`, an NTP
    /// step); the monotonic clock goes on as it was.
    pub(crate) fn set_wall_clock(&mut self, forward: bool, by: std::time::Duration) {
        self.wall_at_start = if forward {
            self.wall_at_start + by
        } else {
            self.wall_at_start - by
        };
        self.history.push(format!(
            "wall clock set {} {} s",
            if forward { "forward" } else { "back" },
            by.as_secs()
        ));
    }

    pub(crate) fn advance_to(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        for process in self.processes.values_mut() {
            let own_end = process.ends.filter(|(at, _)| *at <= now);
            match (process.life, own_end) {
                // Told to stop, it may still finish its job first.
                (Life::Exiting { at, exit }, own_end) if at <= now => {
                    let exit = match own_end {
                        Some((end, own_exit)) if end < at => own_exit,
                        _ => exit,
                    };
                    process.exit(exit, now);
                }
                (Life::Running | Life::Exiting { .. }, Some((_, exit))) => process.exit(exit, now),
                _ => {}
            }
        }
    }

    /// The next moment something happens on its own (an exit, a leftover
    /// leaving, an exec status due, a program's own end).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.processes
            .values()
            .filter_map(|p| {
                let own_end = p.ends.filter(|_| p.is_alive()).map(|(at, _)| at);
                let other = match p.life {
                    Life::Exiting { at, .. } => Some(at),
                    _ if !p.exec_reported => Some(p.spawned_at),
                    _ => p.leftovers_until.filter(|t| *t > self.now),
                };
                other.into_iter().chain(own_end).min()
            })
            .min()
    }

    /// The apps with a live group now.
    fn live_apps(&self) -> BTreeSet<String> {
        self.processes
            .values()
            .filter(|p| p.group_alive(self.now))
            .map(|p| p.app.clone())
            .collect()
    }

    /// Exec statuses due to the supervisor: each process's once. A failed
    /// exec's process exits 127 at that moment.
    pub(crate) fn due_exec_reports(&mut self) -> Vec<(i32, ExecStatus)> {
        let now = self.now;
        let mut reports = Vec::new();
        for process in self.processes.values_mut() {
            if process.exec_reported || process.spawned_at > now {
                continue;
            }
            process.exec_reported = true;
            match process.behaviour.exec_error {
                Some(error) if process.is_alive() => {
                    process.start_error = Some(error);
                    process.exit(Exit::Code(127), now);
                    reports.push((process.pid, ExecStatus::Failed(error)));
                }
                _ => reports.push((process.pid, ExecStatus::Succeeded)),
            }
        }
        reports
    }

    /// A child exited and is not reaped: SIGCHLD is due.
    pub(crate) fn sigchld_pending(&self) -> bool {
        self.processes
            .values()
            .any(|p| matches!(p.life, Life::Zombie(_)))
    }

    /// Process `pid` exits on its own, now.
    pub fn crash(&mut self, pid: i32, exit: Exit) {
        let now = self.now;
        if let Some(process) = self.processes.get_mut(&pid) {
            process.exit(exit, now);
        }
    }

    pub(crate) fn process(&self, pid: i32) -> Option<&FakeProcess> {
        self.processes.get(&pid)
    }

    pub(crate) fn process_mut(&mut self, pid: i32) -> Option<&mut FakeProcess> {
        self.processes.get_mut(&pid)
    }

    pub fn processes(&self) -> impl Iterator<Item = &FakeProcess> {
        self.processes.values()
    }

    /// The processes spawned with a pid from `pid` on (pids only grow).
    pub fn spawned_since(&self, pid: i32) -> impl Iterator<Item = &FakeProcess> {
        self.processes.range(pid..).map(|(_, p)| p)
    }

    /// Processes with a readiness probe running.
    pub(crate) fn probing(&self) -> impl Iterator<Item = i32> + '_ {
        self.probes.iter().copied()
    }

    /// Whether the group `pgid` has a member (for the invariants).
    pub(crate) fn group_exists(&self, pgid: i32) -> bool {
        self.processes
            .get(&pgid)
            .is_some_and(|p| p.group_alive(self.now))
    }

    /// An upgrade's exec: what runs off the loop is lost (the liveness
    /// checks and a memory measurement; the real effects abandon them).
    /// The new image takes over what the last one handed over: the same
    /// sockets; what it did not hand over (a memory measurement, the
    /// readiness probes it runs again itself) is gone.
    pub(crate) fn restore(&mut self, state: FakeHandover) -> Result<(), String> {
        let handed: HashMap<SocketKey, RawFd> = state.sockets.into_iter().collect();
        if handed != self.sockets {
            return Err(format!(
                "the sockets handed over {handed:?} are not those open {:?}",
                self.sockets
            ));
        }
        self.measuring = None;
        self.probes.clear();
        self.history.push("new image".into());
        Ok(())
    }

    /// The liveness checks running: `(leader, check number)`.
    pub(crate) fn checks(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.checks.values().map(|c| (c.pid, c.check))
    }

    /// The check of `pid` is answered (by the driver): it no longer runs.
    pub(crate) fn check_done(&mut self, pid: i32) -> Option<CheckOrder> {
        self.checks.remove(&pid)
    }
}

mod carried_out;
