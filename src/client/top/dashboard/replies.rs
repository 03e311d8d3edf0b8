//! What comes back from the supervisor, into the dashboard's state: a
//! status (the rows, the header, whether the link is up), the reply to a
//! command a key sent, a log tail; and which tail to ask for next.

use super::{
    Dashboard, LOG_LINE_CHARS_MAX, LOG_LINES_MAX, Link, LogPane, LogRequest, Notice, Scope,
};
use crate::cli::exit;
use crate::client::Failure;
use ::model::protocol::StatusReply;
// Whatever may hold a control character (a worker's text above all) is
// drawn printable, tabs as spaces: nothing but ratatui moves the cursor.
use effects::output::terminal::{Tab, printable};

impl Dashboard {
    /// A status request was answered, or failed.
    pub(crate) fn on_status(&mut self, status: Result<StatusReply, Failure>) {
        match status {
            Ok(status) => {
                self.table.update(&status);
                self.header = Some(header(&status));
                self.link = Link::Up;
            }
            Err(failure) => {
                let gone = if failure.code == exit::NOT_RUNNING {
                    "supervisor unreachable"
                } else {
                    "status failed"
                };
                self.link = Link::Lost(format!("{gone}, retrying: {}", failure.message));
            }
        }
    }

    /// The reply to a command sent for a key (`description`: `restart web.2`).
    pub(crate) fn on_action(
        &mut self,
        description: &str,
        reply: Result<serde_json::Value, Failure>,
    ) {
        self.notice = Some(match reply {
            Ok(reply) => {
                let said = match (reply["message"].as_str(), reply["apps"].as_array()) {
                    (Some(message), _) => message.to_string(),
                    (None, Some(apps)) => format!(
                        "rolling replacement of {} started",
                        apps.iter()
                            .filter_map(|a| a.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    (None, None) => "done".to_string(),
                };
                Notice {
                    text: format!("{description}: {said}"),
                    error: false,
                }
            }
            Err(failure) => Notice {
                text: format!("{description}: {}", failure.message),
                error: true,
            },
        });
    }

    /// A command not sent (another is still out).
    pub(crate) fn on_action_refused(&mut self, text: String) {
        self.notice = Some(Notice { text, error: true });
    }

    /// How long the supervisor has not answered `status` (`None`: it has,
    /// or not for long); whether what is shown changed.
    pub(crate) fn set_silence(&mut self, silence: Option<std::time::Duration>) -> bool {
        let silence_s = silence.map(|s| s.as_secs());
        let changed = silence_s != self.silence_s;
        self.silence_s = silence_s;
        changed
    }

    /// The tail to ask for now, for a pane `pane_lines` high: the selected
    /// instance's, or (app scope) an equal share of it for each instance.
    pub(crate) fn log_request(&self, pane_lines: usize) -> Option<LogRequest> {
        if pane_lines == 0 {
            return None;
        }
        let row = self.table.selected()?;
        let wanted = pane_lines.min(LOG_LINES_MAX);
        Some(match self.scope {
            Scope::Instance => LogRequest {
                target: row.target(),
                lines: wanted,
            },
            Scope::App => {
                let instances = self.table.instances_of(&row.app).max(1);
                LogRequest {
                    target: row.app.clone(),
                    lines: (wanted / instances).max(1),
                }
            }
        })
    }

    /// A log tail came (`lines`: `(slot, line)` in the supervisor's order).
    pub(crate) fn on_logs(&mut self, target: &str, lines: Result<Vec<(u32, String)>, Failure>) {
        // An app's name has no dot: `web` is a whole app, `web.2` an instance.
        let per_app = !target.contains('.');
        match lines {
            Ok(lines) => {
                self.logs = LogPane {
                    target: Some(target.to_string()),
                    lines: lines
                        .into_iter()
                        .map(|(slot, line)| {
                            let line = printable(&line, LOG_LINE_CHARS_MAX, Tab::Space);
                            if per_app {
                                format!("{target}.{slot} | {line}")
                            } else {
                                line
                            }
                        })
                        .collect(),
                    error: None,
                };
            }
            Err(failure) => {
                self.logs.target = Some(target.to_string());
                self.logs.error = Some(failure.message);
            }
        }
    }
}

/// `FILE (version N)`, and what rollouts are under way or halted.
pub(super) fn header(status: &StatusReply) -> String {
    let mut text = format!("{} (version {})", status.file, status.version);
    for app in &status.apps {
        if app.rollout.halted {
            text.push_str(&format!("; {}: rollout halted", app.name));
        } else if !app.rollout.complete {
            text.push_str(&format!(
                "; {}: {}/{} replaced",
                app.name, app.rollout.replaced, app.rollout.total
            ));
        }
        if let Some(autoscale) = &app.autoscale {
            text.push_str(&format!(
                "; {} {}",
                app.name,
                autoscale.describe(app.instances)
            ));
        }
    }
    if status.config_error.is_some() {
        text.push_str("; the last edit is invalid (supervise status shows why)");
    }
    printable(&text, usize::MAX, Tab::Space)
}
