//! `supervise`: a declarative process supervisor for Linux.
//!
//! # Theory of operation
//!
//! The crate is laid out the way data flows (DESIGN.md §3).
//!
//! **The file.** [`config`] reads and checks the ecosystem file — the same
//! function for `supervise check`, the start, and every live reload — and
//! resolves it into the [`spec`] model, which is all the rest of the program
//! ever sees. What depends on the machine (users, groups, the program along
//! `PATH`, the CPU count) is looked up there, through [`host`], and stored in
//! the spec: a spawn looks nothing up. While the supervisor runs, the file is
//! watched, read and checked on a thread of its own
//! ([`effects::watch`]), so nothing about it — a FIFO in its place, a slow
//! NSS lookup — can stall the loop.
//!
//! **The core.** [`core`] holds the state of every app and worker and is
//! pure: no clock, no process, no file. Every change to a worker is an
//! [`core::Input`] — a process was spawned or could not be, ran its program or
//! not, exited; its group emptied; a probe or a notify datagram said it is
//! ready; a new version of the file; a command; shutdown; time passing. Each
//! moves a few workers through their state machine ([`core::worker`], whose
//! transitions are checked against a table; an input a state does not accept
//! is a logged no-op) and marks their app dirty. [`core::Core::converge`] then
//! reconciles every dirty app ([`core::reconcile`]: level-triggered, like a
//! Kubernetes controller, O(N log N) per app) until nothing is left to do, and
//! emits [`core::Action`]s: spawn, signal a process group, release a group,
//! report.
//!
//! **The shell.** [`supervisor::Supervisor`] is the loop's body, generic over
//! [`effects::Effects`] — spawn, signal a group, reap, the clock, bind. It
//! turns an event into inputs, lets the core settle, and carries out the
//! actions; the one result the core waits for (a spawn's pid or failure) is
//! fed back before the next event. [`effects::system::System`] is the real
//! world: workers are forked by a small spawner process
//! ([`effects::spawn::Spawner`]) with everything prepared before the fork,
//! output is pumped through bounded queues, an undertaker kills every group
//! if the supervisor dies. [`supervisor::launch`] starts the loop, which owns the event sources: one
//! SIGCHLD stream, SIGINT/SIGTERM/SIGHUP, the config loader, exec-status
//! reports, probes, the notify socket, the control socket ([`control`]),
//! the `/metrics` endpoint ([`effects::metrics`], which renders a snapshot
//! of the loop's state off its thread: [`metrics`]), and the timer the core
//! asks for.
//!
//! **The life of an event.** A worker crashes: the kernel sends SIGCHLD; the
//! loop wakes and calls `handle(ChildExited)`; the shell reaps every exited
//! child (`waitpid`) and feeds each exit to the core; the worker's state
//! machine applies the restart policy (`Backoff { until }`) and its app is
//! reconciled, which asks to be woken at `until`; the shell logs the exit and
//! kills what is left of the process group. At `until` the timer fires,
//! reconcile says `Start`, the worker becomes `Spawning`, the shell asks the
//! spawner for a process and feeds the pid back; the worker is `Starting`
//! until its exec status (or probe, or notify datagram) makes it `Ready`.
//!
//! **Elsewhere.** [`export`] translates a checked file for the engines that
//! do the job beyond one machine or instead of us: Kubernetes objects and
//! systemd units, with a warning (placed like `check`'s) for every key that
//! does not translate.
//!
//! **The proof.** Because the loop is generic over its effects,
//! [`simulation`] runs the real supervisor over a fake process table on a
//! simulated clock, through seeded schedules of faults, commands, edits and
//! shutdowns, checking invariants after every step (crates/sim).

pub mod cli;
pub mod client;

pub mod control;

pub mod metrics;

pub mod replace;
pub mod scale;

pub mod supervisor;
pub mod upgrade;
