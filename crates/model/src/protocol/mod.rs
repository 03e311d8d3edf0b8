//! The control protocol (DESIGN.md §6): line-delimited JSON over a Unix socket.
//!
//! Every request carries the protocol version `v`; a reply is one or more JSON
//! lines with `ok`. Decoding is pure and total: any byte string gives either a
//! request or an error to send back — never a panic (it is fuzzed).

mod status;

use serde::{Deserialize, Serialize};

pub use status::{
    AppStatus, AutoscaleStatus, Rollout, ScheduleStatus, StatusReply, SupervisorInfo, WorkerStatus,
};

/// The protocol version this supervisor speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// The longest request line accepted.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase", deny_unknown_fields)]
pub enum Command {
    /// The state of every app and instance.
    Status,
    /// A rolling replacement of an app (or `all`).
    Reload { app: String },
    /// Stop then start an app or one instance (`web` or `web.2`).
    Restart { target: String },
    /// Stop and hold an app or one instance until `start`.
    Stop { target: String },
    /// Release a held app or instance.
    Start { target: String },
    /// Start a run of a scheduled app now.
    Trigger { app: String },
    /// Replace the supervisor's binary, keeping every worker: `binary`, or
    /// the path it was started from.
    Upgrade {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        binary: Option<String>,
    },
    /// The last lines of output, then (with `follow`) new ones as they come.
    Logs {
        #[serde(default)]
        target: Option<String>,
        #[serde(default = "default_log_lines")]
        lines: usize,
        #[serde(default)]
        follow: bool,
        /// Only lines printed at this time or later (milliseconds since
        /// the Unix epoch); the follow is not filtered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_ms: Option<u64>,
    },
}

fn default_log_lines() -> usize {
    100
}

/// A request line: `{"v": 1, "cmd": "status"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub v: u32,
    #[serde(flatten)]
    pub command: Command,
}

impl Request {
    pub fn new(command: Command) -> Request {
        Request {
            v: PROTOCOL_VERSION,
            command,
        }
    }
}

/// Decode one request line (without its newline).
pub fn decode(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!("request longer than {MAX_REQUEST_BYTES} bytes"));
    }
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("malformed JSON: {e}"))?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "unsupported protocol version {v}; this supervisor speaks {PROTOCOL_VERSION}"
            ));
        }
        None => return Err("missing protocol version `v`".to_string()),
    }
    serde_json::from_value(value).map_err(|e| format!("bad request: {e}"))
}

/// `web` or `web.2`: an app, and maybe one slot of it.
pub fn parse_target(target: &str) -> Result<(&str, Option<u32>), String> {
    match target.rsplit_once('.') {
        Some((app, slot))
            if !app.is_empty() && slot.bytes().all(|b| b.is_ascii_digit()) && !slot.is_empty() =>
        {
            let slot = slot
                .parse()
                .map_err(|_| format!("bad instance number in `{target}`"))?;
            Ok((app, Some(slot)))
        }
        _ if target.is_empty() => Err("empty target".to_string()),
        _ => Ok((target, None)),
    }
}

/// Whether `target`'s app and slot exist, among apps of these instance
/// counts; `Err` is what every command says otherwise.
pub fn check_target(app: &str, slot: Option<u32>, instances: Option<u32>) -> Result<(), String> {
    let Some(instances) = instances else {
        return Err(format!("no app `{app}`"));
    };
    match slot {
        Some(slot) if slot >= instances => Err(format!(
            "{app} has {instances} instance{}; there is no {app}.{slot}",
            if instances == 1 { "" } else { "s" }
        )),
        _ => Ok(()),
    }
}

/// An error reply line.
pub fn error_reply(message: &str) -> serde_json::Value {
    serde_json::json!({"ok": false, "error": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_command() {
        assert_eq!(
            decode(br#"{"v":1,"cmd":"status"}"#).unwrap().command,
            Command::Status
        );
        assert_eq!(
            decode(br#"{"v":1,"cmd":"reload","app":"web"}"#)
                .unwrap()
                .command,
            Command::Reload { app: "web".into() }
        );
        assert_eq!(
            decode(br#"{"v":1,"cmd":"logs"}"#).unwrap().command,
            Command::Logs {
                target: None,
                lines: 100,
                follow: false,
                since_ms: None,
            }
        );
        for command in [
            Command::Status,
            Command::Restart {
                target: "web.1".into(),
            },
            Command::Stop {
                target: "web".into(),
            },
            Command::Start {
                target: "web".into(),
            },
            Command::Trigger {
                app: "nightly".into(),
            },
        ] {
            let line = serde_json::to_vec(&Request::new(command.clone())).unwrap();
            assert_eq!(decode(&line).unwrap().command, command);
        }
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        assert!(decode(b"not json").unwrap_err().contains("malformed"));
        assert!(
            decode(br#"{"cmd":"status"}"#)
                .unwrap_err()
                .contains("version")
        );
        assert!(
            decode(br#"{"v":2,"cmd":"status"}"#)
                .unwrap_err()
                .contains("unsupported protocol version 2")
        );
        assert!(
            decode(br#"{"v":1,"cmd":"explode"}"#)
                .unwrap_err()
                .contains("bad request")
        );
        assert!(
            decode(br#"{"v":1,"cmd":"reload"}"#)
                .unwrap_err()
                .contains("bad request")
        );
        assert!(
            decode(&vec![b' '; MAX_REQUEST_BYTES + 1])
                .unwrap_err()
                .contains("longer")
        );
        assert!(decode(b"").is_err());
        assert!(decode(b"\xff\xfe").is_err());
    }

    #[test]
    fn targets() {
        assert_eq!(parse_target("web"), Ok(("web", None)));
        assert_eq!(parse_target("web.2"), Ok(("web", Some(2))));
        assert_eq!(parse_target("my-app.10"), Ok(("my-app", Some(10))));
        assert_eq!(parse_target("web.x"), Ok(("web.x", None)));
        assert!(parse_target("").is_err());
        assert!(parse_target("web.99999999999").is_err());
    }
}
