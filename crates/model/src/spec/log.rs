//! `log`: the file an app's output is written to as well, its rotation and
//! line format (the core never reads it: a change is tuned, never a
//! replacement).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `log`: where an app's output is written and when the file is rotated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSpec {
    /// The absolute path, `{app}` already replaced; `{instance}` (when
    /// there) is replaced per instance: see [`LogSpec::path_for`].
    pub file: String,
    /// Rotate before a line would take the file past this many bytes.
    pub max_size: u64,
    /// Rotated files kept: `FILE.1` (the newest) … `FILE.{keep}`.
    pub keep: u32,
    pub format: LogFormat,
}

/// How each line of a log file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFormat {
    /// `2026-12-01T03:00:00.123Z web.2 stdout | the line`.
    Text,
    /// `{"timestamp":…,"app":…,"instance":…,"stream":…,"line":…}`.
    Json,
}

/// The placeholder of a log file's path replaced by the instance number.
pub const LOG_INSTANCE_PLACEHOLDER: &str = "{instance}";

impl LogSpec {
    /// The file instance `slot` writes to.
    pub fn path_for(&self, slot: u32) -> PathBuf {
        PathBuf::from(
            self.file
                .replace(LOG_INSTANCE_PLACEHOLDER, &slot.to_string()),
        )
    }
}
