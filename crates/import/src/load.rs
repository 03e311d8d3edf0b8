//! Reading the file to import: the only effects of `import`. A pm2 file in
//! JavaScript — and a `.json` one that is not strict JSON, which pm2 also
//! evaluates as JavaScript — is evaluated by `node` (a pm2 user has it),
//! bounded in time and output, in a process group of its own that is killed
//! afterwards, with whatever the file started outside that group (found by
//! [`IMPORT_MARK`] in its environment); everything else is read as text.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Format;
use config::node::{self, MAX_FILE_BYTES};

/// How long `node` may take to evaluate a pm2 file. Evaluating one takes
/// milliseconds; a file that waits on something is not a config file.
pub const NODE_EVAL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long what node wrote to stderr is waited for once node and its
/// process group are gone: the end of the pipe comes at once, unless a child
/// that left the group holds it open (then only this long). Generous, so a
/// loaded machine's slow reader thread still brings node's error.
const STDERR_AFTER_EXIT: Duration = Duration::from_secs(2);

/// The variable node runs with (a random value per import), and with it
/// every process the evaluated file starts: what it left behind outside
/// node's process group (a `detached` child, a daemon) carries it, and is
/// found by it and killed once node is done. What clears its environment as
/// well is out of reach.
const IMPORT_MARK: &str = "SUPERVISE_IMPORT";

/// The most of node's stderr kept for an error message.
const MAX_NODE_STDERR: u64 = 64 * 1024;

/// The script `node` runs: it evaluates the file as pm2 does (`require` for
/// a `.js`/`.cjs`, `import()` for a `.mjs`, an expression for a `.json`) and
/// writes the export as JSON into the file named after it. The config's own
/// output goes nowhere we read, so a `console.log` in it changes nothing.
const NODE_EVAL: &str = r#"
const fs = require('fs');
const [file, out, mode] = process.argv.slice(1);
const refuse = (message) => { process.stderr.write(message + '\n'); process.exit(3); };
(async () => {
  let value;
  try {
    if (mode === 'json') value = require('vm').runInThisContext('(' + fs.readFileSync(file, 'utf8') + ')');
    else if (mode === 'mjs') value = await import(require('url').pathToFileURL(file));
    else value = require(file);
  } catch (e) {
    refuse(e && e.message ? `${e.name || 'Error'}: ${e.message}` : String(e));
  }
  if (value && typeof value === 'object' && (value.__esModule || mode === 'mjs') && 'default' in value) value = value.default;
  if (value && typeof value.then === 'function') refuse('it exports a Promise: pm2 reads the object a file exports, not what a Promise resolves to');
  if (typeof value === 'function') refuse('it exports a function, not an object of apps');
  let text;
  try { text = JSON.stringify(value === undefined ? null : value); } catch (e) { refuse(`its export cannot be written as JSON: ${e.message}`); }
  try { fs.writeFileSync(out, text); } catch (e) { refuse(`cannot write the export: ${e.message}`); }
  process.exit(0);
})();
"#;

/// Why a file could not be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("cannot write {path}: {reason}")]
    Unwritable { path: String, reason: String },
    #[error("{path}: cannot tell which format this is")]
    UnknownFormat { path: String },
    #[error(
        "{path}: a JavaScript pm2 file is evaluated with `node`, and node was not found: {reason}"
    )]
    NodeMissing { path: String, reason: String },
    #[error("{path}: node could not evaluate it: {stderr}")]
    NodeFailed { path: String, stderr: String },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: String,
        line: u64,
        column: u64,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl ImportError {
    /// A short hint for the user, printed after the error.
    pub fn help(&self) -> Option<&'static str> {
        match self {
            ImportError::UnknownFormat { .. } => Some(
                "name the format: --from pm2 | supervisord | procfile (pm2 files are *.config.js, *.config.cjs, *.config.mjs, *.json, *.yaml; supervisord's end in .conf or .ini; a Procfile is named Procfile). pm2 itself runs any other .js as a script, so import evaluates one only with --from pm2",
            ),
            ImportError::NodeMissing { .. } => Some(
                "install Node.js, or have pm2 print the file as JSON (`pm2 start ecosystem.config.js` then `pm2 jlist`) and write the apps into a .json file",
            ),
            _ => None,
        }
    }
}

/// A file read for import.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A pm2 file in JSON or YAML, with every value's position.
    Tree { tree: node::Node, text: String },
    /// A pm2 file evaluated by node: its export, and the source text to find
    /// lines in.
    Evaluated { value: Value, text: String },
    /// An INI file or a Procfile, without a leading byte-order mark.
    Text(String),
}

/// How node evaluates a pm2 file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeMode {
    Require,
    Import,
    Expression,
}

impl NodeMode {
    fn arg(self) -> &'static str {
        match self {
            NodeMode::Require => "cjs",
            NodeMode::Import => "mjs",
            NodeMode::Expression => "json",
        }
    }
}

/// Read `path` as `format` (or the format its name says).
pub fn read_source(path: &Path, format: Option<Format>) -> Result<(Format, Source), ImportError> {
    let shown = path.display().to_string();
    let format = format
        .or_else(|| Format::from_path(path))
        .ok_or(ImportError::UnknownFormat {
            path: shown.clone(),
        })?;
    let text = read_text(path)?;
    if text.trim_start_matches('\u{feff}').trim().is_empty() {
        return Err(ImportError::Invalid {
            path: shown,
            message: "the file is empty: nothing to import".to_string(),
        });
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let source = match format {
        Format::Pm2 if name.ends_with(".mjs") => Source::Evaluated {
            value: evaluate_with_node(path, NodeMode::Import)?,
            text,
        },
        Format::Pm2 if name.ends_with(".js") || name.ends_with(".cjs") => Source::Evaluated {
            value: evaluate_with_node(path, NodeMode::Require)?,
            text,
        },
        // pm2 evaluates a .json as a JavaScript expression (comments,
        // unquoted keys and trailing commas pass): strict JSON keeps its
        // positions, anything else goes to node.
        Format::Pm2 if name.ends_with(".json") && serde_json::from_str::<Value>(&text).is_err() => {
            Source::Evaluated {
                value: evaluate_with_node(path, NodeMode::Expression)?,
                text,
            }
        }
        Format::Pm2 => match node::parse(&text) {
            Ok(tree) => Source::Tree { tree, text },
            Err(error) => {
                let at = error
                    .location
                    .unwrap_or_else(config::diagnostic::Location::start);
                return Err(ImportError::Syntax {
                    path: shown,
                    line: at.line,
                    column: at.column,
                    message: error.message,
                });
            }
        },
        Format::Supervisord | Format::Procfile => {
            Source::Text(text.strip_prefix('\u{feff}').unwrap_or(&text).to_string())
        }
    };
    Ok((format, source))
}

fn read_text(path: &Path) -> Result<String, ImportError> {
    let unreadable = |reason: String| ImportError::Unreadable {
        path: path.display().to_string(),
        reason,
    };
    // A FIFO or a device would block the open or never end.
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(unreadable("not a regular file".to_string())),
        Ok(_) => {}
        Err(e) => return Err(unreadable(e.to_string())),
    }
    let file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "larger than {} MiB",
            MAX_FILE_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| unreadable("not UTF-8 text".to_string()))
}

/// A file of ours in the temporary folder, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn create() -> std::io::Result<TempFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "supervise-import-{}-{nanos}.json",
            std::process::id()
        ));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        Ok(TempFile(path))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Evaluate `path` with node ([`NODE_EVAL`]), bounded by
/// [`NODE_EVAL_TIMEOUT`] and by [`MAX_FILE_BYTES`] of export.
fn evaluate_with_node(path: &Path, mode: NodeMode) -> Result<Value, ImportError> {
    use std::os::unix::process::CommandExt;
    let shown = path.display().to_string();
    let failed = |stderr: String| ImportError::NodeFailed {
        path: shown.clone(),
        stderr,
    };
    // Absolute, so that a name starting with `-` is not read as an option.
    let absolute = config::absolute_path(path).map_err(|e| failed(e.to_string()))?;
    let out =
        TempFile::create().map_err(|e| failed(format!("cannot make a temporary file: {e}")))?;
    let mark = effects::tracking::random_token();
    let mut child = Command::new("node")
        .env(IMPORT_MARK, &mark)
        .arg("-e")
        .arg(NODE_EVAL)
        .arg(&absolute)
        .arg(&out.0)
        .arg(mode.arg())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ImportError::NodeMissing {
            path: shown.clone(),
            reason: if e.kind() == std::io::ErrorKind::NotFound {
                "no `node` on the PATH".to_string()
            } else {
                e.to_string()
            },
        })?;
    let group = child.id() as i32;
    // Read on a thread that reports over a channel, so a process the config
    // left behind holding the pipe cannot hold us.
    let (sender, receiver) = std::sync::mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stderr.take(MAX_NODE_STDERR).read_to_end(&mut bytes);
            let _ = sender.send(bytes);
        });
    }
    let deadline = Instant::now() + NODE_EVAL_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => break None,
        }
    };
    // Whatever the config started in node's group goes with it, and what it
    // started outside the group by its mark.
    // SAFETY: kill(2) on the process group of the child we started.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    effects::tracking::kill_carriers(&format!("{IMPORT_MARK}={mark}"));
    let stderr = receiver.recv_timeout(STDERR_AFTER_EXIT).unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
    match status {
        None => Err(failed(format!(
            "it did not finish within {}s",
            NODE_EVAL_TIMEOUT.as_secs()
        ))),
        Some(status) if !status.success() => Err(failed(if stderr.is_empty() {
            format!("node {status}")
        } else {
            stderr
        })),
        Some(_) => {
            let file = std::fs::File::open(&out.0).map_err(|e| failed(e.to_string()))?;
            let mut bytes = Vec::new();
            let _ = file.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes);
            if bytes.len() > MAX_FILE_BYTES {
                return Err(failed(format!(
                    "its export is larger than {} MiB",
                    MAX_FILE_BYTES >> 20
                )));
            }
            if bytes.is_empty() {
                return Err(failed(
                    "it exited before its export was read (process.exit in the file?)".to_string(),
                ));
            }
            serde_json::from_slice(&bytes)
                .map_err(|e| failed(format!("its export is not JSON: {e}")))
        }
    }
}
