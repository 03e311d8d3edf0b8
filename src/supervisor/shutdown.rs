//! SIGINT and SIGTERM: shutdown is a phase of the core, not `instances = 0`.
//! Every worker is stopped, concurrently, each within its `kill_timeout`;
//! nothing starts any more; a second SIGINT SIGKILLs every group at once.

use super::Supervisor;
use effects::Effects;
use supervise_core::{Input, Phase};

impl<E: Effects> Supervisor<E> {
    pub(super) fn interrupt(&mut self) {
        let now = self.effects.now();
        let input = match self.core.phase() {
            Phase::Running => Input::Shutdown { why: "SIGINT" },
            Phase::ShuttingDown => Input::KillAll,
        };
        self.core.input(input, now);
    }

    pub(super) fn terminate(&mut self) {
        let now = self.effects.now();
        self.core.input(Input::Shutdown { why: "SIGTERM" }, now);
    }
}
