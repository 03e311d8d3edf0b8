//! The book's key reference is rendered from the JSON Schema, so the two
//! cannot disagree, and the book's pages and links lead somewhere.
//!
//! `docs/src/reference/keys.md` is the markdown this file renders from
//! `schemas/ecosystem.schema.json` (itself generated from the types that parse
//! the file, and kept fresh by the schema test): every key with its type, its
//! default and its description, as the schema gives them. The test fails when
//! the committed page is not that rendering; `UPDATE_DOCS=1 cargo test --test it
//! docs_reference` writes it instead. The other tests check that every page
//! `docs/src/SUMMARY.md` lists exists (and that every page is listed), and that
//! every relative link in `docs/src` and `README.md` leads to a file that
//! exists — and, for a link into a markdown page, to a heading it has.
//!
//! The order of the keys is the schema's: serde_json's `preserve_order`, which
//! the package turns on, keeps it.
//!
//! Here: the renderer of the page (the tests of both files use it); the
//! tests of the key reference are in `keys.rs`, those of the book's pages and
//! links in `links.rs`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

mod keys;
mod links;

const SCHEMA: &str = "schemas/ecosystem.schema.json";
const PAGE: &str = "docs/src/reference/keys.md";
const BOOK: &str = "docs/src";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// The key reference
// ---------------------------------------------------------------------------

/// What the type of a key is called, for a named type of the schema.
fn label(def: &str) -> String {
    match def {
        "DurationText" => "duration".into(),
        "CommandLine" => "command".into(),
        "AccountId" => "name or id".into(),
        "EnvValue" => "scalar".into(),
        _ => {
            let mut words = String::new();
            for (i, c) in def.chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    words.push(' ');
                }
                words.push(c.to_ascii_lowercase());
            }
            words
        }
    }
}

fn anchor(def: &str) -> String {
    def.to_ascii_lowercase()
}

/// One part of the page still to write: a mapping of keys (a table), or a
/// named type its keys use.
struct Part {
    def: String,
    table: bool,
    /// The keys that lead to it, as met (relative to the enclosing table).
    paths: Vec<String>,
    body: String,
}

struct Renderer<'a> {
    defs: &'a Map<String, Value>,
    parts: Vec<Part>,
}

impl<'a> Renderer<'a> {
    fn def(&self, reference: &str) -> (&'a str, &'a Value) {
        let name = reference
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("a reference outside $defs: {reference}"));
        let (name, def) = self
            .defs
            .get_key_value(name)
            .unwrap_or_else(|| panic!("no definition {name}"));
        (name.as_str(), def)
    }

    /// The part for `def`, met at key `path`; created (to be written later)
    /// the first time.
    fn meet(&mut self, def: &str, table: bool, path: &str) {
        match self.parts.iter_mut().find(|p| p.def == def) {
            Some(part) => {
                if !part.paths.iter().any(|p| p == path) {
                    part.paths.push(path.to_string());
                }
            }
            None => self.parts.push(Part {
                def: def.to_string(),
                table,
                paths: vec![path.to_string()],
                body: String::new(),
            }),
        }
    }

    /// The type of a schema, as inline markdown; `path` is the key it is the
    /// type of.
    fn type_of(&mut self, schema: &Value, path: &str) -> String {
        if schema == &Value::Bool(true) {
            return "any value".into();
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let (name, def) = self.def(reference);
            if let Some(values) = values(def) {
                return values;
            }
            if let Some((key, inner)) = single_key(def) {
                let inner = self.type_of(inner, &format!("{path}.{key}"));
                return format!("{{`{key}`: {inner}}}");
            }
            let table = def.get("properties").is_some();
            self.meet(name, table, path);
            let text = if table {
                "mapping".to_string()
            } else {
                label(name)
            };
            return format!("[{text}](#{})", anchor(name));
        }
        if let Some(values) = values(schema) {
            return values;
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
                let types: Vec<String> = alternatives
                    .iter()
                    .filter(|a| !is_null(a))
                    .map(|a| self.type_of(a, path))
                    .collect();
                return or_list(&types);
            }
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => panic!("a schema without a type: {schema}"),
        };
        let types: Vec<String> = types
            .into_iter()
            .map(|t| self.basic(t, schema, path))
            .collect();
        or_list(&types)
    }

    fn basic(&mut self, ty: &str, schema: &Value, path: &str) -> String {
        match ty {
            "array" => {
                let items = schema.get("items").expect("a list says what it holds");
                format!("list of {}", self.type_of(items, path))
            }
            "object" => match schema.get("additionalProperties") {
                Some(inner) if inner.is_object() => {
                    format!(
                        "mapping of names to {}",
                        self.type_of(inner, &format!("{path}.NAME"))
                    )
                }
                _ => "mapping".into(),
            },
            "integer" => match schema.get("minimum").and_then(Value::as_i64) {
                Some(min) => format!("integer ≥ {min}"),
                None => "integer".into(),
            },
            other => other.to_string(),
        }
    }

    /// A table of the keys of an object schema.
    fn table(&mut self, object: &Value, prefix: &str) -> String {
        let properties = object["properties"]
            .as_object()
            .expect("an object with keys");
        let required: BTreeSet<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = String::from("| key | type | default | description |\n|---|---|---|---|\n");
        for (key, schema) in properties {
            let path = format!("{prefix}{key}");
            let ty = self.type_of(schema, &path);
            let description = schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("");
            let (text, default) = split_default(&one_line(description));
            let default = match (schema.get("default"), default) {
                (Some(value), _) => format!("`{value}`"),
                (None, Some(default)) => default,
                (None, None) if required.contains(key.as_str()) => "required".into(),
                (None, None) => "—".into(),
            };
            let mut cell = text;
            for note in self.notes(schema).into_iter().chain(forbidden(schema)) {
                if !cell.is_empty() {
                    cell.push_str("<br>");
                }
                cell.push_str(&note);
            }
            writeln!(
                out,
                "| `{key}` | {} | {} | {} |",
                cell_text(&ty),
                cell_text(&default),
                cell_text(&cell)
            )
            .unwrap();
        }
        if let Some(patterns) = object.get("patternProperties").and_then(Value::as_object) {
            for (pattern, schema) in patterns {
                let ty = self.type_of(schema, prefix);
                writeln!(
                    out,
                    "| keys matching `{pattern}` | {} | — | ignored |",
                    cell_text(&ty)
                )
                .unwrap();
            }
        }
        out
    }

    /// What each value of an enumeration means, when the schema says.
    fn notes(&self, schema: &Value) -> Vec<String> {
        let schema = match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => self.def(reference).1,
            None => schema,
        };
        for key in ["anyOf", "oneOf"] {
            if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
                if alternatives
                    .iter()
                    .all(|a| a.get("const").is_some() || is_null(a))
                {
                    return alternatives
                        .iter()
                        .filter_map(|a| {
                            let value = a.get("const")?;
                            let description = a.get("description").and_then(Value::as_str)?;
                            Some(format!("{}: {}", code(value), one_line(description)))
                        })
                        .collect();
                }
                if let [one] = alternatives
                    .iter()
                    .filter(|a| !is_null(a))
                    .collect::<Vec<_>>()[..]
                {
                    return self.notes(one);
                }
            }
        }
        if let Some(inner) = schema.get("additionalProperties").filter(|i| i.is_object()) {
            return self.notes(inner);
        }
        Vec::new()
    }

    /// The body of a named type: what it is, how it is written, and each of
    /// its forms.
    fn value_type(&mut self, def: &Value, path: &str) -> String {
        let mut out = String::new();
        if let Some(description) = def.get("description").and_then(Value::as_str) {
            writeln!(out, "{}\n", paragraphs(description)).unwrap();
        }
        if let Some(expected) = def.get("x-expected").and_then(Value::as_str) {
            writeln!(out, "Written as: {expected}.\n").unwrap();
        }
        for key in ["anyOf", "oneOf"] {
            let Some(alternatives) = def.get(key).and_then(Value::as_array) else {
                continue;
            };
            for alternative in alternatives.iter().filter(|a| !is_null(a)) {
                let ty = self.type_of(alternative, path);
                let described = match alternative.get("$ref").and_then(Value::as_str) {
                    Some(reference) => self.def(reference).1,
                    None => alternative,
                };
                let mut line = format!("- {ty}");
                let mut said = Vec::new();
                if let Some(description) = described.get("description").and_then(Value::as_str) {
                    said.push(one_line(description));
                }
                if let Some((key, inner)) = single_key(described)
                    && let Some(description) = inner.get("description").and_then(Value::as_str)
                {
                    said.push(format!("`{key}`: {}", one_line(description)));
                }
                if !said.is_empty() {
                    write!(line, ": {}", said.join(" ")).unwrap();
                }
                writeln!(out, "{line}").unwrap();
                for note in self.notes(alternative) {
                    writeln!(out, "  - {note}").unwrap();
                }
            }
            out.push('\n');
        }
        if let Some(values) = def.get("enum").and_then(Value::as_array) {
            let values: Vec<String> = values.iter().map(code).collect();
            writeln!(out, "One of {}.\n", or_list(&values)).unwrap();
        }
        if def.get("anyOf").is_none()
            && def.get("oneOf").is_none()
            && def.get("enum").is_none()
            && let Some(ty) = def.get("type").and_then(Value::as_str)
        {
            writeln!(out, "A {}.\n", self.basic(ty, def, path)).unwrap();
        }
        out
    }
}

/// The values of an enumeration (`enum`, or `oneOf` constants), or `None`.
fn values(schema: &Value) -> Option<String> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return Some(or_list(&values.iter().map(code).collect::<Vec<_>>()));
    }
    if let Some(value) = schema.get("const") {
        return Some(code(value));
    }
    let alternatives = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))?
        .as_array()?;
    let constants: Vec<&Value> = alternatives.iter().filter(|a| !is_null(a)).collect();
    if constants.iter().all(|a| a.get("const").is_some()) {
        return Some(or_list(
            &constants
                .iter()
                .map(|a| code(&a["const"]))
                .collect::<Vec<_>>(),
        ));
    }
    None
}

/// An object of exactly one key, which it requires (`{tcp: ADDRESS}`):
/// written inline rather than as a table of its own.
fn single_key(schema: &Value) -> Option<(&str, &Value)> {
    let properties = schema.get("properties")?.as_object()?;
    let required = schema.get("required")?.as_array()?;
    match (properties.iter().next(), properties.len(), required.len()) {
        (Some((key, inner)), 1, 1) if required[0] == key.as_str() => Some((key.as_str(), inner)),
        _ => None,
    }
}

/// Keys a schema forbids (`not: {anyOf: [{required: …}]}`), said in words.
fn forbidden(schema: &Value) -> Option<String> {
    let alternatives = schema.get("not")?.get("anyOf")?.as_array()?;
    let sets: Vec<Vec<String>> = alternatives
        .iter()
        .filter_map(|a| a.get("required")?.as_array())
        .map(|keys| {
            keys.iter()
                .filter_map(Value::as_str)
                .map(|k| format!("`{k}`"))
                .collect()
        })
        .collect();
    if sets.iter().all(|s| s.len() == 1) {
        let keys: Vec<String> = sets.into_iter().flatten().collect();
        Some(format!("It may not hold {}.", or_list(&keys)))
    } else {
        let pairs: Vec<String> = sets.iter().map(|s| and_list(s)).collect();
        Some(format!("Not together: {}.", pairs.join("; ")))
    }
}

fn is_null(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn code(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

fn or_list(items: &[String]) -> String {
    join(items, "or")
}

fn and_list(items: &[String]) -> String {
    join(items, "and")
}

fn join(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} {word} {last}", init.join(", ")),
    }
}

/// A description on one line (the schema keeps the line breaks of the doc
/// comments it comes from).
fn one_line(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br>")
}

fn paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn cell_text(text: &str) -> String {
    text.replace('|', "\\|")
}

/// Splits the sentence that gives the default (`Default 10s.`, `Default: the
/// app's name.`) from the rest of a description.
fn split_default(text: &str) -> (String, Option<String>) {
    let start = if text.starts_with("Default") {
        Some(0)
    } else {
        text.find(". Default").map(|i| i + 2)
    };
    let Some(start) = start else {
        return (text.to_string(), None);
    };
    let rest = &text[start..];
    let end = rest.find(". ").map_or(rest.len(), |i| i + 1);
    let sentence = &rest[..end];
    let default = sentence
        .trim_start_matches("Default")
        .trim_start_matches(':')
        .trim()
        .trim_end_matches('.')
        .to_string();
    let remaining = format!("{}{}", &text[..start], &rest[end..]);
    (remaining.trim().to_string(), Some(default))
}

/// The whole page.
fn render(schema: &Value) -> String {
    let defs = schema["$defs"].as_object().expect("the schema has $defs");
    let mut r = Renderer {
        defs,
        parts: Vec::new(),
    };
    let top = r.table(schema, "");
    // Parts are written in the order they were met; writing one may meet more.
    let mut next = 0;
    while next < r.parts.len() {
        let (_, def) = r.def(&format!("#/$defs/{}", r.parts[next].def));
        let path = r.parts[next].paths[0].clone();
        let body = if r.parts[next].table {
            let mut body = String::new();
            if let Some(description) = def.get("description").and_then(Value::as_str) {
                writeln!(body, "{}\n", paragraphs(description)).unwrap();
            }
            body.push_str(&r.table(def, ""));
            let mut after = Vec::new();
            if let Some(expected) = def.get("x-expected").and_then(Value::as_str) {
                after.push(format!("Written as: {expected}."));
            }
            after.extend(forbidden(def));
            if !after.is_empty() {
                write!(body, "\n{}\n", after.join(" ")).unwrap();
            }
            body
        } else {
            r.value_type(def, &path)
        };
        r.parts[next].body = body;
        next += 1;
    }

    let mut out = String::new();
    out.push_str(
        "<!-- Generated from schemas/ecosystem.schema.json by tests/it/docs_reference/: do not edit.\n     \
         `UPDATE_DOCS=1 cargo test --test it docs_reference` writes it again. -->\n\n",
    );
    out.push_str("# Key reference\n\n");
    out.push_str(
        "Every key of the ecosystem file, with its type, its default and what it does,\n\
         as the JSON Schema `schemas/ecosystem.schema.json` gives them (`supervise\n\
         schema` prints it; it is generated from the types that parse the file). This\n\
         page is rendered from the schema by a test, so the two cannot disagree. [The\n\
         ecosystem file](../ecosystem-file.md) tells how the keys work together.\n\n",
    );
    out.push_str("## The top level {#top-level}\n\n");
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        writeln!(out, "{}\n", paragraphs(description)).unwrap();
    }
    out.push_str(&top);
    for part in r.parts.iter().filter(|p| p.table) {
        let paths: Vec<String> = part.paths.iter().map(|p| format!("`{p}`")).collect();
        write!(
            out,
            "\n## {} {{#{}}}\n\n{}",
            and_list(&paths),
            anchor(&part.def),
            part.body
        )
        .unwrap();
    }
    out.push_str("\n## Value types {#value-types}\n\nThe named types the keys above use.\n");
    for part in r.parts.iter().filter(|p| !p.table) {
        write!(
            out,
            "\n### {} {{#{}}}\n\n{}",
            label(&part.def),
            anchor(&part.def),
            part.body.trim_end()
        )
        .unwrap();
        out.push('\n');
    }
    out
}
