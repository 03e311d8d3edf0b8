//! `APP.target`, the app as one unit: it wants every instance (and the
//! shared sockets, or the timer of a schedule), so that `systemctl start
//! APP.target` is `instances: N`, and it is what other apps depend on.

use std::fmt::Write as _;

use super::sockets::SocketUnit;
use super::syntax::escape_line;
use super::{AppUnits, UNITS_PER_LINE};
use crate::Notes;

impl AppUnits<'_> {
    fn count(&self, notes: &mut Notes) -> u32 {
        if self.app.instances_from_max {
            self.warn(
                notes,
                &["instances"],
                format!(
                    "`instances: max` is {} here, this machine's CPU count: the target wants that many",
                    self.app.instances
                ),
            );
        }
        self.app.instances
    }

    /// The target's text; `timer`: whether it wants the timer.
    pub(super) fn target(&self, sockets: &[SocketUnit], timer: bool, notes: &mut Notes) -> String {
        let name = self.name();
        let mut wants: Vec<String> = Vec::new();
        let count = if self.app.schedule.is_some() {
            0
        } else {
            self.count(notes)
        };
        if timer {
            wants.push(format!("{name}.timer"));
        }
        for socket in sockets.iter().filter(|s| !s.per_instance) {
            if count > 0 {
                wants.push(socket.file.clone());
            }
        }
        for slot in 0..count {
            for socket in sockets.iter().filter(|s| s.per_instance) {
                wants.push(socket.instance_name.replace("%i", &slot.to_string()));
            }
            wants.push(format!("{name}@{slot}.service"));
        }
        let mut text = self.header("The target");
        let _ = writeln!(text, "[Unit]");
        let _ = writeln!(
            text,
            "Description={}",
            escape_line(&if self.app.schedule.is_some() && self.app.instances == 0 {
                format!("{name}: its schedule is paused (supervise export)")
            } else if self.app.schedule.is_some() {
                format!("{name}: on its schedule (supervise export)")
            } else {
                format!(
                    "{name}: {count} instance{} (supervise export)",
                    if count == 1 { "" } else { "s" }
                )
            })
        );
        // A one-shot waited for as `completed` requires its instances: the
        // target (which its dependents require) fails when one does.
        let (requires, wants): (Vec<String>, Vec<String>) =
            if self.source.waited_for_as_completed(name) {
                wants
                    .into_iter()
                    .partition(|unit| unit.ends_with(".service"))
            } else {
                (Vec::new(), wants)
            };
        for chunk in wants.chunks(UNITS_PER_LINE) {
            let _ = writeln!(text, "Wants={}", chunk.join(" "));
        }
        for chunk in requires.chunks(UNITS_PER_LINE) {
            let _ = writeln!(text, "Requires={}", chunk.join(" "));
        }
        let _ = writeln!(text, "\n[Install]");
        let _ = writeln!(
            text,
            "WantedBy={}",
            if self.options.user {
                "default.target"
            } else {
                "multi-user.target"
            }
        );
        text
    }
}
