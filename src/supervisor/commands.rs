//! Commands from the control socket. `status` reads the state; the others
//! are inputs to the core, which answers with what it did or why not.

use super::Supervisor;
use effects::Effects;
use model::protocol::{Command, error_reply};
use supervise_core::commands::{Order, Reply};

impl<E: Effects> Supervisor<E> {
    /// Carry out a command and return its reply line.
    pub fn control(&mut self, command: Command) -> serde_json::Value {
        let order = match command {
            // Without CPU and memory: the real loop adds them off its thread
            // (`run`), and answers `status` itself.
            Command::Status => {
                return serde_json::to_value(self.status())
                    .unwrap_or_else(|e| error_reply(&format!("cannot encode the status: {e}")));
            }
            Command::Reload { app } => Order::Reload { app },
            Command::Restart { target } => Order::Restart { target },
            Command::Stop { target } => Order::Hold { target },
            Command::Start { target } => Order::Release { target },
            Command::Trigger { app } => Order::Trigger { app },
            // Carried out by the loop (it replaces the whole process).
            Command::Upgrade { .. } => return error_reply("an upgrade is carried out by the loop"),
            // Served by the control task itself, from the log hub.
            Command::Logs { .. } => return error_reply("logs are served by the control socket"),
        };
        let now = self.clock();
        let reply = self.core.command(order, now);
        self.settle(now);
        match reply {
            Ok(Reply::Reloading { apps }) => serde_json::json!({"ok": true, "apps": apps}),
            Ok(Reply::Done { message }) => serde_json::json!({"ok": true, "message": message}),
            Err(message) => error_reply(&message),
        }
    }
}
