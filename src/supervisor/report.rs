//! The core's events, as log lines: a sentence for people, and with
//! `--log-format json` an `event` name and fields — a stable interface (the manual's
//! event log, docs/src/events.md) that tests and scripts wait on.

use std::time::Duration;

use tracing::{debug, error, info, warn};

use model::process::Exit;
use model::spec::{Desired, SocketKey};
use model::usage::binary_size;
use supervise_core::Event;
use supervise_core::event::Instance;
use supervise_core::worker::{Decision, StopEnd};

/// `web.2`, as in the output prefix.
fn label(instance: &Instance) -> String {
    format!("{}.{}", instance.app, instance.slot)
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// `800ms`, `1.2s`, `2m5s`: short and exact enough for a log line.
pub(crate) fn short_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A decision as event fields: (`decision`, `attempt`, `delay_ms`).
fn decision_fields(decision: &Decision) -> (&'static str, Option<u32>, Option<u64>) {
    match decision {
        Decision::Restart { attempt, delay } => ("restart", Some(*attempt), Some(millis(*delay))),
        Decision::GiveUp { .. } => ("failed", None, None),
        Decision::Done => ("done", None, None),
        Decision::Replaced => ("replaced", None, None),
    }
}

fn describe(decision: &Decision) -> String {
    match decision {
        Decision::Restart { attempt, delay } => {
            format!("restart {attempt} in {}", short_duration(*delay))
        }
        Decision::GiveUp { restarts, within } => format!(
            "{restarts} restarts within {}: giving up (failed)",
            short_duration(*within)
        ),
        Decision::Done => "not restarted (restart policy)".to_string(),
        Decision::Replaced => "its replacement takes its slot".to_string(),
    }
}

fn exit_fields(exit: Exit) -> (Option<i32>, Option<&'static str>) {
    match exit {
        Exit::Code(code) => (Some(code), None),
        Exit::Signal { signal, .. } => (
            None,
            model::Signal::from_number(signal).map(model::Signal::as_str),
        ),
    }
}

/// The first version of the file is in force.
pub(crate) fn first_applied(shown: &str, desired: &Desired) {
    let instances: u32 = desired.apps.iter().map(|a| a.instances).sum();
    info!(
        event = "applied",
        file = %shown,
        file_version = 1,
        "applied {shown}: {}, {}",
        plural(desired.apps.len(), "app"),
        plural(instances as usize, "instance")
    );
}

/// Leftovers of an exited leader's group were killed.
pub(crate) fn group_killed(instance: &Instance, pid: i32, count: usize) {
    warn!(
        event = "group_killed", app = %instance.app, slot = instance.slot, pid, count,
        "{}: killed {count} leftover processes of its group", label(instance)
    );
}

/// A socket no app wants any more was closed.
pub(crate) fn unlistening(closed: &SocketKey) {
    let address = &closed.address;
    match closed.slot {
        Some(slot) => {
            info!(event = "unlistening", address = %address, slot, "closed the socket on {address} of slot {slot}")
        }
        None => info!(event = "unlistening", address = %address, "closed the socket on {address}"),
    }
}

/// Log one event of the core.
pub(crate) fn event(event: &Event, shown: &str) {
    match event {
        Event::Spawned { .. }
        | Event::StartFailed { .. }
        | Event::Ready { .. }
        | Event::AllReady
        | Event::StartedPartly { .. }
        | Event::Exited { .. }
        | Event::Stopping { .. }
        | Event::Killing { .. }
        | Event::Stopped { .. }
        | Event::Shutdown { .. }
        | Event::KillAll => process(event),
        Event::RolloutHalted { .. }
        | Event::Plan(_)
        | Event::Applied { .. }
        | Event::BindFailed { .. }
        | Event::Reload { .. } => file(event, shown),
        Event::ForeignNotify { .. }
        | Event::NotInjected { .. }
        | Event::CheckFailed { .. }
        | Event::Healthy { .. }
        | Event::Unhealthy { .. }
        | Event::MemoryExceeded { .. }
        | Event::WatchdogMissed { .. }
        | Event::Recycling { .. } => liveness(event),
        Event::WaitingFor { .. }
        | Event::DependenciesMet { .. }
        | Event::DependencyFailed { .. }
        | Event::DependencyRestarted { .. }
        | Event::RunDue { .. }
        | Event::RunSkipped { .. }
        | Event::RunQueued { .. }
        | Event::RunEnded { .. }
        | Event::ClockStepped { .. }
        | Event::Autoscaled { .. } => order(event),
        Event::Reconciled { .. }
        | Event::Ignored(_)
        | Event::Stalled { .. }
        | Event::StartsWaitForRoom
        | Event::Anomaly(_) => own(event),
    }
}

/// A process started, became ready, ended or was stopped; shutdown.
fn process(event: &Event) {
    match event {
        Event::Spawned { instance, pid } => info!(
            event = "spawned", app = %instance.app, slot = instance.slot, pid, generation = instance.generation,
            "{} started (pid {pid})", label(instance)
        ),
        Event::StartFailed {
            instance,
            pid,
            error,
            detail,
            decision,
        } => {
            let (name, attempt, delay_ms) = decision_fields(decision);
            let why = detail.clone().unwrap_or_else(|| error.to_string());
            warn!(
                event = "start_failed", app = %instance.app, slot = instance.slot, pid,
                generation = instance.generation, errno = error.errno, stage = error.stage.name(),
                decision = name, attempt, delay_ms,
                "{} failed to start: {why}; {}", label(instance), describe(decision)
            );
        }
        Event::Ready {
            instance,
            pid,
            via,
            after,
        } => info!(
            event = "ready", app = %instance.app, slot = instance.slot, pid,
            generation = instance.generation, via = via.name(),
            "{} is ready (pid {pid}, after {}, by {})", label(instance), short_duration(*after), via.name()
        ),
        Event::AllReady => info!(event = "all_ready", "every instance is ready"),
        Event::StartedPartly { not_ready } => warn!(
            event = "started_partly", not_ready = ?not_ready,
            "started, but not every instance is ready: {} (each has had its start; they restart as their app says; under systemd, READY=1 is sent now)",
            not_ready.join(", ")
        ),
        Event::Exited {
            instance,
            pid,
            exit,
            ran,
            decision,
        } => {
            let (code, signal) = exit_fields(*exit);
            let (name, attempt, delay_ms) = decision_fields(decision);
            info!(
                event = "exited", app = %instance.app, slot = instance.slot, pid,
                generation = instance.generation, code, signal, decision = name, attempt, delay_ms,
                "{} {exit} after {}; {}", label(instance), short_duration(*ran), describe(decision)
            );
        }
        Event::Stopping {
            instance,
            pid,
            reason,
            command,
            signal,
            uptime,
        } => {
            let why = command.unwrap_or(reason.describe());
            info!(
                event = "stopping", app = %instance.app, slot = instance.slot, pid,
                generation = instance.generation, reason = why, uptime_ms = millis(*uptime),
                "{} stopping ({why}): {} to its processes (leader pid {pid})", label(instance), signal.as_str()
            );
        }
        Event::Killing {
            instance,
            pid,
            kill_timeout,
        } => warn!(
            event = "killing", app = %instance.app, slot = instance.slot, pid,
            "{} did not stop within kill_timeout {}: SIGKILL to its processes (leader pid {pid})",
            label(instance), short_duration(*kill_timeout)
        ),
        Event::Stopped {
            instance,
            pid,
            killed,
            leader_exit,
            took,
            end,
        } => {
            let how = match (killed, leader_exit) {
                (true, _) => "killed with SIGKILL".to_string(),
                (false, Some(exit)) => exit.to_string(),
                (false, None) => "gone".to_string(),
            };
            let took_ms = millis(*took);
            let took = short_duration(*took);
            let (app, slot, generation) = (&instance.app, instance.slot, instance.generation);
            match end {
                StopEnd::Remove => info!(
                    event = "stopped", app = %app, slot, pid, generation, killed, took_ms,
                    "{} stopped in {took} ({how})", label(instance)
                ),
                StopEnd::Restart => info!(
                    event = "stopped", app = %app, slot, pid, generation, killed, took_ms,
                    "{} stopped in {took} ({how}); starting it again", label(instance)
                ),
                StopEnd::Held => info!(
                    event = "stopped", app = %app, slot, pid, generation, killed, took_ms,
                    "{} stopped in {took} ({how}); held until `supervise start`", label(instance)
                ),
                StopEnd::Decided(decision) => {
                    let (name, attempt, delay_ms) = decision_fields(decision);
                    info!(
                        event = "stopped", app = %app, slot, pid, generation, killed, took_ms,
                        decision = name, attempt, delay_ms,
                        "{} stopped in {took} ({how}); {}", label(instance), describe(decision)
                    );
                }
            }
        }
        Event::Shutdown { why, processes } => info!(
            event = "shutdown",
            signal = why,
            "{why}: stopping {processes} processes (SIGINT again kills them at once)"
        ),
        Event::KillAll => warn!(
            event = "kill_all",
            "second SIGINT: killing every process group now"
        ),
        _ => {}
    }
}

/// A version of the file: its plan, its rollout, its sockets.
fn file(event: &Event, shown: &str) {
    match event {
        Event::RolloutHalted { instance } => error!(
            event = "rollout_halted", app = %instance.app, slot = instance.slot, generation = instance.generation,
            "{}: rollout halted: the replacement for slot {} failed; the old instances keep serving",
            instance.app, instance.slot
        ),
        Event::Plan(change) => {
            let app = match change {
                model::plan::AppChange::Added { name, .. }
                | model::plan::AppChange::Removed { name, .. }
                | model::plan::AppChange::Unchanged { name } => name,
                model::plan::AppChange::Changed(changed) => &changed.name,
            };
            info!(event = "plan", app = %app, "{change}");
        }
        Event::Applied {
            trigger,
            file_version,
        } => info!(
            event = "applied", file = %shown, file_version,
            "{trigger}: applied {shown} (version {file_version})"
        ),
        Event::BindFailed { app, error } => error!(
            event = "bind_failed", app = %app,
            "{app}: {error}; this app keeps its last good version"
        ),
        Event::Reload {
            app,
            generation,
            instances,
        } => info!(
            event = "reload", app = %app, generation,
            "{app}: reload requested; rolling replace of {}", plural(*instances as usize, "instance")
        ),
        _ => {}
    }
}

/// What a running instance was found to be: checks, memory, watchdog, the
/// notify socket and the preload library.
fn liveness(event: &Event) {
    match event {
        Event::ForeignNotify {
            app,
            pid,
            uid,
            expected,
        } => warn!(
            app = %app, pid,
            "notify datagram for {app} from uid {uid}, not the worker's uid {expected}; ignored"
        ),
        Event::NotInjected {
            instance,
            pid,
            addresses,
            before_ready,
        } => {
            let when = if *before_ready {
                "exited before it was ready, and its program never bound"
            } else {
                "is ready but its program never bound"
            };
            warn!(
                event = "not_injected", app = %instance.app, slot = instance.slot, pid,
                generation = instance.generation, addresses = %addresses.join(" "), before_ready,
                "{} {when} {} through libc's bind(): the preload library of `inject` did not reach it \
                 (a static binary, as Go and musl builds are, a program with file capabilities, or one that makes raw syscalls; \
                 its own bind() of the port supervise holds fails with EADDRINUSE); have it take its socket from the fd \
                 supervise passes (3 for the first `listen` address, as LISTEN_FDS and LISTEN_FDNAMES say; see the manual) \
                 and drop `inject` (a program that already does, as gunicorn, needs no `inject`)",
                label(instance),
                addresses.join(", ")
            );
        }
        Event::CheckFailed {
            instance,
            pid,
            failures,
            threshold,
            counted,
            detail,
        } => {
            let count = if *counted {
                format!("{failures}/{threshold} in a row")
            } else {
                "within grace, not counted".to_string()
            };
            info!(
                event = "check_failed", app = %instance.app, slot = instance.slot, pid,
                generation = instance.generation, failures, threshold, counted, detail = %detail,
                "{} health check failed ({count}): {detail}", label(instance)
            );
        }
        Event::Healthy { instance, pid } => info!(
            event = "healthy", app = %instance.app, slot = instance.slot, pid,
            generation = instance.generation,
            "{} is healthy again (pid {pid})", label(instance)
        ),
        Event::Unhealthy {
            instance,
            pid,
            failures,
            detail,
        } => warn!(
            event = "unhealthy", app = %instance.app, slot = instance.slot, pid,
            generation = instance.generation, failures, detail = %detail,
            "{} is unhealthy (pid {pid}): {failures} health checks failed in a row, the last: {detail}",
            label(instance)
        ),
        Event::MemoryExceeded {
            instance,
            pid,
            rss_bytes,
            limit_bytes,
        } => warn!(
            event = "memory_exceeded", app = %instance.app, slot = instance.slot, pid,
            generation = instance.generation, rss_bytes, limit_bytes,
            "{} uses {} (pid {pid}), over its max_memory of {}",
            label(instance), binary_size(*rss_bytes), binary_size(*limit_bytes)
        ),
        Event::WatchdogMissed {
            instance,
            pid,
            period,
            silent_for,
            triggered,
            signal,
        } => {
            let why = if *triggered {
                "sent WATCHDOG=trigger".to_string()
            } else {
                format!(
                    "sent no WATCHDOG=1 for {} (watchdog {})",
                    short_duration(*silent_for),
                    short_duration(*period)
                )
            };
            warn!(
                event = "watchdog_missed", app = %instance.app, slot = instance.slot, pid,
                generation = instance.generation, triggered, watchdog_ms = millis(*period),
                silent_ms = millis(*silent_for), signal = signal.as_str(),
                "{} {why}: {} to its processes (leader pid {pid})", label(instance), signal.as_str()
            );
        }
        Event::Recycling {
            instance,
            pid,
            why,
            attempt,
            delay,
        } => info!(
            event = "recycling", app = %instance.app, slot = instance.slot, pid,
            generation = instance.generation, reason = %why, attempt, delay_ms = millis(*delay),
            "{} {why}: a new instance starts in {} (restart {attempt}); pid {pid} serves until it is ready",
            label(instance), short_duration(*delay)
        ),
        _ => {}
    }
}

/// Dependencies and schedules: what waits for what, and when runs are due.
fn order(event: &Event) {
    match event {
        Event::WaitingFor { app, on } => info!(
            event = "waiting", app = %app, on = %on.join(", "),
            "{app}: waiting for {}", on.join(", ")
        ),
        Event::DependenciesMet { app } => info!(
            event = "dependencies_met", app = %app,
            "{app}: every dependency is met; starting"
        ),
        Event::DependencyFailed {
            app,
            dependency,
            reason,
        } => error!(
            event = "dependency_failed", app = %app, dependency = %dependency, reason = %reason,
            "{app}: held, {reason}; it starts once {dependency} is fixed in the file or restarted"
        ),
        Event::DependencyRestarted {
            app,
            dependency,
            generation,
        } => info!(
            event = "dependency_restarted", app = %app, dependency = %dependency, generation,
            "{app}: every instance of {dependency} was replaced; replacing {app} (generation {generation})"
        ),
        Event::RunDue { app, why } => info!(
            event = "run_due", app = %app, why = *why,
            "{app}: run ({})", match *why {
                "schedule" => "scheduled",
                "trigger" => "triggered",
                "start" => "run_on_start",
                _ => "queued",
            }
        ),
        Event::RunSkipped { app, why, reason } => warn!(
            event = "run_skipped", app = %app, why = *why, reason = %reason,
            "{app}: {why} skipped: {reason}"
        ),
        Event::RunQueued { app, why, queued } => info!(
            event = "run_queued", app = %app, why = *why, queued = *queued,
            "{app}: {why} queued behind the run that goes"
        ),
        Event::RunEnded {
            app,
            result,
            ok,
            took,
        } => {
            if *ok {
                info!(
                    event = "run_ended", app = %app, result = %result, ok = *ok, took_ms = took.as_millis() as u64,
                    "{app}: run ended ({result}) after {}", short_duration(*took)
                )
            } else {
                warn!(
                    event = "run_ended", app = %app, result = %result, ok = *ok, took_ms = took.as_millis() as u64,
                    "{app}: run ended ({result}) after {}", short_duration(*took)
                )
            }
        }
        Event::ClockStepped {
            forward,
            by,
            rearmed,
        } => {
            let direction = if *forward { "forward" } else { "back" };
            let rearmed_text = if rearmed.is_empty() {
                String::new()
            } else {
                format!(
                    "; cron schedules run at their next time after the new one ({})",
                    rearmed.join(", ")
                )
            };
            warn!(
                event = "clock_stepped", direction, by_ms = by.as_millis() as u64, rearmed = ?rearmed,
                "the wall clock was set {direction} by {}{rearmed_text}", short_duration(*by)
            )
        }
        Event::Autoscaled { app, from, to, why } => {
            let direction = if to > from { "up" } else { "down" };
            info!(
                event = "autoscaled", app = %app, from, to, direction, why = %why,
                "{app}: scaled {direction} from {from} to {to} instances: {why}"
            )
        }
        _ => {}
    }
}

/// The core about itself: passes, refused inputs, anomalies.
fn own(event: &Event) {
    match event {
        Event::Reconciled { app, passes } => {
            debug!(event = "reconciled", app = %app, passes, "{app}: reconciled")
        }
        Event::Ignored(refused) => debug!("{refused}; ignored"),
        Event::Stalled { by } => warn!(
            event = "stalled",
            stalled_ms = millis(*by),
            "supervise did not run for {} past its wake-up (stopped, paused or starved); the deadlines of readiness, checks and watchdogs move by as much",
            short_duration(*by)
        ),
        Event::StartsWaitForRoom => warn!(
            event = "starts_wait_for_room",
            "instances wait to start: supervise is at its limit of open files (RLIMIT_NOFILE); they start as files are freed. Raise the limit (systemd: LimitNOFILE=, a shell: ulimit -Hn as root) or run fewer instances"
        ),
        Event::Anomaly(what) => error!(event = "anomaly", "internal: {what}"),
        _ => {}
    }
}
