//! `supervise top`: a live dashboard of the running supervisor, a client of
//! its control socket like `status` — the same `status` and `logs` requests,
//! and `reload`/`restart`/`stop`/`start` for the selection, each confirmed.
//!
//! The parts, so that what can be pure is: [`model`] (the rows, sort,
//! filter, selection), [`dashboard`] (keys and replies in, effects out),
//! [`view`] (drawing a dashboard, tested on ratatui's `TestBackend`); the
//! I/O is here and in [`background`] (one thread per kind of request, so
//! the keys never wait on the socket) and [`terminal`] (raw mode and the
//! alternate screen, given back on every way out).
//!
//! Costs are bounded by consts: at most [`REDRAWS_PER_SECOND`] frames and as
//! many status requests a second, one log tail each [`LOG_REFRESH`] (or at
//! once when the selection moves), each request bounded like every client's
//! ([`REPLY_TIMEOUT`](crate::client::REPLY_TIMEOUT) per line, and
//! [`LOG_FETCH_LIMIT`] for a whole tail). Keys are read while requests are
//! out: a supervisor that does not answer (SIGSTOP) delays the keys by at
//! most one frame ([`FRAME_INTERVAL`]) and shows how long it has been silent.
//!
//! With no supervisor at the start, `top` exits 3 as every client does.
//! When it goes away later, `top` stays: the header says it is gone, the
//! last rows stay on screen, and it keeps asking, so a restarted supervisor
//! is picked up again (the socket is looked up anew for each request: its
//! name may change with a new supervisor); `q` quits (exit 0).

mod background;
mod dashboard;
#[cfg(test)]
mod fixtures;
mod model;
mod terminal;
mod view;

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event};
use ratatui::layout::Rect;
use ratatui::widgets::TableState;

use self::background::Background;
use self::dashboard::{Dashboard, Effect, LOG_LINE_CHARS_MAX, LOG_LINES_MAX, LogRequest};
use super::{Connection, Failure, REPLY_TIMEOUT, ask, ask_status, fail, socket_path};
use crate::cli::exit;
use ::model::protocol::{Command, StatusReply};

/// The most frames drawn, and status requests sent, per second.
pub(crate) const REDRAWS_PER_SECOND: u32 = 2;
/// The shortest time between two frames (and two status requests).
pub(crate) const FRAME_INTERVAL: Duration = Duration::from_millis(1000 / REDRAWS_PER_SECOND as u64);
/// How often the selection's log tail is asked for again.
pub(crate) const LOG_REFRESH: Duration = Duration::from_secs(1);
/// The longest one log tail may take in all (each line is bounded too).
pub(crate) const LOG_FETCH_LIMIT: Duration = REPLY_TIMEOUT;
/// After this long without an answer to `status`, the header says so.
const SILENCE_SHOWN_AFTER: Duration = Duration::from_secs(1);

/// Where the supervisor's socket is, looked up again for every request: a
/// supervisor restarted while `top` runs may bind its socket under another
/// name (the file's aliases point to it), and `top` must find it there.
#[derive(Clone)]
struct Locator {
    file: Option<PathBuf>,
    socket: Option<PathBuf>,
}

impl Locator {
    fn find(&self) -> Result<PathBuf, Failure> {
        socket_path(self.file.as_deref(), self.socket.as_deref())
    }
}

/// `supervise top`, for the supervisor of `file` (or at `socket`).
pub fn top(file: Option<&Path>, socket: Option<&Path>) -> Result<(), Failure> {
    if !std::io::stdout().is_terminal() {
        return Err(fail(
            exit::USAGE,
            "supervise top draws a live dashboard and needs a terminal, but its output is \
             not one; in a script or a pipe use `supervise status` (or `status --json`)",
        ));
    }
    let locator = Locator {
        file: file.map(Path::to_path_buf),
        socket: socket.map(Path::to_path_buf),
    };
    // As every client: no supervisor, exit 3, before the screen is taken.
    let first = ask_status(&locator.find()?)?;
    let mut dashboard = Dashboard::default();
    dashboard.on_status(Ok(first));
    let mut screen = terminal::Screen::take()
        .map_err(|e| fail(exit::USAGE, format!("cannot set up the terminal: {e}")))?;
    let result = run(&mut screen, &locator, dashboard);
    // The terminal back before the error is printed.
    drop(screen);
    result
}

/// A command for a key, and what to call it in the status line.
struct Order {
    description: String,
    command: Command,
}

/// The loop: replies in, requests out when due, keys, a frame when needed.
fn run(
    screen: &mut terminal::Screen,
    locator: &Locator,
    mut dashboard: Dashboard,
) -> Result<(), Failure> {
    let thread_failed =
        |e: std::io::Error| fail(exit::USAGE, format!("cannot start a thread: {e}"));
    let terminal_failed = |e: std::io::Error| fail(exit::USAGE, format!("the terminal: {e}"));
    let at = locator.clone();
    let mut status: Background<(), Result<StatusReply, Failure>> =
        Background::spawn("top-status", move |()| ask_status(&at.find()?))
            .map_err(thread_failed)?;
    let at = locator.clone();
    let mut logs = Background::spawn("top-logs", move |request: LogRequest| {
        let lines = at.find().and_then(|socket| log_tail(&socket, &request));
        (request.target, lines)
    })
    .map_err(thread_failed)?;
    let at = locator.clone();
    let mut orders = Background::spawn("top-orders", move |order: Order| {
        let reply = at.find().and_then(|socket| ask(&socket, order.command));
        (order.description, reply)
    })
    .map_err(thread_failed)?;

    let mut table_state = TableState::default();
    let mut dirty = true;
    let mut last_frame: Option<Instant> = None;
    let mut next_status = Instant::now() + FRAME_INTERVAL;
    let mut next_logs = Instant::now();
    let mut logs_of: Option<String> = None;
    loop {
        if terminal::quit_signalled() {
            return Ok(());
        }
        if let Some(reply) = status.take() {
            dashboard.on_status(reply);
            dirty = true;
        }
        if let Some((target, lines)) = logs.take() {
            dashboard.on_logs(&target, lines);
            dirty = true;
        }
        if let Some((description, reply)) = orders.take() {
            dashboard.on_action(&description, reply);
            dirty = true;
            // Show what the command did without waiting a whole frame more.
            next_status = Instant::now();
        }
        dirty |= dashboard.set_silence(
            status
                .busy_for()
                .filter(|waited| *waited >= SILENCE_SHOWN_AFTER),
        );

        let now = Instant::now();
        if now >= next_status && status.offer(()) {
            next_status = now + FRAME_INTERVAL;
        }
        let size = screen.terminal.size().map_err(terminal_failed)?;
        let area = Rect::new(0, 0, size.width, size.height);
        let wanted = dashboard.log_request(view::log_pane_lines(area));
        if let Some(request) = wanted {
            let moved = logs_of.as_deref() != Some(request.target.as_str());
            let target = request.target.clone();
            if (moved || now >= next_logs) && logs.offer(request) {
                logs_of = Some(target);
                next_logs = now + LOG_REFRESH;
            }
        }

        if dirty && last_frame.is_none_or(|at| at.elapsed() >= FRAME_INTERVAL) {
            screen
                .terminal
                .draw(|frame| view::draw(frame, &dashboard, &mut table_state))
                .map_err(terminal_failed)?;
            dirty = false;
            last_frame = Some(Instant::now());
        }

        // Wait for a key until the next thing falls due; at most a frame, to
        // take in the replies of requests still out.
        let now = Instant::now();
        let frame_due = last_frame.filter(|_| dirty).map(|at| at + FRAME_INTERVAL);
        let wake = [Some(next_status), Some(next_logs), frame_due]
            .into_iter()
            .flatten()
            .filter(|at| *at > now)
            .min()
            .unwrap_or(now + FRAME_INTERVAL)
            .min(now + FRAME_INTERVAL);
        if !event::poll(wake - now).map_err(terminal_failed)? {
            continue;
        }
        // Every event already there, then back to the replies.
        loop {
            match event::read().map_err(terminal_failed)? {
                Event::Key(key) => match dashboard.handle_key(key) {
                    Effect::Quit => return Ok(()),
                    Effect::Redraw => dirty = true,
                    Effect::Nothing => {}
                    Effect::Send {
                        description,
                        command,
                    } => {
                        let busy = format!(
                            "{description}: not sent, the last command is still waiting for its reply"
                        );
                        if !orders.offer(Order {
                            description,
                            command,
                        }) {
                            dashboard.on_action_refused(busy);
                        }
                        dirty = true;
                    }
                },
                Event::Resize(..) => dirty = true,
                _ => {}
            }
            if !event::poll(Duration::ZERO).map_err(terminal_failed)? {
                break;
            }
        }
    }
}

/// The last lines of `request.target`, at most [`LOG_LINES_MAX`] kept (the
/// latest), each cut to [`LOG_LINE_CHARS_MAX`], within [`LOG_FETCH_LIMIT`].
fn log_tail(socket: &Path, request: &LogRequest) -> Result<Vec<(u32, String)>, Failure> {
    let deadline = Instant::now() + LOG_FETCH_LIMIT;
    let mut connection = Connection::open(
        socket,
        Command::Logs {
            target: Some(request.target.clone()),
            lines: request.lines,
            follow: false,
            since_ms: None,
        },
    )?;
    let mut lines = VecDeque::new();
    while let Some(reply) = connection.next_reply()? {
        if reply["end"] == true {
            break;
        }
        if let (Some(line), Some(slot)) = (reply["line"].as_str(), reply["slot"].as_u64()) {
            if lines.len() == LOG_LINES_MAX {
                lines.pop_front();
            }
            let slot = u32::try_from(slot).unwrap_or(u32::MAX);
            lines.push_back((slot, line.chars().take(LOG_LINE_CHARS_MAX).collect()));
        }
        if Instant::now() > deadline {
            return Err(fail(
                exit::NOT_RUNNING,
                format!(
                    "the log tail took longer than {}",
                    humantime::format_duration(LOG_FETCH_LIMIT)
                ),
            ));
        }
    }
    Ok(lines.into())
}
