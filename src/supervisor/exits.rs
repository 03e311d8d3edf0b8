//! Exits and draining: every exited child is reaped (adopted descendants
//! too: we are a subreaper, and no zombie may stay), and a stopping worker's
//! stop ends once every process of its instance is gone.

use std::time::Instant;

use super::Supervisor;
use effects::Effects;
use supervise_core::Input;

impl<E: Effects> Supervisor<E> {
    /// Reap every child that has exited, feed the exits to the core, then
    /// look at the groups that were draining.
    pub(super) fn reap(&mut self, now: Instant) {
        while let Some(reaped) = self.effects.reap() {
            self.core.input(
                Input::Exited {
                    pid: reaped.pid,
                    exit: reaped.exit,
                    start_error: reaped.start_error,
                },
                now,
            );
        }
        for answer in self.effects.take_check_answers() {
            self.check_answered(answer, now);
        }
        self.check_draining(now);
    }

    /// A stop whose leader is reaped completes when its group is empty.
    pub(super) fn check_draining(&mut self, now: Instant) {
        let draining: Vec<i32> = self.core.draining_groups().collect();
        if draining.is_empty() {
            return;
        }
        for pgid in self.effects.empty_groups(&draining) {
            self.core.input(Input::GroupEmpty { pgid }, now);
        }
    }

    /// An instance's processes changed (a cgroup emptied).
    pub(super) fn groups_changed(&mut self, now: Instant) {
        self.effects.settle_groups();
        self.check_draining(now);
    }

    /// Deadlines may be due; draining groups are looked at again when their
    /// poll is due.
    pub(super) fn timer(&mut self, now: Instant) {
        self.core.input(Input::Tick, now);
        if self.poll_at.is_some_and(|at| at <= now) {
            self.poll_at = None;
            self.check_draining(now);
        }
    }
}
