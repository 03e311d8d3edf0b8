use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::replies::header;
use super::*;
use crate::cli::exit;
use crate::client::Failure;
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

#[test]
fn the_header_shows_an_autoscaled_app_count_range_and_load() {
    let mut status = reply(&[("web", vec![worker(0, Some(1), None)])]);
    status.apps[0].instances = 3;
    status.apps[0].autoscale = Some(model::protocol::AutoscaleStatus {
        min: 1,
        max: 8,
        queue_target: Some(10),
        cpu_target: None,
        queue: Some(27.4),
        cpu_percent: None,
    });
    assert_eq!(
        header(&status),
        "/srv/ecosystem.yaml (version 1); web 3 of 1..8 (queue 27/10)"
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
