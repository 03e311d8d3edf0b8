//! The ecosystem file: reading, checking and resolving it, with the host
//! lookups that resolution needs (users, groups, the program along `PATH`,
//! the CPU count: [`host`]).
//!
//! One function, [`check_file`], is what `supervise check`, the supervisor's
//! start and every live reload call, so they can never disagree. It goes:
//!
//! 1. bytes → text (size limit, UTF-8), reporting a bad byte by line and column;
//! 2. text → spanned node tree ([`node`]); a YAML syntax error stops here and is
//!    reported alone;
//! 3. tree → structural check against the generated JSON Schema ([`structure`]),
//!    collecting every unknown key and wrong type;
//! 4. clean tree → [`raw`] types → semantic checks and resolution ([`validate`])
//!    into the [`model::spec`] model.

pub mod diagnostic;
pub mod envfile;
pub mod host;
pub mod node;
pub mod raw;
pub mod structure;
pub mod validate;

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use diagnostic::{Diagnostic, Location, Reporter};
pub use host::Host;

use model::spec::Desired;

/// The JSON Schema of the ecosystem file, generated from [`raw::EcosystemFile`].
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(raw::EcosystemFile)).unwrap_or_default()
}

static SCHEMA: LazyLock<serde_json::Value> = LazyLock::new(json_schema);

/// The result of checking a file.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The resolved model, when there was no error.
    pub desired: Option<Desired>,
    /// Every error and warning, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The text that was checked (for rendering the diagnostics' source lines).
    pub text: String,
}

impl Checked {
    pub fn is_valid(&self) -> bool {
        self.desired.is_some()
    }
}

/// The file could not be read at all (exit code 2, not 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {path}: {reason}")]
pub struct Unreadable {
    pub(crate) path: String,
    pub(crate) reason: String,
}

/// The absolute path of the ecosystem file, as the user spelled it (no
/// symlink resolved): watching it follows every symlink on the way, so a
/// swapped directory link (`current -> releases/2`) is seen as an edit.
pub fn absolute_path(path: &Path) -> std::io::Result<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    if joined.file_name().is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ));
    }
    Ok(joined.components().collect())
}

/// Read, check and resolve the ecosystem file at `path`.
pub fn check_file(path: &Path, host: &Host) -> Result<Checked, Unreadable> {
    let (source, bytes) = read_file(path)?;
    Ok(check_bytes(&bytes, &source, host))
}

/// The file's absolute path and contents (at most one byte more than
/// [`node::MAX_FILE_BYTES`], which [`check_bytes`] then refuses).
pub fn read_file(path: &Path) -> Result<(PathBuf, Vec<u8>), Unreadable> {
    use std::io::Read;
    let unreadable = |reason: String| Unreadable {
        path: path.display().to_string(),
        reason,
    };
    use std::os::unix::fs::OpenOptionsExt;
    let source = absolute_path(path).map_err(|e| unreadable(e.to_string()))?;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&source)
        .map_err(|e| unreadable(e.to_string()))?;
    let metadata = file.metadata().map_err(|e| unreadable(e.to_string()))?;
    if !metadata.is_file() {
        let what = match metadata.file_type() {
            t if t.is_dir() => "a directory",
            t if std::os::unix::fs::FileTypeExt::is_fifo(&t) => "a FIFO",
            t if std::os::unix::fs::FileTypeExt::is_socket(&t) => "a socket",
            _ => "a device",
        };
        return Err(unreadable(format!(
            "it is {what}, not a regular file; an ecosystem file must be a regular file (at most {} bytes)",
            node::MAX_FILE_BYTES
        )));
    }
    let mut bytes = Vec::new();
    file.take(node::MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    Ok((source, bytes))
}

fn too_large(len: u64) -> Checked {
    let diagnostic = Diagnostic::error(
        format!(
            "the file is {len} bytes, more than the {} bytes an ecosystem file may have",
            node::MAX_FILE_BYTES
        ),
        None,
    )
    .with_help("an ecosystem file describes apps; move data elsewhere");
    Checked {
        desired: None,
        diagnostics: vec![diagnostic],
        text: String::new(),
    }
}

/// Check file contents; `source` is the file's absolute path (relative paths in
/// the file are resolved against its folder).
pub fn check_bytes(bytes: &[u8], source: &Path, host: &Host) -> Checked {
    if bytes.len() > node::MAX_FILE_BYTES {
        return too_large(bytes.len() as u64);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => check_text(text, source, host),
        Err(error) => {
            let valid = &bytes[..error.valid_up_to()];
            let line = valid.iter().filter(|b| **b == b'\n').count() as u64 + 1;
            let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let column = String::from_utf8_lossy(&valid[line_start..])
                .chars()
                .count() as u64
                + 1;
            let diagnostic = Diagnostic::error(
                "the file is not valid UTF-8",
                Some(Location {
                    line,
                    column,
                    len: 1,
                }),
            )
            .with_help("save the file as UTF-8");
            Checked {
                desired: None,
                diagnostics: vec![diagnostic],
                text: String::from_utf8_lossy(bytes).into_owned(),
            }
        }
    }
}

/// Check YAML text.
pub fn check_text(text: &str, source: &Path, host: &Host) -> Checked {
    let (desired, mut diagnostics) = match node::parse(text) {
        Err(error) => {
            let diagnostic = Diagnostic::error(
                error.message,
                Some(error.location.unwrap_or_else(Location::start)),
            )
            .with_help(error.help);
            (None, vec![diagnostic])
        }
        Ok(root) => check_tree(&root, source, host),
    };
    diagnostic::sort(&mut diagnostics);
    Checked {
        desired,
        diagnostics,
        text: text.to_string(),
    }
}

fn check_tree(root: &node::Node, source: &Path, host: &Host) -> (Option<Desired>, Vec<Diagnostic>) {
    let mut reporter = Reporter::new(root);
    match &root.kind {
        node::NodeKind::Null => {
            reporter.error(&[], "the file is empty").help(
                "an ecosystem file is a mapping with `apps:`; see examples/hello/ecosystem.yaml",
            );
            return (None, reporter.finish());
        }
        node::NodeKind::Map(_) => {}
        _ => {
            reporter
                .error(&[], format!("expected a mapping with `apps:` at the top level, found {}", root.describe()))
                .help("an ecosystem file is a mapping with `apps:`; see examples/hello/ecosystem.yaml");
            return (None, reporter.finish());
        }
    }
    let problems = structure::check(root, &SCHEMA, &mut reporter);
    // Set aside what is structurally broken and check everything else, so one
    // run reports the misspelt key *and* the bad signal two lines below it.
    let Some((json, broken)) = without_broken_parts(root, &problems) else {
        return (None, reporter.finish());
    };
    let raw = match serde_json::from_value::<raw::EcosystemFile>(json) {
        Ok(raw) => raw,
        Err(error) => {
            // The structure check should make this impossible; if the two ever
            // disagree, say so instead of losing the problem.
            reporter.error(&[], format!("internal error: the file passed the structure check but not deserialization: {error}"));
            return (None, reporter.finish());
        }
    };
    if root
        .get("apps")
        .and_then(|(_, apps)| apps.entries())
        .is_some_and(<[_]>::is_empty)
    {
        reporter
            .warning(
                &[diagnostic::PathSeg::Key("apps".into())],
                "no apps are declared",
            )
            .help("add an app under `apps:`");
    }
    let desired = validate::resolve(&raw, source, host, &broken, &mut reporter);
    (desired, reporter.finish())
}

/// The document as JSON without its `x-` blocks and without the parts that
/// have structural problems, plus the list of fields removed (so validation
/// neither reports them as missing nor judges other fields against defaults
/// that stand in for them). `None` when a problem is not confined to one field
/// of one app (or of `defaults`), and nothing more can be checked.
fn without_broken_parts(
    root: &node::Node,
    problems: &[structure::ProblemPlace],
) -> Option<(serde_json::Value, validate::BrokenFields)> {
    use diagnostic::PathSeg::Key;
    let mut json = root.to_json();
    let top = json.as_object_mut()?;
    top.retain(|key, _| !key.starts_with("x-"));
    let mut broken = validate::BrokenFields::default();
    for problem in problems {
        match problem.path.as_slice() {
            [Key(key)] if key != "apps" && key != "defaults" => {
                top.remove(key);
            }
            [Key(apps), Key(app)] if apps == "apps" => {
                top.get_mut("apps")?.as_object_mut()?.remove(app);
            }
            [Key(apps), Key(app), Key(field), ..] if apps == "apps" => {
                let fields = top.get_mut("apps")?.get_mut(app)?.as_object_mut()?;
                fields.remove(field);
                broken.insert(app.clone(), field.clone());
                // `comand` (did you mean `command`?) also stands for the missing `command`.
                if let [_, _, _] = problem.path.as_slice() {
                    broken.insert(app.clone(), problem.meant.clone().unwrap_or_default());
                }
            }
            [Key(defaults), Key(field), ..] if defaults == "defaults" => {
                top.get_mut("defaults")?.as_object_mut()?.remove(field);
                broken.insert("defaults".to_string(), field.clone());
            }
            _ => return None,
        }
    }
    // Without `apps` (e.g. it was misspelt) there is nothing left to check.
    top.get("apps")?;
    Some((json, broken))
}

/// Deserialize a structurally valid tree into the raw types, skipping the
/// top-level `x-` extension blocks.
pub fn raw_from_tree(root: &node::Node) -> Result<raw::EcosystemFile, serde_json::Error> {
    let mut json = root.to_json();
    if let Some(object) = json.as_object_mut() {
        object.retain(|key, _| !key.starts_with("x-"));
    }
    serde_json::from_value(json)
}

#[cfg(test)]
mod tests;
