//! The argv pm2 would run: the script found as pm2 finds it, the
//! interpreter pm2 would choose, and string arguments split as pm2 splits
//! them.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::super::{DraftApp, normalize};
use super::{Pm2App, text_of};

/// What the translation needs to know of the machine's files.
pub trait Files {
    fn kind(&self, path: &Path) -> FileKind;
    /// The program `name` as found on the `PATH`.
    fn which(&self, name: &str) -> Option<PathBuf>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Missing,
    /// A file with a NUL byte in its first bytes (pm2's `isBinary`).
    Binary,
    Text,
}

/// pm2's split of a string `args` (its `Config._valid`): words, `"…"` and
/// `'…'` groups without their quotes, and `k="v w"` kept whole, quotes and all.
pub fn split_args(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let is_plain = |c: char| !c.is_whitespace() && c != '"' && c != '\'' && c != '=';
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        // k="v" or k='v': the key, `=`, a quoted value, kept as written.
        let key_end = (i..chars.len())
            .find(|&j| !is_plain(chars[j]))
            .unwrap_or(chars.len());
        if key_end > i && key_end + 1 < chars.len() && chars[key_end] == '=' {
            let quote = chars[key_end + 1];
            if (quote == '"' || quote == '\'')
                && let Some(close) = (key_end + 2..chars.len()).find(|&j| chars[j] == quote)
            {
                out.push(chars[i..=close].iter().collect());
                i = close + 1;
                continue;
            }
        }
        // "…" or '…': the inside.
        if (chars[i] == '"' || chars[i] == '\'')
            && let Some(close) = (i + 1..chars.len()).find(|&j| chars[j] == chars[i])
        {
            let inside: String = chars[i + 1..close].iter().collect();
            if !inside.trim().is_empty() {
                out.push(inside);
            }
            i = close + 1;
            continue;
        }
        // \S+ (a quote in the middle does not end it).
        let end = (i..chars.len())
            .find(|&j| chars[j].is_whitespace())
            .unwrap_or(chars.len());
        out.push(chars[i..end].iter().collect());
        i = end;
    }
    out
}

fn string_list(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::String(s) => Some(split_args(s)),
        Value::Array(items) => Some(items.iter().map(text_of).collect()),
        Value::Null => Some(Vec::new()),
        _ => None,
    }
}

/// pm2's interpreter for a script extension (its `API/interpreter.json`).
fn interpreter_for(extension: &str) -> Option<&'static str> {
    Some(match extension {
        "sh" => "bash",
        "py" => "python",
        "rb" => "ruby",
        "php" => "php",
        "pl" => "perl",
        "js" => "node",
        "coffee" => "coffee",
        "ls" => "lsc",
        "ts" | "tsx" => "bun",
        _ => return None,
    })
}

/// The argv pm2 would run for `script`.
pub(super) fn command(
    app: &Pm2App,
    script: &str,
    cwd: &Path,
    files: &dyn Files,
    draft: &mut DraftApp,
    env: &mut Map<String, Value>,
    used: &mut Vec<String>,
) -> Vec<String> {
    let line = app.line_of("script");
    let in_cwd = normalize(&cwd.join(script));
    let (exec_path, found_on_path) = match files.kind(&in_cwd) {
        FileKind::Missing => match files.which(script) {
            Some(found) => (found, true),
            None => {
                draft.warn(line, format!("`script: {script}` is not in {} nor on the PATH here: pm2 would refuse to start it", cwd.display()));
                (in_cwd.clone(), false)
            }
        },
        _ => (in_cwd.clone(), false),
    };
    // The script as the imported file writes it: a program found on the PATH
    // by name, else the path as pm2's file gave it (relative to `cwd`).
    let script_written = if found_on_path || script.contains('/') {
        script.to_string()
    } else {
        format!("./{script}")
    };
    // An empty one is unset to pm2 (`!app.exec_interpreter`).
    let explicit = app
        .get("exec_interpreter")
        .and_then(|(v, _)| v.as_str())
        .filter(|i| !i.is_empty())
        .map(str::to_string);
    if app.get("exec_interpreter").is_some() {
        used.push("exec_interpreter".to_string());
    }
    let extension = exec_path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let interpreter = match explicit {
        Some(i) => i,
        None => match interpreter_for(extension) {
            Some("python")
                if files.which("python").is_none() && files.which("python3").is_some() =>
            {
                "python3".to_string()
            }
            Some("bun") if files.which("bun").is_none() => {
                draft.warn(line, "a TypeScript script: pm2 runs it with bun, or node's type stripping (Node.js >= 22.18); it is written here with node");
                "node".to_string()
            }
            Some(i) => i.to_string(),
            None if files.kind(&exec_path) == FileKind::Binary => "none".to_string(),
            None => "node".to_string(),
        },
    };
    if interpreter.contains("python") {
        env.insert("PYTHONUNBUFFERED".to_string(), json!("1"));
    }
    if interpreter == "coffee" || interpreter == "lsc" {
        draft.warn(line, format!("pm2 runs .{extension} files with the {interpreter} it bundles: install {interpreter} on the PATH"));
    }
    let mut argv = Vec::new();
    if interpreter == "none" {
        argv.push(script_written);
    } else {
        argv.push(interpreter);
        if let Some((value, line)) = app.get("node_args") {
            used.push("node_args".to_string());
            match string_list(value) {
                Some(args) => argv.extend(args),
                None => draft.leave_out(
                    "node_args",
                    line,
                    "`node_args` is neither a string nor a list: left out",
                ),
            }
        }
        // The interpreter reads its script from a path, not the PATH: a
        // program found there goes in whole (as pm2 gives it).
        argv.push(if found_on_path {
            exec_path.display().to_string()
        } else {
            script_written
        });
    }
    if let Some((value, line)) = app.get("args") {
        used.push("args".to_string());
        match string_list(value) {
            Some(args) => argv.extend(args),
            None => draft.leave_out(
                "args",
                line,
                "`args` is neither a string nor a list: left out",
            ),
        }
    }
    if matches!(
        app.get("exec_mode").and_then(|(v, _)| v.as_str()),
        Some("cluster" | "cluster_mode")
    ) && argv
        .first()
        .is_some_and(|p| p != "node" && !p.ends_with("/node"))
    {
        draft.warn(
            app.line_of("exec_mode"),
            "pm2's cluster mode runs only node scripts; this one runs as separate processes",
        );
    }
    argv
}
