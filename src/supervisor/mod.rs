//! The supervisor loop's body: it turns each event into inputs of the pure
//! [`Core`] and carries out the actions the core returns, through
//! [`Effects`].
//!
//! [`Supervisor::handle`] takes one piece of news (a child exited, a signal, a new
//! version of the file, an exec status, a probe result, a notify datagram, a
//! health check's answer, a memory measurement, a timer) and does not return
//! before the core has settled: every spawn it ordered has been tried and its
//! result fed back. It is generic over the effects, so the same code runs
//! on the real system (the loop: [`launch`], `run`) and in the
//! deterministic simulation (crates/sim) over a fake process table.
//!
//! One concern per file: `execute` (the one executor: actions → effects),
//! `exits` (reaping and draining groups), `readiness` (exec status,
//! probes, notify), [`file`](mod@file) (a new version of the file), `commands` (from
//! the control socket), `status`, `snapshot` (for `/metrics`), `shutdown`,
//! [`report`] (events → log), [`upgrade`] and [`upgrading`] (what an
//! upgrade hands over, and its steps), [`launch`] and `run` (the real loop:
//! how it starts, and its turns).

mod commands;
mod execute;
mod exits;
pub(crate) mod file;
pub(crate) mod launch;
mod readiness;
pub(crate) mod report;
mod run;
mod shutdown;
mod snapshot;
mod status;
pub mod upgrade;
pub mod upgrading;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant, SystemTime};

use effects::notify::Notification;
use effects::spawn::ExecStatus;
use effects::{CheckAnswer, Effects};
pub use file::{Load, Loaded};
use model::spec::Desired;
use supervise_core::{Action, Core, Input};

/// While a stopped worker's leader is gone but its group is not yet empty,
/// the group is looked at this often.
pub const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Rounds of (converge, carry out) per event: a bug guard, far above need
/// (a round ends when no spawn result is left to feed back).
const MAX_ROUNDS: usize = 64;

/// What happened in the world, for [`Supervisor::handle`] (the core's own
/// reports are `supervise_core::Event`).
#[derive(Debug)]
pub enum News {
    /// SIGCHLD: one or more children may have exited.
    ChildExited,
    /// SIGINT (a second one kills everything).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// The config loader checked the file.
    Config(Loaded),
    /// What the exec-status pipe of `pid` said.
    ExecStatus { pid: i32, status: ExecStatus },
    /// The readiness probe of `pid` succeeded.
    ProbeSucceeded { pid: i32 },
    /// A datagram on the notify socket.
    Notified(Notification),
    /// A liveness check answered.
    Checked(CheckAnswer),
    /// What instances use in memory: `(leader pid, bytes)`.
    /// (The answer to measurement `round`.)
    MemoryMeasured { round: u64, usage: Vec<(i32, u64)> },
    /// The processes of some instance changed (a cgroup emptied).
    GroupsChanged,
    /// The time [`Supervisor::next_wake`] asked for came.
    Timer,
    /// The loop ran this long past the time it asked to be woken at: a
    /// stall of ours (see `supervise_core::Input::Stalled`).
    Stalled { by: Duration },
}

/// The environment workers inherit: ours, without what describes *our* sockets.
pub(crate) fn worker_base_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(name, _)| {
            let name = name.as_bytes();
            name != b"NOTIFY_SOCKET"
                && !name.starts_with(b"LISTEN_")
                && !name.starts_with(b"WATCHDOG_")
        })
        .collect()
}

/// The core, the effects, and what the shell keeps for `status`.
pub struct Supervisor<E: Effects> {
    core: Core,
    effects: E,
    /// The file as the user named it (for messages).
    shown: String,
    /// The diagnostics of the last edit, while the file is invalid or unreadable.
    config_error: Option<String>,
    /// When the current version of the file was applied (for `status`).
    applied_at: SystemTime,
    /// When to look at draining groups again (while some drain). A fixed
    /// moment, so that frequent events cannot keep pushing it back.
    poll_at: Option<Instant>,
    /// Restarts, exits and versions of the file, counted for `/metrics`.
    tally: crate::metrics::Tally,
    /// The leaders of an autoscaled app's ready instances, for its sample.
    leaders: Vec<i32>,
}

impl<E: Effects> Supervisor<E> {
    /// A supervisor for the first version of the file. Its sockets must be
    /// bound already (in `effects`), so a start that cannot bind is refused
    /// before anything runs.
    pub fn new(desired: &Desired, shown: &str, own_uid: u32, effects: E) -> Supervisor<E> {
        let now = effects.now();
        Supervisor {
            core: Core::new(desired, own_uid, now),
            effects,
            shown: shown.to_string(),
            config_error: None,
            applied_at: SystemTime::now(),
            poll_at: None,
            leaders: Vec::new(),
            tally: Default::default(),
        }
    }

    /// Start the first version's workers.
    pub fn start(&mut self) {
        report::first_applied(&self.shown, self.core.desired());
        self.tally.applies += 1;
        let now = self.clock();
        self.execute(vec![Action::RouteOutput], now);
        self.settle(now);
    }

    pub fn core(&self) -> &Core {
        &self.core
    }

    pub fn effects(&self) -> &E {
        &self.effects
    }

    pub fn effects_mut(&mut self) -> &mut E {
        &mut self.effects
    }

    /// Everything is stopped after a shutdown.
    pub fn finished(&self) -> bool {
        self.core.finished()
    }

    /// Take the effects back once finished.
    pub fn into_effects(self) -> E {
        self.effects
    }

    /// Handle one event completely: inputs to the core, then carry out what
    /// it decides until it has settled.
    pub fn handle(&mut self, news: News) {
        self.handle_all([news]);
    }

    /// Handle a batch of events, then let the core settle once.
    pub fn handle_all(&mut self, news: impl IntoIterator<Item = News>) {
        let now = self.clock();
        self.core.begin_turn(self.effects.start_room());
        for news in news {
            self.take(news, now);
        }
        self.settle(now);
    }

    fn take(&mut self, news: News, now: Instant) {
        match news {
            News::ChildExited => self.reap(now),
            News::Interrupt => self.interrupt(),
            News::Terminate => self.terminate(),
            News::Config(loaded) => self.config(loaded, now),
            News::ExecStatus { pid, status } => self.exec_status(pid, status, now),
            News::ProbeSucceeded { pid } => self.probe_succeeded(pid, now),
            News::Notified(notification) => self.notified(notification, now),
            News::Checked(answer) => self.check_answered(answer, now),
            News::MemoryMeasured { round, usage } => self.memory_measured(round, usage, now),
            News::GroupsChanged => self.groups_changed(now),
            News::Timer => self.timer(now),
            News::Stalled { by } => self.core.input(Input::Stalled { by }, now),
        }
    }

    /// Both clocks, read now: the core gets the wall clock with the instant.
    fn clock(&mut self) -> Instant {
        let now = self.effects.now();
        self.core.set_wall_clock(self.effects.wall_clock(), now);
        now
    }

    /// When to send [`News::Timer`] if nothing happens before.
    pub fn next_wake(&self) -> Instant {
        let wake = self.core.next_wake();
        self.poll_at.map_or(wake, |poll| wake.min(poll))
    }

    /// Converge and carry out the actions until nothing is left to do.
    fn settle(&mut self, now: Instant) {
        for _ in 0..MAX_ROUNDS {
            self.core.converge(now);
            let actions = self.core.take_actions();
            if actions.is_empty() && !self.core.unsettled() {
                let draining = self.core.draining_groups().next().is_some();
                self.poll_at = (draining && self.effects.needs_polling())
                    .then(|| self.poll_at.unwrap_or(now + GROUP_POLL_INTERVAL));
                return;
            }
            self.execute(actions, now);
        }
        tracing::error!("the core did not settle within {MAX_ROUNDS} rounds; continuing");
    }
}
