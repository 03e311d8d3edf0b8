//! Talking to an upgrade's probe: before the running supervisor execs a new
//! binary, it runs `BINARY --upgrade-probe` with the state it would hand
//! over on stdin (see the supervise crate's `upgrade` for what the answer
//! must be). Here is the conversation: the state fed in, stdout and stderr
//! captured, bounded, until they end — and when what was captured is
//! enough to judge.
//!
//! The probe is our child, started as an `exec` liveness check is (a
//! process group and a cgroup or a token of its own: see
//! [`crate::transient::Transient`]), so that nothing it leaves behind outlives
//! it; the loop reaps it with every other child. Its answer is its first
//! line: once it exited and that line came, it is judged, whoever still
//! holds its stdout.

use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use model::process::{Exit, StartError};

/// The argument that makes our binary answer a probe.
pub const PROBE_ARG: &str = "--upgrade-probe";
/// How long the new binary may take to read the state and answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// What is kept of the probe's stdout and of its stderr (the rest is read
/// and counted).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// What of each is echoed when the probe is refused (the log line and the
/// client's error), with the count of the bytes left out.
pub const MAX_ECHO_BYTES: usize = 512;
/// How much of an output one read takes.
const READ_BYTES: usize = 4096;

/// What the probe said so far on one of its outputs.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    /// The first [`MAX_ANSWER_BYTES`].
    pub kept: Vec<u8>,
    /// How many bytes it wrote there (read so far).
    pub total: usize,
    /// The output ended (or cannot be read).
    pub ended: bool,
}

impl Captured {
    pub fn take(&mut self, bytes: &[u8]) {
        let room = MAX_ANSWER_BYTES.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.total = self.total.saturating_add(bytes.len());
    }

    /// What it said, trimmed and bounded, for a message.
    pub fn echo(&self) -> String {
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
pub struct ProbeOutput {
    pub stdout: Captured,
    pub stderr: Captured,
}

impl ProbeOutput {
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
    pub fn enough(&self, ended: ProbeEnd) -> bool {
        match ended {
            ProbeEnd::CouldNotRun(_) => true,
            ProbeEnd::Exited(Exit::Code(0)) => self.answer().is_some(),
            ProbeEnd::Exited(_) => self.stderr.ended,
        }
    }

    /// What [`ProbeOutput::enough`] looks at, to wake the loop when it changes.
    fn progress(&self) -> (bool, bool) {
        (self.answer().is_some(), self.stderr.ended)
    }
}

/// How the probe's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEnd {
    /// The binary could not be run (its exec failed).
    CouldNotRun(StartError),
    Exited(Exit),
}

/// A probe that runs.
pub struct RunningProbe {
    pub pid: i32,
    /// What it said so far; changed when it may be enough to judge it.
    pub said: watch::Receiver<ProbeOutput>,
}

/// Converse with a probe started with these pipes: feed it `state`, and
/// hear its stdout and stderr until they end or the receiver is dropped.
pub(crate) fn converse(
    pid: i32,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    state: Vec<u8>,
) -> RunningProbe {
    let (tell, said) = watch::channel(ProbeOutput::default());
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
    RunningProbe { pid, said }
}

/// Read one of the probe's outputs to its end into `tell`'s [`Captured`]
/// that `pick` chooses, telling the receiver when that may settle it.
async fn listen(
    fd: OwnedFd,
    tell: &watch::Sender<ProbeOutput>,
    pick: fn(&mut ProbeOutput) -> &mut Captured,
) {
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
pub fn echo(bytes: &[u8], total: usize) -> String {
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

#[cfg(test)]
mod tests {
    use std::io::{self, Read, Write};

    use super::*;

    const EXIT_0: ProbeEnd = ProbeEnd::Exited(Exit::Code(0));
    const GOOD: &str = r#"{"ok":true,"version":"9.9.9","format":1}"#;

    /// What a probe's leftover does: hold its stdout open after the
    /// answer. The answer is heard all the same, and the state was fed.
    #[tokio::test]
    async fn the_first_line_is_heard_while_its_pipe_stays_open() {
        let (mut stdin, fed) = io::pipe().unwrap();
        let (stdout, mut out) = io::pipe().unwrap();
        let (stderr, _err) = io::pipe().unwrap();
        let mut running = converse(
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
        assert_eq!(said.answer(), Some(GOOD.as_bytes()));
        let mut state = Vec::new();
        stdin.read_to_end(&mut state).unwrap();
        assert_eq!(state, b"state");
    }
}
