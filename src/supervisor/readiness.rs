//! Readiness and liveness news: a process ran its program (or could not), a
//! probe or a health check answered, a worker spoke on the notify socket
//! (readiness, its watchdog), a memory measurement came back.
//!
//! A notify datagram is attributed to the worker whose process group holds
//! the sender (the notify task read the sender's group from /proc when the
//! datagram arrived); the core checks the sender's uid and the app's
//! readiness mode.

use std::time::Instant;

use super::Supervisor;
use effects::notify::Notification;
use effects::spawn::ExecStatus;
use effects::{CheckAnswer, Effects};
use supervise_core::Input;

impl<E: Effects> Supervisor<E> {
    pub(super) fn exec_status(&mut self, pid: i32, status: ExecStatus, now: Instant) {
        let error = match status {
            ExecStatus::Failed(error) => Some(error),
            ExecStatus::Succeeded | ExecStatus::Pending => None,
        };
        let held_back = self.effects.exec_known(pid, error);
        if error.is_none() {
            self.core.input(Input::ExecSucceeded { pid }, now);
        }
        // An exit reaped before this report was held back until now.
        if let Some(reaped) = held_back {
            self.core.input(
                Input::Exited {
                    pid: reaped.pid,
                    exit: reaped.exit,
                    start_error: reaped.start_error,
                },
                now,
            );
            self.check_draining(now);
        }
    }

    pub(super) fn probe_succeeded(&mut self, pid: i32, now: Instant) {
        self.core.input(Input::ProbeSucceeded { pid }, now);
    }

    pub(super) fn notified(&mut self, notification: Notification, now: Instant) {
        // By the sender's process group or pid, as the kernel tells them:
        // never by `MAINPID=`, which anyone of the same uid could write
        // to speak for another instance.
        let leader = [notification.sender_pgid, Some(notification.sender_pid)]
            .into_iter()
            .flatten()
            .find(|pid| self.core.worker_of(*pid).is_some());
        let Some(leader) = leader else {
            tracing::debug!(
                pid = notification.sender_pid,
                "notify datagram from pid {} which belongs to no worker; ignored",
                notification.sender_pid
            );
            return;
        };
        self.core.input(
            Input::Notified {
                leader,
                uid: notification.sender_uid,
                ready: notification.ready,
                status: notification.status,
                watchdog: notification.watchdog,
                extend_timeout: notification.extend_timeout,
                injected: notification.injected,
            },
            now,
        );
    }

    pub(super) fn check_answered(&mut self, answer: CheckAnswer, now: Instant) {
        let CheckAnswer {
            pid,
            check,
            passed,
            detail,
        } = answer;
        let input = Input::Checked {
            pid,
            check,
            passed,
            detail,
        };
        self.core.input(input, now);
    }

    pub(super) fn memory_measured(&mut self, round: u64, usage: Vec<(i32, u64)>, now: Instant) {
        self.core.input(Input::MemoryMeasured { round, usage }, now);
    }
}
