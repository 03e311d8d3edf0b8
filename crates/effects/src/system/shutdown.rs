//! The end: every instance stopped, kill and reap what workers left
//! behind, wait for their last output, and hand back the helpers' pids,
//! the log sink and the tracking to tear down.

use std::collections::HashSet;
use std::time::Instant;

use tracing::warn;

use super::System;
use crate::output::{self, LogSink};
use crate::tracking::Tracking;

/// How long the last reap of killed adopted processes may take at shutdown.
const ADOPTED_REAP_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

impl System {
    /// Shutdown, every instance stopped: SIGKILL and reap whatever descendant
    /// of a worker is still around (an adopted daemon, a token carrier).
    pub fn kill_adopted(&mut self) {
        let mut known: HashSet<i32> = self.processes.keys().copied().collect();
        known.insert(self.setup.undertaker.pid());
        known.extend(self.setup.spawner.pid());
        let count = self.groups.kill_adopted(&known);
        if count > 0 {
            warn!(
                event = "adopted_killed",
                count, "killed {count} leftover descendants of workers"
            );
        }
        // Reap them: SIGKILL is quick, but bounded all the same.
        let deadline = Instant::now() + ADOPTED_REAP_WAIT;
        let mut left = self.groups.to_reap();
        while left > 0 && Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer; -1 = any child.
            match unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } {
                pid if pid > 0 => left = left.saturating_sub(1),
                0 => std::thread::sleep(std::time::Duration::from_millis(5)),
                _ => break,
            }
        }
    }

    /// Everything stopped: dismiss the undertaker and the spawner (each exits
    /// when its socket or pipe closes) and return their pids for a last reap,
    /// with the output queue and the tracking to tear down.
    /// At exit: until the stopped workers' last output is read (bounded by
    /// [`output::OUTPUT_DRAIN_WAIT`]).
    pub async fn output_finished(&self) {
        self.pumps.finished(output::OUTPUT_DRAIN_WAIT).await;
    }

    pub fn finish(self) -> (Vec<i32>, LogSink, Tracking) {
        let System { setup, .. } = self;
        let mut helpers: Vec<i32> = setup.spawner.pid().into_iter().collect();
        drop(setup.spawner);
        helpers.push(setup.undertaker.dismiss());
        (helpers, setup.sink, setup.tracking)
    }
}
