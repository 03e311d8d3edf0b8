//! The supervisor's part of an upgrade: the core and what the shell keeps
//! beside it (for `status` and `/metrics`), handed over and taken back.
//! The effects' part is [`effects::system::SystemState`]; the
//! sequence is in `supervisor::run` and [`crate::upgrade`].

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::Supervisor;
use effects::Effects;
use supervise_core::Core;

/// What [`Supervisor`] hands over, as written…
#[derive(Serialize)]
pub(crate) struct SupervisorStateRef<'a> {
    core: &'a Core,
    shown: &'a str,
    config_error: &'a Option<String>,
    applied_at: SystemTime,
    tally: &'a crate::metrics::Tally,
}

/// …and as read (the same fields).
#[derive(Debug, Deserialize)]
pub struct SupervisorState {
    core: Core,
    shown: String,
    config_error: Option<String>,
    applied_at: SystemTime,
    tally: crate::metrics::Tally,
}

impl<E: Effects> Supervisor<E> {
    /// The state to hand over. Call between two events (the core settled).
    pub(crate) fn handover(&self) -> SupervisorStateRef<'_> {
        SupervisorStateRef {
            core: &self.core,
            shown: &self.shown,
            config_error: &self.config_error,
            applied_at: self.applied_at,
            tally: &self.tally,
        }
    }

    /// The supervisor the previous image handed over, on `effects` (restored
    /// from the same handover). What the exec lost — a measurement, the
    /// liveness checks that ran — is ordered again, every app is looked at
    /// again, and the timers are re-armed from the core's deadlines.
    pub fn restored(state: SupervisorState, effects: E) -> Supervisor<E> {
        let mut supervisor = Supervisor {
            core: state.core,
            effects,
            shown: state.shown,
            config_error: state.config_error,
            applied_at: state.applied_at,
            poll_at: None,
            leaders: Vec::new(),
            tally: state.tally,
        };
        supervisor.resumed();
        supervisor
    }

    /// The upgrade stopped after the liveness checks that ran were abandoned
    /// for it (the state could not be written, or the exec failed): they are
    /// ordered again, as in a new image.
    pub(crate) fn upgrade_abandoned(&mut self) {
        self.resumed();
        let now = self.clock();
        self.settle(now);
    }

    fn resumed(&mut self) {
        let now = self.clock();
        self.core.resumed(now);
        self.execute(vec![supervise_core::Action::RouteOutput], now);
    }
}
