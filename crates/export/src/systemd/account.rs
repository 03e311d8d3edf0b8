//! The account an instance runs as: `user` and `group` as `User=` and
//! `Group=`, written as the file writes them, and what a user's systemd
//! (`--user`), which cannot switch accounts, leaves out.

use super::AppUnits;
use super::syntax::escape_line;
use crate::Notes;

impl AppUnits<'_> {
    /// `User=` and `Group=`, or with `--user` a warning for each.
    pub(super) fn account(&self, service: &mut Vec<String>, notes: &mut Notes) {
        let name = self.name();
        if let Some(identity) = &self.app.process.identity {
            if self.options.user {
                self.warn(
                    notes,
                    &["user"],
                    "a user's systemd cannot switch users: `user` is not exported with --user",
                );
                self.warn(
                    notes,
                    &["group"],
                    "a user's systemd cannot switch groups: `group` is not exported with --user",
                );
            } else {
                if identity.user == "nobody" {
                    self.warn(
                        notes,
                        &["user"],
                        "systemd calls User=nobody unsafe (every unprivileged service shares it); a user of the app's own is better",
                    );
                }
                // As written: a name, or the number (the machine the units
                // run on may give that number another name, or none).
                if let Some((user, number)) = self.source.written_account(name, "user") {
                    if let (Some(uid), false) = (number, identity.has_entry()) {
                        notes.warn_with_help(
                            name,
                            &["user"],
                            format!(
                                "this machine has no user of uid {uid}: systemd starts a unit with User={uid} only where one exists (else it fails with 217/USER), where supervise runs the bare uid"
                            ),
                            Some("create the user where the units run (useradd, or a systemd-sysusers.d entry)"),
                        );
                    }
                    let user = number.map_or(user, |uid| uid.to_string());
                    service.push(format!("User={}", escape_line(&user)));
                }
                if let Some((group, number)) = self.source.written_account(name, "group") {
                    let group = number.map_or(group, |gid| gid.to_string());
                    service.push(format!("Group={}", escape_line(&group)));
                }
            }
        }
    }
}
