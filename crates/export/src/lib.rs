//! `supervise export`: the same ecosystem file, handed to an engine that
//! already does the job beyond one machine (Kubernetes) or instead of us on
//! one machine (systemd).
//!
//! # Why it is shaped like this
//!
//! An export is a *translation*, and a translation loses things. The one rule
//! is that nothing is lost silently: every key of the file is either
//! expressed in the output or named in a warning, with the `file:line:column`
//! where it is written (the table-driven test in `tests/export.rs` walks the
//! JSON Schema and holds every key to that). So the translators are pure
//! functions from what `supervise check` produced — the resolved
//! [`Desired`] model, which is what the file *means*, and the spanned node
//! tree, which says what the file *wrote* and where — to objects or unit
//! text plus a list of [`Diagnostic`]s. The command line (the supervise crate's `cli`)
//! only reads the file, prints and writes.
//!
//! Warnings are about keys that are written (in the app or in `defaults`):
//! a default that an engine does differently (Kubernetes' own crash-loop
//! backoff, say) is documented in the manual's mapping table (docs/src/export.md), not repeated
//! for every app of every file. One default is warned about all the same,
//! at the app's name: the exponential backoff under a systemd without
//! `RestartSteps=`, where a crash loop would restart every 100ms for ever. Facts about the output that are not about a
//! key of the file (the image a container runs) are *notes*: printed, never
//! counted by `--strict`.
//!
//! Reading goes through [`config::check_file`], the function `check`, the
//! start and every reload use, so an invalid file is refused with exactly
//! `check`'s diagnostics.

pub mod kubernetes;
pub mod systemd;

use std::path::{Path, PathBuf};
use std::time::Duration;

use config::diagnostic::{self, Diagnostic, PathSeg, Reporter, Severity};
use config::node::{self, Node};
use config::raw::AccountId;
use config::{self, Host};
use model::spec::{AppSpec, Condition, Desired};

/// A valid ecosystem file, ready to be translated.
#[derive(Debug, Clone)]
pub struct Source {
    /// What the file means (defaults merged, paths absolute, `max` resolved).
    pub(crate) desired: Desired,
    /// What the file says, with positions: which keys are written, and where.
    pub(crate) root: Node,
    /// The file's text (for rendering the source line of a warning).
    pub text: String,
    /// The file as the user named it, for diagnostics.
    pub shown: String,
    /// The folder relative paths in the file are taken from.
    pub(crate) folder: PathBuf,
    /// The warnings `check` itself gives (a program not found, …).
    pub check_warnings: Vec<Diagnostic>,
}

/// Why there is nothing to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The file could not be read (exit 2); the message is ready to print.
    Unreadable(String),
    /// The file is invalid (exit 1): `check`'s report, rendered.
    Invalid(String),
}

impl Source {
    /// The path of `listen` entry `index` inside `app`: `listen` itself for
    /// the one-entry form, `listen[i]` for a list (as [`Source::written`]
    /// takes text segments, an index is written as its number).
    pub(crate) fn listen_field(&self, app: &str, index: usize) -> Vec<String> {
        let is_list = self
            .written(app, &["listen"])
            .and_then(|path| self.node_at(&path))
            .is_some_and(|node| matches!(node.kind, node::NodeKind::Seq(_)));
        if is_list {
            vec!["listen".into(), index.to_string()]
        } else {
            vec!["listen".into()]
        }
    }

    /// Read and check the file at `path` (shown as `shown`) the way `check` does.
    pub fn load(path: &Path, host: &Host) -> Result<Source, Refused> {
        let shown = path.display().to_string();
        let checked = config::check_file(path, host)
            .map_err(|unreadable| Refused::Unreadable(format!("error: {unreadable}\n")))?;
        let report = || {
            let mut text = diagnostic::render(&shown, &checked.text, &checked.diagnostics);
            text.push_str(&format!(
                "{shown}: invalid ({})\n",
                diagnostic::summary_line(&checked.diagnostics)
            ));
            text
        };
        let Some(desired) = checked.desired.clone() else {
            return Err(Refused::Invalid(report()));
        };
        // The tree of a file `check` accepted: parsing it again cannot fail,
        // but if it ever did, say so rather than export without positions.
        let root = node::parse(&checked.text).map_err(|error| {
            Refused::Invalid(format!(
                "{shown}: internal error: the file was valid but could not be parsed again: {}\n",
                error.message
            ))
        })?;
        let folder = desired
            .source
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let folder = folder.canonicalize().unwrap_or(folder);
        Ok(Source {
            desired,
            root,
            text: checked.text,
            shown,
            folder,
            check_warnings: checked.diagnostics,
        })
    }

    /// The apps to export: all, or the one `only` names.
    pub fn apps<'a>(&'a self, only: Option<&str>) -> Result<Vec<&'a AppSpec>, String> {
        match only {
            None => Ok(self.desired.apps.iter().collect()),
            Some(name) => match self.desired.app(name) {
                Some(app) => Ok(vec![app]),
                None => {
                    let names: Vec<&str> =
                        self.desired.apps.iter().map(|a| a.name.as_str()).collect();
                    Err(format!(
                        "no app named `{name}` in {}; it has: {}",
                        self.shown,
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ))
                }
            },
        }
    }

    /// Whether another app waits for `app` as `completed`: it then runs to
    /// completion (a Kubernetes Job, a systemd `Type=oneshot`), even with
    /// `restart: on-failure`.
    pub(crate) fn waited_for_as_completed(&self, app: &str) -> bool {
        self.desired.apps.iter().any(|other| {
            other
                .depends_on
                .iter()
                .any(|d| d.app == app && d.condition == Condition::Completed)
        })
    }

    /// The names `env` sets for `app` (in the app or in `defaults`), as
    /// opposed to the ones that come from `env_file` only.
    pub(crate) fn env_names(&self, app: &str) -> Vec<String> {
        let mut names = Vec::new();
        for scope in [
            vec![
                PathSeg::Key("apps".into()),
                PathSeg::Key(app.to_string()),
                PathSeg::Key("env".into()),
            ],
            vec![PathSeg::Key("defaults".into()), PathSeg::Key("env".into())],
        ] {
            if let Some(entries) = self.node_at(&scope).and_then(|n| n.entries()) {
                names.extend(entries.iter().map(|(k, _)| k.key_text()));
            }
        }
        names
    }

    /// The node written at `path`, if that exact path exists in the file.
    pub(crate) fn node_at(&self, path: &[PathSeg]) -> Option<&Node> {
        let mut node = &self.root;
        for seg in path {
            node = match seg {
                PathSeg::Key(name) => node.get(name).map(|(_, v)| v)?,
                PathSeg::Index(index) => match &node.kind {
                    node::NodeKind::Seq(items) => items.get(*index)?,
                    _ => return None,
                },
            };
        }
        Some(node)
    }

    /// `user` or `group` (`field`) of `app` as written: its text (a name,
    /// or the number) and, when it is a number (a YAML integer, or a
    /// string of digits, as `check` reads it), that number.
    pub(crate) fn written_account(&self, app: &str, field: &str) -> Option<(String, Option<u32>)> {
        let node = self.node_at(&self.written(app, &[field])?)?;
        match &node.kind {
            node::NodeKind::Int(number) => Some((number.to_string(), u32::try_from(*number).ok())),
            node::NodeKind::Str(text) => Some((
                text.clone(),
                AccountId::is_number(text)
                    .then(|| text.parse().ok())
                    .flatten(),
            )),
            _ => None,
        }
    }

    /// Where `field` (a path inside an app: `["backoff", "max"]`, or
    /// `["listen", "1"]` for a list's second entry) is written for `app`: in
    /// the app itself, else in `defaults`; `None` when it is left to its
    /// default.
    pub(crate) fn written(&self, app: &str, field: &[&str]) -> Option<Vec<PathSeg>> {
        // No key of the format is a number: a numeric segment is an index.
        let seg = |f: &&str| match f.parse::<usize>() {
            Ok(index) => PathSeg::Index(index),
            Err(_) => key(f),
        };
        let in_app: Vec<PathSeg> = [key("apps"), key(app)]
            .into_iter()
            .chain(field.iter().map(seg))
            .collect();
        if self.node_at(&in_app).is_some() {
            return Some(in_app);
        }
        let in_defaults: Vec<PathSeg> = std::iter::once(key("defaults"))
            .chain(field.iter().map(seg))
            .collect();
        self.node_at(&in_defaults).map(|_| in_defaults)
    }
}

fn key(name: &str) -> PathSeg {
    PathSeg::Key(name.to_string())
}

/// The warnings and notes of one export, placed in the file by path.
pub(crate) struct Notes<'a> {
    source: &'a Source,
    reporter: Reporter<'a>,
    notes: Vec<String>,
}

impl<'a> Notes<'a> {
    pub(crate) fn new(source: &'a Source) -> Notes<'a> {
        Notes {
            source,
            reporter: Reporter::new(&source.root),
            notes: Vec::new(),
        }
    }

    /// Warn about `field` of `app` where it is written (the app, or
    /// `defaults`, once for every app that inherits it). Nothing when the
    /// field is not written: the manual documents what defaults become.
    /// Returns whether it was written.
    pub(crate) fn warn(&mut self, app: &str, field: &[&str], message: impl Into<String>) -> bool {
        self.warn_with_help(app, field, message, None::<String>)
    }

    /// [`Notes::warn`] with a help line saying what to do.
    pub(crate) fn warn_with_help(
        &mut self,
        app: &str,
        field: &[&str],
        message: impl Into<String>,
        help: Option<impl Into<String>>,
    ) -> bool {
        self.report(
            Severity::Warning,
            app,
            field,
            message.into(),
            help.map(Into::into),
        )
    }

    /// Refuse `field` of `app` where it is written (the export fails with
    /// exit 1); or, when it is not written, at the app's name.
    pub(crate) fn error(
        &mut self,
        app: &str,
        field: &[&str],
        message: impl Into<String>,
        help: &str,
    ) {
        let message = message.into();
        if !self.report(
            Severity::Error,
            app,
            field,
            message.clone(),
            Some(help.to_string()),
        ) {
            self.error_key(&[key("apps"), key(app)], message, help);
        }
    }

    fn report(
        &mut self,
        severity: Severity,
        app: &str,
        field: &[&str],
        message: String,
        help: Option<String>,
    ) -> bool {
        let Some(path) = self.source.written(app, field) else {
            return false;
        };
        // A block (`backoff: {…}`, a list) is pointed at by its key; a
        // scalar by its value.
        let block = self
            .source
            .node_at(&path)
            .is_some_and(|n| matches!(n.kind, node::NodeKind::Map(_) | node::NodeKind::Seq(_)));
        let diagnostic = match (severity, block) {
            (Severity::Error, true) => self.reporter.key_error(&path, message),
            (Severity::Error, false) => self.reporter.error(&path, message),
            (_, true) => self.reporter.key_warning(&path, message),
            (_, false) => self.reporter.warning(&path, message),
        };
        if let Some(help) = help {
            diagnostic.help(help);
        }
        true
    }

    /// Warn about a key itself (an app's name).
    pub(crate) fn warn_key(&mut self, path: &[PathSeg], message: impl Into<String>, help: &str) {
        self.reporter.key_warning(path, message).help(help);
    }

    /// A warning at top-level `key`, when the file has it.
    pub(crate) fn warn_top_level_key(
        &mut self,
        source: &Source,
        key: &str,
        message: &str,
        help: &str,
    ) {
        let path = [PathSeg::Key(key.to_string())];
        if source.node_at(&path).is_some() {
            self.warn_key(&path, message, help);
        }
    }

    /// Refuse: an error at `path` (the export fails with exit 1).
    pub(crate) fn error_key(&mut self, path: &[PathSeg], message: impl Into<String>, help: &str) {
        self.reporter.key_error(path, message).help(help);
    }

    /// A fact about the output that is not about a key of the file.
    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub(crate) fn finish(self) -> (Vec<Diagnostic>, Vec<String>) {
        let mut diagnostics = self.reporter.finish();
        diagnostic::sort(&mut diagnostics);
        (diagnostics, self.notes)
    }
}

/// What an export produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// Files in output order: a name (`hello@.service`, or the kind and name
    /// of a Kubernetes object) and the text.
    pub files: Vec<(String, String)>,
    /// Warnings (and, when the export was refused, errors), by position.
    pub diagnostics: Vec<Diagnostic>,
    /// Notes that are not about a key of the file.
    pub notes: Vec<String>,
}

impl Exported {
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// `3 objects`, `1 unit file`.
    pub fn count_text(&self, word: &str) -> String {
        let n = self.files.len();
        format!("{n} {word}{}", if n == 1 { "" } else { "s" })
    }

    pub fn warning_count(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .count()
    }
}

/// Whether supervise sets `name` itself for `app` (PORT, SUPERVISE_*,
/// LISTEN_*, …): an `env_file` value of it is overridden, so it is not
/// exported either.
pub(crate) fn reserved_env_name(app: &AppSpec, name: &str) -> bool {
    let process = &app.process;
    config::validate::reserved_env_name(
        name,
        !process.listen.is_empty(),
        process.identity.is_some(),
        process.watchdog.is_some(),
    )
}

/// `names` as "`A`, `B`".
pub(crate) fn name_list<S: AsRef<str>>(names: &[S]) -> String {
    names
        .iter()
        .map(|n| format!("`{}`", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whole seconds for fields that only take integers, rounded up (a
/// `kill_timeout` of 1.5s must not become 1s); and whether that rounded.
pub(crate) fn whole_seconds(duration: Duration) -> (i64, bool) {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    (
        i64::try_from(seconds).unwrap_or(i64::MAX),
        duration.subsec_nanos() > 0,
    )
}

/// A duration as humantime writes it (`1m 30s` → `1m30s` is not needed:
/// systemd reads humantime's spaced form too).
pub(crate) fn duration_text(duration: Duration) -> String {
    humantime::format_duration(duration)
        .to_string()
        .replace(' ', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(whole_seconds(Duration::from_secs(10)), (10, false));
        assert_eq!(whole_seconds(Duration::from_millis(1500)), (2, true));
        assert_eq!(whole_seconds(Duration::from_millis(1)), (1, true));
    }

    #[test]
    fn durations_are_written_without_spaces() {
        assert_eq!(duration_text(Duration::from_secs(90)), "1m30s");
        assert_eq!(duration_text(Duration::from_millis(100)), "100ms");
    }
}
