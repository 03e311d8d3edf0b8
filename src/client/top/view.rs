//! Drawing the [`Dashboard`] with ratatui: a function of the state and the
//! frame's size alone, so a `TestBackend` shows exactly what a terminal
//! would, at any size (down to nothing at all: a pane resized to 20×5 must
//! still draw, not panic).
//!
//! From the top: a header (the file, rollouts, a lost supervisor), the
//! table, the log pane of the selection (when there is room), the status
//! line (a prompt, the filter being typed, or the last reply), and the keys.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};

use super::dashboard::{Action, Dashboard, Link, Mode};
use super::model::Column;
use effects::output::terminal::{Tab, printable};

/// Below this height the log pane is left out: the table comes first.
const LOG_PANE_MIN_TERMINAL_ROWS: u16 = 16;
/// The log pane's share of the height, in percent.
const LOG_PANE_PERCENT: u16 = 35;
/// The instance column grows with the longest name, up to this; longer
/// names are cut (a 200-character app name must not push every other
/// column off the screen).
const INSTANCE_COLUMN_MAX: u16 = 40;
/// Likewise the state column (`stopped (held)`, `backoff`, …).
const STATE_COLUMN_MAX: u16 = 20;
/// Health is shown when this much is left for it (it takes all there is).
const HEALTH_COLUMN_MIN: u16 = 8;
/// The longest target named in the help line (a long name is cut).
const HELP_TARGET_MAX: usize = 24;
/// Between columns: two spaces, so that a cell's own spaces (`9.6 MiB`)
/// never read as a column break.
const COLUMN_SPACING: u16 = 2;

/// Where each part goes in `area`.
struct Areas {
    header: Rect,
    table: Rect,
    logs: Rect,
    status: Rect,
    help: Rect,
}

fn areas(area: Rect) -> Areas {
    let logs = if area.height >= LOG_PANE_MIN_TERMINAL_ROWS {
        Constraint::Percentage(LOG_PANE_PERCENT)
    } else {
        Constraint::Length(0)
    };
    let [header, table, logs, status, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        logs,
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    Areas {
        header,
        table,
        logs,
        status,
        help,
    }
}

/// How many log lines the pane shows in a terminal of `area`.
pub(crate) fn log_pane_lines(area: Rect) -> usize {
    // Less its two borders.
    usize::from(areas(area).logs.height.saturating_sub(2))
}

/// Draw the whole dashboard. `table_state` keeps the table's scroll offset
/// from one frame to the next.
pub(crate) fn draw(frame: &mut Frame, dashboard: &Dashboard, table_state: &mut TableState) {
    let areas = areas(frame.area());
    frame.render_widget(header(dashboard), areas.header);
    draw_table(frame, dashboard, table_state, areas.table);
    if areas.logs.height > 0 {
        frame.render_widget(logs(dashboard, areas.logs.height), areas.logs);
    }
    frame.render_widget(status_line(dashboard), areas.status);
    frame.render_widget(help_line(dashboard), areas.help);
}

fn header(dashboard: &Dashboard) -> Paragraph<'static> {
    let title = Span::styled("supervise top", Style::new().add_modifier(Modifier::BOLD));
    let file = dashboard.header.clone().unwrap_or_default();
    let link = match &dashboard.link {
        Link::Connecting => Span::raw("  connecting…"),
        Link::Up => Span::raw(""),
        Link::Lost(why) => Span::styled(
            format!("  {}", printable(why, usize::MAX, Tab::Space)),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
    };
    let silence = match dashboard.silence_s {
        Some(seconds) => Span::styled(
            format!("  the supervisor has not answered for {seconds}s"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        None => Span::raw(""),
    };
    // What is wrong first: a long file name must not push it off the line.
    Paragraph::new(Line::from(vec![
        title,
        link,
        silence,
        Span::raw(format!("  {file}")),
    ]))
}

fn draw_table(frame: &mut Frame, dashboard: &Dashboard, state: &mut TableState, area: Rect) {
    let table = &dashboard.table;
    let sort = table.sort();
    let columns = fitting_columns(dashboard, area.width);
    let titles = columns.iter().map(|(column, _)| {
        if *column == sort.column {
            let arrow = if sort.descending { "▼" } else { "▲" };
            format!("{}{arrow}", column.title())
        } else {
            column.title().to_string()
        }
    });
    let header = Row::new(titles).style(Style::new().add_modifier(Modifier::BOLD));
    let widths = columns.iter().map(|(_, width)| *width);
    if table.shown().len() == 0 {
        let why = match (&dashboard.link, table.total()) {
            (Link::Connecting, _) => "waiting for the supervisor's first answer".to_string(),
            (_, 0) => "the supervisor runs no instance".to_string(),
            (_, total) => format!(
                "no instance of {total} matches the filter `{}` (Esc clears it)",
                table.filter()
            ),
        };
        let [head, body] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
        let widget = Table::new([header], widths).column_spacing(COLUMN_SPACING);
        frame.render_widget(widget, head);
        frame.render_widget(Paragraph::new(why), body);
        return;
    }
    let instance_width = columns
        .iter()
        .find_map(|(column, width)| match (column, width) {
            (Column::Instance, Constraint::Length(width)) => Some(usize::from(*width)),
            _ => None,
        })
        .unwrap_or(usize::MAX);
    let rows = table.shown().map(|row| {
        Row::new(columns.iter().map(|(column, _)| match column {
            Column::Instance => instance_cell(&row.app, row.slot, instance_width),
            _ => printable(&row.cell(*column), usize::MAX, Tab::Space),
        }))
    });
    let widget = Table::new(rows, widths)
        .header(header)
        .column_spacing(COLUMN_SPACING)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    state.select(table.selected_index());
    frame.render_stateful_widget(widget, area, state);
}

/// `app.slot` in `width` characters: a name too long loses its end, not
/// the slot, so that the instances of a long-named app stay apart
/// (`aaaaaaaa….0`, `aaaaaaaa….1`).
fn instance_cell(app: &str, slot: u32, width: usize) -> String {
    let target = format!("{app}.{slot}");
    if target.chars().count() <= width {
        return target;
    }
    let suffix = format!("….{slot}");
    let kept = width.saturating_sub(suffix.chars().count());
    format!("{}{suffix}", app.chars().take(kept).collect::<String>())
}

/// The columns that fit in `width`, in their order, with their widths:
/// each as wide as its widest cell (or title, with room for the sort
/// arrow), within its bound; health takes what is left. When not all fit,
/// the instance comes first and the others by [`COLUMN_PRIORITY`]: a
/// 20-column pane shows names and states, not slivers of every column.
fn fitting_columns(dashboard: &Dashboard, width: u16) -> Vec<(Column, Constraint)> {
    let natural = |column: Column| {
        let cells = dashboard
            .table
            .shown()
            .map(|row| row.cell(column).chars().count())
            .max()
            .unwrap_or(0);
        let title = column.title().chars().count() + 1;
        u16::try_from(cells.max(title))
            .unwrap_or(u16::MAX)
            .min(column_max(column))
    };
    let mut chosen = Vec::new();
    let mut used: u16 = 0;
    for column in COLUMN_PRIORITY {
        let needed = natural(column);
        let spacing = if chosen.is_empty() { 0 } else { COLUMN_SPACING };
        let after = used.saturating_add(spacing).saturating_add(needed);
        // The instance is always shown, cut to the width if it must be.
        if column == Column::Instance || after <= width {
            chosen.push((column, needed.min(width)));
            used = after.min(width);
        }
    }
    chosen.sort_by_key(|(column, _)| Column::ALL.iter().position(|c| c == column));
    chosen
        .into_iter()
        .map(|(column, needed)| {
            let constraint = match column {
                Column::Health => Constraint::Fill(1),
                _ => Constraint::Length(needed),
            };
            (column, constraint)
        })
        .collect()
}

/// Which columns stay when not all fit, most wanted first.
const COLUMN_PRIORITY: [Column; Column::ALL.len()] = [
    Column::Instance,
    Column::State,
    Column::Restarts,
    Column::Cpu,
    Column::Memory,
    Column::Pid,
    Column::Uptime,
    Column::Health,
];

/// The widest a column grows.
fn column_max(column: Column) -> u16 {
    match column {
        Column::Instance => INSTANCE_COLUMN_MAX,
        Column::State => STATE_COLUMN_MAX,
        Column::Health => HEALTH_COLUMN_MIN,
        Column::Pid => 8,
        Column::Cpu => 7,
        Column::Memory => 10,
        Column::Restarts => 9,
        Column::Uptime => 8,
    }
}

fn logs(dashboard: &Dashboard, height: u16) -> Paragraph<'static> {
    let pane = &dashboard.logs;
    let title = match &pane.target {
        Some(target) => format!(" logs {target} "),
        None => " logs ".to_string(),
    };
    let block = Block::bordered().title(title);
    let inner = usize::from(height.saturating_sub(2));
    let text: Vec<Line> = match (&pane.error, dashboard.table.selected()) {
        (Some(error), _) => vec![Line::styled(
            printable(error, usize::MAX, Tab::Space),
            Style::new().fg(Color::Red),
        )],
        (None, None) => vec![Line::raw("no instance selected")],
        (None, Some(_)) if pane.lines.is_empty() => vec![Line::raw("(no output yet)")],
        (None, Some(_)) => {
            let skip = pane.lines.len().saturating_sub(inner);
            pane.lines[skip..].iter().cloned().map(Line::raw).collect()
        }
    };
    Paragraph::new(text).block(block)
}

fn status_line(dashboard: &Dashboard) -> Paragraph<'static> {
    let prompt = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    match &dashboard.mode {
        Mode::Confirm(confirmation) => Paragraph::new(Span::styled(
            format!(
                "{} {}? (y/n)",
                confirmation.action.verb(),
                confirmation.target
            ),
            prompt,
        )),
        Mode::Filter => Paragraph::new(Line::from(vec![
            Span::styled(format!("filter: {}_", dashboard.filter_input), prompt),
            Span::raw("  (app or state; Enter keeps it, Esc clears it)"),
        ])),
        Mode::Browse => match &dashboard.notice {
            Some(notice) => {
                let style = if notice.error {
                    Style::new().fg(Color::Red)
                } else {
                    Style::new()
                };
                Paragraph::new(Span::styled(
                    printable(&notice.text, usize::MAX, Tab::Space),
                    style,
                ))
            }
            None => Paragraph::new(shown_count(dashboard)),
        },
    }
}

/// `3 instances` or `2 of 3 instances (filter: web)`.
fn shown_count(dashboard: &Dashboard) -> String {
    let table = &dashboard.table;
    let total = table.total();
    match table.filter() {
        "" => format!("{total} instances"),
        filter => format!(
            "{} of {total} instances (filter: {filter})",
            table.shown().len()
        ),
    }
}

/// The keys, with what the action keys apply to now.
fn help_line(dashboard: &Dashboard) -> Paragraph<'static> {
    let selected = dashboard.table.selected();
    let on = |action: Action| match selected {
        Some(row) if action.target(row, dashboard.scope).contains('.') => {
            instance_cell(&row.app, row.slot, HELP_TARGET_MAX)
        }
        Some(row) if row.app.chars().count() > HELP_TARGET_MAX => {
            let kept: String = row.app.chars().take(HELP_TARGET_MAX - 1).collect();
            format!("{kept}…")
        }
        Some(row) => row.app.clone(),
        None => "-".to_string(),
    };
    // The targets say the scope: `web.2` (an instance) or `web` (its app).
    let text = format!(
        "q quit  ↑↓  <> sort  i reverse  / filter  a scope  \
         {}: r restart  x stop  s start  {}: R reload",
        on(Action::Restart),
        on(Action::Reload),
    );
    Paragraph::new(text).style(Style::new().fg(Color::DarkGray))
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::client::top::fixtures::{reply, worker};

    fn render(dashboard: &Dashboard, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
        let mut state = TableState::default();
        terminal
            .draw(|frame| draw(frame, dashboard, &mut state))
            .expect("drawn");
        let buffer = terminal.backend().buffer();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    fn three_web_instances() -> Dashboard {
        let mut dashboard = Dashboard::default();
        let mut second = worker(1, Some(4243), Some(12.5));
        second.restarts = 2;
        second.health = Some("healthy".to_string());
        dashboard.on_status(Ok(reply(&[(
            "web",
            vec![
                worker(0, Some(4242), Some(0.1)),
                second,
                worker(2, None, None),
            ],
        )])));
        dashboard.on_logs(
            "web.0",
            Ok(vec![
                (0, "listening on :8080".to_string()),
                (0, "GET /".to_string()),
            ]),
        );
        dashboard
    }

    #[test]
    fn renders_the_table_logs_and_keys() {
        let screen = render(&three_web_instances(), 110, 20);
        let expected = [
            "supervise top  /srv/ecosystem.yaml (version 1)",
            "instance▲  pid   state    health                                            cpu    memory   restarts   uptime",
            "web.0      4242  ready    -                                                 0.1%   9.6 MiB  0          1m1s",
            "web.1      4243  ready    healthy                                           12.5%  9.6 MiB  2          1m1s",
            "web.2      -     backoff  -                                                 -      -        0          -",
            "",
            "",
            "",
            "",
            "",
            "",
            "┌ logs web.0 ────────────────────────────────────────────────────────────────────────────────────────────────┐",
            "│listening on :8080                                                                                          │",
            "│GET /                                                                                                       │",
            "│                                                                                                            │",
            "│                                                                                                            │",
            "│                                                                                                            │",
            "└────────────────────────────────────────────────────────────────────────────────────────────────────────────┘",
            "3 instances",
            "q quit  ↑↓  <> sort  i reverse  / filter  a scope  web.0: r restart  x stop  s start  web: R reload",
        ];
        assert_eq!(screen, expected, "\n{}", screen.join("\n"));
    }

    #[test]
    fn prompts_and_filters_show_on_the_status_line() {
        use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let mut dashboard = three_web_instances();
        let press = |d: &mut Dashboard, c: char| {
            d.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
        };
        press(&mut dashboard, 'a');
        press(&mut dashboard, 'x');
        let screen = render(&dashboard, 80, 10);
        assert_eq!(screen[8], "stop web? (y/n)");
        press(&mut dashboard, 'n');
        press(&mut dashboard, '/');
        for c in "nomatch".chars() {
            press(&mut dashboard, c);
        }
        let screen = render(&dashboard, 80, 10);
        assert_eq!(
            screen[2],
            "no instance of 3 matches the filter `nomatch` (Esc clears it)"
        );
        assert!(screen[8].starts_with("filter: nomatch_"), "{}", screen[8]);
    }

    #[test]
    fn a_lost_supervisor_is_shown_in_the_header() {
        let mut dashboard = three_web_instances();
        dashboard.on_status(Err(crate::client::Failure {
            code: crate::cli::exit::NOT_RUNNING,
            message: "no supervisor is running for this file".to_string(),
        }));
        let screen = render(&dashboard, 120, 6);
        assert!(
            screen[0].starts_with(
                "supervise top  supervisor unreachable, retrying: no supervisor is running for this file"
            ),
            "{}",
            screen[0]
        );
        // The last rows stay.
        assert!(screen[2].starts_with("web.0"), "{}", screen[2]);
    }

    #[test]
    fn any_size_draws_even_none() {
        let dashboard = three_web_instances();
        for (width, height) in [(0, 0), (1, 1), (20, 5), (5, 20), (3, 2), (200, 1), (1, 200)] {
            let screen = render(&dashboard, width, height);
            assert_eq!(screen.len(), usize::from(height));
        }
        let tiny = render(&dashboard, 20, 5);
        assert!(tiny[1].starts_with("instance▲"), "{tiny:?}");
        assert!(tiny[2].starts_with("web.0"), "{tiny:?}");
    }

    #[test]
    fn a_200_character_app_name_is_cut_and_leaves_room_for_the_rest() {
        let name = "a".repeat(200);
        let mut dashboard = Dashboard::default();
        dashboard.on_status(Ok(reply(&[(
            &name,
            vec![worker(0, Some(7), Some(1.0)), worker(1, Some(8), Some(1.0))],
        )])));
        let screen = render(&dashboard, 120, 8);
        // Cut before the slot, so the two instances stay apart.
        let kept = usize::from(INSTANCE_COLUMN_MAX) - "….0".chars().count();
        for (line, slot) in [(2, 0), (3, 1)] {
            let cut = format!("{}….{slot}  ", "a".repeat(kept));
            assert!(screen[line].starts_with(&cut), "{screen:#?}");
        }
        let help = format!("{}….0: r restart", "a".repeat(HELP_TARGET_MAX - 3));
        assert!(screen[7].contains(&help), "{screen:#?}");
        let row = &screen[2];
        assert!(
            row.contains("  7  ") && row.contains("ready") && row.contains("1m1s"),
            "{row}"
        );
    }

    #[test]
    fn a_thousand_instances_scroll_to_the_selection() {
        let workers = (0..1000)
            .map(|s| worker(s, Some(10_000 + s as i32), None))
            .collect();
        let mut dashboard = Dashboard::default();
        dashboard.on_status(Ok(reply(&[("many", workers)])));
        dashboard.table.select_last();
        let mut terminal = Terminal::new(TestBackend::new(100, 30)).expect("a test terminal");
        let mut state = TableState::default();
        terminal
            .draw(|frame| draw(frame, &dashboard, &mut state))
            .expect("drawn");
        let buffer = terminal.backend().buffer();
        let rows: Vec<String> = (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect()
            })
            .collect();
        assert!(rows.iter().any(|r| r.starts_with("many.999 ")), "{rows:#?}");
        assert!(!rows.iter().any(|r| r.starts_with("many.0 ")));
        assert_eq!(rows[rows.len() - 2].trim_end(), "1000 instances");
    }
}
