//! `supervise reload`: ask for a rolling replacement, then follow it in
//! `status` until it completes, halts or takes too long.

use std::path::Path;
use std::time::Instant;

use super::{Failure, POLL_INTERVAL, WAIT_LIMIT, ask, ask_status, fail, print};
use crate::cli::exit;
use model::protocol::Command;

/// `supervise reload APP|all`: start a rolling replacement and follow it.
pub fn reload(socket: &Path, app: &str) -> Result<(), Failure> {
    let started = ask(
        socket,
        Command::Reload {
            app: app.to_string(),
        },
    )?;
    let apps: Vec<String> = started["apps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut shown = String::new();
    loop {
        let status = ask_status(socket)?;
        let mut done = true;
        let mut line = Vec::new();
        for app in status.apps.iter().filter(|a| apps.contains(&a.name)) {
            let name = &app.name;
            if app.rollout.halted {
                print(&format!(
                    "{name}: rollout halted: a replacement failed to become ready; the old instances keep serving\n"
                ))?;
                return Err(fail(exit::HALTED, format!("{name}: rollout halted")));
            }
            let held = match app.rollout.held {
                0 => String::new(),
                n => format!(" ({n} held by `stop`: they follow on `start`)"),
            };
            line.push(format!(
                "{name}: {}/{} replaced{held}",
                app.rollout.replaced, app.rollout.total
            ));
            done &= app.rollout.complete;
        }
        let text = line.join(", ");
        if text != shown {
            print(&format!("{text}\n"))?;
            shown = text;
        }
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(exit::HALTED, "timed out waiting for the rollout"));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}
