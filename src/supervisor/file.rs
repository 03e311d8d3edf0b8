//! A new version of the file, checked by the config loader off this thread:
//! valid → the core's (which has the sockets it adds bound first); invalid or
//! unreadable → say so (in the log and in `status`) and keep running the last
//! good version; the same content in what is now another file changes
//! nothing here.

use std::path::Path;
use std::time::{Instant, SystemTime};

use tracing::{error, warn};

use super::Supervisor;
use config::diagnostic;
use config::host::Host;
use effects::Effects;
use effects::runtime::FileIdentity;
use effects::watch::FileNews;
use model::spec::Desired;
use supervise_core::{Input, Phase};

/// A version of the file, read and checked, for the supervisor loop.
#[derive(Debug)]
pub struct Loaded {
    /// Why it was read: "the file changed", "SIGHUP".
    pub trigger: String,
    pub load: Load,
    /// What the file is now (for the supervisor's claim on the runtime
    /// directory); for a file that is not there, only its place.
    pub identity: Option<FileIdentity>,
    /// The content hash of what was read (valid or not): an upgrade hands
    /// it to the next image, whose loader starts from it.
    pub hash: Option<[u8; 32]>,
}

/// What reading and checking found.
#[derive(Debug)]
pub enum Load {
    /// Valid; `diagnostics` holds its warnings, rendered (may be empty).
    Valid {
        desired: Desired,
        diagnostics: String,
    },
    /// Invalid: the diagnostics rendered as `check` prints them.
    Invalid { rendered: String, summary: String },
    /// It could not be read (permission denied, a FIFO, gone).
    Unreadable { message: String },
    /// The same content as the last version seen, in what is now another
    /// file (moved away and copied back, linked): only `identity` is news.
    Unchanged,
}

impl Loaded {
    /// Check what the watcher found in the file `shown` (on the watcher's
    /// thread: a slow user lookup never stalls the loop).
    pub(crate) fn check(news: FileNews, shown: &Path) -> Loaded {
        match news {
            FileNews::Read {
                trigger,
                source,
                bytes,
                hash,
                identity,
            } => {
                let shown = shown.display().to_string();
                let checked = config::check_bytes(&bytes, &source, &Host::detect());
                let rendered = diagnostic::render(&shown, &checked.text, &checked.diagnostics);
                let load = match checked.desired {
                    Some(desired) => Load::Valid {
                        desired,
                        diagnostics: rendered,
                    },
                    None => Load::Invalid {
                        summary: diagnostic::summary_line(&checked.diagnostics),
                        rendered,
                    },
                };
                Loaded {
                    trigger: trigger.to_string(),
                    load,
                    identity,
                    hash: Some(hash),
                }
            }
            FileNews::Unreadable {
                trigger,
                message,
                identity,
            } => Loaded {
                trigger: trigger.to_string(),
                load: Load::Unreadable { message },
                identity,
                hash: None,
            },
            FileNews::Replaced { identity } => Loaded {
                trigger: "the file was replaced".to_string(),
                load: Load::Unchanged,
                identity: Some(identity),
                hash: None,
            },
        }
    }
}

impl<E: Effects> Supervisor<E> {
    pub(super) fn config(&mut self, loaded: Loaded, now: Instant) {
        if self.core.phase() == Phase::ShuttingDown {
            return;
        }
        let trigger = loaded.trigger;
        match loaded.load {
            Load::Valid {
                desired,
                diagnostics,
            } => {
                if !diagnostics.is_empty() {
                    warn!("{}", diagnostics.trim_end());
                }
                self.config_error = None;
                self.core.input(Input::Apply { desired, trigger }, now);
                self.applied_at = SystemTime::now();
            }
            Load::Invalid { rendered, summary } => {
                error!(
                    event = "config_invalid",
                    file = %self.shown,
                    "{trigger}: {} is invalid ({summary}); still running the last good version\n{}",
                    self.shown,
                    rendered.trim_end()
                );
                self.config_error = Some(rendered);
                self.tally.rejected_edits += 1;
            }
            Load::Unreadable { message } => {
                error!(
                    event = "config_invalid",
                    file = %self.shown,
                    "{trigger}: {message}; still running the last good version"
                );
                self.config_error = Some(message);
                self.tally.rejected_edits += 1;
            }
            // The same content in another file: only the claim on the
            // runtime directory changes (the loop has seen to it).
            Load::Unchanged => {}
        }
    }
}
