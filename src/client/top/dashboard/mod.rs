//! What `supervise top` shows and how it answers keys, as a state machine
//! with no I/O: a key or a reply goes in, the state changes, and what the
//! loop must do (send a command, quit) comes out as an [`Effect`]. The loop
//! (`mod.rs`) owns the terminal and the socket; this owns the meaning, so
//! that any sequence of keys can be tested — and is, mashed at random.
//!
//! This file holds the state and its vocabulary (modes, actions, what the
//! loop must do); [`keys`] is how each key changes it, [`replies`] how
//! what the supervisor answers does (a status, a command's reply, a log
//! tail) and which tail to ask for next.

mod keys;
mod replies;
#[cfg(test)]
mod tests;

use super::model::{InstanceRow, Table};
use ::model::protocol::Command;

/// The most log lines asked for at once (for the pane's height; an app's
/// share per instance is this divided among them, at least one each).
pub(crate) const LOG_LINES_MAX: usize = 200;
/// A log line longer than this is cut (the pane is one line high per line).
pub(crate) const LOG_LINE_CHARS_MAX: usize = 1000;
/// The longest filter one can type: it is matched against every row.
pub(crate) const FILTER_CHARS_MAX: usize = 64;

/// What an action key applies to: the selected instance, or its whole app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Instance,
    App,
}

/// The control commands the keys give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// A rolling replacement; always of the whole app.
    Reload,
    Restart,
    Stop,
    Start,
}

impl Action {
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Action::Reload => "reload",
            Action::Restart => "restart",
            Action::Stop => "stop",
            Action::Start => "start",
        }
    }

    /// What the action applies to for `row` in `scope`: `web.2` or `web`.
    pub(crate) fn target(self, row: &InstanceRow, scope: Scope) -> String {
        match (self, scope) {
            (Action::Reload, _) | (_, Scope::App) => row.app.clone(),
            (_, Scope::Instance) => row.target(),
        }
    }

    fn command(self, target: String) -> Command {
        match self {
            Action::Reload => Command::Reload { app: target },
            Action::Restart => Command::Restart { target },
            Action::Stop => Command::Stop { target },
            Action::Start => Command::Start { target },
        }
    }
}

/// An action waiting for its `y`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confirmation {
    pub(crate) action: Action,
    pub(crate) target: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    Browse,
    /// Typing a filter after `/`.
    Filter,
    Confirm(Confirmation),
}

/// What the loop must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    Nothing,
    /// Something shown changed.
    Redraw,
    /// Send this command; its reply goes to [`Dashboard::on_action`].
    Send {
        description: String,
        command: Command,
    },
    Quit,
}

/// The line under the table: the last command's reply or error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) text: String,
    pub(crate) error: bool,
}

/// Whether the last status request was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// No answer yet (at the start).
    Connecting,
    Up,
    /// The last request failed: the rows are those of the last answer.
    Lost(String),
}

/// The tail of the selection's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogPane {
    /// What the lines are of: `web.2` or `web`.
    pub(crate) target: Option<String>,
    pub(crate) lines: Vec<String>,
    pub(crate) error: Option<String>,
}

/// A log tail to ask for: `lines` per instance of `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogRequest {
    pub(crate) target: String,
    pub(crate) lines: usize,
}

/// Everything `top` shows.
#[derive(Debug, Clone)]
pub(crate) struct Dashboard {
    pub(crate) table: Table,
    pub(crate) mode: Mode,
    pub(crate) scope: Scope,
    /// The filter as being typed (applied at each key).
    pub(crate) filter_input: String,
    /// The file, its version, and rollouts in progress, from the last status.
    pub(crate) header: Option<String>,
    pub(crate) link: Link,
    pub(crate) notice: Option<Notice>,
    pub(crate) logs: LogPane,
    /// Whole seconds the status request now out has waited, once it is long.
    pub(crate) silence_s: Option<u64>,
}

impl Default for Dashboard {
    fn default() -> Dashboard {
        Dashboard {
            table: Table::default(),
            mode: Mode::Browse,
            scope: Scope::Instance,
            filter_input: String::new(),
            header: None,
            link: Link::Connecting,
            notice: None,
            logs: LogPane::default(),
            silence_s: None,
        }
    }
}
