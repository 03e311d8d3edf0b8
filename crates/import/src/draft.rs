//! What an import produces before it is written: the [`Draft`], its
//! [`DraftApp`]s as ecosystem-file keys, and the [`Note`]s on what did not
//! carry over exactly. Every translator fills these; [`crate::render`] and
//! [`crate::summary`] read them.

use serde_json::{Map, Value};

use crate::Format;

/// How much a note matters to the one who reads the imported file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// Behaviour that did not carry over, or carried over changed.
    Warning,
    /// Something to know, nothing lost.
    Note,
}

/// One thing the import could not carry over exactly, with the line of the
/// source it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub(crate) severity: Severity,
    pub(crate) line: Option<usize>,
    pub(crate) text: String,
}

impl Note {
    pub(crate) fn warning(line: Option<usize>, text: impl Into<String>) -> Note {
        Note {
            severity: Severity::Warning,
            line,
            text: text.into(),
        }
    }

    pub(crate) fn info(line: Option<usize>, text: impl Into<String>) -> Note {
        Note {
            severity: Severity::Note,
            line,
            text: text.into(),
        }
    }
}

/// One app of the imported file.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftApp {
    pub(crate) name: String,
    /// Where the app is declared in the source.
    pub(crate) line: Option<usize>,
    /// Ecosystem-file keys, in the order they are written.
    pub(crate) fields: Map<String, Value>,
    pub(crate) notes: Vec<Note>,
    /// The source's keys for this app that were carried over (some with a
    /// note on how), in the source's order.
    pub(crate) mapped: Vec<String>,
    /// The source's keys for this app that were not, each with a warning or
    /// a note saying why.
    pub(crate) left_out: Vec<String>,
}

impl DraftApp {
    pub(crate) fn new(name: String, line: Option<usize>) -> DraftApp {
        DraftApp {
            name,
            line,
            fields: Map::new(),
            notes: Vec::new(),
            mapped: Vec::new(),
            left_out: Vec::new(),
        }
    }

    pub(crate) fn set(&mut self, key: &str, value: Value) {
        self.fields.insert(key.to_string(), value);
    }

    pub(crate) fn warn(&mut self, line: Option<usize>, text: impl Into<String>) {
        self.notes.push(Note::warning(line, text));
    }

    pub(crate) fn note(&mut self, line: Option<usize>, text: impl Into<String>) {
        self.notes.push(Note::info(line, text));
    }

    /// `key` of the source is not carried over: a warning says why.
    pub(crate) fn leave_out(&mut self, key: &str, line: Option<usize>, text: impl Into<String>) {
        self.warn(line, text);
        self.mark_left_out(key);
    }

    /// `key` of the source is not carried over, and nothing a process sees
    /// changes for it (pm2's own tooling, say): a note says why.
    pub(crate) fn leave_out_with_note(
        &mut self,
        key: &str,
        line: Option<usize>,
        text: impl Into<String>,
    ) {
        self.note(line, text);
        self.mark_left_out(key);
    }

    /// Record `key` of the source as not carried over (a note about it is
    /// already there).
    pub(crate) fn mark_left_out(&mut self, key: &str) {
        if !self.left_out.iter().any(|k| k == key) {
            self.left_out.push(key.to_string());
        }
    }

    /// Record `key` of the source as carried over, unless it was left out.
    pub(crate) fn record_mapped(&mut self, key: &str) {
        if !self.left_out.iter().any(|k| k == key) && !self.mapped.iter().any(|k| k == key) {
            self.mapped.push(key.to_string());
        }
    }
}

/// What an import produced, before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub format: Format,
    /// The source file as the user named it.
    pub source: String,
    pub apps: Vec<DraftApp>,
    /// Notes about the file as a whole (its other sections, say).
    pub notes: Vec<Note>,
}
