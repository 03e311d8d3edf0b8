//! `supervise import`: another supervisor's file turned into an ecosystem
//! file, so moving to supervise costs a command, not an afternoon.
//!
//! Each format has a pure translator from its parsed file to a [`Draft`]:
//! [`pm2`] (an `ecosystem.config.js`, `.json` or `.yaml`), [`supervisord`]
//! (the `[program:x]` sections of an INI file) and [`procfile`]. A draft
//! holds the apps as ecosystem-file keys and, next to each, [`Note`]s for
//! what could not be carried over exactly; [`render`] writes it as a
//! commented YAML file, each note a `# import:` line above its app. The
//! shell around them ([`load`]) reads the file, evaluates a JavaScript one
//! with `node`, and says which format a file is.
//!
//! Around the translators: [`draft`] is what they produce, [`environment`]
//! checks an app's environment, [`places`] writes the source's paths,
//! [`checkable`] keeps names, durations and strings within what `check`
//! accepts, [`yaml`] writes the file and [`report`] the lines printed
//! beside it.

mod checkable;
mod draft;
pub mod emit;
mod environment;
pub mod load;
#[cfg(test)]
mod outcome;
mod places;
pub mod pm2;
pub mod procfile;
mod report;
pub mod supervisord;
mod yaml;

use std::path::Path;

pub(crate) use checkable::millis;
pub use checkable::{app_name, without_nul};
pub(crate) use draft::Severity;
pub use draft::{Draft, DraftApp, Note};
pub(crate) use environment::{EnvVar, checked_env, set_env};
pub use load::{ImportError, read_source};
pub use places::{Places, normalize};
pub use report::{diagnostics, summary};
pub(crate) use yaml::escaped;
pub use yaml::render;

/// The formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// pm2's ecosystem file: `.js`/`.cjs` (evaluated with node), `.json`, `.yaml`.
    Pm2,
    /// supervisord's INI file (`[program:x]` sections).
    Supervisord,
    /// A Procfile (foreman, overmind, Heroku): `name: command` lines.
    Procfile,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Pm2 => "pm2",
            Format::Supervisord => "supervisord",
            Format::Procfile => "Procfile",
        }
    }

    /// The format a file's name says, if it says one.
    pub(crate) fn from_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?;
        if name == "Procfile" || name.starts_with("Procfile.") || name.ends_with(".procfile") {
            return Some(Format::Procfile);
        }
        // pm2's own list of config files (its `knonwConfigFileExtensions`):
        // any other .js is a script to it.
        if [".config.js", ".config.cjs", ".config.mjs"]
            .iter()
            .any(|e| name.ends_with(e))
        {
            return Some(Format::Pm2);
        }
        match path.extension()?.to_str()? {
            "json" | "yaml" | "yml" => Some(Format::Pm2),
            "ini" | "conf" => Some(Format::Supervisord),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_file_name() {
        assert_eq!(
            Format::from_path(Path::new("ecosystem.config.js")),
            Some(Format::Pm2)
        );
        assert_eq!(
            Format::from_path(Path::new("x/app.json")),
            Some(Format::Pm2)
        );
        assert_eq!(
            Format::from_path(Path::new("supervisord.conf")),
            Some(Format::Supervisord)
        );
        assert_eq!(
            Format::from_path(Path::new("Procfile")),
            Some(Format::Procfile)
        );
        assert_eq!(
            Format::from_path(Path::new("Procfile.dev")),
            Some(Format::Procfile)
        );
        assert_eq!(Format::from_path(Path::new("README")), None);
        assert_eq!(
            Format::from_path(Path::new("server.js")),
            None,
            "pm2 runs it as a script"
        );
        assert_eq!(
            Format::from_path(Path::new("pm2.config.mjs")),
            Some(Format::Pm2)
        );
    }
}
