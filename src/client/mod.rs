//! The everyday commands, as clients of a running supervisor's control socket:
//! `status`, `reload`, `restart`, `stop`, `start`, `scale`, `logs`, and the
//! live dashboard over them, `top`.
//!
//! The socket is found from the ecosystem file (the same default as `check`)
//! or `--socket`. With no supervisor there, a command says so, names the
//! socket it tried, and exits 3.
//!
//! A supervisor that is there but does not answer (stopped with SIGSTOP,
//! wedged, or serving as many clients as it takes) must not hang a command
//! either: connecting, sending the request and getting the first reply line
//! take at most [`REPLY_TIMEOUT`] together, and each later line at most as
//! long again, after which the command names the socket, says the supervisor
//! did not answer, and exits 3 as well. Only `logs -f`, once its first reply
//! has come, waits as long as the supervisor keeps the stream open: the
//! instances it follows may be quiet for hours.
//!
//! This file holds the bounds on those waits and how a command fails;
//! [`connection`] is the socket, the request and the replies; each command
//! has its own file: [`status`](mod@status), [`reload`](mod@reload),
//! [`upgrade`](mod@upgrade), [`simple`](mod@simple) (`restart`, `stop`,
//! `start`), [`logs`](mod@logs), [`scale`](mod@scale), and [`top`](mod@top).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::output::{self, Unwritten};
use crate::cli::{ecosystem_path, exit};
use effects::runtime;

mod connection;
mod logs;
mod reload;
mod scale;
mod simple;
mod status;
mod top;
mod upgrade;

pub(crate) use connection::{Connection, ask};
pub use logs::{logs, unix_millis};
pub use reload::reload;
pub use scale::scale;
pub use simple::simple;
pub use status::{ask_status, status};
pub use top::top;
pub use upgrade::upgrade;

/// How long a command waits for the supervisor to take its connection and
/// request and send the first reply line; then, for each next line (but see
/// [`Connection`] for `logs -f`).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `upgrade` waits for the new image's answer: the probe (5 s at
/// most), then the exec and the restore of a large state.
pub(crate) const UPGRADE_REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `reload` waits for the rollout to complete.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(300);
/// How often they look.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A failure with its exit code and message (empty when there is nothing
/// to say: the reader of stdout went away, see [`Unwritten`]).
pub struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl From<Unwritten> for Failure {
    fn from(unwritten: Unwritten) -> Failure {
        Failure {
            code: unwritten.exit_code(),
            message: unwritten.message().unwrap_or_default(),
        }
    }
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// Where the control socket of the supervisor for `file` is.
pub fn socket_path(file: Option<&Path>, socket: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(socket) = socket {
        return Ok(socket.to_path_buf());
    }
    let file = ecosystem_path(file).map_err(|m| fail(exit::USAGE, m))?;
    let identity = runtime::identify(&file)
        .map_err(|e| fail(exit::USAGE, format!("cannot read {}: {e}", file.display())))?;
    Ok(runtime::find_socket(&runtime::runtime_dir(), &identity))
}

/// Write to stdout (see [`output`]).
fn print(text: &str) -> Result<(), Failure> {
    Ok(output::write(text.as_bytes())?)
}

/// Turn a command's result into output and an exit code.
pub fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(failure) => {
            if !failure.message.is_empty() {
                let _ = writeln!(std::io::stderr(), "error: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}
