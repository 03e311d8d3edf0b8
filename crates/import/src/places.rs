//! Where the source's paths are read and how the output writes them:
//! relative to the output's folder when they lie inside it, absolute
//! otherwise, with `.` and `..` taken out without touching the file system.

use std::path::{Path, PathBuf};

/// Where the paths of the source are resolved and where the output goes:
/// relative paths in the source are read against `source_dir`, and written
/// relative to `output_dir` (absolute when they lie outside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    pub source_dir: PathBuf,
    pub output_dir: PathBuf,
}

impl Places {
    /// `path` of the source, as the output should write it, or `None` when it
    /// is the output's own folder (the default `cwd`).
    pub(crate) fn cwd(&self, path: &str) -> Option<String> {
        let absolute = normalize(&self.source_dir.join(path));
        self.relative(&absolute)
    }

    fn relative(&self, absolute: &Path) -> Option<String> {
        match absolute.strip_prefix(&self.output_dir) {
            Ok(rest) if rest.as_os_str().is_empty() => None,
            Ok(rest) => Some(format!("./{}", rest.display())),
            Err(_) => Some(absolute.display().to_string()),
        }
    }

    /// A file path of the source as the output should write it.
    pub(crate) fn file(&self, base: &Path, path: &str) -> String {
        let absolute = normalize(&base.join(path));
        self.relative(&absolute).unwrap_or_else(|| ".".to_string())
    }
}

/// `path` without `.` and `..` components (no file system access: the
/// folders need not exist on this machine).
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_written_relative_to_the_output_when_inside_it() {
        let places = Places {
            source_dir: "/srv/app/config".into(),
            output_dir: "/srv/app".into(),
        };
        assert_eq!(places.cwd(".."), None);
        assert_eq!(places.cwd("."), Some("./config".to_string()));
        assert_eq!(places.cwd("/opt/x"), Some("/opt/x".to_string()));
        assert_eq!(places.cwd("../../etc"), Some("/srv/etc".to_string()));
    }
}
