//! `supervise export systemd`: each app as systemd units that run it the
//! way we do.
//!
//! - `APP@.service`, a template: instance `APP@N` is slot N
//!   (`SUPERVISE_INSTANCE=%i`); `{instance}` is `%i`, and `{instance+N}`,
//!   which systemd cannot add up, is computed by `/bin/sh` in front of an
//!   `exec` (the program keeps the pid, so `LISTEN_PID` stays right);
//! - `APP.target`, which wants `APP@0` … `APP@N-1`: `systemctl start
//!   APP.target` is `instances: N`;
//! - per `listen` address a socket unit with `FileDescriptorName=` (the
//!   socket's name in `LISTEN_FDNAMES`).
//!
//! # Sharing one socket between N instances
//!
//! A socket unit without `Accept=yes` activates *one* service: its
//! `Service=`. But a service may take the fds of any socket unit with
//! `Sockets=`, and systemd documents that "the same socket file descriptors
//! may be passed to multiple processes simultaneously". So `APP.socket`
//! is bound once (by systemd), `Service=APP@0.service` is what a connection
//! starts when nothing runs, and every `APP@N.service` has
//! `Sockets=APP.socket`: all instances get the same listening socket as
//! fd 3 with `LISTEN_FDS`/`LISTEN_PID`/`LISTEN_FDNAMES` set, one accept queue
//! shared as under `supervise`, and the socket stays bound while instances
//! restart. (The other way, one `ReusePort=yes` socket per instance, leaves
//! a crashed instance's queue waiting for it; it is what `reuseport: true`
//! asks for, and gets: a template `APP@.socket` whose instance N serves
//! `APP@N.service` only.) `examples/hello`'s worker is tested under
//! `systemd-socket-activate` with the exported socket and command.
//!
//! The translation is split by concern, one file each: `service` (the
//! template `APP@.service`, with its keys from `exec` (`ExecStart=`),
//! `environment`, `account` (`User=`, `Group=`), `restart` (start limit,
//! `Restart=`, backoff) and `dependencies` (`depends_on`)), `sockets`
//! (`listen`), `timer` (`schedule`) and `target` (`APP.target`); `limits`
//! refuses what systemd cannot be given, and `syntax`, `calendar` and
//! `reserved` are systemd's value syntax, calendars and own units. This
//! file holds the entry point and the order of an app's files.
//!
//! Everything is plain text; values are quoted and escaped for systemd
//! (`%` → `%%`, `$` → `$$` in command lines), and the values systemd reads
//! verbatim (paths, socket names) are refused when they hold a control
//! character or end with `\` (which would continue the line), so a hostile
//! value cannot add a directive.

use std::fmt::Write as _;

mod account;
mod calendar;
mod dependencies;
mod environment;
mod exec;
mod limits;
mod reserved;
mod restart;
mod service;
mod sockets;
mod syntax;
mod target;
mod timer;

pub use dependencies::MAX_PART_OF_PER_UNIT;

use reserved::SYSTEMD_OWN_UNITS;
use syntax::{continues_a_line, escape_line};

use super::{Exported, Notes, Source};
use config::diagnostic::PathSeg;
use model::spec::AppSpec;

/// The command line's choices.
#[derive(Debug, Clone)]
pub struct Options {
    /// Units for a user's manager (`systemctl --user`): no `User=`, and the
    /// targets are wanted by `default.target`.
    pub user: bool,
    /// The systemd version of the machine the units are for.
    pub systemd_version: u32,
    /// Export this app only.
    pub app: Option<String>,
}

/// Debian 12's systemd, and this project's machines'.
pub const DEFAULT_SYSTEMD_VERSION: u32 = 252;

impl Default for Options {
    fn default() -> Options {
        Options {
            user: false,
            systemd_version: DEFAULT_SYSTEMD_VERSION,
            app: None,
        }
    }
}

/// How many units one `Wants=`, `Requires=`, `PartOf=` or `After=` line lists.
const UNITS_PER_LINE: usize = 8;

/// Marks the place of `%i` while text is escaped (escaping would double its
/// `%`). A NUL: the one character no command, value or path can hold (the
/// loader refuses it), so no text of the file can pass for the mark.
const INSTANCE_MARK: char = '\0';

/// Translate the file. `Err` is a usage error (an unknown `--app`).
pub fn export(source: &Source, options: &Options) -> Result<Exported, String> {
    let apps = source.apps(options.app.as_deref())?;
    let mut notes = Notes::new(source);
    warn_top_level(source, &mut notes);
    let mut files = Vec::new();
    for app in apps {
        let unit = AppUnits {
            source,
            options,
            app,
        };
        unit.files(&mut notes, &mut files);
    }
    let (diagnostics, notes) = notes.finish();
    Ok(Exported {
        files,
        diagnostics,
        notes,
    })
}

/// Every file, each after a `# NAME` line.
pub fn render(exported: &Exported) -> String {
    let mut out = String::new();
    for (index, (name, text)) in exported.files.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "# {name}");
        out.push_str(text);
    }
    out
}

fn warn_top_level(source: &Source, notes: &mut Notes) {
    notes.warn_top_level_key(
        source,
        "memory_check",
        "`memory_check` has no effect under systemd: the kernel holds each instance to MemoryMax=",
        "`max_memory` becomes MemoryMax=",
    );
    notes.warn_top_level_key(
        source,
        "metrics",
        "`metrics` is not exported: there is no supervisor to serve them",
        "systemd's own state is in `systemctl show` (and prometheus' systemd exporters)",
    );
}

/// The translation of one app, whose methods (one file per concern)
/// write its units.
struct AppUnits<'a> {
    source: &'a Source,
    options: &'a Options,
    app: &'a AppSpec,
}

impl AppUnits<'_> {
    fn name(&self) -> &str {
        &self.app.name
    }

    fn warn(&self, notes: &mut Notes, field: &[&str], message: impl Into<String>) -> bool {
        notes.warn(&self.app.name, field, message)
    }

    fn header(&self, what: &str) -> String {
        format!(
            "# {what} of app `{}`, made by `supervise export systemd` from {}.\n",
            self.name(),
            escape_line(&self.source.shown)
        )
    }

    /// The app's units, in order: the service, its sockets, the timer, the
    /// target; none when one would be refused.
    fn files(&self, notes: &mut Notes, files: &mut Vec<(String, String)>) {
        if !self.values_fit_on_a_line(notes) || !self.names_fit(notes) {
            return;
        }
        let first = files.len();
        let sockets = self.sockets(notes);
        let service = self.service(&sockets, notes);
        files.push((format!("{}@.service", self.name()), service));
        for socket in &sockets {
            files.push((socket.file.clone(), socket.text.clone()));
        }
        let timer = self.timer(notes);
        if let Some(timer) = &timer {
            files.push((format!("{}.timer", self.name()), timer.clone()));
        }
        // `instances: 0` pauses a schedule: the timer is written, not wanted.
        let paused = timer.is_some() && self.app.instances == 0;
        if paused {
            let name = self.name();
            notes.note(format!(
                "{name}: `instances: 0` pauses its schedule: {name}.target does not want {name}.timer (`systemctl start {name}.timer` resumes it)"
            ));
        }
        files.push((
            format!("{}.target", self.name()),
            self.target(&sockets, timer.is_some() && !paused, notes),
        ));
        if let Some((taken, _)) = files[first..]
            .iter()
            .find(|(file, _)| SYSTEMD_OWN_UNITS.contains(&file.as_str()))
        {
            let message = format!(
                "the unit `{taken}` of app `{}` is one of systemd's own: installed, it would replace it",
                self.name()
            );
            files.truncate(first);
            notes.error_key(
                &[
                    PathSeg::Key("apps".into()),
                    PathSeg::Key(self.name().into()),
                ],
                message,
                "rename the app (its units are named after it)",
            );
            return;
        }
        // The values above were refused or escaped so that none ends a line
        // with `\` (systemd would join the next line to it); should one
        // still do, nothing of the app is written.
        if files[first..]
            .iter()
            .any(|(_, text)| continues_a_line(text))
        {
            files.truncate(first);
            notes.error_key(
                &[PathSeg::Key("apps".into()), PathSeg::Key(self.name().into())],
                format!("a value of app `{}` would end a unit line with `\\`, which systemd reads as a line continued", self.name()),
                "remove the trailing backslash",
            );
        }
    }
}
