//! The supervisor upgrading itself in the middle of a schedule (one wait
//! in five is preceded by one): the same steps the real loop takes.

use super::{Violation, World};
use supervise::supervisor::{News, Supervisor};

impl World {
    /// The supervisor upgrades itself, through the steps the real loop
    /// takes: the new binary is probed (the fake probe reads the state as
    /// a new image would), the state is handed over and the exec takes
    /// place; the new image is made from the bytes handed over, as the real
    /// one is, takes the effects' part back, and reaps what exited meanwhile.
    pub(crate) fn upgrade(&mut self) -> Result<(), Violation> {
        use supervise::supervisor::upgrading::{self, Next};
        self.upgrades += 1;
        let binary = std::env::current_exe()
            .map_err(|e| Violation(format!("no binary to upgrade to: {e}")))?;
        let shell = crate::SimShell {
            logs: effects::output::LogHub::new(),
            binary,
            upgrades: u32::try_from(self.upgrades).unwrap_or(u32::MAX),
        };
        let mut under_way = None;
        let shutting_down = self.supervisor.core().phase() == supervise_core::Phase::ShuttingDown;
        upgrading::begin(&mut under_way, &mut self.supervisor, &shell, None, None);
        match (&under_way, shutting_down) {
            // Refused at once, as it must be: nothing changes.
            (None, true) => return Ok(()),
            (None, false) => {
                return Err(Violation(
                    "the upgrade was refused before its probe started".into(),
                ));
            }
            (Some(_), true) => {
                return Err(Violation("an upgrade was begun while shutting down".into()));
            }
            (Some(_), false) => {}
        }
        let approved = match upgrading::progress(&mut under_way, &mut self.supervisor) {
            Next::Exec(approved) => approved,
            Next::Wait => {
                return Err(Violation(
                    "the upgrade's probe answered and exited, yet it was not judged".into(),
                ));
            }
            Next::Refused => {
                return Err(Violation(
                    "the upgrade was refused: the probe could not read the state".into(),
                ));
            }
        };
        let Some(state) = upgrading::carry_out(*approved, &mut self.supervisor, &shell) else {
            return Err(Violation(
                "the upgrade was abandoned before the exec".into(),
            ));
        };
        let handover = supervise::upgrade::Handover::<
            supervise::supervisor::upgrade::SupervisorState,
            crate::fake::FakeHandover,
            crate::SimShellState,
        >::decode(&state)
        .and_then(|handover| handover.check().map(|()| handover))
        .map_err(|e| Violation(format!("the state does not survive an upgrade: {e}")))?;
        let placeholder = Supervisor::new(
            &self.desired,
            "ecosystem.yaml",
            crate::UID,
            crate::fake::FakeEffects::new(self.now()),
        );
        let old = std::mem::replace(&mut self.supervisor, placeholder);
        let mut fake = old.into_effects();
        fake.restore(handover.system)
            .map_err(|e| Violation(format!("the new image cannot take the effects back: {e}")))?;
        let mut image = Supervisor::restored(handover.supervisor, fake);
        upgrading::resume_probes(&mut image);
        self.supervisor = image;
        self.handle(News::ChildExited);
        Ok(())
    }
}
