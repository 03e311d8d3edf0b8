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

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

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

#[test]
fn the_key_reference_is_rendered_from_the_schema() {
    let schema: Value =
        serde_json::from_str(&read(&root().join(SCHEMA))).expect("the schema is JSON");
    let rendered = render(&schema);
    let page = root().join(PAGE);
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&page, &rendered).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        return;
    }
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(rendered.lines().count()));
        panic!(
            "{PAGE} is stale (it first differs at line {}): run `UPDATE_DOCS=1 cargo test --test it docs_reference`",
            line + 1
        );
    }
}

#[test]
fn every_key_of_the_schema_is_on_the_page() {
    let schema: Value = serde_json::from_str(&read(&root().join(SCHEMA))).unwrap();
    let page = render(&schema);
    let mut keys = Vec::new();
    collect_keys(&schema, &mut keys);
    let defs = schema["$defs"].as_object().unwrap();
    for def in defs.values() {
        collect_keys(def, &mut keys);
    }
    assert!(keys.len() > 40, "found only {} keys", keys.len());
    for key in keys {
        assert!(
            page.contains(&format!("`{key}`")),
            "`{key}` is missing from the rendering"
        );
    }
}

fn collect_keys(schema: &Value, keys: &mut Vec<String>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        keys.extend(properties.keys().cloned());
    }
}

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
        "<!-- Generated from schemas/ecosystem.schema.json by tests/it/docs_reference.rs: do not edit.\n     \
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

// ---------------------------------------------------------------------------
// The book's pages and links
// ---------------------------------------------------------------------------

/// The markdown files of the book, and README.md.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join(BOOK), &mut files);
    files.sort();
    files
}

/// The lines of a markdown file outside fenced code blocks, with their
/// numbers.
fn outside_fences(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            continue;
        }
        out.push((i + 1, line));
    }
    out
}

/// The lines outside fenced code blocks, inline code spans blanked out:
/// where a link can be.
fn prose(text: &str) -> Vec<(usize, String)> {
    outside_fences(text)
        .into_iter()
        .map(|(number, line)| (number, blank_code_spans(line)))
        .collect()
}

fn blank_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of the links on a line: `[text](target)`, `[label]: target`,
/// and `href="…"` / `src="…"`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let mut depth = 0;
        let end = after
            .char_indices()
            .find(|&(_, c)| match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth == 0 => true,
                ')' => {
                    depth -= 1;
                    false
                }
                _ => false,
            })
            .map_or(after.len(), |(j, _)| j);
        let target = after[..end].trim();
        // `[text](<a b> "title")`: the target without its title.
        let target = target.split_once(" \"").map_or(target, |(t, _)| t);
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some((label, target)) = trimmed.split_once("]:")
        && !label.contains("](")
        && let Some(target) = target.split_whitespace().next()
    {
        targets.push(target.to_string());
    }
    for attribute in ["href=\"", "src=\""] {
        let mut rest = line;
        while let Some(i) = rest.find(attribute) {
            let after = &rest[i + attribute.len()..];
            let end = after.find('"').unwrap_or(after.len());
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

fn is_external(target: &str) -> bool {
    target.is_empty()
        || target.starts_with('#')
        || target.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        })
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
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

/// The ids of a page's headings, as mdBook makes them: an explicit
/// `{#id}`, else the heading's text lowercased, spaces made `-`, everything
/// but letters, digits, `-` and `_` dropped (a repeated one gets `-1`, `-2` …).
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for (_, line) in outside_fences(text) {
        let line = line.replace('`', "");
        let Some(heading) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let heading = heading.trim();
        let id = match heading.rsplit_once("{#") {
            Some((_, id)) if heading.ends_with('}') => id.trim_end_matches('}').trim().to_string(),
            _ => {
                let text = strip_links(heading);
                text.chars()
                    .filter_map(|c| {
                        if c.is_alphanumeric() || c == '_' || c == '-' {
                            Some(c.to_lowercase().next().unwrap_or(c))
                        } else if c.is_whitespace() {
                            Some('-')
                        } else {
                            None
                        }
                    })
                    .collect()
            }
        };
        let mut unique = id.clone();
        let mut n = 1;
        while !ids.insert(unique.clone()) {
            unique = format!("{id}-{n}");
            n += 1;
        }
    }
    ids
}

/// `[text](target)` → `text`.
fn strip_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn every_page_of_the_summary_exists_and_every_page_is_in_it() {
    let book = root().join(BOOK);
    let summary = read(&book.join("SUMMARY.md"));
    let mut listed = BTreeSet::new();
    let mut problems = Vec::new();
    for (number, line) in prose(&summary) {
        for target in link_targets(&line) {
            if target.is_empty() {
                continue; // a draft chapter: `[Title]()`
            }
            let path = normalize(&book.join(&target));
            if !path.is_file() {
                problems.push(format!("SUMMARY.md:{number}: `{target}` does not exist"));
            }
            listed.insert(path);
        }
    }
    assert!(
        listed.len() >= 20,
        "SUMMARY.md lists only {} pages",
        listed.len()
    );
    for file in markdown_files() {
        if file.starts_with(&book)
            && file.file_name().is_some_and(|n| n != "SUMMARY.md")
            && !listed.contains(&normalize(&file))
        {
            problems.push(format!(
                "{} is not in SUMMARY.md (mdbook would leave it out)",
                file.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading_that_exist() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let mut lines = prose(&text);
        // `{{#include FILE}}` (mdBook's) must name a file too.
        for (number, line) in &mut lines {
            while let Some(i) = line.find("{{#include ") {
                let after = &line[i + "{{#include ".len()..];
                let end = after.find("}}").unwrap_or(after.len());
                let target = after[..end]
                    .trim()
                    .split(':')
                    .next()
                    .unwrap_or("")
                    .to_string();
                if !dir.join(&target).is_file() {
                    problems.push(format!(
                        "{name}:{number}: the included `{target}` does not exist"
                    ));
                }
                checked += 1;
                *line = format!("{}{}", &line[..i], &after[end..]);
            }
        }
        for (number, line) in lines {
            for target in link_targets(&line) {
                if is_external(&target) {
                    if let Some(id) = target.strip_prefix('#')
                        && !heading_ids(&text).contains(id)
                    {
                        problems.push(format!("{name}:{number}: no heading `#{id}` on this page"));
                    }
                    continue;
                }
                checked += 1;
                let (path, fragment) = target
                    .split_once('#')
                    .map_or((target.as_str(), None), |(p, f)| (p, Some(f)));
                let resolved = match path.strip_prefix('/') {
                    Some(from_root) => root().join(from_root),
                    None => dir.join(path),
                };
                let resolved = normalize(&resolved);
                if !resolved.exists() {
                    problems.push(format!("{name}:{number}: `{target}` leads to no file"));
                    continue;
                }
                if let Some(id) = fragment
                    && resolved.extension().is_some_and(|e| e == "md")
                    && !heading_ids(&read(&resolved)).contains(id)
                {
                    problems.push(format!(
                        "{name}:{number}: `{target}`: {path} has no heading `#{id}`"
                    ));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_link_scanner_reads_what_mdbook_reads() {
    assert_eq!(
        link_targets("see [a](b.md#c) and [d](<e f.md> \"t\")"),
        ["b.md#c", "e f.md"]
    );
    assert_eq!(link_targets("[x]: ../y.md"), ["../y.md"]);
    assert_eq!(blank_code_spans("`[a](b)` [c](d)").trim(), "[c](d)");
    assert!(is_external("https://example.org") && is_external("#top") && !is_external("a.md"));
    let ids = heading_ids(
        "# A `b` c\n## Cluster mode: one port\n## X {#custom}\n# A b c\n```\n# not\n```\n",
    );
    assert_eq!(
        ids,
        ["a-b-c", "a-b-c-1", "cluster-mode-one-port", "custom"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    let (text, default) = split_default("Working directory. Default: that folder.");
    assert_eq!(
        (text.as_str(), default.as_deref()),
        ("Working directory.", Some("that folder"))
    );
    let (text, default) = split_default("Default 1s. Then more.");
    assert_eq!(
        (text.as_str(), default.as_deref()),
        ("Then more.", Some("1s"))
    );
}
