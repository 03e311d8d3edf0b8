//! What the import does with one key of an app: the tables of every
//! documented key in pm2's and supervisord's tests say it of each.

/// What the import does with one key of an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Carried over: the output differs from the app without the key.
    Written,
    /// Carried over with nothing to write, and a note at its line says so.
    Noted,
    /// Carried over with nothing to write: supervise behaves so anyway.
    Same,
    /// Left out, with a warning or a note at its line.
    LeftOut,
}

impl Outcome {
    /// What became of a key the import `mapped` and/or `left_out`, where
    /// `written` the output differs from the app without it and `noted` a
    /// note stands at its line; `None` when that is none of the four.
    pub(super) fn of(mapped: bool, left_out: bool, written: bool, noted: bool) -> Option<Outcome> {
        match (mapped, left_out) {
            (true, false) if written => Some(Outcome::Written),
            (true, false) if noted => Some(Outcome::Noted),
            (true, false) => Some(Outcome::Same),
            (_, true) if noted => Some(Outcome::LeftOut),
            _ => None,
        }
    }
}
