//! `supervise upgrade`: hand the supervisor a new binary and wait for the
//! new image's answer, which takes longer than any other reply (see
//! [`UPGRADE_REPLY_TIMEOUT`]).

use std::path::Path;
use std::time::Instant;

use super::{Connection, Failure, UPGRADE_REPLY_TIMEOUT, fail, print};
use crate::cli::exit;
use model::protocol::Command;

/// `supervise upgrade [--binary PATH]`: replace the supervisor's binary;
/// the new image answers, with the versions and how long it took.
pub fn upgrade(socket: &Path, binary: Option<&Path>) -> Result<(), Failure> {
    let binary = match binary {
        Some(path) => Some(
            std::path::absolute(path)
                .map_err(|e| fail(exit::USAGE, format!("{}: {e}", path.display())))?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    let mut connection = Connection::open(socket, Command::Upgrade { binary })?;
    // The answer comes from the new image: after the probe, the exec and
    // the restore of the whole state.
    connection.reader.get_mut().deadline = Some(Instant::now() + UPGRADE_REPLY_TIMEOUT);
    let reply = connection.next_reply()?.ok_or_else(|| {
        fail(
            exit::INVALID,
            "the connection closed without an answer: the new binary did not take over (see the supervisor's log)",
        )
    })?;
    let kept = match reply["lost"].as_u64().unwrap_or(0) {
        0 => "every worker kept".to_string(),
        n => format!("{n} workers ended in the exec window (see `child_lost` in the log)"),
    };
    print(&format!(
        "upgraded from {} to {} in {} ms (pid {}, upgrade {}); {kept}\n",
        reply["from_version"].as_str().unwrap_or("?"),
        reply["to_version"].as_str().unwrap_or("?"),
        reply["took_ms"],
        reply["pid"],
        reply["upgrades"],
    ))?;
    Ok(())
}
