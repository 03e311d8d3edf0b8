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
//! Everything is plain text; values are quoted and escaped for systemd
//! (`%` → `%%`, `$` → `$$` in command lines), and the values systemd reads
//! verbatim (paths, socket names) are refused when they hold a control
//! character or end with `\` (which would continue the line), so a hostile
//! value cannot add a directive.

use std::fmt::Write as _;

mod calendar;
mod reserved;
mod syntax;

use calendar::cron_to_calendar;
use reserved::SYSTEMD_OWN_UNITS;
use syntax::{
    continues_a_line, escape_line, escape_specifiers, exec_word, marked, quote, seconds_text,
    shell_word, timespan,
};

use super::{Exported, Notes, Source};
use crate::config::diagnostic::PathSeg;
use crate::spec::{
    AppSpec, Condition, ListenAddress, Overlap, Piece, Readiness, RestartPolicy, Template, When,
};

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
/// The first systemd with `RestartSteps=` and `RestartMaxDelaySec=`.
pub const RESTART_STEPS_SINCE: u32 = 254;
/// How far (relative) the factor systemd's whole `RestartSteps=` make may
/// be from the file's before the export says so.
const FACTOR_TOLERANCE: f64 = 0.005;

impl Default for Options {
    fn default() -> Options {
        Options {
            user: false,
            systemd_version: DEFAULT_SYSTEMD_VERSION,
            app: None,
        }
    }
}

/// How many units one `Wants=` line of a target lists.
const UNITS_PER_LINE: usize = 8;

/// The most dependency instances one unit is `PartOf=` (and `After=`) one
/// by one, for `on_dependency_restart: restart`; above it, the dependency's
/// target, with a warning (see `dependencies`). Each is an edge for every
/// instance of the unit: an app of 4,096 instances (the most `check`
/// allows) depending on one of 64 has 262,144, which `systemd-analyze
/// verify` (systemd 252, 2 cores) loads in 3.5 s, against 1.8 s for one
/// instance, 5.4 s for 128 and 10 s for 256 (4,096: 8 minutes).
pub const MAX_PART_OF_PER_UNIT: u32 = 64;

/// The longest unit name systemd loads (its UNIT_NAME_MAX, 256, less the NUL).
const MAX_UNIT_NAME: usize = 255;

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
    let top = |key: &str| vec![PathSeg::Key(key.to_string())];
    if source.node_at(&top("memory_check")).is_some() {
        notes.warn_key(
            &top("memory_check"),
            "`memory_check` has no effect under systemd: the kernel holds each instance to MemoryMax=",
            "`max_memory` becomes MemoryMax=",
        );
    }
    if source.node_at(&top("metrics")).is_some() {
        notes.warn_key(
            &top("metrics"),
            "`metrics` is not exported: there is no supervisor to serve them",
            "systemd's own state is in `systemctl show` (and prometheus' systemd exporters)",
        );
    }
}

struct AppUnits<'a> {
    source: &'a Source,
    options: &'a Options,
    app: &'a AppSpec,
}

/// One socket unit of an app.
struct SocketUnit {
    /// `APP.socket`, `APP.1.socket`, or a template `APP@.socket`.
    file: String,
    /// The name a service lists in `Sockets=` (`%i` for a template).
    instance_name: String,
    per_instance: bool,
    text: String,
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

    /// Whether the longest unit name of the app (its last instance, a socket
    /// of its last `listen` address, or the slice systemd makes for its
    /// instances) is one systemd can load; else an error at the app.
    fn names_fit(&self, notes: &mut Notes) -> bool {
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
    fn values_fit_on_a_line(&self, notes: &mut Notes) -> bool {
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
            let entry = listen_field(self.source, name, index);
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

    fn target(&self, sockets: &[SocketUnit], timer: bool, notes: &mut Notes) -> String {
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

    fn sockets(&self, notes: &mut Notes) -> Vec<SocketUnit> {
        let name = self.name();
        let listen = &self.app.process.listen;
        if listen.len() > 1 {
            self.warn(
                notes,
                &["listen"],
                "systemd does not promise the file's order for the fds of several socket units: find each by its name in LISTEN_FDNAMES",
            );
        }
        let mut units = Vec::new();
        for (index, spec) in listen.iter().enumerate() {
            let field = listen_field(self.source, name, index);
            let field: Vec<&str> = field.iter().map(String::as_str).collect();
            if spec.inject {
                let mut inject = field.clone();
                inject.push("inject");
                self.warn(
                    notes,
                    &inject,
                    format!(
                        "`inject`: systemd cannot hand a socket to a program that binds {} itself; no socket unit is written, and only one instance can bind the port",
                        spec.address
                    ),
                );
                continue;
            }
            let address = match &spec.address {
                ListenAddress::Tcp(address) if address.port() == 0 => {
                    self.warn(
                        notes,
                        &field,
                        "port 0 (one the kernel picks) cannot be a socket unit's: write a port",
                    );
                    continue;
                }
                ListenAddress::Tcp(address) => address.to_string(),
                ListenAddress::Unix(path) => path.display().to_string(),
            };
            let stem = if index == 0 {
                name.to_string()
            } else {
                format!("{name}.{index}")
            };
            let (file, instance_name, service) = if spec.reuseport {
                (
                    format!("{stem}@.socket"),
                    format!("{stem}@%i.socket"),
                    format!("{name}@%i.service"),
                )
            } else {
                (
                    format!("{stem}.socket"),
                    format!("{stem}.socket"),
                    format!("{name}@0.service"),
                )
            };
            let mut text = self.header("A listening socket");
            let _ = writeln!(text, "[Unit]");
            let _ = writeln!(
                text,
                "Description={}",
                escape_line(&format!(
                    "{name}: listening on {address} (supervise export)"
                ))
            );
            let _ = writeln!(text, "PartOf={name}.target");
            let _ = writeln!(text, "\n[Socket]");
            let _ = writeln!(text, "ListenStream={}", escape_line(&address));
            let _ = writeln!(text, "FileDescriptorName={}", escape_line(&spec.name));
            if spec.reuseport {
                let _ = writeln!(text, "ReusePort=yes");
            }
            let _ = writeln!(text, "Service={service}");
            units.push(SocketUnit {
                file,
                instance_name,
                per_instance: spec.reuseport,
                text,
            });
        }
        units
    }

    fn service(&self, sockets: &[SocketUnit], notes: &mut Notes) -> String {
        let name = self.name();
        let app = self.app;
        let mut unit = Vec::<String>::new();
        let mut service = Vec::<String>::new();
        unit.push(format!(
            "Description={}",
            escape_line(&format!(
                "{name} instance {INSTANCE_MARK} (supervise export)"
            ))
        ));
        unit.push(format!("PartOf={name}.target"));
        for socket in sockets {
            unit.push(format!("Requires={}", socket.instance_name));
            unit.push(format!("After={}", socket.instance_name));
        }
        self.dependencies(&mut unit, notes);
        match app.max_restarts {
            Some(max) => {
                // `count` restarts are `count + 1` starts; systemd's count is a
                // u32, so u32::MAX restarts are one fewer (in four billion).
                unit.push(format!("StartLimitBurst={}", max.count.saturating_add(1)));
                unit.push(format!("StartLimitIntervalSec={}", timespan(max.within)));
            }
            // We never give up; systemd's default would after 5 starts in 10s.
            None => unit.push("StartLimitIntervalSec=0".into()),
        }

        // `check` allows `completed` only for an app that ends (`never` or
        // `on-failure`); either way it is a `Type=oneshot`, whose start
        // lasts until it exits 0.
        let oneshot = self.source.waited_for_as_completed(name);
        let notify = app.ready == Readiness::Notify;
        if oneshot {
            service.push("Type=oneshot".into());
            service.push("RemainAfterExit=yes".into());
            if notify {
                self.warn(
                    notes,
                    &["ready"],
                    format!(
                        "`ready: notify` is not exported: `{name}` is waited for as `completed`, so it is Type=oneshot, whose start ends when it exits 0, not at READY=1"
                    ),
                );
            }
        } else if notify {
            service.push("Type=notify".into());
        } else {
            service.push("Type=exec".into());
        }
        if (notify && !oneshot) || app.process.watchdog.is_some() {
            // We take READY=1 and WATCHDOG=1 from anything in the group.
            service.push("NotifyAccess=all".into());
        }
        service.push(format!("ExecStart={}", self.exec_start()));
        match &app.ready {
            Readiness::Probe(spec) => {
                let field = match spec.kind {
                    crate::spec::ProbeKind::Tcp => "tcp",
                    crate::spec::ProbeKind::Http => "http",
                };
                self.warn(
                    notes,
                    &["ready", field],
                    "systemd has no readiness probe: an instance counts as started once its program runs",
                );
            }
            // The default delay is not written: the README says what it becomes.
            Readiness::Delay(delay) if self.source.written(name, &["ready", "delay"]).is_some() => {
                if oneshot {
                    self.warn(
                        notes,
                        &["ready"],
                        format!(
                            "`ready: {{delay}}` is not exported: `{name}` is waited for as `completed`, so it is Type=oneshot, whose start ends when it exits 0, not after a delay"
                        ),
                    );
                } else {
                    // Alive this long = ready: the start ends after the
                    // sleep, and fails if the program exits during it.
                    service.push(format!("ExecStartPost=/bin/sleep {}", seconds_text(*delay)));
                }
            }
            Readiness::Immediate | Readiness::Notify | Readiness::Delay(_) => {}
        }
        service.push(format!(
            "WorkingDirectory={}",
            escape_line(&app.process.cwd.display().to_string())
        ));
        self.environment(&mut service, notes);
        if let Some(identity) = &app.process.identity {
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
        let shared: Vec<&str> = sockets.iter().map(|s| s.instance_name.as_str()).collect();
        if !shared.is_empty() {
            service.push(format!("Sockets={}", shared.join(" ")));
        }
        service.push(format!(
            "Restart={}",
            match app.restart {
                RestartPolicy::Always => "always",
                RestartPolicy::OnFailure => "on-failure",
                RestartPolicy::Never => "no",
            }
        ));
        self.backoff(&mut service, notes);
        if oneshot {
            service.push("TimeoutStartSec=infinity".into());
        } else {
            service.push(format!("TimeoutStartSec={}", timespan(app.ready_timeout)));
        }
        service.push(format!("TimeoutStopSec={}", timespan(app.kill_timeout)));
        service.push(format!("KillSignal={}", app.stop_signal.as_str()));
        service.push("KillMode=control-group".into());
        if let Some(watchdog) = app.process.watchdog {
            service.push(format!("WatchdogSec={}", timespan(watchdog)));
            service.push(format!("WatchdogSignal={}", app.watchdog_signal.as_str()));
        } else {
            self.warn(
                notes,
                &["watchdog_signal"],
                "`watchdog_signal` without `watchdog` does nothing",
            );
        }
        if let Some(bytes) = app.max_memory {
            // systemd refuses u64::MAX bytes as out of range: a limit no
            // process reaches is `infinity`.
            if bytes == u64::MAX {
                service.push("MemoryMax=infinity".into());
            } else {
                service.push(format!("MemoryMax={bytes}"));
            }
        }
        self.lost(notes);

        let mut text = self.header("The template of each instance");
        let _ = writeln!(text, "[Unit]");
        for line in unit {
            let _ = writeln!(text, "{line}");
        }
        let _ = writeln!(text, "\n[Service]");
        for line in service {
            let _ = writeln!(text, "{line}");
        }
        text
    }

    /// Keys with no systemd equivalent.
    fn lost(&self, notes: &mut Notes) {
        self.warn(
            notes,
            &["health"],
            "`health` is not exported: systemd runs no liveness checks (WatchdogSec= is its way)",
        );
        self.warn(
            notes,
            &["reload"],
            "`reload` is not exported: systemd restarts an instance at a time when told (`systemctl restart APP@N`), with no surge",
        );
        self.warn(
            notes,
            &["log"],
            "`log` is not exported: the output goes to the journal (`journalctl -u APP@N`)",
        );
    }

    /// `depends_on` as dependencies on the other app's target, which
    /// wants (a one-shot's: requires) each of its instances and, as every
    /// target does by default, is ordered after each: one `After=` is
    /// "after every instance started", whatever the count. (One per
    /// instance would make N×M edges: two apps of 4,096 instances gave
    /// units that `systemd-analyze verify` took 8 minutes to load.)
    ///
    /// `on_dependency_restart: restart` is `PartOf=`, which (systemd.unit(5))
    /// propagates a stop or a restart of the listed unit to this one, and
    /// nothing else: not a failure that is not restarted, nor a start. A
    /// restart is one by hand (`systemctl restart`) or systemd's own after
    /// a crash (`Restart=`, which queues a restart job). So, per dependency:
    ///
    /// - `PartOf=` and `After=` each instance (`APP@N.service`), while the
    ///   unit lists at most [`MAX_PART_OF_PER_UNIT`] of them: any one
    ///   instance's stop or restart stops or restarts every instance of
    ///   this app — each time, where supervise replaces it once, after every
    ///   instance it saw was replaced and the new ones meet the condition
    ///   (the README says so). The `After=` orders that restart after the
    ///   instance's: the one through the target does not, as the target
    ///   takes no part in it (on systemd 252 the dependent came back before
    ///   the instance had);
    /// - else `PartOf=APP.target`, with a warning: only a stop or restart
    ///   of the target itself (`systemctl restart APP.target`) reaches this
    ///   app; an instance's does not, as the target only wants it;
    /// - `completed`: `PartOf=APP.target`, which passes on what the form
    ///   above would, as that target requires its instances: a stop or
    ///   restart of one (`systemctl restart APP@N`) is the target's too
    ///   (systemd.unit(5), `Requires=`). The `Requires=APP.target` of this
    ///   unit passes it on as well, whatever `on_dependency_restart` says.
    fn dependencies(&self, unit: &mut Vec<String>, notes: &mut Notes) {
        let restart_with =
            self.app.on_dependency_restart == crate::spec::OnDependencyRestart::Restart;
        let mut listed: u32 = 0;
        for dependency in &self.app.depends_on {
            let Some(other) = self.source.desired.app(&dependency.app) else {
                continue;
            };
            let kind = match dependency.condition {
                Condition::Completed => "Requires",
                Condition::Healthy => {
                    self.warn(
                        notes,
                        &["depends_on", &dependency.app],
                        format!(
                            "`{}: healthy` becomes `ready`: systemd runs no health checks",
                            dependency.app
                        ),
                    );
                    "Wants"
                }
                Condition::Started | Condition::Ready => "Wants",
            };
            let target = format!("{}.target", other.name);
            unit.push(format!("{kind}={target}"));
            unit.push(format!("After={target}"));
            if !restart_with {
                continue;
            }
            if dependency.condition == Condition::Completed {
                unit.push(format!("PartOf={target}"));
            } else if listed.saturating_add(other.instances) <= MAX_PART_OF_PER_UNIT {
                listed += other.instances;
                let instances: Vec<String> = (0..other.instances)
                    .map(|slot| format!("{}@{slot}.service", other.name))
                    .collect();
                for chunk in instances.chunks(UNITS_PER_LINE) {
                    let list = chunk.join(" ");
                    unit.push(format!("PartOf={list}"));
                    unit.push(format!("After={list}"));
                }
            } else {
                unit.push(format!("PartOf={target}"));
                let dep = &other.name;
                notes.warn_with_help(
                    self.name(),
                    &["on_dependency_restart"],
                    format!(
                        "`{dep}` has {} instances, and a unit is made PartOf= at most {MAX_PART_OF_PER_UNIT} one by one (each is an edge for every instance, which systemd loads slowly): `{}` is PartOf={target} instead, stopped or restarted with that target, but no longer when one instance of `{dep}` stops or restarts (a crash that Restart= restarts, `systemctl restart {dep}@N`)",
                        other.instances,
                        self.name()
                    ),
                    Some(format!(
                        "it is PartOf= each instance of the dependencies it restarts with while they have at most {MAX_PART_OF_PER_UNIT} together{}",
                        if listed > 0 {
                            format!(" (those before `{dep}` have {listed})")
                        } else {
                            String::new()
                        }
                    )),
                );
            }
        }
    }

    /// `backoff` as `RestartSec=`, and with systemd 254 `RestartSteps=`
    /// and `RestartMaxDelaySec=`: systemd waits `RestartSec` before the
    /// first restart, `RestartSec · (max/RestartSec)^((n-1)/steps)` before
    /// restart n, and the max after `steps`; so `steps` = log_factor(max /
    /// initial) gives our delays, rounded to whole steps. Before 254 every
    /// restart waits `RestartSec`: said for every app that restarts with a
    /// growing backoff, the default one included (a crash loop then
    /// restarts ten times a second for ever, where we back off to 30s).
    fn backoff(&self, service: &mut Vec<String>, notes: &mut Notes) {
        let name = self.name();
        let backoff = self.app.backoff;
        service.push(format!("RestartSec={}", timespan(backoff.initial)));
        let grows = backoff.max > backoff.initial && backoff.factor > 1.0;
        let growth = || {
            let (from, to) = (
                super::duration_text(backoff.initial),
                super::duration_text(backoff.max),
            );
            if backoff.factor == 2.0 {
                format!("doubles from {from} to {to}")
            } else {
                format!(
                    "grows by a factor of {} from {from} to {to}",
                    backoff.factor
                )
            }
        };
        if self.options.systemd_version >= RESTART_STEPS_SINCE {
            if grows {
                let ratio = backoff.max.as_secs_f64() / backoff.initial.as_secs_f64();
                let steps = (ratio.ln() / backoff.factor.ln()).round().max(1.0);
                service.push(format!("RestartSteps={}", steps as u64));
                service.push(format!("RestartMaxDelaySec={}", timespan(backoff.max)));
                let effective = ratio.powf(1.0 / steps);
                if (effective - backoff.factor).abs() > FACTOR_TOLERANCE * backoff.factor {
                    notes.note(format!(
                        "{name}: the backoff {}, in whole steps under systemd: RestartSteps={} makes each delay {effective:.2} times the last, not {}",
                        growth(),
                        steps as u64,
                        backoff.factor
                    ));
                }
            }
        } else if grows && self.app.restart != RestartPolicy::Never {
            let written = self.source.written(name, &["backoff"]).is_some();
            let message = format!(
                "systemd {} has no RestartSteps= (254 and later): {}the backoff {}, but every restart waits RestartSec={}; the exponential part is lost",
                self.options.systemd_version,
                if written { "" } else { "by default " },
                growth(),
                timespan(backoff.initial)
            );
            let help = format!(
                "with systemd {RESTART_STEPS_SINCE} or later on the machine, pass --systemd-version {RESTART_STEPS_SINCE} to keep it"
            );
            if !notes.warn_with_help(name, &["backoff"], message.clone(), Some(help.clone())) {
                notes.warn_key(
                    &[PathSeg::Key("apps".into()), PathSeg::Key(name.into())],
                    message,
                    &help,
                );
            }
        }
        self.warn(
            notes,
            &["backoff", "reset_after"],
            "`reset_after` is not exported: systemd resets its restart counter only on a manual start",
        );
    }

    /// Whether any word of the command or any `env` value needs arithmetic
    /// on the instance number.
    fn needs_shell(&self) -> bool {
        let offset = |t: &Template| t.pieces().any(|p| matches!(p, Piece::Instance(n) if n > 0));
        self.app.process.argv.iter().any(offset)
            || self.app.process.env.iter().any(|(_, v)| offset(v))
    }

    /// The program as systemd must be given it: the absolute path `check`
    /// found, else a relative path made absolute from `cwd` (systemd
    /// takes only absolute paths and bare names, which it looks up in a
    /// PATH of its own), with `{instance}` marked. A name starting with
    /// `@-:+!` is made absolute too: systemd reads those as prefixes even
    /// in quotes.
    fn program(&self) -> Option<String> {
        let process = &self.app.process;
        if let Some(program) = &process.program {
            return Some(program.display().to_string());
        }
        let first = process.argv.first()?;
        if first
            .pieces()
            .any(|p| matches!(p, Piece::Instance(n) if n > 0))
        {
            return None; // run by `/bin/sh`, which finds it from WorkingDirectory=
        }
        let written = marked(first);
        ((written.contains('/') && !written.starts_with('/'))
            || written.starts_with(['@', '-', ':', '+', '!']))
        .then(|| {
            process
                .cwd
                .join(&written)
                .components()
                .collect::<std::path::PathBuf>()
        })
        .map(|path| path.display().to_string())
    }

    fn exec_start(&self) -> String {
        let process = &self.app.process;
        let program = self.program();
        if self.needs_shell() {
            // `/bin/sh -c 'export PORT_ADMIN=$((9100+%i)); exec prog …'`.
            let mut script = String::new();
            for (name, value) in &process.env {
                if value
                    .pieces()
                    .any(|p| matches!(p, Piece::Instance(n) if n > 0))
                {
                    let _ = write!(script, "export {name}={}; ", shell_word(value));
                }
            }
            script.push_str("exec");
            for (index, word) in process.argv.iter().enumerate() {
                script.push(' ');
                if index == 0
                    && let Some(program) = &program
                {
                    script.push_str(&shell_word(&Template::literal(program.clone())));
                    continue;
                }
                script.push_str(&shell_word(word));
            }
            return format!("/bin/sh -c {}", exec_word(&script));
        }
        let mut words = Vec::new();
        for (index, word) in process.argv.iter().enumerate() {
            if index == 0 {
                // systemd wants an absolute path (or looks in its own PATH).
                if let Some(program) = &program {
                    words.push(exec_word(program));
                    continue;
                }
            }
            words.push(exec_word(&marked(word)));
        }
        words.join(" ")
    }

    fn environment(&self, service: &mut Vec<String>, notes: &mut Notes) {
        let name = self.name();
        let process = &self.app.process;
        let mut inline: Vec<(String, String)> = Vec::new();
        let env_file = self.env_file(notes);
        let from_file: Vec<String> = env_file
            .as_ref()
            .map(|(_, names)| names.clone())
            .unwrap_or_default();
        for (key, value) in &process.env {
            if value
                .pieces()
                .any(|p| matches!(p, Piece::Instance(n) if n > 0))
            {
                continue; // set by the shell in ExecStart=
            }
            if from_file.contains(key) && env_file.as_ref().is_some_and(|(f, _)| f.is_some()) {
                continue; // read from EnvironmentFile=
            }
            if super::reserved_env_name(self.app, key) {
                continue; // an env_file's, which supervise overrides (warned)
            }
            inline.push((key.clone(), marked(value)));
        }
        inline.push(("SUPERVISE_APP".into(), name.to_string()));
        inline.push(("SUPERVISE_INSTANCE".into(), INSTANCE_MARK.to_string()));
        inline.push(("NODE_APP_INSTANCE".into(), INSTANCE_MARK.to_string()));
        if let Some(port) = process.listen.iter().find_map(|l| match &l.address {
            ListenAddress::Tcp(a) if a.port() != 0 => Some(a.port()),
            _ => None,
        }) {
            inline.push(("PORT".into(), port.to_string()));
        }
        if let Some((Some(file), _)) = &env_file {
            service.push(format!("EnvironmentFile={}", escape_line(file)));
        }
        for (key, value) in inline {
            service.push(format!(
                "Environment={}",
                quote(&escape_specifiers(&format!("{key}={value}")))
            ));
        }
    }

    /// `env_file` as `EnvironmentFile=` (its path) when systemd reads it
    /// the way we do, and the names it sets. `None` path: its entries are
    /// written as `Environment=` (with a warning saying why).
    fn env_file(&self, notes: &mut Notes) -> Option<(Option<String>, Vec<String>)> {
        let name = self.name();
        let path = self.source.written(name, &["env_file"])?;
        let file = self.source.node_at(&path)?.as_str()?.to_string();
        let absolute = self.source.folder.join(&file);
        let text = std::fs::read_to_string(&absolute).unwrap_or_default();
        let entries = crate::config::envfile::parse(&text).unwrap_or_default();
        let names: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
        let env_names = self.source.env_names(&self.app.name);
        let overridden: Vec<&String> = names.iter().filter(|n| env_names.contains(n)).collect();
        let reserved: Vec<&String> = names
            .iter()
            .filter(|n| super::reserved_env_name(self.app, n))
            .collect();
        let unlike =
            text.contains('\\') || text.lines().any(|l| l.trim_start().starts_with("export "));
        // systemd's EnvironmentFile= wins over Environment=: a file that sets
        // what `env` or supervise sets is copied instead, without those.
        let mut why = Vec::new();
        if !overridden.is_empty() {
            why.push(format!(
                "`env` sets {} too, and systemd's EnvironmentFile= would win over Environment=",
                super::name_list(&overridden)
            ));
        }
        if !reserved.is_empty() {
            why.push(format!(
                "it sets {}, which supervise sets itself (and systemd's EnvironmentFile= would win): left out",
                super::name_list(&reserved)
            ));
        }
        if unlike {
            why.push("it uses `export` or backslash escapes, which systemd reads otherwise".into());
        }
        if !why.is_empty() {
            self.warn(
                notes,
                &["env_file"],
                format!(
                    "env_file is copied into Environment= lines: {}; export again after editing it",
                    why.join("; ")
                ),
            );
            return Some((None, names));
        }
        Some((Some(absolute.display().to_string()), names))
    }

    fn timer(&self, notes: &mut Notes) -> Option<String> {
        let schedule = self.app.schedule.as_ref()?;
        let name = self.name();
        let mut timer = Vec::new();
        match &schedule.when {
            When::Cron { cron, timezone } => {
                let (calendar, both_days) = match cron_to_calendar(cron.as_str()) {
                    Ok(found) => found,
                    Err(why) => {
                        self.warn(
                            notes,
                            &["schedule"],
                            format!(
                                "`{}` cannot be written as a systemd calendar ({why}): no timer is exported",
                                cron.as_str()
                            ),
                        );
                        return None;
                    }
                };
                if both_days {
                    self.warn(
                        notes,
                        &["schedule"],
                        "cron runs when the day of the month *or* the day of the week matches; systemd's calendar needs both",
                    );
                }
                timer.push(format!("OnCalendar={calendar} {}", timezone.name()));
            }
            When::Every(period) => {
                timer.push(format!("OnActiveSec={}", timespan(*period)));
                timer.push(format!("OnUnitActiveSec={}", timespan(*period)));
            }
        }
        if schedule.run_on_start {
            timer.push("OnActiveSec=0".into());
        }
        timer.push("AccuracySec=1s".into());
        timer.push(format!("Unit={name}@0.service"));
        match schedule.overlap {
            Overlap::Skip => {} // a timer does not start a unit that runs
            Overlap::Queue | Overlap::Replace => {
                self.warn(
                    notes,
                    &["overlap"],
                    "systemd skips a time that comes while the run goes on: only `overlap: skip` is exported",
                );
            }
        }
        let mut text = self.header("The schedule");
        let _ = writeln!(text, "[Unit]");
        let _ = writeln!(
            text,
            "Description={}",
            escape_line(&format!("{name}: its schedule (supervise export)"))
        );
        let _ = writeln!(text, "PartOf={name}.target");
        let _ = writeln!(text, "\n[Timer]");
        for line in timer {
            let _ = writeln!(text, "{line}");
        }
        Some(text)
    }
}

/// The path of `listen` entry `index` inside the app (see `kubernetes`).
fn listen_field(source: &Source, app: &str, index: usize) -> Vec<String> {
    let is_list = source
        .written(app, &["listen"])
        .and_then(|path| source.node_at(&path))
        .is_some_and(|node| matches!(node.kind, crate::config::node::NodeKind::Seq(_)));
    if is_list {
        vec!["listen".into(), index.to_string()]
    } else {
        vec!["listen".into()]
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn cron_expressions_become_calendars() {
        let calendar = |e: &str| cron_to_calendar(e).unwrap();
        assert_eq!(calendar("0 3 * * *"), ("*-*-* 03:00:00".into(), false));
        assert_eq!(
            calendar("*/15 * * * 1-5"),
            ("Mon..Fri *-*-* *:00/15:00".into(), false)
        );
        assert_eq!(
            calendar("30 2 1,15 jan *"),
            ("*-01-01,15 02:30:00".into(), false)
        );
        assert_eq!(calendar("0 0 1 * 0"), ("Sun *-*-01 00:00:00".into(), true));
        assert_eq!(calendar("@weekly"), ("Sun *-*-* 00:00:00".into(), false));
        assert_eq!(
            calendar("0 12 * * 5-7"),
            ("Fri..Sun *-*-* 12:00:00".into(), false)
        );
        // systemd's week starts on Monday: a range from Sunday is split.
        assert_eq!(
            calendar("0 0 * * 0-5"),
            ("Mon..Fri,Sun *-*-* 00:00:00".into(), false)
        );
        assert_eq!(
            calendar("0 0 * * sun-sat"),
            ("Mon..Sun *-*-* 00:00:00".into(), false)
        );
        assert_eq!(
            calendar("0 0 * * 7,1-2"),
            ("Mon..Tue,Sun *-*-* 00:00:00".into(), false)
        );
        assert_eq!(
            calendar("0 0 * * */2"),
            ("Tue,Thu,Sat..Sun *-*-* 00:00:00".into(), false)
        );
        // A step longer than its field repeats never: its first value.
        assert_eq!(calendar("0 */25 * * *"), ("*-*-* 00:00:00".into(), false));
        assert_eq!(calendar("*/30 * * * *"), ("*-*-* *:00/30:00".into(), false));
        assert_eq!(calendar("50/10 * * * *"), ("*-*-* *:50:00".into(), false));
        assert!(cron_to_calendar("0 0 L * *").is_err());
    }

    #[test]
    fn words_are_escaped_for_systemd() {
        assert_eq!(exec_word("/usr/bin/python3"), "/usr/bin/python3");
        assert_eq!(exec_word("a b"), "\"a b\"");
        assert_eq!(exec_word("100%"), "100%%");
        assert_eq!(exec_word("$HOME"), "\"$$HOME\"");
        assert_eq!(exec_word("x\ny"), "\"x\\ny\"");
        assert_eq!(exec_word(""), "\"\"");
        assert_eq!(exec_word("x\u{85}y\u{7f}"), "\"x\\u0085y\\x7f\"");
        assert_eq!(
            exec_word(&marked(&Template::parse("--slot={instance}").unwrap())),
            "--slot=%i"
        );
    }

    #[test]
    fn offsets_go_through_the_shell() {
        let word = shell_word(&Template::parse("--port={instance+9000}").unwrap());
        assert_eq!(escape_specifiers(&word), "'--port='$((9000+%i))");
        assert_eq!(shell_word(&Template::literal("it's")), "'it'\\''s'");
    }

    #[test]
    fn durations_are_plain_seconds() {
        assert_eq!(timespan(Duration::from_secs(31 * 86400)), "2678400s");
        assert_eq!(timespan(Duration::from_secs(90)), "90s");
        assert_eq!(timespan(Duration::from_millis(1500)), "1500ms");
        assert_eq!(timespan(Duration::from_micros(2500)), "2500us");
        assert_eq!(timespan(Duration::ZERO), "0s");
    }

    #[test]
    fn a_line_cannot_be_broken() {
        assert!(continues_a_line("A=1\nB=x\\\nC=2\n"));
        assert!(!continues_a_line("A=x\\\\\nB=\\y\n"));
        assert_eq!(escape_line("a\nb=c"), "a b=c");
        assert_eq!(escape_line("50%"), "50%%");
    }
}
