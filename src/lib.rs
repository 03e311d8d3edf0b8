//! `supervise`: a declarative process supervisor for Linux — the binary
//! crate: the loop, the command line, the client, the control and
//! `/metrics` servers, and self-upgrade, over the crates of `crates/`.
//!
//! # Theory of operation
//!
//! The crates are laid out the way data flows (crates/README.md has the
//! graph; `tests/it/layers.rs` holds it), and each layer sees only the one
//! below:
//!
//! **The file.** `config` reads and checks the ecosystem file — the same
//! function for `supervise check`, the start, and every live reload — and
//! resolves it into `model::spec`, which is all the rest of the program ever
//! sees. What depends on the machine (users, groups, the program along
//! `PATH`, the CPU count) is looked up then and stored in the spec: a spawn
//! looks nothing up that the check found. While the supervisor runs, the
//! effects' watcher reads the file on a thread of its own, and the check
//! runs there too ([`supervisor::file`]), so nothing about the file — a FIFO
//! in its place, a slow NSS lookup — can stall the loop.
//!
//! **The core.** `supervise_core` holds the state of every app and worker
//! and is pure: no clock, no process, no file (it depends on `model` only).
//! Every change to a worker is an `Input` — a process was spawned or could
//! not be, ran its program or not, exited; its group emptied; a probe or a
//! notify datagram said it is ready; a socket was bound; a new version of
//! the file; a command; shutdown; a stall of ours; time passing. Each moves
//! a few workers through their state machine (transitions checked against a
//! table; an input a state does not accept is a logged no-op) and marks
//! their app dirty. `Core::converge` then reconciles every dirty app
//! (level-triggered, like a Kubernetes controller, O(N log N) per app)
//! until nothing is left to do, and emits `Action`s: spawn, bind, signal a
//! process group, release a group, route output, report.
//!
//! **The shell.** [`supervisor::Supervisor`] turns what happened into
//! inputs, lets the core settle, and carries out the actions in one place
//! (its executor), through the `effects::Effects` trait; the results the
//! core waits for (a spawn's pid, a bind) are fed back before the next
//! event. `effects::system::System` is the real world: workers are forked
//! by a small spawner process with everything prepared before the fork,
//! output is pumped through bounded queues, an undertaker kills every group
//! if the supervisor dies. The loop ([`supervisor::launch`]) owns the event
//! sources — one SIGCHLD stream, SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2, the
//! file's loader, exec-status reports, probes, the notify socket, the
//! control socket ([`control`]), the `/metrics` endpoint ([`metrics`]), and
//! the timer the core asks for — and each turn takes every fact waiting
//! before it judges a deadline.
//!
//! **The life of an event.** A worker crashes: the kernel sends SIGCHLD; the
//! loop wakes and hands the supervisor `ChildExited`; the shell reaps every
//! exited child (`waitpid`) and feeds each exit to the core; the worker's
//! state machine applies the restart policy (`Backoff { until }`) and its
//! app is reconciled, which asks to be woken at `until`; the shell logs the
//! exit and kills what is left of the process group. At `until` the timer
//! fires, reconcile says `Start`, the worker becomes `Spawning`, the shell
//! asks the spawner for a process and feeds the pid back; the worker is
//! `Starting` until its exec status (or probe, or notify datagram) makes it
//! `Ready`.
//!
//! **An upgrade** ([`upgrade`], [`supervisor::upgrading`]) is steps of the
//! same shell: the new binary is probed with the state, the state — the
//! core's, the effects', the loop's — is handed over, and the new image
//! execs in the same pid, adopting every worker, pipe and socket.
//!
//! **Elsewhere.** `export` translates a checked file for the engines that do
//! the job beyond one machine or instead of us (Kubernetes objects, systemd
//! units), with a warning (placed like `check`'s) for every key that does
//! not translate; `import` reads pm2, supervisord and Procfile files.
//!
//! **The proof.** Because the supervisor is generic over its effects, the
//! simulation (crates/sim) runs the real one over a fake process table on a
//! simulated clock, through seeded schedules of faults, commands, edits,
//! upgrades and shutdowns, checking invariants after every step.
//!
//! # Glossary
//!
//! - *app*: an entry of `apps:`; *instance*: one running copy, `APP.N`;
//!   *slot*: its number N, stable across restarts and replacements.
//! - *worker*: the core's record of one slot running one *generation* (a
//!   version of the app's process definition); a new generation gets new
//!   workers, which a *rollout* puts in place of the old, slot by slot.
//! - *leader*: the process started for an instance; its group (or cgroup)
//!   holds the instance's processes.
//! - *ready*: counted as serving; *hold*: stopped by `supervise stop` until
//!   `start`; *recycle*: one instance replaced (unhealthy, over its memory).
//! - *fact*: news about the workers (an exit, an exec status, a datagram);
//!   *order*: anything else that wakes the loop (a command, a timer).
//! - *spawner*, *undertaker*: the helper processes that fork the workers and
//!   kill them all if supervise dies.
//!
//! The manual (docs/) has the longer glossary.

pub mod cli;
pub mod client;
pub mod control;
pub mod metrics;
pub(crate) mod replace;
pub(crate) mod scale;
pub mod supervisor;
pub mod upgrade;
