//! The structural check: walk the spanned YAML tree against the JSON Schema that
//! is generated from the [`super::raw`] types, collecting *every* problem.
//!
//! Using the generated schema (instead of a hand-written list of keys) keeps one
//! description of the format: a field added to the raw types is known here, in
//! the published schema and in the did-you-mean suggestions at once.
//!
//! The walker understands the subset of JSON Schema that `schemars` emits for our
//! types: `$ref`, `anyOf`/`oneOf`, `type`, `enum`/`const`, `properties`,
//! `required`, `additionalProperties`, `patternProperties` (literal `^prefix`
//! patterns only), `items`, `minimum` and the `uint32`/`int64` formats, plus our
//! own `x-expected` keyword, which phrases what a value should look like.

use serde_json::Value;

use super::diagnostic::{PathSeg, Reporter, did_you_mean, path_text};
use super::node::{Node, NodeKind};

/// A problem found by the walk, not yet placed in the file.
#[derive(Debug, Clone)]
struct Problem {
    path: Vec<PathSeg>,
    at_key: bool,
    message: String,
    help: Option<String>,
    /// For a misspelt key: the known key it probably meant.
    meant: Option<String>,
}

/// Where a structural problem is, and which key a misspelt one probably meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemPlace {
    pub(crate) path: Vec<PathSeg>,
    pub(crate) meant: Option<String>,
}

/// Check `root` against `schema`, reporting every structural problem.
/// Returns where every problem is, so the caller can set the broken parts
/// aside and still check the rest.
pub fn check(root: &Node, schema: &Value, reporter: &mut Reporter) -> Vec<ProblemPlace> {
    let walker = Walker {
        root_schema: schema,
    };
    let mut problems = Vec::new();
    walker.walk(root, schema, &mut Vec::new(), &mut problems);
    let places = problems
        .iter()
        .map(|p| ProblemPlace {
            path: p.path.clone(),
            meant: p.meant.clone(),
        })
        .collect();
    for problem in problems {
        let diagnostic = if problem.at_key {
            reporter.key_error(&problem.path, problem.message)
        } else {
            reporter.error(&problem.path, problem.message)
        };
        if let Some(help) = problem.help {
            diagnostic.help(help);
        }
    }
    places
}

struct Walker<'s> {
    root_schema: &'s Value,
}

/// The most `$ref` hops followed for one schema (a cycle guard).
const MAX_REF_HOPS: usize = 16;

impl<'s> Walker<'s> {
    fn resolve(&self, mut schema: &'s Value) -> &'s Value {
        for _ in 0..MAX_REF_HOPS {
            let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let target = reference
                .strip_prefix('#')
                .and_then(|pointer| self.root_schema.pointer(pointer));
            match target {
                Some(target) => schema = target,
                None => break,
            }
        }
        schema
    }

    fn branches(&self, schema: &'s Value) -> Option<Vec<&'s Value>> {
        let list = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))?
            .as_array()?;
        Some(list.iter().map(|b| self.resolve(b)).collect())
    }

    fn walk(
        &self,
        node: &Node,
        schema: &'s Value,
        path: &mut Vec<PathSeg>,
        out: &mut Vec<Problem>,
    ) {
        let schema = self.resolve(schema);
        if schema.as_bool() == Some(true) {
            return;
        }
        if let Some(branches) = self.branches(schema) {
            self.walk_alternatives(node, schema, &branches, path, out);
            return;
        }
        if !self.accepts_shallow(node, schema) {
            out.push(self.mismatch_with_suggestion(node, schema, path));
            return;
        }
        match &node.kind {
            NodeKind::Map(entries) => self.walk_map(entries, schema, path, out),
            NodeKind::Seq(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (index, item) in items.iter().enumerate() {
                        path.push(PathSeg::Index(index));
                        self.walk(item, item_schema, path, out);
                        path.pop();
                    }
                }
            }
            NodeKind::Int(value) => {
                if let Some(problem) = integer_range_problem(*value, schema, path) {
                    out.push(problem);
                }
            }
            _ => {}
        }
    }

    fn walk_alternatives(
        &self,
        node: &Node,
        schema: &'s Value,
        branches: &[&'s Value],
        path: &mut Vec<PathSeg>,
        out: &mut Vec<Problem>,
    ) {
        let compatible: Vec<&Value> = branches
            .iter()
            .copied()
            .filter(|b| self.accepts_shallow(node, b))
            .collect();
        match compatible.as_slice() {
            [] => out.push(self.mismatch_with_suggestion(node, schema, path)),
            [only] => self.walk(node, only, path, out),
            several => {
                let mut best: Option<(usize, Vec<Problem>)> = None;
                for branch in several {
                    let mut trial = Vec::new();
                    self.walk(node, branch, path, &mut trial);
                    if trial.is_empty() {
                        return;
                    }
                    let score = self.key_overlap(node, branch);
                    if best.as_ref().is_none_or(|(s, _)| score > *s) {
                        best = Some((score, trial));
                    }
                }
                match best {
                    Some((score, trial)) if score > 0 => out.extend(trial),
                    _ => {
                        let mut problem = self.mismatch(node, schema, path);
                        if let Some(entries) = node.entries() {
                            let known = self.property_names_of(several);
                            let unknown: Vec<&str> = entries
                                .iter()
                                .filter_map(|(k, _)| k.as_str())
                                .filter(|k| !known.iter().any(|n| n == k))
                                .collect();
                            if let Some(first) = unknown.first() {
                                problem.message = format!(
                                    "unknown field `{first}` in {}; expected {}",
                                    path_text(path),
                                    self.expected(schema)
                                );
                                problem.path.push(PathSeg::Key(first.to_string()));
                                problem.at_key = true;
                                if let Some(s) =
                                    did_you_mean(first, known.iter().map(String::as_str))
                                {
                                    problem.help = Some(format!("did you mean `{s}`?"));
                                }
                            }
                        }
                        out.push(problem);
                    }
                }
            }
        }
    }

    fn walk_map(
        &self,
        entries: &[(Node, Node)],
        schema: &'s Value,
        path: &mut Vec<PathSeg>,
        out: &mut Vec<Problem>,
    ) {
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let prefixes: Vec<&str> = schema
            .get("patternProperties")
            .and_then(Value::as_object)
            .map(|patterns| {
                patterns
                    .keys()
                    .filter_map(|p| p.strip_prefix('^'))
                    .collect()
            })
            .unwrap_or_default();
        let mut suggested: Vec<&str> = Vec::new();
        for (key, value) in entries {
            let Some(name) = key.as_str() else {
                out.push(Problem {
                    path: path.clone(),
                    at_key: false,
                    message: format!(
                        "keys in {} must be text, found {}",
                        path_text(path),
                        key.describe()
                    ),
                    help: Some("quote the key".to_string()),
                    meant: None,
                });
                continue;
            };
            path.push(PathSeg::Key(name.to_string()));
            if let Some(property) = properties.and_then(|p| p.get(name)) {
                self.walk(value, property, path, out);
            } else if prefixes.iter().any(|prefix| name.starts_with(prefix)) {
                // An extension block (`x-…`): ignored by design.
            } else {
                match additional {
                    Some(Value::Bool(false)) => {
                        let parent = path_text(&path[..path.len() - 1]);
                        let known: Vec<&str> = properties
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        let meant = did_you_mean(name, known.iter().copied());
                        let help = match meant {
                            Some(suggestion) => {
                                suggested.push(suggestion);
                                format!("did you mean `{suggestion}`?")
                            }
                            None => format!("known fields here: {}", known.join(", ")),
                        };
                        out.push(Problem {
                            path: path.clone(),
                            at_key: true,
                            message: format!("unknown field `{name}` in {parent}"),
                            help: Some(help),
                            meant: meant.map(str::to_string),
                        });
                    }
                    Some(additional) if additional.is_object() => {
                        self.walk(value, additional, path, out)
                    }
                    _ => {}
                }
            }
            path.pop();
        }
        let required = schema.get("required").and_then(Value::as_array);
        for name in required.into_iter().flatten().filter_map(Value::as_str) {
            // A misspelt key already says what is missing (`app` → did you mean `apps`?).
            if !entries.iter().any(|(k, _)| k.as_str() == Some(name)) && !suggested.contains(&name)
            {
                out.push(Problem {
                    path: path.clone(),
                    at_key: false,
                    message: format!("missing field `{name}` in {}", path_text(path)),
                    help: None,
                    meant: None,
                });
            }
        }
    }

    /// Does the node have the right *kind* for this schema (without looking inside)?
    fn accepts_shallow(&self, node: &Node, schema: &'s Value) -> bool {
        let schema = self.resolve(schema);
        if schema.as_bool() == Some(true) {
            return true;
        }
        if let Some(branches) = self.branches(schema) {
            return branches.iter().any(|b| self.accepts_shallow(node, b));
        }
        if let Some(constant) = schema.get("const") {
            return node_equals(node, constant);
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            return options.iter().any(|o| node_equals(node, o));
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return true,
        };
        types.iter().any(|t| kind_matches(&node.kind, t))
    }

    /// How many of the node's keys the schema knows (to pick the branch the user meant).
    fn key_overlap(&self, node: &Node, schema: &'s Value) -> usize {
        let Some(entries) = node.entries() else {
            return 0;
        };
        let known = self.property_names_of(&[schema]);
        entries
            .iter()
            .filter(|(k, _)| k.as_str().is_some_and(|k| known.iter().any(|n| n == k)))
            .count()
    }

    fn property_names_of(&self, schemas: &[&'s Value]) -> Vec<String> {
        let mut names = Vec::new();
        for schema in schemas {
            let schema = self.resolve(schema);
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                names.extend(properties.keys().cloned());
            }
            if let Some(branches) = self.branches(schema) {
                names.extend(self.property_names_of(&branches));
            }
        }
        names
    }

    /// Every word a string value may be here (for did-you-mean on enums).
    fn allowed_words(&self, schema: &'s Value) -> Vec<String> {
        let schema = self.resolve(schema);
        let mut words = Vec::new();
        if let Some(constant) = schema.get("const").and_then(Value::as_str) {
            words.push(constant.to_string());
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            words.extend(options.iter().filter_map(Value::as_str).map(str::to_string));
        }
        if let Some(branches) = self.branches(schema) {
            for branch in branches {
                words.extend(self.allowed_words(branch));
            }
        }
        words
    }

    /// What a value at this schema should look like, in words.
    fn expected(&self, schema: &'s Value) -> String {
        let schema = self.resolve(schema);
        if let Some(text) = schema.get("x-expected").and_then(Value::as_str) {
            return text.to_string();
        }
        if let Some(branches) = self.branches(schema) {
            let real: Vec<&Value> = branches
                .into_iter()
                .filter(|b| !is_null_schema(b))
                .collect();
            // `Option<T>` is `anyOf: [T, null]`: describe T.
            if let [only] = real.as_slice() {
                return self.expected(only);
            }
            // Only words allowed (`restart`): list them.
            if real.iter().all(|b| !self.allowed_words(b).is_empty()) {
                return one_of(&self.allowed_words(schema));
            }
            let parts: Vec<String> = real.iter().map(|b| self.expected(b)).collect();
            return parts.join(" or ");
        }
        let words = self.allowed_words(schema);
        if !words.is_empty() {
            return one_of(&words);
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => vec![],
        };
        let phrases: Vec<&str> = types
            .iter()
            .map(|t| match *t {
                "string" => "a string",
                "integer" => "an integer",
                "number" => "a number",
                "boolean" => "true or false",
                "object" => "a mapping",
                "array" => "a list",
                _ => "a value",
            })
            .collect();
        if phrases.is_empty() {
            "a value".to_string()
        } else {
            phrases.join(" or ")
        }
    }

    /// A mismatch, with a did-you-mean when a misspelt word was written.
    fn mismatch_with_suggestion(
        &self,
        node: &Node,
        schema: &'s Value,
        path: &[PathSeg],
    ) -> Problem {
        let mut problem = self.mismatch(node, schema, path);
        if let NodeKind::Str(word) = &node.kind {
            let words = self.allowed_words(schema);
            if let Some(suggestion) = did_you_mean(word, words.iter().map(String::as_str)) {
                problem.help = Some(format!("did you mean `{suggestion}`?"));
            }
        }
        problem
    }

    fn mismatch(&self, node: &Node, schema: &'s Value, path: &[PathSeg]) -> Problem {
        Problem {
            path: path.to_vec(),
            at_key: false,
            message: format!(
                "{}: expected {}, found {}",
                path_text(path),
                self.expected(schema),
                node.describe()
            ),
            help: None,
            meant: None,
        }
    }
}

fn one_of(words: &[String]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
    format!("one of {}", quoted.join(", "))
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn kind_matches(kind: &NodeKind, schema_type: &str) -> bool {
    matches!(
        (kind, schema_type),
        (NodeKind::Null, "null")
            | (NodeKind::Bool(_), "boolean")
            | (NodeKind::Int(_), "integer" | "number")
            | (NodeKind::Float(_), "number")
            | (NodeKind::Str(_), "string")
            | (NodeKind::Seq(_), "array")
            | (NodeKind::Map(_), "object")
    )
}

fn node_equals(node: &Node, value: &Value) -> bool {
    match (&node.kind, value) {
        (NodeKind::Str(s), Value::String(v)) => s == v,
        (NodeKind::Bool(b), Value::Bool(v)) => b == v,
        (NodeKind::Int(i), Value::Number(n)) => n.as_i64().map(i128::from) == Some(*i),
        (NodeKind::Null, Value::Null) => true,
        _ => false,
    }
}

fn integer_range_problem(value: i128, schema: &Value, path: &[PathSeg]) -> Option<Problem> {
    let (low, high): (i128, i128) = match schema.get("format").and_then(Value::as_str) {
        Some("uint32") => (0, u32::MAX.into()),
        Some("int64") => (i64::MIN.into(), i64::MAX.into()),
        Some("uint64") => (0, u64::MAX.into()),
        _ => (i128::MIN, i128::MAX),
    };
    let low = schema
        .get("minimum")
        .and_then(Value::as_i64)
        .map_or(low, |m| low.max(m.into()));
    if value < low || value > high {
        let message = if value < 0 && low == 0 {
            format!("{}: must not be negative, found {value}", path_text(path))
        } else {
            format!(
                "{}: {value} is out of range ({low} to {high})",
                path_text(path)
            )
        };
        return Some(Problem {
            path: path.to_vec(),
            at_key: false,
            message,
            help: None,
            meant: None,
        });
    }
    None
}
