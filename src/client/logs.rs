//! `supervise logs`: the tail, and with `-f` the lines as they come,
//! followed again across an upgrade; made printable on a terminal.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use super::{Connection, Failure, print};
use effects::output::terminal::{Tab, printable};
use model::protocol::Command;

/// Milliseconds since the Unix epoch (0 before it), as `logs` sends `since`.
pub fn unix_millis(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `supervise logs [TARGET] [-n LINES] [-f] [--since WHEN]`: `request` is a
/// [`Command::Logs`].
pub fn logs(socket: &Path, request: Command) -> Result<(), Failure> {
    let again = match &request {
        Command::Logs {
            target,
            follow: true,
            ..
        } => Some(Command::Logs {
            target: target.clone(),
            lines: 0,
            follow: true,
            since_ms: None,
        }),
        _ => None,
    };
    // On a terminal, what the workers printed is made printable (see
    // `effects::output::terminal`); into a pipe or a file, as printed.
    let terminal = {
        use std::io::IsTerminal;
        std::io::stdout().is_terminal()
    };
    let mut connection = Connection::open(socket, request)?;
    loop {
        let Some(reply) = connection.next_reply()? else {
            // A follow that ends without a word: the supervisor stopped (its
            // socket is gone), or it was upgraded (the socket is there, and
            // the new image answers). Follow the new one.
            let Some(again) = again.clone().filter(|_| socket.exists()) else {
                return Ok(());
            };
            let _ = writeln!(
                std::io::stderr(),
                "[the supervisor was upgraded (or restarted): following again; lines printed meanwhile are in `supervise logs`]"
            );
            connection = Connection::open(socket, again)?;
            continue;
        };
        if reply["end"] == true {
            return Ok(());
        }
        // The supervisor's first word on a follow: the tail is done.
        if reply["following"] == true {
            continue;
        }
        if let Some(missed) = reply["missed"].as_u64() {
            print(&format!("[{missed} lines missed]\n"))?;
            continue;
        }
        let line = reply["line"].as_str().unwrap_or("");
        let line = if terminal {
            Cow::Owned(printable(line, usize::MAX, Tab::Keep))
        } else {
            Cow::Borrowed(line)
        };
        print(&format!(
            "{}.{} | {line}\n",
            printable(reply["app"].as_str().unwrap_or("?"), usize::MAX, Tab::Keep),
            reply["slot"],
        ))?;
    }
}
