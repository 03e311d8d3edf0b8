//! Reading a pm2 file: its apps as keys with the lines they are written on,
//! from a JSON or YAML tree (which keeps positions) or from what node
//! printed of a JavaScript one (whose lines are found in the source), and
//! what the file holds besides its apps.

use serde_json::Value;

use super::super::Note;
use config::node::{Node, NodeKind};

/// One app of the pm2 file: its keys (pm2's canonical names), each with the
/// line it is written on.
#[derive(Debug, Clone, PartialEq)]
pub struct Pm2App {
    pub(crate) line: Option<usize>,
    pub(crate) keys: Vec<(String, Option<usize>, Value)>,
}

impl Pm2App {
    pub(super) fn get(&self, key: &str) -> Option<(&Value, Option<usize>)> {
        self.keys
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, line, v)| (v, *line))
    }

    pub(super) fn line_of(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(|(_, line)| line).or(self.line)
    }
}

/// pm2's alias → the key it stands for.
const ALIASES: &[(&str, &str)] = &[
    ("exec", "script"),
    ("interpreter", "exec_interpreter"),
    ("interpreter_args", "node_args"),
    ("interpreterArgs", "node_args"),
    ("out", "out_file"),
    ("output", "out_file"),
    ("out_log", "out_file"),
    ("error", "error_file"),
    ("err", "error_file"),
    ("err_file", "error_file"),
    ("err_log", "error_file"),
    ("log", "log_file"),
    ("pid", "pid_file"),
    ("cron", "cron_restart"),
    ("combine_logs", "merge_logs"),
    ("user", "uid"),
];

/// A key as pm2 reads it: aliases and camelCase to the snake_case name.
pub(super) fn canonical(key: &str) -> String {
    if let Some((_, to)) = ALIASES.iter().find(|(from, _)| *from == key) {
        return to.to_string();
    }
    if key.starts_with("env_")
        || !key.chars().any(|c| c.is_ascii_uppercase())
        || key == "windowsHide"
    {
        return key.to_string();
    }
    let mut out = String::new();
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    ALIASES
        .iter()
        .find(|(from, _)| *from == out)
        .map_or(out, |(_, to)| to.to_string())
}

/// A pm2 file read: its apps, and what it holds besides them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pm2File {
    pub(crate) apps: Vec<Pm2App>,
    /// File-level notes: entries of `apps` that are not apps, keys beside
    /// `apps` (`deploy`, …).
    pub(crate) notes: Vec<Note>,
}

/// The apps of a pm2 file: `{apps: […]}`, a list, or one app; plus the
/// other top-level keys when there is an `apps`.
fn app_values(root: &Value) -> Result<(Vec<&Value>, Vec<&String>), String> {
    match root {
        Value::Object(map) if map.contains_key("apps") => {
            let others = map.keys().filter(|k| *k != "apps").collect();
            match &map["apps"] {
                Value::Array(apps) => Ok((apps.iter().collect(), others)),
                Value::Object(_) => Err(
                    "`apps` is a mapping: this looks like a supervise file already (pm2's `apps` is a list)"
                        .to_string(),
                ),
                _ => Err("`apps` must be a list of apps".to_string()),
            }
        }
        Value::Array(apps) => Ok((apps.iter().collect(), Vec::new())),
        Value::Object(map) if map.is_empty() => {
            Err("it exports an empty object: no apps".to_string())
        }
        Value::Object(_) => Ok((vec![root], Vec::new())),
        _ => Err("a pm2 file exports `{apps: [...]}`, a list of apps, or one app".to_string()),
    }
}

fn other_keys_note(keys: &[(String, Option<usize>)]) -> Option<Note> {
    let (first, line) = keys.first()?;
    let names: Vec<String> = keys.iter().map(|(k, _)| format!("`{k}`")).collect();
    let what = if first == "deploy" || keys.iter().any(|(k, _)| k == "deploy") {
        " (pm2's `deploy` sets up remote hosts: supervise does not deploy; keep your deploy tool and run `supervise` there)"
    } else {
        ""
    };
    Some(Note::warning(
        *line,
        format!("{} beside `apps`: left out{what}", names.join(", ")),
    ))
}

fn not_an_app(line: Option<usize>, value: &Value) -> Note {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    };
    Note::warning(
        line,
        format!("an entry of `apps` is {kind}, not an app: left out"),
    )
}

/// The apps of a JSON or YAML pm2 file, each key with its line.
pub fn apps_from_tree(tree: &Node) -> Result<Pm2File, String> {
    let json = tree.to_json();
    let (_, others) = app_values(&json)?;
    let nodes: Vec<&Node> = match &tree.kind {
        NodeKind::Map(_) if tree.get("apps").is_some() => {
            match tree.get("apps").map(|(_, a)| &a.kind) {
                Some(NodeKind::Seq(items)) => items.iter().collect(),
                _ => Vec::new(),
            }
        }
        NodeKind::Seq(items) => items.iter().collect(),
        _ => vec![tree],
    };
    let mut file = Pm2File::default();
    let others: Vec<(String, Option<usize>)> = others
        .iter()
        .map(|k| {
            (
                k.to_string(),
                tree.get(k).map(|(key, _)| key.location.line as usize),
            )
        })
        .collect();
    file.notes.extend(other_keys_note(&others));
    for node in nodes {
        let line = Some(node.location.line as usize);
        let Some(entries) = node.entries() else {
            file.notes.push(not_an_app(line, &node.to_json()));
            continue;
        };
        file.apps.push(Pm2App {
            line,
            keys: entries
                .iter()
                .map(|(k, v)| {
                    (
                        canonical(&k.key_text()),
                        Some(k.location.line as usize),
                        v.to_json(),
                    )
                })
                .collect(),
        });
    }
    Ok(file)
}

/// Where each key is written in a JavaScript file: every `word:`,
/// `'word':` and `"word":` of every line, indexed once (a file of thousands
/// of apps is read in one pass, not once per key).
struct KeyLines<'a> {
    lines: Vec<&'a str>,
    keys: std::collections::HashMap<&'a str, Vec<usize>>,
}

impl<'a> KeyLines<'a> {
    fn new(text: &'a str) -> KeyLines<'a> {
        let lines: Vec<&str> = text.lines().collect();
        let mut keys: std::collections::HashMap<&str, Vec<usize>> =
            std::collections::HashMap::new();
        for (index, line) in lines.iter().enumerate() {
            let bytes = line.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                let quote = bytes[i];
                let (start, end) = if quote == b'\'' || quote == b'"' {
                    let close = line[i + 1..].find(quote as char).map(|c| i + 1 + c);
                    match close {
                        Some(close) => (i + 1, close),
                        None => break,
                    }
                } else if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' || bytes[i] == b'$' {
                    let len = line[i..]
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                        .unwrap_or(line.len() - i);
                    (i, i + len)
                } else {
                    i += 1;
                    continue;
                };
                let after = if quote == b'\'' || quote == b'"' {
                    end + 1
                } else {
                    end
                };
                if line[after.min(line.len())..].trim_start().starts_with(':') {
                    keys.entry(&line[start..end]).or_default().push(index + 1);
                }
                i = after.max(i + 1);
            }
        }
        KeyLines { lines, keys }
    }

    /// The line of `key` nearest `anchor` and after line `after` (of two as
    /// near, the earlier). A key's lines are in order, so this is two binary
    /// searches: a file of N apps is read in N log N, not N².
    fn near(&self, key: &str, after: usize, anchor: usize) -> Option<usize> {
        let lines = self.keys.get(key)?;
        let lines = &lines[lines.partition_point(|l| *l <= after)..];
        let split = lines.partition_point(|l| *l < anchor);
        let below = split.checked_sub(1).map(|i| lines[i]);
        let above = lines.get(split).copied();
        match (below, above) {
            (Some(below), Some(above)) => Some(if anchor - below <= above - anchor {
                below
            } else {
                above
            }),
            (below, above) => below.or(above),
        }
    }

    /// The first line after `after` that holds `name` in quotes.
    fn name(&self, name: &str, after: usize) -> Option<usize> {
        let quoted: Vec<String> = ['\'', '"', '`']
            .iter()
            .map(|q| format!("{q}{name}{q}"))
            .collect();
        (after..self.lines.len())
            .find(|&i| quoted.iter().any(|q| self.lines[i].contains(q.as_str())))
            .map(|i| i + 1)
    }
}

/// The apps of a JavaScript pm2 file as node printed them. Node keeps no
/// positions, so each key's line is found in the source: the app's `name`,
/// then the key nearest it after the previous app.
pub fn apps_from_evaluated(root: &Value, text: &str) -> Result<Pm2File, String> {
    let index = KeyLines::new(text);
    let (values, others) = app_values(root)?;
    let mut file = Pm2File::default();
    let others: Vec<(String, Option<usize>)> = others
        .iter()
        .map(|k| (k.to_string(), index.near(k, 0, 0)))
        .collect();
    file.notes.extend(other_keys_note(&others));
    let mut after = 0;
    for value in values {
        let Value::Object(map) = value else {
            file.notes.push(not_an_app(None, value));
            continue;
        };
        let name_line = map
            .get("name")
            .and_then(Value::as_str)
            .and_then(|name| index.name(name, after));
        let anchor = name_line.unwrap_or(after + 1);
        let keys = map
            .iter()
            .map(|(key, v)| (canonical(key), index.near(key, after, anchor), v.clone()))
            .collect();
        let line = name_line.or_else(|| Some(after + 1).filter(|l| *l <= index.lines.len()));
        if let Some(l) = name_line {
            after = l;
        }
        file.apps.push(Pm2App { line, keys });
    }
    Ok(file)
}
