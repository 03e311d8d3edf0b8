//! Writing values as YAML by hand: the imported file is read by people, so
//! it gets block mappings, short flow lists and quotes only where YAML needs
//! them. A generic serializer would quote too much or too little and could not
//! put the `# import:` comments next to the app they belong to.

use serde_json::Value;

/// Words YAML reads as something other than a string (YAML 1.1's booleans
/// included, which some editors and older tools still apply).
const NOT_STRINGS: &[&str] = &[
    "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", ".inf", "-.inf", ".nan",
];

/// `value` as a YAML scalar, quoted when a plain scalar would be read
/// differently. `flow`: the scalar sits inside `[…]`, where `,` ends it.
pub fn scalar(value: &Value, flow: bool) -> String {
    match value {
        Value::String(text) => string(text, flow),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// A mapping key as YAML reads it back: an app named `true` or `1` is
/// quoted, or it would be a boolean or a number.
pub fn key(text: &str) -> String {
    string(text, false)
}

fn string(text: &str, flow: bool) -> String {
    if is_plain(text, flow) {
        text.to_string()
    } else {
        // A JSON string is a valid YAML double-quoted scalar: its escapes are
        // a subset of YAML's.
        Value::String(text.to_string()).to_string()
    }
}

fn is_plain(text: &str, flow: bool) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || "_./@%+=:-$ ".contains(c) || (!flow && c == ',');
    let dash_word = first == '-' && text.len() > 1 && !text[1..].starts_with([' ', '-'])
        || text.starts_with("--") && text.len() > 2;
    (first.is_ascii_alphanumeric() || "_./$".contains(first) || dash_word)
        && text.chars().all(allowed)
        && !text.ends_with([' ', ':'])
        && !text.contains(": ")
        && !text.contains("  ")
        && !NOT_STRINGS.contains(&text.to_ascii_lowercase().as_str())
        && text.parse::<f64>().is_err()
        && !looks_numeric(text)
}

/// Integers in other bases and with separators (`0x1F`, `0o17`, `1_000`).
fn looks_numeric(text: &str) -> bool {
    let digits = text.trim_start_matches(['+', '-']);
    digits.starts_with(|c: char| c.is_ascii_digit())
        && digits
            .chars()
            .all(|c| c.is_ascii_hexdigit() || "xXoObB_.:".contains(c))
}

/// `key: value` lines for one mapping entry at `indent` spaces, values that
/// are mappings written as nested blocks and lists of scalars as flow lists.
pub(crate) fn entry(out: &mut String, indent: usize, key: &str, value: &Value) {
    let pad = " ".repeat(indent);
    let key = string(key, false);
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push_str(&format!("{pad}{key}:\n"));
            for (k, v) in map {
                entry(out, indent + 2, k, v);
            }
        }
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            let items: Vec<String> = items.iter().map(|i| scalar(i, true)).collect();
            out.push_str(&format!("{pad}{key}: [{}]\n", items.join(", ")));
        }
        Value::Array(items) => {
            out.push_str(&format!("{pad}{key}:\n"));
            for item in items {
                let mut nested = String::new();
                match item {
                    Value::Object(map) => {
                        for (k, v) in map {
                            entry(&mut nested, indent + 4, k, v);
                        }
                        // The first line of the item carries the dash.
                        let nested =
                            nested.replacen(&" ".repeat(indent + 4), &format!("{pad}  - "), 1);
                        out.push_str(&nested);
                    }
                    other => out.push_str(&format!("{pad}  - {}\n", scalar(other, false))),
                }
            }
        }
        Value::Object(_) => out.push_str(&format!("{pad}{key}: {{}}\n")),
        scalar_value => out.push_str(&format!("{pad}{key}: {}\n", scalar(scalar_value, false))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn plain_strings_stay_plain() {
        for text in [
            "node",
            "server.js",
            "./bin/worker",
            "/usr/bin/python3",
            "NODE_ENV",
            "--port=8080",
            "a b",
            "$PORT",
            "-v",
            "--queue",
            "--max-old-space-size=128",
        ] {
            assert_eq!(scalar(&json!(text), false), text, "{text}");
        }
    }

    #[test]
    fn strings_yaml_would_misread_are_quoted() {
        for text in [
            "",
            "true",
            "No",
            "null",
            "~",
            "42",
            "1.5",
            "0x1F",
            "1_000",
            "8:30",
            "{instance}",
            "a: b",
            "a #b",
            "-",
            "- x",
            "-1",
            "--",
            "*",
            "&x",
            "!tag",
            "'q'",
            "\"q\"",
            "trail ",
            "@at",
            "%p",
            "[x]",
            "multi\nline",
            "tab\there",
        ] {
            let written = scalar(&json!(text), false);
            assert!(written.starts_with('"'), "{text:?} written as {written}");
            let back: String = serde_saphyr::from_str(&written).expect("reads back");
            assert_eq!(back, text);
        }
    }

    #[test]
    fn a_comma_is_quoted_inside_a_flow_list_only() {
        assert_eq!(scalar(&json!("a,b"), false), "a,b");
        assert_eq!(scalar(&json!("a,b"), true), "\"a,b\"");
    }

    #[test]
    fn entries_read_back_as_the_values_written() {
        let value = json!({
            "command": ["node", "server.js", "--name=a b", "{instance}"],
            "env": {"NODE_ENV": "production", "PORT": "3000", "EMPTY": ""},
            "instances": 4,
            "backoff": {"initial": "100ms", "factor": 1.5},
            "listen": [{"name": "admin", "address": "unix:/tmp/x.sock"}, "127.0.0.1:80"],
            "shell": true,
        });
        let mut out = String::new();
        for (k, v) in value.as_object().expect("a mapping") {
            entry(&mut out, 0, k, v);
        }
        let back: Value = serde_saphyr::from_str(&out).expect("reads back");
        assert_eq!(back, value, "written:\n{out}");
    }
}
