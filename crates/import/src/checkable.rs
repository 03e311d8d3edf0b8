//! What the output writes so that `check` reads it back: app names made
//! valid and unique, durations in the units humantime reads, and no NUL
//! byte in what a process would be given. The translators map keys; this
//! keeps what they write within what supervise accepts.

use serde_json::Value;

use crate::{Draft, Note, escaped};

/// `name` made into an app name (lowercase letters, digits, `_`, `-`,
/// starting with a letter or digit, not `all`), unique among `taken`.
pub fn app_name(name: &str, taken: &[String]) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out = out.trim_matches(['-', '_']).to_string();
    if out.is_empty() {
        out = "app".to_string();
    }
    if out == "all" {
        out = "all-app".to_string();
    }
    let mut candidate = out.clone();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{out}-{n}");
        n += 1;
    }
    candidate
}

/// Take out of `draft` what no process can be given: a string with a NUL
/// byte (C strings end there, and `check` refuses it). An app whose
/// command holds one is left out; another key that holds one (a `cwd`,
/// a variable of `env`) is, with a warning for each.
pub fn without_nul(draft: &mut Draft) {
    let mut kept = Vec::new();
    for mut app in std::mem::take(&mut draft.apps) {
        if app.fields.get("command").is_some_and(holds_nul) {
            draft.notes.push(Note::warning(
                app.line,
                format!(
                    "{}: its command holds a NUL byte, which no program can be given: left out",
                    app.name
                ),
            ));
            continue;
        }
        let mut warnings = Vec::new();
        app.fields.retain(|key, value| {
            if let Value::Object(entries) = value {
                entries.retain(|name, value| {
                    let bad = name.contains('\0') || holds_nul(value);
                    if bad {
                        warnings.push(format!(
                            "`{key}.{}` holds a NUL byte: left out",
                            escaped(name)
                        ));
                    }
                    !bad
                });
                return true;
            }
            let bad = holds_nul(value);
            if bad {
                warnings.push(format!("`{key}` holds a NUL byte: left out"));
            }
            !bad
        });
        let line = app.line;
        for warning in warnings {
            app.warn(line, warning);
        }
        kept.push(app);
    }
    draft.apps = kept;
}

/// Whether a string in `value` holds a NUL byte.
fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// The most milliseconds written as `Nms`: humantime reads `ms` in
/// nanoseconds, a `u64`, so beyond this `check` would refuse the number.
const MAX_WRITTEN_AS_MS: u64 = u64::MAX / 1_000_000;

/// A duration in milliseconds as a humantime string (`1600ms`, `3s`, `1m`,
/// and `N s M ms` past [`MAX_WRITTEN_AS_MS`]).
pub(crate) fn millis(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if !ms.is_multiple_of(1000) {
        return if ms > MAX_WRITTEN_AS_MS {
            format!("{}s {}ms", ms / 1000, ms % 1000)
        } else {
            format!("{ms}ms")
        };
    }
    let s = ms / 1000;
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_are_made_valid_and_unique() {
        assert_eq!(app_name("API Server", &[]), "api-server");
        assert_eq!(app_name("web.1", &[]), "web-1");
        assert_eq!(app_name("_worker_", &[]), "worker");
        assert_eq!(app_name("!!!", &[]), "app");
        assert_eq!(app_name("all", &[]), "all-app");
        assert_eq!(app_name("web", &["web".into(), "web-2".into()]), "web-3");
    }

    #[test]
    fn durations_are_written_in_their_largest_whole_unit() {
        assert_eq!(millis(1600), "1600ms");
        assert_eq!(millis(3000), "3s");
        assert_eq!(millis(120_000), "2m");
        assert_eq!(millis(7_200_000), "2h");
        assert_eq!(millis(0), "0s");
        let longest = millis(u64::MAX);
        assert_eq!(
            humantime::parse_duration(&longest).map(|d| d.as_millis()),
            Ok(u128::from(u64::MAX)),
            "{longest}"
        );
    }
}
