//! Text for a terminal.
//!
//! What a worker prints may hold escape sequences — OSC 0 sets the
//! window's title, OSC 52 writes the clipboard, CSI 2J clears the screen,
//! a carriage return writes over the `web.2 | ` prefix — and a worker that
//! runs as `nobody` must not drive the terminal of the root who reads its
//! output. So wherever a worker's text meets a terminal (the foreground
//! output, `supervise logs`, `status`, `top`), its control characters are
//! shown as `?`: with no ESC, BEL or C1 control left, no sequence can begin,
//! however the worker splits it across writes or lines. Files, pipes and
//! `--log-format json` keep the bytes as printed: they are data, not a
//! screen.

use std::borrow::Cow;

/// What [`printable`] makes of a tab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Kept: a line on a terminal lays out as it would have.
    Keep,
    /// A space: in a cell of a table or a dashboard, a tab would move the
    /// cursor past what is drawn beside it.
    Space,
}

/// `text` safe to put on a terminal: at most `max_chars` characters, with
/// every control character (C0, DEL and C1: an escape sequence a worker
/// printed, a carriage return) shown as `?`, and tabs as `tab` says.
pub fn printable(text: &str, max_chars: usize, tab: Tab) -> String {
    text.chars()
        .take(max_chars)
        .map(|c| match c {
            '\t' if tab == Tab::Keep => '\t',
            '\t' => ' ',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// A line a worker printed, safe to put on a terminal ([`printable`],
/// tabs kept; bytes that are not UTF-8 shown as U+FFFD, for a raw 0x9B is
/// CSI to a terminal that is not in UTF-8). Borrowed when there is nothing
/// to change, as for most lines.
pub(crate) fn printable_bytes(line: &[u8]) -> Cow<'_, [u8]> {
    let plain = line.iter().all(|b| matches!(b, b' '..=b'~' | b'\t'));
    if plain {
        return Cow::Borrowed(line);
    }
    Cow::Owned(printable(&String::from_utf8_lossy(line), usize::MAX, Tab::Keep).into_bytes())
}

/// A JSON line with its DEL and C1 characters written as `\u007f`,
/// `\u0080` … `\u009f`, which JSON allows and does not require (serde
/// escapes only C0): a reader of the JSON gets the same text, and a
/// terminal shown `--log-format json` gets no C1 CSI (U+009B). Only inside
/// a string can such a character be; and in UTF-8, 0xC2 is only ever the
/// first byte of a character, so the pairs found are characters.
pub(crate) fn json_c1_escaped(line: &[u8]) -> Cow<'_, [u8]> {
    let c1 = |pair: &[u8]| pair[0] == 0xC2 && (0x80..=0x9F).contains(&pair[1]);
    if !line.contains(&0x7F) && !line.windows(2).any(c1) {
        return Cow::Borrowed(line);
    }
    let mut escaped = Vec::with_capacity(line.len() + 16);
    let mut rest = line;
    while let Some((&first, after)) = rest.split_first() {
        match (first, after.first()) {
            (0x7F, _) => {
                escaped.extend_from_slice(b"\\u007f");
                rest = after;
            }
            (0xC2, Some(&second)) if (0x80..=0x9F).contains(&second) => {
                escaped.extend_from_slice(format!("\\u{:04x}", second).as_bytes());
                rest = &after[1..];
            }
            _ => {
                escaped.push(first);
                rest = after;
            }
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_become_question_marks_and_tabs_are_kept_or_spaced() {
        let hostile = "a\x1b]0;title\x07b\x1b]52;c;eA==\x1b\\c\x1b[2Jd\u{9b}1me\rf\tg\x7fh";
        assert_eq!(
            printable(hostile, usize::MAX, Tab::Keep),
            "a?]0;title?b?]52;c;eA==?\\c?[2Jd?1me?f\tg?h"
        );
        assert_eq!(printable("a\tb", usize::MAX, Tab::Space), "a b");
        assert_eq!(printable("héllo wörld", 5, Tab::Keep), "héllo");
    }

    #[test]
    fn plain_lines_are_borrowed_and_others_made_printable() {
        assert!(matches!(printable_bytes(b"plain\tline"), Cow::Borrowed(_)));
        assert_eq!(&*printable_bytes(b"\x1b[2J"), b"?[2J");
        assert_eq!(&*printable_bytes("é\u{9b}".as_bytes()), "é?".as_bytes());
        // A raw C1 CSI (not UTF-8) is not passed on.
        assert_eq!(&*printable_bytes(b"\x9b2J"), "\u{fffd}2J".as_bytes());
    }

    #[test]
    fn json_lines_get_c1_and_del_escaped_and_say_the_same() {
        // U+00A0 (no-break space) is not a control: it stays as it is.
        let text = "a\u{9b}2J é\u{7f}\u{85}ü\u{a0}";
        let line = serde_json::json!({ "line": text }).to_string();
        let escaped = json_c1_escaped(line.as_bytes());
        let expected = "{\"line\":\"a\\u009b2J é\\u007f\\u0085ü\u{a0}\"}";
        assert_eq!(std::str::from_utf8(&escaped).unwrap(), expected);
        let back: serde_json::Value = serde_json::from_slice(&escaped).unwrap();
        assert_eq!(back["line"], text);
        let plain = "{\"plain\":\"é\"}";
        assert!(matches!(
            json_c1_escaped(plain.as_bytes()),
            Cow::Borrowed(_)
        ));
    }
}
