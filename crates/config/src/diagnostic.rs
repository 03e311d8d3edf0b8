//! Diagnostics: what is wrong, where (`file:line:column`), and what to do.
//!
//! `supervise check` and the live reload print these in exactly the same form,
//! so a user who saw one in the log can reproduce it with `check`.

use std::fmt::Write as _;

use serde::Serialize;

use super::node::Node;

/// A position in the ecosystem file: 1-based line and column (in characters),
/// and how many characters the offending token spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Location {
    pub line: u64,
    pub column: u64,
    #[serde(skip)]
    pub len: u64,
}

impl Location {
    /// The very beginning of the file (for problems with the file as a whole).
    pub fn start() -> Location {
        Location {
            line: 1,
            column: 1,
            len: 0,
        }
    }

    /// Convert serde-saphyr's location; `None` for its "unknown" marker.
    pub(crate) fn from_saphyr(location: &serde_saphyr::Location) -> Option<Location> {
        (location.line() > 0).then(|| Location {
            line: location.line(),
            column: location.column().max(1),
            len: location.span().len(),
        })
    }
}

/// One step of a path into the document: `apps` → `web` → `listen` → `0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

/// Render a path the way users write it: `apps.web.listen[0]`.
pub(crate) fn path_text(path: &[PathSeg]) -> String {
    let mut text = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            PathSeg::Index(index) => {
                let _ = write!(text, "[{index}]");
            }
        }
    }
    if text.is_empty() {
        "the top level".to_string()
    } else {
        text
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// One problem found in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub(crate) help: Option<String>,
    /// `None` only for problems of the file as a whole (unreadable, too large).
    pub location: Option<Location>,
}

impl Diagnostic {
    pub(crate) fn error(message: impl Into<String>, location: Option<Location>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            help: None,
            location,
        }
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }
}

/// Collects diagnostics while walking a document, placing each one by path.
pub struct Reporter<'a> {
    root: &'a Node,
    diagnostics: Vec<Diagnostic>,
}

impl<'a> Reporter<'a> {
    pub fn new(root: &'a Node) -> Reporter<'a> {
        Reporter {
            root,
            diagnostics: Vec::new(),
        }
    }

    /// Report a problem with the value at `path`.
    pub fn error(&mut self, path: &[PathSeg], message: impl Into<String>) -> &mut Diagnostic {
        self.push(Severity::Error, path, false, message.into())
    }

    /// Report a problem with the key at the end of `path` (unknown field, bad name).
    pub fn key_error(&mut self, path: &[PathSeg], message: impl Into<String>) -> &mut Diagnostic {
        self.push(Severity::Error, path, true, message.into())
    }

    pub fn warning(&mut self, path: &[PathSeg], message: impl Into<String>) -> &mut Diagnostic {
        self.push(Severity::Warning, path, false, message.into())
    }

    /// A warning about the key at the end of `path`.
    pub fn key_warning(&mut self, path: &[PathSeg], message: impl Into<String>) -> &mut Diagnostic {
        self.push(Severity::Warning, path, true, message.into())
    }

    /// The document being checked: for checks that look across apps, and for
    /// the lines a message names (a dependency cycle's edges).
    pub(crate) fn root(&self) -> &'a Node {
        self.root
    }

    fn push(
        &mut self,
        severity: Severity,
        path: &[PathSeg],
        key: bool,
        message: String,
    ) -> &mut Diagnostic {
        let location = self.root.find(path, key).location;
        // The same value reached through `defaults` or an alias is reported once.
        let index = match self
            .diagnostics
            .iter()
            .position(|d| d.location == Some(location) && d.message == message)
        {
            Some(index) => index,
            None => {
                self.diagnostics.push(Diagnostic {
                    severity,
                    message,
                    help: None,
                    location: Some(location),
                });
                self.diagnostics.len() - 1
            }
        };
        &mut self.diagnostics[index]
    }

    pub(crate) fn error_count(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    pub(crate) fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    pub fn finish(self) -> Vec<Diagnostic> {
        self.diagnostics
    }
}

impl Diagnostic {
    /// Set the help line (builder style on a reported diagnostic).
    pub fn help(&mut self, help: impl Into<String>) -> &mut Diagnostic {
        self.help = Some(help.into());
        self
    }
}

/// Sort for reading: by position, errors before warnings at the same place.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by_key(|d| {
        (
            d.location.map(|l| (l.line, l.column)),
            std::cmp::Reverse(d.severity),
        )
    });
}

/// Render diagnostics the way compilers do:
///
/// ```text
/// ecosystem.yaml:8:5: error: unknown field `instnces` in apps.web
///     8 |     instnces: 4
///       |     ^^^^^^^^
///   help: did you mean `instances`?
/// ```
pub fn render(file: &str, source: &str, diagnostics: &[Diagnostic]) -> String {
    let mut out = String::new();
    for diagnostic in diagnostics {
        render_one(&mut out, file, source, diagnostic);
    }
    out
}

fn render_one(out: &mut String, file: &str, source: &str, d: &Diagnostic) {
    let severity = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let Some(location) = d.location else {
        let _ = writeln!(out, "{file}: {severity}: {}", d.message);
        if let Some(help) = &d.help {
            let _ = writeln!(out, "  help: {help}");
        }
        return;
    };
    let _ = writeln!(
        out,
        "{file}:{}:{}: {severity}: {}",
        location.line, location.column, d.message
    );
    let line_text = usize::try_from(location.line - 1)
        .ok()
        .and_then(|index| source.lines().nth(index));
    if let Some(line_text) = line_text {
        // Tabs would shift the caret; show each as one space.
        let shown: String = line_text
            .chars()
            .map(|c| if c == '\t' || c.is_control() { ' ' } else { c })
            .collect();
        let width = location.line.to_string().len();
        let before = usize::try_from(location.column - 1).unwrap_or(0);
        let line_chars = shown.chars().count();
        let available = line_chars.saturating_sub(before).max(1);
        let carets = usize::try_from(location.len)
            .unwrap_or(1)
            .clamp(1, available);
        let _ = writeln!(out, "  {:>width$} | {}", location.line, shown.trim_end());
        let _ = writeln!(
            out,
            "  {:>width$} | {}{}",
            "",
            " ".repeat(before.min(line_chars)),
            "^".repeat(carets)
        );
    }
    if let Some(help) = &d.help {
        let _ = writeln!(out, "  help: {help}");
    }
}

/// The one-line count printed after the diagnostics.
pub fn summary_line(diagnostics: &[Diagnostic]) -> String {
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = diagnostics.len() - errors;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    format!(
        "{}, {}",
        plural(errors, "error"),
        plural(warnings, "warning")
    )
}

/// Diagnostics as JSON objects for editors and CI (`check --format json`).
#[derive(Debug, Serialize)]
pub struct JsonDiagnostic<'a> {
    pub(crate) file: &'a str,
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub severity: Severity,
    pub message: &'a str,
    pub(crate) help: Option<&'a str>,
}

pub fn to_json<'a>(file: &'a str, diagnostics: &'a [Diagnostic]) -> Vec<JsonDiagnostic<'a>> {
    diagnostics
        .iter()
        .map(|d| JsonDiagnostic {
            file,
            line: d.location.map(|l| l.line),
            column: d.location.map(|l| l.column),
            severity: d.severity,
            message: &d.message,
            help: d.help.as_deref(),
        })
        .collect()
}

/// Words longer than this get no did-you-mean.
pub(crate) const MAX_SUGGESTED_WORD: usize = 64;

/// The closest candidate to a misspelt word, if any is close enough to help.
pub(crate) fn did_you_mean<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    // A typo is short; comparing a huge word with each candidate would cost
    // its length times theirs, for a suggestion nobody needs.
    if word.len() > MAX_SUGGESTED_WORD {
        return None;
    }
    candidates
        .into_iter()
        .filter(|candidate| candidate.len() <= 2 * MAX_SUGGESTED_WORD)
        .map(|candidate| (strsim::jaro_winkler(word, candidate), candidate))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}
