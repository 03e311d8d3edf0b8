//! The effectful shell around the pure core: processes, signals, sockets,
//! files and output.
//!
//! What the supervisor loop does to the world goes through one narrow
//! interface, [`Effects`]: spawn, signal a process group, reap, the clock,
//! bind. [`system::System`] is the real one (fork+exec, `killpg`, `waitpid`,
//! the socket registry, output pumps, probes, the undertaker);
//! the simulation (crates/sim) has a deterministic process table behind the
//! same trait, and drives the real supervisor loop through it.

pub mod cgroup;
pub(crate) mod checks;
pub mod clock;
pub mod clock_set;
pub mod fd_room;
mod load;

pub(crate) mod groups;
pub(crate) mod inject;
pub mod logfile;
pub mod logging;
pub mod notify;
pub mod output;
pub(crate) mod probe;
pub mod procfs;
pub mod runtime;
pub mod signals;
pub mod sockets;
pub mod spawn;
pub mod system;
pub mod systemd;
pub mod tracking;
pub(crate) mod transient;
pub mod undertaker;
pub mod upgrade;
pub mod usage;
pub mod watch;

use std::collections::HashSet;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use model::Signal;

use model::orders::{CheckOrder, SpawnOrder};
use model::process::{Exit, StartError};
use model::spec::{AppSpec, Desired, ListenAddress, Readiness, SocketKey};
pub use model::usage::{GroupUsage, LoadSample};
pub use sockets::BindError;
use upgrade::KeptOpen;
use upgrade::probe::{ProbeEnd, RunningProbe};

/// A reaped child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub pid: i32,
    pub exit: Exit,
    /// Set when the process never ran the program (the status pipe said why).
    pub start_error: Option<StartError>,
}

/// The answer of a liveness check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckAnswer {
    /// The leader of the worker checked.
    pub pid: i32,
    /// The check's number.
    pub check: u64,
    pub passed: bool,
    /// Why it failed, in words.
    pub detail: String,
}

/// A spawn that created no process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnFailure {
    pub error: StartError,
    /// What went wrong, in words (which program, which limit).
    pub detail: String,
}

/// A worker to start, and its bound listening sockets.
#[derive(Debug)]
pub struct Start<'a> {
    pub order: &'a SpawnOrder,
    pub sockets: Vec<(RawFd, ListenAddress)>,
}

/// Everything the supervisor loop does to the world.
pub trait Effects {
    /// The monotonic clock.
    fn now(&self) -> Instant;

    /// The wall clock (cron schedules are evaluated on it).
    fn wall_clock(&self) -> std::time::SystemTime;

    /// Start the process of each worker (and its output capture and
    /// readiness probe) with its bound listening sockets: in the order
    /// given, the pid of each, or why not.
    fn spawn(&mut self, starts: &[Start]) -> Vec<Result<i32, SpawnFailure>>;

    /// Send `signal` to instance `pgid`: its process group and whatever
    /// escaped it (an empty group is fine).
    fn signal_group(&mut self, pgid: i32, signal: Signal);

    /// The next exited child, without blocking; `None` when there is none.
    fn reap(&mut self) -> Option<Reaped>;

    /// Which of these instances (named by their leader's process group) have
    /// no process left — in their group, or escaped from it.
    fn empty_groups(&mut self, pgids: &[i32]) -> Vec<i32>;

    /// Whether the loop must look at draining groups on a timer: nothing
    /// tells it when one empties (with cgroups, inotify does).
    fn needs_polling(&self) -> bool;

    /// SIGKILL what is left of instance `pgid` (its leader is gone); how many were left.
    fn kill_leftovers(&mut self, pgid: i32) -> usize;

    /// The instance is gone for good: stop tracking it (the undertaker too).
    fn forget_group(&mut self, pgid: i32);

    /// Something about the instances' processes changed (a cgroup emptied),
    /// or the effects asked to be woken: tidy up what is gone.
    fn settle_groups(&mut self);

    /// `exec` in process `pid` succeeded (`None`) or failed: recorded, so that
    /// its exit is reaped with the cause. An exit that was reaped before (and
    /// held back for this) is returned now.
    fn exec_known(&mut self, pid: i32, error: Option<StartError>) -> Option<Reaped>;

    /// Stop the readiness probe of process `pid`, if one runs.
    fn cancel_probe(&mut self, pid: i32);

    /// Start a liveness check. Its answer comes back later: as an event
    /// from a task (tcp, http), or from [`Effects::take_check_answers`]
    /// once its process is reaped (exec).
    fn check(&mut self, order: &CheckOrder);

    /// Stop the liveness check of the worker led by `pid`, if one runs; it
    /// will not be answered.
    fn cancel_check(&mut self, pid: i32);

    /// The answers of `exec` checks whose process was reaped.
    fn take_check_answers(&mut self) -> Vec<CheckAnswer>;

    /// The load of autoscaled `app`: the connections waiting in the accept
    /// queues of its TCP listening sockets, and the CPU each of `leaders`
    /// (its ready instances) used since the last sample of it, summed.
    fn sample_load(&mut self, app: &AppSpec, leaders: &[i32]) -> LoadSample;

    /// Measure the memory of the instances led by `pids`, off the loop;
    /// the answer comes back as an event, with `round`.
    fn measure_memory(&mut self, round: u64, pids: Vec<i32>);

    /// How many processes may start now: the file descriptors they need
    /// are free ([`fd_room`]).
    fn start_room(&mut self) -> usize;

    /// The hard memory ceiling of the running instance led by `pgid` is now
    /// `bytes` (`None`: none), where the kernel can hold it to one.
    fn limit_memory(&mut self, pgid: i32, bytes: Option<u64>);

    /// The socket for `key` (bound now for `app` if new), and where it is bound.
    fn bind(&mut self, key: &SocketKey, app: &str) -> Result<(RawFd, ListenAddress), BindError>;

    /// Close every socket not in `wanted`; the keys closed.
    fn retain_sockets(&mut self, wanted: &HashSet<SocketKey>) -> Vec<SocketKey>;

    /// Tell systemd, when it supervises us.
    fn notify_systemd(&mut self, state: &str);

    /// Drop the output kept for a slot (or a whole app) that is gone.
    fn forget_output(&mut self, app: &str, slot: Option<u32>);

    /// A version of the file was applied: each app's output goes to the
    /// log file it names from now on (a change restarts nothing), and
    /// `logs` may name its apps and their instances, no other.
    fn route_output(&mut self, desired: &Desired);

    // An upgrade, the same steps for the real effects and the simulated
    // ones (see the supervise crate's `upgrade`): the probe of the new
    // binary, what is handed over, and the exec.

    /// What the effects hand the next image: their sockets, children and
    /// pipes, and what each process was at.
    type Handover: KeptOpen + serde::Serialize + serde::de::DeserializeOwned;

    /// The effects' part of an upgrade's state, now (nothing stops: if the
    /// exec fails, everything goes on).
    fn handover(&self) -> Self::Handover;

    /// Start `binary --upgrade-probe`, fed `state`.
    fn start_upgrade_probe(
        &mut self,
        binary: &Path,
        state: Vec<u8>,
    ) -> Result<RunningProbe, String>;

    /// How the probe ended, once reaped; forgotten once taken.
    fn probe_ended(&mut self) -> Option<ProbeEnd>;

    /// Give the probe up (timed out, or we stop): killed if it still runs.
    fn abandon_probe(&mut self);

    /// Right before the exec: the liveness checks that run are stopped,
    /// unanswered (the new image orders them again).
    fn abandon_transients(&mut self);

    /// Right before the exec: the undertaker is told to wait for the new
    /// image `takeover` long, and the output is written out (`flush` at most).
    fn prepare_exec(&mut self, takeover: Duration, flush: Duration);

    /// Replace this image by `binary` (with `args`), handing it `state` and
    /// keeping `fds` open. The real effects return only when the exec
    /// failed; `Ok` is a simulated exec that took place (the caller then
    /// makes the new image from `state`).
    fn exec(
        &mut self,
        binary: &Path,
        args: &[std::ffi::OsString],
        state: &[u8],
        fds: &[RawFd],
    ) -> std::io::Result<()>;

    /// The exec failed: the undertaker stops waiting, the log files are
    /// written again.
    fn exec_failed(&mut self);

    /// In the new image: the readiness probe of a worker that was starting.
    fn resume_probe(&mut self, app: &str, slot: u32, readiness: &Readiness, pid: i32);
}
