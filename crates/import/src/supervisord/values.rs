//! supervisord's value types (its `datatypes.py`): the `KEY=val,…` list
//! of `environment`, byte sizes, booleans. How a value is spelled, apart
//! from what each key does with it.

use serde_json::{Value, json};

/// supervisord's `KEY=val,KEY2="v, w"` (Python's non-POSIX `shlex` with
/// `/.+-():` as word characters; quotes stripped from the value).
pub(crate) fn key_value_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let is_word = |c: char| c.is_alphanumeric() || "_/.+-():".contains(c);
    let chars: Vec<char> = text.chars().collect();
    let mut tokens: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            // shlex's comment character: the rest of the line.
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' {
            let close = (i + 1..chars.len())
                .find(|&j| chars[j] == c)
                .ok_or_else(|| format!("no closing quotation in {text:?}"))?;
            let mut token: String = chars[i..=close].iter().collect();
            i = close + 1;
            // A word straight after the quotes belongs to the same token.
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '"' || chars[i] == '\'') {
                token.push(chars[i]);
                i += 1;
            }
            tokens.push(token);
        } else if is_word(c) {
            let mut token = String::new();
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '"' || chars[i] == '\'') {
                if chars[i] == '"' || chars[i] == '\'' {
                    let q = chars[i];
                    let close = (i + 1..chars.len())
                        .find(|&j| chars[j] == q)
                        .ok_or_else(|| format!("no closing quotation in {text:?}"))?;
                    token.extend(&chars[i..=close]);
                    i = close + 1;
                } else {
                    token.push(chars[i]);
                    i += 1;
                }
            }
            tokens.push(token);
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if i + 2 >= tokens.len() || tokens[i + 1] != "=" {
            return Err(format!("unexpected end of key/value pairs in {text:?}"));
        }
        let value = tokens[i + 2].trim_matches(['\'', '"']).to_string();
        pairs.push((tokens[i].clone(), value));
        i += 4;
    }
    Ok(pairs)
}

/// supervisord's byte sizes (`byte_size`): `KB`, `MB`, `GB` are 1024-based.
pub(super) fn byte_size(text: &str) -> Option<Value> {
    let upper = text.trim().to_ascii_uppercase();
    for (suffix, unit) in [("KB", "KiB"), ("MB", "MiB"), ("GB", "GiB")] {
        if let Some(number) = upper.strip_suffix(suffix) {
            let n: u64 = number.trim().parse().ok()?;
            return Some(json!(format!("{n}{unit}")));
        }
    }
    upper.parse::<u64>().ok().map(|n| json!(n))
}

pub(super) fn truthy(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}
