//! The parsed YAML as a tree of nodes that each remember where they came from.
//!
//! Serde's derive stops at the first problem. To report *every* problem in one run
//! we first parse into this untyped, spanned tree (serde-saphyr resolves anchors,
//! aliases and `<<` merge keys and rejects duplicate keys while doing so), walk it
//! against the schema collecting all problems, and only then deserialize.
//!
//! The tree is also the span index for later diagnostics: [`Node::find`] maps a
//! path such as `apps.web.kill_timeout` back to a `line:column`.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Budget, DuplicateKeyPolicy, MergeKeyPolicy, Spanned};

use super::diagnostic::{Location, PathSeg};

/// A YAML value with its source location.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    /// Where the value is written. For an alias or a merged value this is the
    /// anchored definition, which is where a fix has to be made.
    pub location: Location,
}

/// The shape of a YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in file order (merged entries after the explicit ones).
    Map(Vec<(Node, Node)>),
}

/// The largest file we read. An ecosystem file of a thousand apps is ~200 KiB.
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

/// Parsing budget: far above any real ecosystem file, far below what would let an
/// alias bomb ("billion laughs") or a deeply nested document burn time or memory.
fn budget() -> Budget {
    let mut budget = Budget::default();
    budget.max_events = 500_000;
    budget.max_aliases = 10_000;
    budget.max_anchors = 10_000;
    budget.max_depth = 24;
    budget.flow_nesting_limit = 16;
    budget.max_nodes = 200_000;
    budget.max_total_scalar_bytes = MAX_FILE_BYTES;
    budget.max_recorded_anchor_events = 20_000;
    budget.max_recorded_anchor_bytes = MAX_FILE_BYTES;
    budget.max_merge_keys = 10_000;
    budget.max_documents = 1;
    budget
}

/// A YAML syntax error (or a budget breach), with where the parser stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub message: String,
    pub(crate) help: &'static str,
    pub location: Option<Location>,
}

/// Parse YAML text into a spanned node tree.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let mut options = serde_saphyr::options! {
        budget: Some(budget()),
        duplicate_keys: DuplicateKeyPolicy::Error,
        merge_keys: MergeKeyPolicy::Merge,
        strict_booleans: true,
        with_snippet: false,
    };
    options.alias_limits.max_total_replayed_events = 100_000;
    match serde_saphyr::from_str_with_options::<Option<Spanned<RawNode>>>(text, options) {
        Ok(Some(spanned)) => Ok(Node::from_spanned(spanned)),
        Ok(None) => Ok(Node {
            kind: NodeKind::Null,
            location: Location::start(),
        }),
        Err(error) => {
            use serde_saphyr::MessageFormatter;
            let (message, help) =
                user_message(&serde_saphyr::DefaultMessageFormatter.format_message(&error));
            let location = error.location().and_then(|l| Location::from_saphyr(&l));
            Err(SyntaxError {
                message,
                help,
                location,
            })
        }
    }
}

/// The parser's message, worded for the user: no control characters, and no
/// advice meant for programmers using the library.
fn user_message(message: &str) -> (String, &'static str) {
    const SYNTAX_HELP: &str = "this is a YAML syntax error; nothing after it was checked";
    let clean: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if let Some(rest) = clean.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        return (
            format!("duplicate key `{key}`: each key may appear only once in a mapping"),
            "remove or rename one of them; nothing after it was checked",
        );
    }
    if let Some(detail) = clean.strip_prefix("budget breached: ") {
        return (
            format!("the document exceeds the parsing limits ({detail})"),
            "anchors, aliases or nesting expand to far more than an ecosystem file needs",
        );
    }
    if clean.starts_with("alias references unknown anchor") {
        return (
            clean,
            "`*` starts a YAML alias (of an `&anchor`): quote a value that starts with `*`, such as a cron schedule: \"*/5 * * * *\"",
        );
    }
    if clean.starts_with("non-finite float") {
        return (
            "`.nan` and `.inf` are not usable numbers here".to_string(),
            "write a finite number",
        );
    }
    (clean, SYNTAX_HELP)
}

impl Node {
    fn from_spanned(spanned: Spanned<RawNode>) -> Node {
        let location = Location::from_saphyr(&spanned.defined)
            .or_else(|| Location::from_saphyr(&spanned.referenced))
            .unwrap_or_else(Location::start);
        let kind = match spanned.value {
            RawNode::Null => NodeKind::Null,
            RawNode::Bool(b) => NodeKind::Bool(b),
            RawNode::Int(i) => NodeKind::Int(i),
            RawNode::Float(f) => NodeKind::Float(f),
            RawNode::Str(s) => NodeKind::Str(s),
            RawNode::Seq(items) => {
                NodeKind::Seq(items.into_iter().map(Node::from_spanned).collect())
            }
            RawNode::Map(entries) => NodeKind::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (Node::from_spanned(k), Node::from_spanned(v)))
                    .collect(),
            ),
        };
        Node { kind, location }
    }

    /// The entries of a mapping, or `None` for any other kind.
    pub fn entries(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            NodeKind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The text of a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value stored under `key` in a mapping, with the key node.
    pub fn get(&self, key: &str) -> Option<(&Node, &Node)> {
        self.entries()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(k, v)| (k, v))
    }

    /// Follow a path down the tree. Returns the node at the end, or the deepest
    /// node that exists (so a diagnostic about a missing value still has a place).
    /// With `key` set, the last segment resolves to the mapping key rather than
    /// its value (for "unknown field" and "invalid name" diagnostics).
    pub(crate) fn find(&self, path: &[PathSeg], key: bool) -> &Node {
        let mut node = self;
        for (i, seg) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let next = match (seg, &node.kind) {
                (PathSeg::Key(name), NodeKind::Map(_)) => {
                    node.get(name).map(|(k, v)| if last && key { k } else { v })
                }
                (PathSeg::Index(index), NodeKind::Seq(items)) => items.get(*index),
                _ => None,
            };
            match next {
                Some(next) => node = next,
                None => break,
            }
        }
        node
    }

    /// A short description of the value for "found …" messages.
    pub(crate) fn describe(&self) -> String {
        fn clip(s: &str) -> String {
            const SHOWN: usize = 40;
            if s.chars().count() > SHOWN {
                format!("{}…", s.chars().take(SHOWN).collect::<String>())
            } else {
                s.to_string()
            }
        }
        match &self.kind {
            NodeKind::Null => "an empty value".to_string(),
            NodeKind::Bool(b) => format!("the boolean {b}"),
            NodeKind::Int(i) => format!("the integer {i}"),
            NodeKind::Float(f) => format!("the number {f}"),
            NodeKind::Str(s) => format!("the string {:?}", clip(s)),
            NodeKind::Seq(_) => "a list".to_string(),
            NodeKind::Map(_) => "a mapping".to_string(),
        }
    }

    /// The tree as JSON, for deserializing into the raw types once it is known
    /// to be well-formed (and for validating examples against the JSON Schema).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.kind {
            NodeKind::Null => Value::Null,
            NodeKind::Bool(b) => Value::Bool(*b),
            NodeKind::Int(i) => i64::try_from(*i)
                .map(Value::from)
                .or_else(|_| u64::try_from(*i).map(Value::from))
                .unwrap_or_else(|_| Value::String(i.to_string())),
            NodeKind::Float(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            NodeKind::Str(s) => Value::String(s.clone()),
            NodeKind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeKind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.key_text(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// A mapping key as text (non-string keys are reported by the structure check).
    pub fn key_text(&self) -> String {
        match &self.kind {
            NodeKind::Str(s) => s.clone(),
            NodeKind::Null => "~".to_string(),
            NodeKind::Bool(b) => b.to_string(),
            NodeKind::Int(i) => i.to_string(),
            NodeKind::Float(f) => f.to_string(),
            NodeKind::Seq(_) | NodeKind::Map(_) => "<complex key>".to_string(),
        }
    }
}

/// The untyped value serde-saphyr hands us, wrapped in `Spanned` at every level.
#[derive(Debug)]
enum RawNode {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<RawNode>>),
    Map(Vec<(Spanned<RawNode>, Spanned<RawNode>)>),
}

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = RawNode;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawNode, E> {
                Ok(RawNode::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<RawNode, E> {
                Ok(RawNode::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<RawNode, D::Error> {
                RawNode::deserialize(d)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawNode, E> {
                Ok(RawNode::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawNode, E> {
                Ok(RawNode::Int(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawNode, E> {
                Ok(RawNode::Int(v.into()))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawNode, E> {
                Ok(RawNode::Int(v))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawNode, E> {
                Ok(i128::try_from(v).map_or_else(|_| RawNode::Float(v as f64), RawNode::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawNode, E> {
                Ok(RawNode::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawNode, E> {
                Ok(RawNode::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<RawNode, E> {
                Ok(RawNode::Str(v))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<RawNode, E> {
                Ok(RawNode::Str(String::from_utf8_lossy(v).into_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawNode, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(RawNode::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawNode, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(RawNode::Map(entries))
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}
