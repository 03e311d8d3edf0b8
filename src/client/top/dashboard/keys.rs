//! The input side of the dashboard: each key, in each mode (browsing,
//! typing a filter, confirming an action), changes the state and says what
//! the loop must do. Kept apart from the replies so that the keys can be
//! read (and mashed at random in the tests) as one table.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{Action, Confirmation, Dashboard, Effect, FILTER_CHARS_MAX, Mode, Notice, Scope};

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
}
