//! A new version of the file, checked by the config loader off this thread:
//! valid → bind the sockets it adds, then hand it to the core; invalid or
//! unreadable → say so (in the log and in `status`) and keep running the last
//! good version; the same content in what is now another file changes
//! nothing here.

use std::time::{Instant, SystemTime};

use tracing::{error, warn};

use super::{Load, Loaded, Supervisor};
use crate::effects::Effects;
use supervise_core::{Input, Phase};

impl<E: Effects> Supervisor<E> {
    pub(super) fn config(&mut self, loaded: Loaded, now: Instant) {
        if self.core.phase() == Phase::ShuttingDown {
            return;
        }
        let trigger = loaded.trigger;
        match loaded.load {
            Load::Valid {
                desired,
                diagnostics,
            } => {
                if !diagnostics.is_empty() {
                    warn!("{}", diagnostics.trim_end());
                }
                self.config_error = None;
                let mut unbound: Vec<(String, String)> = Vec::new();
                for (app, key) in self.core.sockets_to_bind(&desired) {
                    if unbound.iter().any(|(failed, _)| *failed == app) {
                        continue;
                    }
                    if let Err(error) = self.effects.bind(&key, &app) {
                        unbound.push((app, error.to_string()));
                    }
                }
                self.effects.route_output(&desired);
                self.core.input(
                    Input::Apply {
                        desired,
                        unbound,
                        trigger,
                    },
                    now,
                );
                self.applied_at = SystemTime::now();
            }
            Load::Invalid { rendered, summary } => {
                error!(
                    event = "config_invalid",
                    file = %self.shown,
                    "{trigger}: {} is invalid ({summary}); still running the last good version\n{}",
                    self.shown,
                    rendered.trim_end()
                );
                self.config_error = Some(rendered);
                self.tally.rejected_edits += 1;
            }
            Load::Unreadable { message } => {
                error!(
                    event = "config_invalid",
                    file = %self.shown,
                    "{trigger}: {message}; still running the last good version"
                );
                self.config_error = Some(message);
                self.tally.rejected_edits += 1;
            }
            // The same content in another file: only the claim on the
            // runtime directory changes (the loop has seen to it).
            Load::Unchanged => {}
        }
    }
}
