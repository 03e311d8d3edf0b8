//! `env_file`: `KEY=VALUE` lines, as docker-compose and systemd's
//! `EnvironmentFile=` read them.
//!
//! Blank lines and lines starting with `#` are skipped; an optional `export `
//! prefix is accepted; a value in single quotes is taken literally, a value in
//! double quotes understands `\n`, `\t`, `\"` and `\\`; an unquoted value is
//! taken up to the end of the line with surrounding spaces trimmed.

use std::path::Path;

/// The largest env file we read.
pub(crate) const MAX_ENV_FILE_BYTES: u64 = 1024 * 1024;

/// Read and parse an env file. The error says what and where, ready to print.
pub fn read(path: &Path) -> Result<Vec<(String, String)>, String> {
    let metadata =
        std::fs::metadata(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("`{}` is not a file", path.display()));
    }
    if metadata.len() > MAX_ENV_FILE_BYTES {
        return Err(format!(
            "`{}` is {} bytes, more than the {MAX_ENV_FILE_BYTES} bytes an env file may have",
            path.display(),
            metadata.len()
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("`{}` is not UTF-8 text", path.display()))?;
    parse(&text).map_err(|(line, message)| format!("{}:{line}: {message}", path.display()))
}

/// Parse env-file text; an error carries its 1-based line number.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            return Err((number, "expected KEY=VALUE".to_string()));
        };
        let name = name.trim();
        let mut bytes = name.bytes();
        let valid = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err((number, format!("invalid variable name `{name}`")));
        }
        let value = unquote(value.trim()).map_err(|message| (number, message))?;
        if value.contains('\0') {
            return Err((number, "value contains a NUL byte".to_string()));
        }
        entries.push((name.to_string(), value));
    }
    Ok(entries)
}

fn unquote(value: &str) -> Result<String, String> {
    if let Some(inner) = value.strip_prefix('\'') {
        return inner
            .strip_suffix('\'')
            .map(str::to_string)
            .ok_or_else(|| "unclosed single quote".to_string());
    }
    let Some(inner) = value.strip_prefix('"') else {
        return Ok(value.to_string());
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                return if chars.as_str().trim().is_empty() {
                    Ok(out)
                } else {
                    Err("text after the closing quote".to_string())
                };
            }
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => break,
            },
            other => out.push(other),
        }
    }
    Err("unclosed double quote".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let text =
            "# comment\n\nA=1\nexport B = two words \nC='x # y'\nD=\"a\\nb \\\"q\\\"\"\nE=\n";
        let parsed = parse(text).unwrap();
        let expected = [
            ("A", "1"),
            ("B", "two words"),
            ("C", "x # y"),
            ("D", "a\nb \"q\""),
            ("E", ""),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(parsed, expected);
    }

    #[test]
    fn reports_the_line_of_a_bad_entry() {
        assert_eq!(parse("A=1\nnonsense\n").unwrap_err().0, 2);
        assert_eq!(parse("1A=x").unwrap_err().0, 1);
        assert_eq!(parse("A=\"open").unwrap_err().0, 1);
        assert_eq!(parse("A='open").unwrap_err().0, 1);
        assert_eq!(parse("A=\"x\" y").unwrap_err().0, 1);
    }
}
