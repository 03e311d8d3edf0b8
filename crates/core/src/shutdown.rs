//! Shutdown is a phase of the core, not `instances = 0`: every app winds
//! down (reconcile stops every process and starts nothing), and a second
//! SIGINT sends SIGKILL everywhere at once.

use std::time::{Duration, Instant};

use super::worker::AfterStop;
use super::{Action, Core, Event, Phase};

impl Core {
    /// SIGINT or SIGTERM: every app winds down; nothing starts any more.
    pub(super) fn shutdown(&mut self, why: &'static str) {
        if self.phase == Phase::ShuttingDown {
            return;
        }
        self.phase = Phase::ShuttingDown;
        let processes = self.pids.len();
        self.report(Event::Shutdown { why, processes });
        self.emit(Action::Systemd("STOPPING=1"));
        // No liveness check counts any more: an app that waits for its
        // dependents to stop holds still, and the others stop.
        let mut cancelled = Vec::new();
        for app in self.apps.values_mut() {
            app.dirty = true;
            for worker in app.workers.values_mut() {
                if let (Some(_), Some(pid)) = (worker.health.in_flight.take(), worker.state.pid()) {
                    cancelled.push(pid);
                }
            }
        }
        for pid in cancelled {
            self.emit(Action::CancelCheck { pid });
        }
    }

    /// The second SIGINT: every process gets SIGKILL now.
    pub(super) fn kill_all(&mut self, now: Instant) {
        self.shutdown("SIGINT");
        self.report(Event::KillAll);
        let mut refusals = Vec::new();
        for app in self.apps.values_mut() {
            app.dirty = true;
            for worker in app.workers.values_mut() {
                let result = if worker.state.is_running() {
                    worker.stop(now, Duration::ZERO, AfterStop::Remove)
                } else if worker.state.is_stopping() {
                    worker.hurry(now)
                } else {
                    Ok(())
                };
                if let Err(refused) = result {
                    refusals.push(refused);
                }
            }
        }
        for refused in refusals {
            self.anomaly(refused.to_string());
        }
    }
}
