//! The file as Python's `RawConfigParser` reads it, as supervisord reads
//! it: sections, `key = value` lines (`=` or `:`), `;`/`#` comments (inline
//! ones after a space), indented continuation lines, lowercased keys. Kept
//! apart from what the keys mean, so that the reading can follow Python's
//! and nothing else.

/// One `key = value` of a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IniEntry {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniSection {
    pub(crate) name: String,
    pub(crate) line: usize,
    pub(crate) entries: Vec<IniEntry>,
    /// Where the same section header appears again (its keys merged in,
    /// later ones winning, as supervisord's parser does).
    pub(crate) again_at: Vec<usize>,
}

impl IniSection {
    pub(super) fn get(&self, key: &str) -> Option<&IniEntry> {
        // A later duplicate wins, as with `strict=False`.
        self.entries.iter().rev().find(|e| e.key == key)
    }
}

/// Parse an INI file; a line that is neither a section, an option, a
/// comment nor a continuation is an error with its line. Blank lines inside
/// a continued value are kept when more of it follows, as Python's
/// `configparser` keeps them.
pub fn parse_ini(text: &str) -> Result<Vec<IniSection>, (usize, String)> {
    let mut sections: Vec<IniSection> = Vec::new();
    // The section being filled (an index: a repeated header refills an
    // earlier one).
    let mut current: Option<usize> = None;
    let mut last_indent: Option<usize> = None;
    let mut blanks = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let stripped = raw.trim();
        if stripped.is_empty() {
            blanks += 1;
            continue;
        }
        if stripped.starts_with('#') || stripped.starts_with(';') {
            continue;
        }
        let indent = raw.len() - raw.trim_start().len();
        let value = strip_inline_comment(stripped);
        if let (Some(option_indent), Some(index)) = (last_indent, current)
            && indent > option_indent
            && let Some(entry) = sections[index].entries.last_mut()
        {
            for _ in 0..blanks {
                entry.value.push('\n');
            }
            entry.value.push('\n');
            entry.value.push_str(value);
            blanks = 0;
            continue;
        }
        blanks = 0;
        if stripped.starts_with('[') {
            let Some(end) = stripped.rfind(']') else {
                return Err((line, format!("a section header without `]`: {stripped}")));
            };
            let name = stripped[1..end].to_string();
            current = match sections.iter().position(|s| s.name == name) {
                Some(index) => {
                    sections[index].again_at.push(line);
                    Some(index)
                }
                None => {
                    sections.push(IniSection {
                        name,
                        line,
                        entries: Vec::new(),
                        again_at: Vec::new(),
                    });
                    Some(sections.len() - 1)
                }
            };
            last_indent = None;
            continue;
        }
        let Some(index) = current else {
            return Err((line, "a value before the first [section]".to_string()));
        };
        let Some(at) = value.find(['=', ':']) else {
            return Err((
                line,
                format!(
                    "neither a [section] nor `key = value`: {}",
                    crate::escaped(stripped)
                ),
            ));
        };
        sections[index].entries.push(IniEntry {
            key: value[..at].trim().to_ascii_lowercase(),
            value: value[at + 1..].trim().to_string(),
            line,
        });
        last_indent = Some(indent);
    }
    Ok(sections)
}

/// `;` or `#` after whitespace starts a comment (Python 3's
/// `inline_comment_prefixes` as supervisor sets them).
fn strip_inline_comment(text: &str) -> &str {
    let bytes = text.as_bytes();
    for i in 1..bytes.len() {
        if (bytes[i] == b';' || bytes[i] == b'#') && bytes[i - 1].is_ascii_whitespace() {
            return text[..i].trim_end();
        }
    }
    text
}
