//! The commands that are one request and one message back: `restart`,
//! `stop`, `start` (and `trigger`).

use std::path::Path;

use super::{Failure, ask, print};
use model::protocol::Command;

/// `supervise restart|stop|start TARGET`.
pub fn simple(socket: &Path, command: Command) -> Result<(), Failure> {
    let reply = ask(socket, command)?;
    if let Some(message) = reply["message"].as_str() {
        print(&format!("{message}\n"))?;
    }
    Ok(())
}
