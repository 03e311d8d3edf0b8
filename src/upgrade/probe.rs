//! The verdict on an upgrade's probe, and the new binary's side of it.
//!
//! Before the running supervisor execs a new binary, it runs
//! `BINARY --upgrade-probe` with the state it would hand over on stdin (the
//! conversation: `effects::upgrade::probe`). The new binary must read and
//! check all of it and answer one line,
//! `{"ok": true, "version": …, "format": …}`, and exit 0 — within
//! [`PROBE_TIMEOUT`](effects::upgrade::probe::PROBE_TIMEOUT). `format` is the format of the state it read, so it
//! must be the one this image wrote ([`super::FORMAT`]); `version` goes into
//! the log and `status`, so it must be plain ([`MAX_VERSION_BYTES`] printable
//! ASCII characters at most). Anything else (not executable, a crash, an
//! exit 1, another answer, silence) refuses the upgrade with what it said
//! (at most [`MAX_ECHO_BYTES`](effects::upgrade::probe::MAX_ECHO_BYTES) of each output), and the running supervisor
//! is untouched.

use std::io::{self, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use effects::upgrade::probe::{ProbeEnd, ProbeOutput, echo};
use model::process::Exit;

use super::{FORMAT, Handover, MAX_STATE_BYTES, VERSION};

/// The longest version a probe may answer (`1.2.3-rc.1+build.5`, with room).
pub(crate) const MAX_VERSION_BYTES: usize = 64;

/// The answer of a probe that answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct ProbeAnswer {
    pub(crate) ok: bool,
    /// As the new binary said it (checked: printable ASCII, bounded).
    pub(crate) version: String,
    /// The format of the state it read.
    pub(crate) format: u32,
}

/// A version fit for the log: 1 to [`MAX_VERSION_BYTES`] printable ASCII
/// characters.
fn plain_version(version: &str) -> bool {
    (1..=MAX_VERSION_BYTES).contains(&version.len())
        && version.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether the probe answered: it exited 0 after a line that says so, of the
/// format this image wrote, with a plain version.
pub(crate) fn verdict(
    binary: &Path,
    ended: ProbeEnd,
    said: &ProbeOutput,
) -> Result<ProbeAnswer, String> {
    let binary = binary.display();
    let stderr = said.stderr.echo();
    let why = if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    };
    let exit = match ended {
        ProbeEnd::CouldNotRun(error) => return Err(format!("cannot run {binary}: {error}")),
        ProbeEnd::Exited(exit) => exit,
    };
    if exit != Exit::Code(0) {
        return Err(format!("{binary} --upgrade-probe {exit}{why}"));
    }
    let answer = said.answer().unwrap_or_default().trim_ascii();
    let answered = match serde_json::from_slice::<ProbeAnswer>(answer) {
        Ok(answered) if answered.ok => answered,
        _ => {
            return Err(format!(
                "{binary} --upgrade-probe did not answer as a supervise binary does (it printed \"{}\"){why}",
                said.stdout.echo()
            ));
        }
    };
    if answered.format != FORMAT {
        return Err(format!(
            "{binary} --upgrade-probe answered that it read a state of format {}, but this supervisor ({VERSION}) wrote format {FORMAT}",
            answered.format
        ));
    }
    if !plain_version(&answered.version) {
        return Err(format!(
            "{binary} --upgrade-probe answered a version that is not 1 to {MAX_VERSION_BYTES} printable ASCII characters (\"{}\")",
            echo(answered.version.as_bytes(), answered.version.len())
        ));
    }
    Ok(answered)
}

/// The new binary's side: read the state on stdin, check all of it, answer.
pub fn answer() -> ExitCode {
    let mut bytes = Vec::new();
    let read = io::stdin()
        .lock()
        .take(MAX_STATE_BYTES as u64 + 1)
        .read_to_end(&mut bytes);
    let checked = match read {
        Err(error) => Err(format!("cannot read the state: {error}")),
        Ok(_) if bytes.len() > MAX_STATE_BYTES => {
            Err(format!("the state is larger than {MAX_STATE_BYTES} bytes"))
        }
        Ok(_) => <Handover>::decode(&bytes)
            .and_then(|state| state.check())
            .map_err(|e| e.to_string()),
    };
    match checked {
        Ok(()) => {
            let line = serde_json::json!({"ok": true, "version": VERSION, "format": FORMAT});
            let _ = writeln!(io::stdout(), "{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            let _ = writeln!(io::stderr(), "{error}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use effects::upgrade::probe::{Captured, MAX_ANSWER_BYTES, MAX_ECHO_BYTES};
    use model::process::StartError;

    fn heard(text: &str, ended: bool) -> Captured {
        let mut heard = Captured {
            ended,
            ..Captured::default()
        };
        heard.take(text.as_bytes());
        heard
    }

    fn said(stdout: &str, stderr: &str) -> ProbeOutput {
        ProbeOutput {
            stdout: heard(stdout, true),
            stderr: heard(stderr, true),
        }
    }

    const EXIT_0: ProbeEnd = ProbeEnd::Exited(Exit::Code(0));
    const GOOD: &str = r#"{"ok":true,"version":"9.9.9","format":1}"#;

    #[test]
    fn only_an_exit_0_with_the_answer_agrees() {
        let binary = Path::new("/opt/supervise");
        assert_eq!(
            verdict(binary, EXIT_0, &said(GOOD, "")).unwrap().version,
            "9.9.9"
        );
        let crashed = verdict(
            binary,
            ProbeEnd::Exited(Exit::Signal {
                signal: 11,
                core: false,
            }),
            &said(GOOD, ""),
        );
        assert!(
            crashed
                .unwrap_err()
                .contains("/opt/supervise --upgrade-probe")
        );
        let refused = verdict(
            binary,
            ProbeEnd::Exited(Exit::Code(1)),
            &said("", "the state is of format 7"),
        );
        assert!(refused.unwrap_err().contains("the state is of format 7"));
        let other = verdict(binary, EXIT_0, &said("hello\n", "")).unwrap_err();
        assert!(
            other.contains("did not answer as a supervise binary does (it printed \"hello\")"),
            "{other}"
        );
        let no = verdict(
            binary,
            EXIT_0,
            &said(r#"{"ok":false,"version":"1","format":1}"#, ""),
        );
        assert!(no.is_err());
        let unrun = verdict(
            binary,
            ProbeEnd::CouldNotRun(StartError {
                stage: model::process::StartStage::Exec,
                errno: libc::EACCES,
            }),
            &ProbeOutput::default(),
        )
        .unwrap_err();
        assert!(
            unrun.contains("cannot run /opt/supervise: exec: Permission denied"),
            "{unrun}"
        );
    }

    #[test]
    fn the_answer_is_the_first_line_whoever_holds_the_pipe_open() {
        let mut open = ProbeOutput::default();
        open.stdout.take(br#"{"ok":true,"#);
        assert_eq!(open.answer(), None);
        assert!(!open.enough(EXIT_0));
        open.stdout.take(b"\"version\":\"2\",\"format\":1}\nmore\n");
        assert!(open.enough(EXIT_0), "no end of stdout or stderr needed");
        assert_eq!(verdict(Path::new("b"), EXIT_0, &open).unwrap().version, "2");
        // A failure is judged with its stderr, once that ends.
        let failed = ProbeEnd::Exited(Exit::Code(1));
        assert!(!open.enough(failed));
        open.stderr.ended = true;
        assert!(open.enough(failed));
        // A last line without its newline counts once stdout ends.
        let mut unterminated = ProbeOutput::default();
        unterminated.stdout.take(GOOD.as_bytes());
        assert_eq!(unterminated.answer(), None);
        unterminated.stdout.ended = true;
        assert_eq!(unterminated.answer(), Some(GOOD.as_bytes()));
        // Nor can a line longer than what is kept be an answer.
        let mut endless = ProbeOutput::default();
        endless.stdout.take(&[b'x'; MAX_ANSWER_BYTES + 10]);
        assert!(endless.enough(EXIT_0));
        assert_eq!(endless.stdout.total, MAX_ANSWER_BYTES + 10);
    }

    #[test]
    fn an_answer_of_another_format_is_refused() {
        let answer = r#"{"ok":true,"version":"9.9.9","format":99999}"#;
        let refused = verdict(Path::new("/b"), EXIT_0, &said(answer, "")).unwrap_err();
        assert!(
            refused.contains("format 99999") && refused.contains(&format!("wrote format {FORMAT}")),
            "{refused}"
        );
    }

    #[test]
    fn a_version_is_printable_ascii_of_a_bounded_length() {
        let answer = |version: &str| {
            let line = serde_json::json!({"ok": true, "version": version, "format": FORMAT});
            verdict(Path::new("/b"), EXIT_0, &said(&line.to_string(), ""))
        };
        assert!(answer("1.2.3-rc.1+build.5").is_ok());
        assert!(answer(&"9".repeat(MAX_VERSION_BYTES)).is_ok());
        for bad in [
            "1.0\u{202e}evil",
            "1.0\u{200b}",
            "1.0\n",
            "1 0",
            "",
            "é",
            &"9".repeat(MAX_VERSION_BYTES + 1),
        ] {
            let refused = answer(bad).unwrap_err();
            assert!(
                refused.contains("not 1 to 64 printable ASCII characters"),
                "{bad:?}: {refused}"
            );
            assert!(
                !refused.contains('\u{202e}') && !refused.contains('\u{200b}'),
                "{refused}"
            );
        }
    }

    #[test]
    fn what_a_refused_probe_printed_is_echoed_bounded() {
        let flood = "x".repeat(MAX_ANSWER_BYTES + 4000);
        let refused = verdict(
            Path::new("/b"),
            ProbeEnd::Exited(Exit::Code(1)),
            &said("", &flood),
        )
        .unwrap_err();
        assert!(refused.len() < MAX_ECHO_BYTES + 100, "{}", refused.len());
        let left = flood.len() - MAX_ECHO_BYTES;
        assert!(
            refused.ends_with(&format!("… ({left} more bytes)")),
            "{refused}"
        );
        let refused = verdict(Path::new("/b"), EXIT_0, &said(&flood, &flood)).unwrap_err();
        assert!(
            refused.len() < 2 * MAX_ECHO_BYTES + 200,
            "{}",
            refused.len()
        );
        // Never within a character; control and format characters escaped.
        let mut text = "a".repeat(MAX_ECHO_BYTES - 1);
        text.push('é');
        assert_eq!(
            echo(text.as_bytes(), text.len()),
            format!("{}… (2 more bytes)", "a".repeat(MAX_ECHO_BYTES - 1))
        );
        let hostile = "a\u{1b}[2J\u{202e}";
        assert_eq!(
            echo(hostile.as_bytes(), hostile.len()),
            "a\\u{1b}[2J\\u{202e}"
        );
    }
}
