//! What `supervise top` shows and how it answers keys, as a state machine
//! with no I/O: a key or a reply goes in, the state changes, and what the
//! loop must do (send a command, quit) comes out as an [`Effect`]. The loop
//! (`mod.rs`) owns the terminal and the socket; this owns the meaning, so
//! that any sequence of keys can be tested — and is, mashed at random.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::model::{InstanceRow, Table};
use crate::cli::exit;
// Whatever may hold a control character (a worker's text above all) is
// drawn printable, tabs as spaces: nothing but ratatui moves the cursor.
use crate::client::Failure;
use ::model::protocol::{Command, StatusReply};
use effects::output::terminal::{Tab, printable};

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

/// How many rows PgUp/PgDn move.
const PAGE_ROWS: isize = 10;

impl Dashboard {
    /// Answer one key.
    pub(crate) fn handle_key(&mut self, key: KeyEvent) -> Effect {
        // Releases and repeats (kitty's protocol) are not presses.
        if key.kind == KeyEventKind::Release {
            return Effect::Nothing;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Effect::Quit;
        }
        match self.mode.clone() {
            Mode::Browse => self.browse_key(key),
            Mode::Filter => self.filter_key(key),
            Mode::Confirm(confirmation) => self.confirm_key(key, confirmation),
        }
    }

    fn browse_key(&mut self, key: KeyEvent) -> Effect {
        let table = &mut self.table;
        match key.code {
            KeyCode::Char('q') => return Effect::Quit,
            KeyCode::Down | KeyCode::Char('j') => table.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => table.move_selection(-1),
            KeyCode::PageDown => table.move_selection(PAGE_ROWS),
            KeyCode::PageUp => table.move_selection(-PAGE_ROWS),
            KeyCode::Home | KeyCode::Char('g') => table.select_first(),
            KeyCode::End | KeyCode::Char('G') => table.select_last(),
            KeyCode::Char('>') => table.cycle_sort(true),
            KeyCode::Char('<') => table.cycle_sort(false),
            KeyCode::Char('i') => table.reverse(),
            KeyCode::Char('/') => {
                self.filter_input = table.filter().to_string();
                self.mode = Mode::Filter;
            }
            KeyCode::Esc => {
                self.filter_input.clear();
                table.set_filter("");
                self.notice = None;
            }
            KeyCode::Char('a') => {
                self.scope = match self.scope {
                    Scope::Instance => Scope::App,
                    Scope::App => Scope::Instance,
                };
            }
            KeyCode::Char('R') => return self.ask(Action::Reload),
            KeyCode::Char('r') => return self.ask(Action::Restart),
            KeyCode::Char('x') => return self.ask(Action::Stop),
            KeyCode::Char('s') => return self.ask(Action::Start),
            _ => return Effect::Nothing,
        }
        Effect::Redraw
    }

    /// Ask to confirm `action` on the selection.
    fn ask(&mut self, action: Action) -> Effect {
        match self.table.selected() {
            Some(row) => {
                self.mode = Mode::Confirm(Confirmation {
                    action,
                    target: action.target(row, self.scope),
                });
            }
            None => {
                self.notice = Some(Notice {
                    text: format!("nothing selected to {}", action.verb()),
                    error: true,
                });
            }
        }
        Effect::Redraw
    }

    fn filter_key(&mut self, key: KeyEvent) -> Effect {
        match key.code {
            KeyCode::Enter => self.mode = Mode::Browse,
            KeyCode::Esc => {
                self.filter_input.clear();
                self.mode = Mode::Browse;
            }
            KeyCode::Backspace => {
                self.filter_input.pop();
            }
            KeyCode::Char(c) if !c.is_control() => {
                if self.filter_input.chars().count() < FILTER_CHARS_MAX {
                    self.filter_input.push(c);
                }
            }
            _ => return Effect::Nothing,
        }
        self.table.set_filter(&self.filter_input);
        Effect::Redraw
    }

    fn confirm_key(&mut self, key: KeyEvent, confirmation: Confirmation) -> Effect {
        self.mode = Mode::Browse;
        if !matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
            self.notice = Some(Notice {
                text: format!(
                    "{} {}: cancelled",
                    confirmation.action.verb(),
                    confirmation.target
                ),
                error: false,
            });
            return Effect::Redraw;
        }
        let description = format!("{} {}", confirmation.action.verb(), confirmation.target);
        self.notice = Some(Notice {
            text: format!("{description}: sent, waiting for the reply"),
            error: false,
        });
        Effect::Send {
            description,
            command: confirmation.action.command(confirmation.target),
        }
    }

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
fn header(status: &StatusReply) -> String {
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
    }
    if status.config_error.is_some() {
        text.push_str("; the last edit is invalid (supervise status shows why)");
    }
    printable(&text, usize::MAX, Tab::Space)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::top::fixtures::{reply, worker};

    fn press(dashboard: &mut Dashboard, code: KeyCode) -> Effect {
        dashboard.handle_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn typed(dashboard: &mut Dashboard, text: &str) {
        for c in text.chars() {
            press(dashboard, KeyCode::Char(c));
        }
    }

    fn running() -> Dashboard {
        let mut dashboard = Dashboard::default();
        dashboard.on_status(Ok(reply(&[
            (
                "web",
                vec![worker(0, Some(10), None), worker(1, Some(11), None)],
            ),
            ("api", vec![worker(0, Some(20), None)]),
        ])));
        dashboard
    }

    #[test]
    fn q_and_ctrl_c_quit() {
        let mut dashboard = running();
        assert_eq!(press(&mut dashboard, KeyCode::Char('q')), Effect::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(dashboard.handle_key(ctrl_c), Effect::Quit);
        // Even while typing a filter, where `q` is a letter.
        press(&mut dashboard, KeyCode::Char('/'));
        assert_eq!(press(&mut dashboard, KeyCode::Char('q')), Effect::Redraw);
        assert_eq!(dashboard.handle_key(ctrl_c), Effect::Quit);
    }

    #[test]
    fn an_action_asks_first_and_sends_on_y() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Down);
        assert_eq!(press(&mut dashboard, KeyCode::Char('r')), Effect::Redraw);
        assert_eq!(
            dashboard.mode,
            Mode::Confirm(Confirmation {
                action: Action::Restart,
                target: "web.0".to_string()
            })
        );
        assert_eq!(
            press(&mut dashboard, KeyCode::Char('y')),
            Effect::Send {
                description: "restart web.0".to_string(),
                command: Command::Restart {
                    target: "web.0".to_string()
                }
            }
        );
        assert_eq!(dashboard.mode, Mode::Browse);
        dashboard.on_action(
            "restart web.0",
            Ok(serde_json::json!({"ok": true, "message": "web.0: restarting"})),
        );
        assert_eq!(
            dashboard.notice.as_ref().map(|n| n.text.as_str()),
            Some("restart web.0: web.0: restarting")
        );
    }

    #[test]
    fn anything_but_y_cancels() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Char('x'));
        assert_eq!(press(&mut dashboard, KeyCode::Char('n')), Effect::Redraw);
        assert_eq!(dashboard.mode, Mode::Browse);
        assert_eq!(
            dashboard.notice.as_ref().map(|n| n.text.as_str()),
            Some("stop api.0: cancelled")
        );
        press(&mut dashboard, KeyCode::Char('x'));
        assert_eq!(press(&mut dashboard, KeyCode::Esc), Effect::Redraw);
        assert_eq!(dashboard.mode, Mode::Browse);
    }

    #[test]
    fn app_scope_targets_the_app_and_reload_always_does() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Char('R'));
        assert!(matches!(&dashboard.mode, Mode::Confirm(c) if c.target == "api"));
        press(&mut dashboard, KeyCode::Char('n'));
        press(&mut dashboard, KeyCode::Char('a'));
        assert_eq!(dashboard.scope, Scope::App);
        press(&mut dashboard, KeyCode::Char('s'));
        assert!(
            matches!(&dashboard.mode, Mode::Confirm(c) if c.target == "api" && c.action == Action::Start)
        );
        assert_eq!(
            press(&mut dashboard, KeyCode::Char('y')),
            Effect::Send {
                description: "start api".to_string(),
                command: Command::Start {
                    target: "api".to_string()
                }
            }
        );
        dashboard.on_action(
            "reload web",
            Ok(serde_json::json!({"ok": true, "apps": ["web"]})),
        );
        assert_eq!(
            dashboard.notice.as_ref().map(|n| n.text.as_str()),
            Some("reload web: rolling replacement of web started")
        );
    }

    #[test]
    fn a_refused_command_shows_the_error() {
        let mut dashboard = running();
        dashboard.on_action(
            "start web",
            Err(Failure {
                code: exit::INVALID,
                message: "web is not held".to_string(),
            }),
        );
        let notice = dashboard.notice.as_ref().expect("a notice");
        assert!(notice.error);
        assert_eq!(notice.text, "start web: web is not held");
    }

    #[test]
    fn filter_typed_then_kept_or_cleared() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Char('/'));
        typed(&mut dashboard, "wex");
        assert_eq!(dashboard.table.shown().len(), 0);
        press(&mut dashboard, KeyCode::Backspace);
        assert_eq!(dashboard.table.shown().len(), 2);
        press(&mut dashboard, KeyCode::Enter);
        assert_eq!(dashboard.mode, Mode::Browse);
        assert_eq!(dashboard.table.filter(), "we");
        // `/` again edits the filter in place; Esc there clears it.
        press(&mut dashboard, KeyCode::Char('/'));
        assert_eq!(dashboard.filter_input, "we");
        press(&mut dashboard, KeyCode::Esc);
        assert_eq!(dashboard.table.filter(), "");
        // Esc while browsing clears it too.
        press(&mut dashboard, KeyCode::Char('/'));
        typed(&mut dashboard, "api");
        press(&mut dashboard, KeyCode::Enter);
        assert_eq!(dashboard.table.shown().len(), 1);
        press(&mut dashboard, KeyCode::Esc);
        assert_eq!(dashboard.table.shown().len(), 3);
    }

    #[test]
    fn a_filter_is_bounded() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Char('/'));
        typed(&mut dashboard, &"w".repeat(FILTER_CHARS_MAX * 2));
        assert_eq!(dashboard.filter_input.chars().count(), FILTER_CHARS_MAX);
    }

    #[test]
    fn with_nothing_shown_an_action_says_so() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Char('/'));
        typed(&mut dashboard, "zzz");
        press(&mut dashboard, KeyCode::Enter);
        assert_eq!(press(&mut dashboard, KeyCode::Char('r')), Effect::Redraw);
        assert_eq!(dashboard.mode, Mode::Browse);
        assert!(dashboard.notice.as_ref().is_some_and(|n| n.error));
        assert_eq!(dashboard.log_request(10), None);
    }

    #[test]
    fn a_lost_supervisor_keeps_the_last_rows() {
        let mut dashboard = running();
        dashboard.on_status(Err(Failure {
            code: exit::NOT_RUNNING,
            message: "no supervisor is running for this file (tried /run/x.sock)".to_string(),
        }));
        assert!(
            matches!(&dashboard.link, Link::Lost(m) if m.starts_with("supervisor unreachable, retrying: "))
        );
        assert_eq!(dashboard.table.shown().len(), 3);
        dashboard.on_status(Ok(reply(&[])));
        assert_eq!(dashboard.link, Link::Up);
        assert_eq!(dashboard.table.shown().len(), 0);
    }

    #[test]
    fn log_requests_are_bounded_and_shared_among_an_apps_instances() {
        let mut dashboard = running();
        press(&mut dashboard, KeyCode::Down);
        assert_eq!(
            dashboard.log_request(20),
            Some(LogRequest {
                target: "web.0".to_string(),
                lines: 20
            })
        );
        assert_eq!(
            dashboard.log_request(100_000).map(|r| r.lines),
            Some(LOG_LINES_MAX)
        );
        assert_eq!(dashboard.log_request(0), None);
        press(&mut dashboard, KeyCode::Char('a'));
        assert_eq!(
            dashboard.log_request(20),
            Some(LogRequest {
                target: "web".to_string(),
                lines: 10
            })
        );
        assert_eq!(dashboard.log_request(1).map(|r| r.lines), Some(1));
    }

    #[test]
    fn log_lines_are_made_printable_and_cut() {
        let mut dashboard = running();
        let hostile = format!("\x1b[2J\x1b]0;pwned\x07tab\there{}", "x".repeat(5000));
        dashboard.on_logs("web.0", Ok(vec![(0, hostile)]));
        let line = &dashboard.logs.lines[0];
        assert!(line.starts_with("?[2J?]0;pwned?tab here"), "{line}");
        assert!(!line.chars().any(char::is_control));
        assert_eq!(line.chars().count(), LOG_LINE_CHARS_MAX);
        dashboard.on_logs("web", Ok(vec![(1, "hello".to_string())]));
        assert_eq!(dashboard.logs.lines, ["web.1 | hello"]);
    }

    #[test]
    fn the_header_names_the_file_and_rollouts() {
        let mut status = reply(&[("web", vec![worker(0, Some(1), None)])]);
        status.apps[0].rollout.complete = false;
        status.apps[0].rollout.total = 3;
        status.apps[0].rollout.replaced = 1;
        assert_eq!(
            header(&status),
            "/srv/ecosystem.yaml (version 1); web: 1/3 replaced"
        );
    }

    proptest::proptest! {
        /// Keys mashed at random, among status replies that come and go:
        /// no panic, and the selection is always one of the rows shown.
        #[test]
        fn mashed_keys_never_break_it(keys in proptest::collection::vec(0usize..KEYS.len(), 0..200)) {
            let mut dashboard = running();
            for (n, key) in keys.into_iter().enumerate() {
                let effect = dashboard.handle_key(KeyEvent::new(KEYS[key], KeyModifiers::NONE));
                if n % 7 == 0 {
                    dashboard.on_status(Ok(reply(&[("web", (0..(n % 5) as u32).map(|s| worker(s, Some(1), None)).collect())])));
                }
                if effect == Effect::Quit {
                    continue;
                }
                let shown = dashboard.table.shown().len();
                match dashboard.table.selected_index() {
                    Some(index) => proptest::prop_assert!(index < shown),
                    None => proptest::prop_assert!(shown == 0),
                }
                let _ = dashboard.log_request(n % 30);
            }
        }
    }

    const KEYS: [KeyCode; 22] = [
        KeyCode::Up,
        KeyCode::Down,
        KeyCode::PageUp,
        KeyCode::PageDown,
        KeyCode::Home,
        KeyCode::End,
        KeyCode::Enter,
        KeyCode::Esc,
        KeyCode::Backspace,
        KeyCode::Tab,
        KeyCode::F(1),
        KeyCode::Char('/'),
        KeyCode::Char('<'),
        KeyCode::Char('>'),
        KeyCode::Char('i'),
        KeyCode::Char('a'),
        KeyCode::Char('r'),
        KeyCode::Char('R'),
        KeyCode::Char('x'),
        KeyCode::Char('y'),
        KeyCode::Char('w'),
        KeyCode::Char('z'),
    ];
}
