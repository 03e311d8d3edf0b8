//! What systemd can be given at all: unit names up to its length limit,
//! and paths and socket names it reads verbatim to the end of a line. An
//! app past either gets an error and none of its units, as a unit systemd
//! cannot load, or a value that runs into the next line, would be worse
//! than none.

use super::AppUnits;
use crate::Notes;
use config::diagnostic::PathSeg;
use model::spec::ListenAddress;

/// The longest unit name systemd loads (its UNIT_NAME_MAX, 256, less the NUL).
const MAX_UNIT_NAME: usize = 255;

impl AppUnits<'_> {
    /// Whether the longest unit name of the app (its last instance, a socket
    /// of its last `listen` address, or the slice systemd makes for its
    /// instances) is one systemd can load; else an error at the app.
    pub(super) fn names_fit(&self, notes: &mut Notes) -> bool {
        let name = self.name();
        let slot = self.app.instances.saturating_sub(1);
        let mut names = vec![
            format!("{name}@{slot}.service"),
            format!("{name}.target"),
            format!("{name}.timer"),
            // systemd puts a template's instances in a slice of their own,
            // named after the template (with `-` escaped).
            format!(
                "{}{}.slice",
                if self.options.user { "app-" } else { "system-" },
                name.replace('-', "\\x2d")
            ),
        ];
        if let Some(last) = self.app.process.listen.len().checked_sub(1) {
            names.push(format!("{name}.{last}@{slot}.socket"));
        }
        let Some(longest) = names.into_iter().max_by_key(String::len) else {
            return true;
        };
        if longest.len() <= MAX_UNIT_NAME {
            return true;
        }
        notes.error_key(
            &[PathSeg::Key("apps".into()), PathSeg::Key(name.into())],
            format!(
                "the unit `{longest}` of app `{name}` would have a name of {} characters: systemd takes at most {MAX_UNIT_NAME}",
                longest.len()
            ),
            "use a shorter app name",
        );
        false
    }

    /// Refuse the values systemd reads verbatim to the end of the line
    /// (paths, socket names): there, a tab, a line break or another control
    /// character cannot be escaped, and a trailing `\` would continue the
    /// line into the next directive. Whether all fit.
    pub(super) fn values_fit_on_a_line(&self, notes: &mut Notes) -> bool {
        let name = self.name();
        let mut fits = true;
        let mut check = |notes: &mut Notes, field: &[&str], what: &str, text: &str| {
            let message = if text.chars().any(char::is_control) {
                format!(
                    "{what} {text:?} holds a control character (a tab, a line break …), which systemd cannot be given there"
                )
            } else if text.ends_with('\\') {
                format!(
                    "{what} `{text}` ends with `\\`, which systemd reads as a line continued on the next"
                )
            } else {
                return;
            };
            fits = false;
            notes.error(
                name,
                field,
                message,
                "rename it; systemd takes it as written, with no escapes",
            );
        };
        let cwd = self.app.process.cwd.display().to_string();
        check(notes, &["cwd"], "the working directory", &cwd);
        if let Some(path) = self.source.written(name, &["env_file"])
            && let Some(file) = self.source.node_at(&path).and_then(|n| n.as_str())
        {
            let absolute = self.source.folder.join(file).display().to_string();
            check(notes, &["env_file"], "the env_file path", &absolute);
        }
        for (index, spec) in self.app.process.listen.iter().enumerate() {
            let entry = self.source.listen_field(name, index);
            let mut field: Vec<&str> = entry.iter().map(String::as_str).collect();
            if let ListenAddress::Unix(path) = &spec.address {
                check(
                    notes,
                    &field,
                    "the socket path",
                    &path.display().to_string(),
                );
            }
            if self
                .source
                .written(name, &[&field[..], &["name"]].concat())
                .is_some()
            {
                field.push("name");
            }
            check(notes, &field, "the socket name", &spec.name);
        }
        fits
    }
}
