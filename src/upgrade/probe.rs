//! The probe: before the running supervisor execs a new binary, it runs
//! `BINARY --upgrade-probe` with the state it would hand over on stdin. The
//! new binary must read and check all of it and answer one line,
//! `{"ok": true, "version": …, "format": …}`, and exit 0 — within
//! [`PROBE_TIMEOUT`]. `format` is the format of the state it read, so it
//! must be the one this image wrote ([`super::FORMAT`]); `version` goes into
//! the log and `status`, so it must be plain ([`MAX_VERSION_BYTES`] printable
//! ASCII characters at most). Anything else (not executable, a crash, an
//! exit 1, another answer, silence) refuses the upgrade with what it said
//! (at most [`MAX_ECHO_BYTES`] of each output), and the running supervisor
//! is untouched.
//!
//! The probe is our child, started by the effects as an `exec` liveness
//! check is (a process group and a cgroup or a token of its own: see
//! [`crate::effects::groups::Transient`]), so that nothing it leaves behind
//! outlives it; the loop reaps it with every other child. Its answer is its
//! first line: once it exited and that line came, it is judged, whoever
//! still holds its stdout.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::{FORMAT, Handover, MAX_STATE_BYTES, VERSION};
use model::process::{Exit, StartError};

/// The argument that makes our binary answer a probe.
pub const PROBE_ARG: &str = "--upgrade-probe";
/// How long the new binary may take to read the state and answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// What is kept of the probe's stdout and of its stderr (the rest is read
/// and counted).
const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// What of each is echoed when the probe is refused (the log line and the
/// client's error), with the count of the bytes left out.
pub const MAX_ECHO_BYTES: usize = 512;
/// The longest version a probe may answer (`1.2.3-rc.1+build.5`, with room).
pub const MAX_VERSION_BYTES: usize = 64;
/// How much of an output one read takes.
const READ_BYTES: usize = 4096;

/// What the probe said so far on one of its outputs.
#[derive(Debug, Default, Clone)]
pub struct Heard {
    /// The first [`MAX_ANSWER_BYTES`].
    pub kept: Vec<u8>,
    /// How many bytes it wrote there (read so far).
    pub total: usize,
    /// The output ended (or cannot be read).
    pub ended: bool,
}

impl Heard {
    fn take(&mut self, bytes: &[u8]) {
        let room = MAX_ANSWER_BYTES.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.total = self.total.saturating_add(bytes.len());
    }

    /// What it said, trimmed and bounded, for a message.
    fn echo(&self) -> String {
        let start = self.kept.len() - self.kept.trim_ascii_start().len();
        let text = &self.kept[start..];
        // The end is trimmed only when it is the end of what it wrote.
        let (text, total) = if self.total == self.kept.len() {
            let text = text.trim_ascii_end();
            (text, text.len())
        } else {
            (text, self.total - start)
        };
        echo(text, total)
    }
}

/// What the probe said so far.
#[derive(Debug, Default, Clone)]
pub struct Said {
    pub stdout: Heard,
    pub stderr: Heard,
}

impl Said {
    /// Its answer: the first line (without its newline) — or all it said,
    /// once its stdout ended or no answer can be that long.
    pub fn answer(&self) -> Option<&[u8]> {
        let out = &self.stdout;
        match out.kept.iter().position(|b| *b == b'\n') {
            Some(end) => Some(&out.kept[..end]),
            None if out.ended || out.kept.len() >= MAX_ANSWER_BYTES => Some(&out.kept),
            None => None,
        }
    }

    /// Whether a probe that `ended` so has said enough to be judged: its
    /// answer after an exit 0, the end of its stderr (why it failed)
    /// otherwise.
    pub fn enough(&self, ended: Ended) -> bool {
        match ended {
            Ended::CouldNotRun(_) => true,
            Ended::Exited(Exit::Code(0)) => self.answer().is_some(),
            Ended::Exited(_) => self.stderr.ended,
        }
    }

    /// What [`Said::enough`] looks at, to wake the loop when it changes.
    fn progress(&self) -> (bool, bool) {
        (self.answer().is_some(), self.stderr.ended)
    }
}

/// How the probe's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The binary could not be run (its exec failed).
    CouldNotRun(StartError),
    Exited(Exit),
}

/// A probe that runs.
pub struct Running {
    pub pid: i32,
    /// What it said so far; changed when it may be enough to judge it.
    pub said: watch::Receiver<Said>,
}

/// The answer of a probe that agreed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Agreed {
    pub ok: bool,
    /// As the new binary said it (checked: printable ASCII, bounded).
    pub version: String,
    /// The format of the state it read.
    pub format: u32,
}

/// Converse with a probe started with these pipes: feed it `state`, and
/// hear its stdout and stderr until they end or the receiver is dropped.
pub fn hear(pid: i32, stdin: OwnedFd, stdout: OwnedFd, stderr: OwnedFd, state: Vec<u8>) -> Running {
    let (tell, said) = watch::channel(Said::default());
    tokio::spawn(async move {
        let feed = async move {
            if let Ok(mut pipe) = tokio::net::unix::pipe::Sender::from_owned_fd(stdin) {
                // A probe that stops reading early (it refused) closes its
                // end: the write fails, which is not ours to report.
                let _ = pipe.write_all(&state).await;
            }
        };
        let conversation = async {
            tokio::join!(
                feed,
                listen(stdout, &tell, |said| &mut said.stdout),
                listen(stderr, &tell, |said| &mut said.stderr),
            )
        };
        tokio::select! {
            _ = conversation => {}
            () = tell.closed() => {}
        }
    });
    Running { pid, said }
}

/// Read one of the probe's outputs to its end into `tell`'s [`Heard`]
/// that `pick` chooses, telling the receiver when that may settle it.
async fn listen(fd: OwnedFd, tell: &watch::Sender<Said>, pick: fn(&mut Said) -> &mut Heard) {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok();
    let mut chunk = vec![0u8; READ_BYTES];
    loop {
        let read = match pipe.as_mut() {
            Some(pipe) => pipe.read(&mut chunk).await.unwrap_or(0),
            None => 0,
        };
        tell.send_if_modified(|said| {
            let before = said.progress();
            let heard = pick(said);
            match read {
                0 => heard.ended = true,
                n => heard.take(&chunk[..n]),
            }
            said.progress() != before
        });
        if read == 0 {
            return;
        }
    }
}

/// At most [`MAX_ECHO_BYTES`] of `bytes` (of `total` said), every control
/// or format character escaped, and how many bytes were left out.
fn echo(bytes: &[u8], total: usize) -> String {
    let mut cut = bytes.len().min(MAX_ECHO_BYTES);
    // Not within a UTF-8 sequence.
    while cut > 0 && cut < bytes.len() && bytes[cut] & 0xc0 == 0x80 {
        cut -= 1;
    }
    let shown: String = String::from_utf8_lossy(&bytes[..cut])
        .escape_debug()
        .collect();
    match total.saturating_sub(cut) {
        0 => shown,
        left => format!("{shown}… ({left} more bytes)"),
    }
}

/// A version fit for the log: 1 to [`MAX_VERSION_BYTES`] printable ASCII
/// characters.
fn plain_version(version: &str) -> bool {
    (1..=MAX_VERSION_BYTES).contains(&version.len())
        && version.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether the probe agreed: it exited 0 after a line that says so, of the
/// format this image wrote, with a plain version.
pub fn verdict(binary: &Path, ended: Ended, said: &Said) -> Result<Agreed, String> {
    let binary = binary.display();
    let stderr = said.stderr.echo();
    let why = if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    };
    let exit = match ended {
        Ended::CouldNotRun(error) => return Err(format!("cannot run {binary}: {error}")),
        Ended::Exited(exit) => exit,
    };
    if exit != Exit::Code(0) {
        return Err(format!("{binary} --upgrade-probe {exit}{why}"));
    }
    let answer = said.answer().unwrap_or_default().trim_ascii();
    let agreed = match serde_json::from_slice::<Agreed>(answer) {
        Ok(agreed) if agreed.ok => agreed,
        _ => {
            return Err(format!(
                "{binary} --upgrade-probe did not answer as a supervise binary does (it printed \"{}\"){why}",
                said.stdout.echo()
            ));
        }
    };
    if agreed.format != FORMAT {
        return Err(format!(
            "{binary} --upgrade-probe answered that it read a state of format {}, but this supervisor ({VERSION}) wrote format {FORMAT}",
            agreed.format
        ));
    }
    if !plain_version(&agreed.version) {
        return Err(format!(
            "{binary} --upgrade-probe answered a version that is not 1 to {MAX_VERSION_BYTES} printable ASCII characters (\"{}\")",
            echo(agreed.version.as_bytes(), agreed.version.len())
        ));
    }
    Ok(agreed)
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
        Ok(_) => Handover::decode(&bytes).and_then(|state| state.check()),
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

    fn heard(text: &str, ended: bool) -> Heard {
        let mut heard = Heard {
            ended,
            ..Heard::default()
        };
        heard.take(text.as_bytes());
        heard
    }

    fn said(stdout: &str, stderr: &str) -> Said {
        Said {
            stdout: heard(stdout, true),
            stderr: heard(stderr, true),
        }
    }

    const EXIT_0: Ended = Ended::Exited(Exit::Code(0));
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
            Ended::Exited(Exit::Signal {
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
            Ended::Exited(Exit::Code(1)),
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
            Ended::CouldNotRun(StartError {
                stage: model::process::StartStage::Exec,
                errno: libc::EACCES,
            }),
            &Said::default(),
        )
        .unwrap_err();
        assert!(
            unrun.contains("cannot run /opt/supervise: exec: Permission denied"),
            "{unrun}"
        );
    }

    #[test]
    fn the_answer_is_the_first_line_whoever_holds_the_pipe_open() {
        let mut open = Said::default();
        open.stdout.take(br#"{"ok":true,"#);
        assert_eq!(open.answer(), None);
        assert!(!open.enough(EXIT_0));
        open.stdout.take(b"\"version\":\"2\",\"format\":1}\nmore\n");
        assert!(open.enough(EXIT_0), "no end of stdout or stderr needed");
        assert_eq!(verdict(Path::new("b"), EXIT_0, &open).unwrap().version, "2");
        // A failure is judged with its stderr, once that ends.
        let failed = Ended::Exited(Exit::Code(1));
        assert!(!open.enough(failed));
        open.stderr.ended = true;
        assert!(open.enough(failed));
        // A last line without its newline counts once stdout ends.
        let mut unterminated = Said::default();
        unterminated.stdout.take(GOOD.as_bytes());
        assert_eq!(unterminated.answer(), None);
        unterminated.stdout.ended = true;
        assert_eq!(unterminated.answer(), Some(GOOD.as_bytes()));
        // Nor can a line longer than what is kept be an answer.
        let mut endless = Said::default();
        endless.stdout.take(&[b'x'; MAX_ANSWER_BYTES + 10]);
        assert!(endless.enough(EXIT_0));
        assert_eq!(endless.stdout.total, MAX_ANSWER_BYTES + 10);
    }

    /// What a probe's leftover does: hold its stdout open after the
    /// answer. The answer is heard all the same, and the state was fed.
    #[tokio::test]
    async fn the_first_line_is_heard_while_its_pipe_stays_open() {
        let (mut stdin, fed) = io::pipe().unwrap();
        let (stdout, mut out) = io::pipe().unwrap();
        let (stderr, _err) = io::pipe().unwrap();
        let mut running = hear(
            1,
            fed.into(),
            stdout.into(),
            stderr.into(),
            b"state".to_vec(),
        );
        out.write_all(format!("{GOOD}\n").as_bytes()).unwrap();
        let heard = tokio::time::timeout(PROBE_TIMEOUT, async {
            while !running.said.borrow().enough(EXIT_0) {
                running.said.changed().await.unwrap();
            }
        })
        .await;
        assert!(heard.is_ok(), "{:?}", running.said.borrow());
        let said = running.said.borrow().clone();
        assert!(!said.stdout.ended && !said.stderr.ended);
        assert_eq!(
            verdict(Path::new("b"), EXIT_0, &said).unwrap().version,
            "9.9.9"
        );
        let mut state = Vec::new();
        stdin.read_to_end(&mut state).unwrap();
        assert_eq!(state, b"state");
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
            Ended::Exited(Exit::Code(1)),
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
