//! `log`: a file an app's output is written to, rotated by size.
//!
//! The block merges key by key with `defaults.log`, so `defaults` can say
//! `{file: "logs/{app}.log", max_size: 50MB}` and one app only `keep: 20`.
//! `{app}` is replaced here; `{instance}` stays for the writer (one file per
//! instance). Apps may share a file (`logs/all.log`), but then they must
//! agree on how it is rotated and written: one file has one policy.

use std::collections::HashMap;
use std::path::Path;

use super::health::resolve_size;
use super::{AppContext, join_clean, key};
use crate::diagnostic::{PathSeg, Reporter};
use crate::raw;
use model::spec::{AppSpec, LOG_INSTANCE_PLACEHOLDER, LogFormat, LogSpec, defaults};

/// The placeholder replaced by the app's name.
const APP_PLACEHOLDER: &str = "{app}";

impl AppContext<'_> {
    /// The app's `log` (`None` without one, or after an error).
    pub(super) fn resolve_log(&self, reporter: &mut Reporter) -> Option<LogSpec> {
        if self.fields.log.is_none() && self.defaults.log.is_none() {
            return None;
        }
        let block_path = if self.fields.log.is_some() {
            self.app_path(&["log"])
        } else {
            vec![key("defaults"), key("log")]
        };
        let Some((file, file_path)) =
            self.pick_nested("log", "file", |f| f.log.as_ref(), |l| l.file.as_ref())
        else {
            reporter
                .error(&block_path, "`log` needs a `file`")
                .help("write e.g. `log: {file: \"logs/{app}.log\"}` (relative to the ecosystem file's folder)");
            return None;
        };
        let file = self.resolve_log_path(&file, &file_path, reporter);
        let max_size = match self.pick_nested(
            "log",
            "max_size",
            |f| f.log.as_ref(),
            |l| l.max_size.as_ref(),
        ) {
            Some((size, path)) => resolve_size(
                &size,
                "log.max_size",
                "leave `max_size` out for the default of 10MB",
                &path,
                reporter,
            ),
            None => Some(defaults::LOG_MAX_SIZE),
        };
        let keep = match self.pick_nested("log", "keep", |f| f.log.as_ref(), |l| l.keep.as_ref()) {
            Some((keep, _)) if keep <= defaults::MAX_LOG_KEEP => Some(keep),
            Some((keep, path)) => {
                reporter
                    .error(
                        &path,
                        format!(
                            "`keep: {keep}` is more rotated files than the {} supervise keeps at most",
                            defaults::MAX_LOG_KEEP
                        ),
                    )
                    .help("raise `max_size` instead, or keep fewer files");
                None
            }
            None => Some(defaults::LOG_KEEP),
        };
        let format = self
            .pick_nested("log", "format", |f| f.log.as_ref(), |l| l.format.as_ref())
            .map_or(LogFormat::Text, |(format, _)| match format {
                raw::LogFileFormat::Text => LogFormat::Text,
                raw::LogFileFormat::Json => LogFormat::Json,
            });
        Some(LogSpec {
            file: file?,
            max_size: max_size?,
            keep: keep?,
            format,
        })
    }

    /// `log.file` made absolute, `{app}` replaced; any other placeholder is
    /// refused (a typo such as `{name}` would otherwise name a file).
    fn resolve_log_path(
        &self,
        written: &str,
        path: &[PathSeg],
        reporter: &mut Reporter,
    ) -> Option<String> {
        if written.trim().is_empty() {
            reporter
                .error(path, "`log.file` is empty")
                .help("name a file, e.g. `logs/{app}.log`");
            return None;
        }
        if written.ends_with('/') {
            reporter
                .error(path, format!("`{written}` names a folder, not a file"))
                .help("name the file in it, e.g. `logs/{app}.log`");
            return None;
        }
        let mut rest = written;
        while let Some(start) = rest.find('{') {
            let placeholder = rest[start..]
                .find('}')
                .map_or(&rest[start..], |end| &rest[start..=start + end]);
            if placeholder != APP_PLACEHOLDER && placeholder != LOG_INSTANCE_PLACEHOLDER {
                reporter
                    .error(
                        path,
                        format!("unknown placeholder `{placeholder}` in `log.file`"),
                    )
                    .help("a log file's path may use `{app}` and `{instance}`");
                return None;
            }
            rest = &rest[start + placeholder.len()..];
        }
        let named = written.replace(APP_PLACEHOLDER, self.name);
        Some(
            join_clean(self.folder, &named)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// Across apps: a log file is not the ecosystem file, and apps that share a
/// file agree on its `max_size`, `keep` and `format`.
pub(super) fn check_shared_files(
    file: &raw::EcosystemFile,
    source_in_folder: &Path,
    resolved: &[(&str, Option<AppSpec>)],
    reporter: &mut Reporter,
) {
    let where_written = |name: &str| {
        let own = file.apps.get(name).is_some_and(|app| app.log.is_some());
        if own {
            vec![key("apps"), key(name), key("log")]
        } else {
            vec![key("defaults"), key("log")]
        }
    };
    let mut first_of_file: HashMap<&str, (&str, &LogSpec)> = HashMap::new();
    let mut reported_at: Vec<Vec<PathSeg>> = Vec::new();
    for (name, spec) in resolved {
        let Some(log) = spec.as_ref().and_then(|s| s.log.as_ref()) else {
            continue;
        };
        let path = where_written(name);
        if Path::new(&log.file) == source_in_folder && !reported_at.contains(&path) {
            reporter
                .error(&path, "the log file is the ecosystem file itself")
                .help("write the output to another file, e.g. `logs/{app}.log`");
            reported_at.push(path);
            continue;
        }
        match first_of_file.get(log.file.as_str()) {
            None => {
                first_of_file.insert(&log.file, (name, log));
            }
            Some((first, shared)) if *shared != log && !reported_at.contains(&path) => {
                reporter
                    .error(
                        &path,
                        format!(
                            "`{name}` writes to {} as `{first}` does, but rotates or formats it differently",
                            log.file
                        ),
                    )
                    .help("one file has one `max_size`, `keep` and `format`: give both apps the same, or put `{app}` in the file's name");
                reported_at.push(path);
            }
            Some(_) => {}
        }
    }
}
