//! The draft as a commented YAML file: each note a `# import:` line above
//! its app, and every character YAML would not read in a comment (a NUL,
//! an ESC, a line separator from the source) written as an escape.

use crate::{Draft, Note, emit};

/// The draft as a commented ecosystem file.
pub fn render(draft: &Draft) -> String {
    let mut out = String::new();
    // A file name may hold anything, a line break included.
    let source: String = draft
        .source
        .chars()
        .map(|c| if printable(c) { c } else { '?' })
        .collect();
    out.push_str(&format!(
        "# Imported from {source} ({}) by `supervise import`.\n",
        draft.format.name()
    ));
    out.push_str(
        "# `# import:` lines say what did not carry over exactly: read them, then delete them.\n",
    );
    for note in &draft.notes {
        push_note(&mut out, 0, note);
    }
    out.push('\n');
    if draft.apps.is_empty() {
        out.push_str("apps: {}\n");
        return out;
    }
    out.push_str("apps:\n");
    for (i, app) in draft.apps.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for note in &app.notes {
            push_note(&mut out, 2, note);
        }
        out.push_str(&format!("  {}:\n", emit::key(&app.name)));
        for (key, value) in &app.fields {
            emit::entry(&mut out, 4, key, value);
        }
    }
    out
}

fn push_note(out: &mut String, indent: usize, note: &Note) {
    let pad = " ".repeat(indent);
    let line = note
        .line
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default();
    let mut first = true;
    let text: String = note.text.replace('\r', "");
    for text in text.lines() {
        // A note may quote the source's line, which may hold any byte: a
        // comment holds what YAML can read (a NUL or an ESC in it makes
        // the whole file unreadable), so the rest is written as escapes.
        let text = escaped(text);
        if first {
            out.push_str(&format!("{pad}# import{line}: {text}\n"));
            first = false;
        } else {
            out.push_str(&format!("{pad}#   {text}\n"));
        }
    }
}

/// Whether YAML reads `c` in a comment: a printable character (YAML 1.2
/// §5.1, c-printable) but the C0 and C1 controls and DEL (a tab included:
/// shown as `\t`, it reads better), and not U+2028/U+2029, which YAML 1.1
/// reads as line breaks, nor a byte order mark.
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

/// `text` with every character YAML would not read in a comment written as
/// an escape (`\0`, `\t`, `\x1b`, `\u{2028}`): for the `# import:` lines,
/// and for what `import` prints, where an ESC from the source would reach
/// the terminal.
pub(crate) fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if printable(c) => out.push(c),
            '\0' => out.push_str("\\0"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x80 => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push_str(&format!("\\u{{{:04x}}}", u32::from(c))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{diagnostics, procfile, without_nul};

    /// A NUL, an ESC, a BEL or a line separator in the source: the
    /// imported file is valid YAML and passes `check`.
    #[test]
    fn control_bytes_of_the_source_are_escaped_and_nul_is_left_out() {
        let mut draft = procfile::translate(
            "web: sleep 100\nbad\0line\n\u{1b}[2Jcls: x\napi: echo \u{7}bell \u{2028}\nnul: sleep\x001\n",
            "Procfile",
        );
        without_nul(&mut draft);
        let names: Vec<&str> = draft.apps.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["web", "api"]);
        let text = render(&draft);
        assert!(
            text.lines()
                .filter(|l| l.trim_start().starts_with('#'))
                .all(|l| l.chars().all(printable)),
            "{text:?}"
        );
        assert!(text.contains("bad\\0line"), "{text}");
        assert!(text.contains("\\x1b[2Jcls"), "{text}");
        let host = config::Host::detect();
        let checked = config::check_text(&text, Path::new("/srv/ecosystem.yaml"), &host);
        assert!(checked.is_valid(), "{text}\n{:?}", checked.diagnostics);
        for line in diagnostics(&draft) {
            assert!(line.chars().all(printable), "{line:?}");
        }
    }
}
