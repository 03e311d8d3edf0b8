//! The terminal in raw mode on the alternate screen, and back however `top`
//! ends: [`Screen`] restores it in `Drop` (a return, an error, a panic that
//! unwinds), and a panic hook restores it *before* the panic message is
//! printed, so that the message lands on the normal screen, readable, and
//! not in the alternate one that is about to vanish. Restoring twice is
//! harmless, and a flag makes the hook do nothing once `top` has left. A
//! panic on any of `top`'s threads while the screen is taken ends `top`
//! (exit 101, as a panic's): a request thread that died would leave a
//! dashboard that no longer updates, drawn on a terminal given back.
//!
//! SIGTERM, SIGHUP and SIGINT (which raw mode no longer makes from Ctrl-C,
//! but `kill` still sends) would end the process with the terminal still
//! raw: they only set a flag, which the loop reads at least once a frame,
//! and `top` then quits the ordinary way.
//!
//! A terminal that goes away (the tmux server or the SSH connection gone)
//! is another matter: its reads return end-of-file at once, and crossterm's
//! wait for a key turns into a busy loop that never returns to ours (found
//! orphaned `top`s spinning at 25 % of a core each). A thread watches
//! standard input for that hang-up and ends the process there and then:
//! there is no terminal left to restore.

use std::io::{self, Stdout, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// Whether the terminal is in `top`'s state (raw, alternate screen).
static TAKEN: AtomicBool = AtomicBool::new(false);
static PANIC_HOOK: Once = Once::new();
/// The exit code after a panic, as Rust's own.
const PANIC_EXIT: i32 = 101;
/// Whether a signal asked `top` to quit.
static QUIT_SIGNAL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_quit_signal(_: libc::c_int) {
    // An atomic store: all a signal handler may safely do here.
    QUIT_SIGNAL.store(true, Ordering::SeqCst);
}

/// Whether SIGTERM, SIGHUP or SIGINT came since the screen was taken.
pub(crate) fn quit_signalled() -> bool {
    QUIT_SIGNAL.load(Ordering::SeqCst)
}

fn catch_quit_signals() -> io::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_quit_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(signal, &action) }.map_err(io::Error::from)?;
    }
    Ok(())
}

/// How often the hang-up watcher looks at standard input.
const HANGUP_CHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// End the process once standard input (the terminal) hangs up.
fn watch_for_hangup() -> io::Result<()> {
    std::thread::Builder::new()
        .name("top-hangup".into())
        .spawn(|| {
            loop {
                // No events asked for: poll still reports POLLHUP, POLLERR
                // and POLLNVAL, and consumes nothing a key press brings.
                let mut stdin = libc::pollfd {
                    fd: libc::STDIN_FILENO,
                    events: 0,
                    revents: 0,
                };
                let timeout = HANGUP_CHECK.as_millis() as libc::c_int;
                // SAFETY: one valid pollfd.
                let ready = unsafe { libc::poll(&mut stdin, 1, timeout) };
                if ready > 0
                    && stdin.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
                {
                    // SAFETY: _exit ends the process at once; the terminal
                    // it would restore is gone.
                    unsafe { libc::_exit(0) };
                }
            }
        })
        .map(drop)
}

/// The terminal, taken over; given back when dropped.
pub(crate) struct Screen {
    pub(crate) terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    /// Raw mode, the alternate screen, a hidden cursor; quit signals caught.
    pub(crate) fn take() -> io::Result<Screen> {
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let was_taken = give_back();
                previous(info);
                // A panic on a thread of `top` while the screen was taken
                // ends `top` too: the dashboard cannot go on without the
                // terminal it just gave back.
                if was_taken {
                    std::process::exit(PANIC_EXIT);
                }
            }));
        });
        catch_quit_signals()?;
        watch_for_hangup()?;
        TAKEN.store(true, Ordering::SeqCst);
        // Made now, so that a failure below gives the terminal back.
        let mut stdout = io::stdout();
        let taken = terminal::enable_raw_mode()
            .and_then(|()| execute!(stdout, EnterAlternateScreen, cursor::Hide))
            .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())));
        match taken {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(error) => {
                give_back();
                Err(error)
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        give_back();
    }
}

/// Leave raw mode and the alternate screen and show the cursor, each even
/// if another failed; once. Whether it was taken.
fn give_back() -> bool {
    if !TAKEN.swap(false, Ordering::SeqCst) {
        return false;
    }
    // Raw mode first: it is what makes a shell unusable if left on.
    let _ = terminal::disable_raw_mode();
    let mut stdout = io::stdout();
    let _ = execute!(stdout, LeaveAlternateScreen, cursor::Show);
    let _ = stdout.flush();
    true
}
