//! systemd's value syntax: durations, words of a command line, quoted
//! values and whole lines, escaped so that no value can end its line or
//! add a directive.

use std::fmt::Write as _;
use std::time::Duration;

use super::INSTANCE_MARK;
use model::spec::{Piece, Template};

/// A duration as a unit setting: plain seconds (`2678400s`), or
/// milliseconds or microseconds when it has a fraction. humantime's
/// months and years (30.44 and 365.25 days) are not systemd's (30.4375
/// and 365.25), so no unit larger than a second is used.
pub(super) fn timespan(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}us", duration.as_micros())
    }
}

/// A duration in seconds for `sleep` (`0.5`, `2`).
pub(super) fn seconds_text(duration: Duration) -> String {
    let text = format!("{:.3}", duration.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A template's text with [`INSTANCE_MARK`] for `{instance}` (an offset
/// never reaches here: it goes through the shell).
pub(super) fn marked(template: &Template) -> String {
    template
        .pieces()
        .map(|piece| match piece {
            Piece::Text(text) => text.to_string(),
            Piece::Instance(_) => INSTANCE_MARK.to_string(),
        })
        .collect()
}

/// A template as one `sh` word: text in single quotes, the instance as
/// `%i` or `$((N+%i))` (systemd puts the number there before sh runs).
pub(super) fn shell_word(template: &Template) -> String {
    let mut word = String::new();
    for piece in template.pieces() {
        match piece {
            Piece::Text(text) => {
                let _ = write!(word, "'{}'", text.replace('\'', "'\\''"));
            }
            Piece::Instance(0) => word.push(INSTANCE_MARK),
            Piece::Instance(offset) => {
                let _ = write!(word, "$(({offset}+{INSTANCE_MARK}))");
            }
        }
    }
    if word.is_empty() {
        word.push_str("''");
    }
    word
}

/// `%` → `%%` (specifiers), then the instance mark → `%i`.
pub(super) fn escape_specifiers(text: &str) -> String {
    text.replace('%', "%%").replace(INSTANCE_MARK, "%i")
}

/// One word of a command line (`ExecStart=`): specifiers and `$` escaped,
/// quoted when it holds anything but plain characters.
pub(super) fn exec_word(text: &str) -> String {
    let escaped = escape_specifiers(text).replace('$', "$$");
    let plain = !escaped.is_empty()
        && escaped
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain { escaped } else { quote(&escaped) }
}

/// A double-quoted systemd string with C escapes (a newline cannot end the
/// line, a quote cannot end the word).
pub(super) fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // `\xNN` is a byte: a C1 control (U+0080…U+009F) needs `\uNNNN`.
            c if c.is_control() && c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value on a line of its own (`Description=`, paths): no newline may end
/// the directive early, and specifiers are escaped.
pub(super) fn escape_line(text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| {
            if c.is_control() && c != INSTANCE_MARK {
                ' '
            } else {
                c
            }
        })
        .collect();
    // The instance mark (ours) becomes `%i`; any other `%` is literal.
    escape_specifiers(&text)
}

/// Whether a line of `text` ends with an odd run of `\\` (systemd then
/// joins the next line to it).
pub(super) fn continues_a_line(text: &str) -> bool {
    text.lines()
        .any(|line| line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_escaped_for_systemd() {
        assert_eq!(exec_word("/usr/bin/python3"), "/usr/bin/python3");
        assert_eq!(exec_word("a b"), "\"a b\"");
        assert_eq!(exec_word("100%"), "100%%");
        assert_eq!(exec_word("$HOME"), "\"$$HOME\"");
        assert_eq!(exec_word("x\ny"), "\"x\\ny\"");
        assert_eq!(exec_word(""), "\"\"");
        assert_eq!(exec_word("x\u{85}y\u{7f}"), "\"x\\u0085y\\x7f\"");
        assert_eq!(
            exec_word(&marked(&Template::parse("--slot={instance}").unwrap())),
            "--slot=%i"
        );
    }

    #[test]
    fn offsets_go_through_the_shell() {
        let word = shell_word(&Template::parse("--port={instance+9000}").unwrap());
        assert_eq!(escape_specifiers(&word), "'--port='$((9000+%i))");
        assert_eq!(shell_word(&Template::literal("it's")), "'it'\\''s'");
    }

    #[test]
    fn durations_are_plain_seconds() {
        assert_eq!(timespan(Duration::from_secs(31 * 86400)), "2678400s");
        assert_eq!(timespan(Duration::from_secs(90)), "90s");
        assert_eq!(timespan(Duration::from_millis(1500)), "1500ms");
        assert_eq!(timespan(Duration::from_micros(2500)), "2500us");
        assert_eq!(timespan(Duration::ZERO), "0s");
    }

    #[test]
    fn a_line_cannot_be_broken() {
        assert!(continues_a_line("A=1\nB=x\\\nC=2\n"));
        assert!(!continues_a_line("A=x\\\\\nB=\\y\n"));
        assert_eq!(escape_line("a\nb=c"), "a b=c");
        assert_eq!(escape_line("50%"), "50%%");
    }
}
