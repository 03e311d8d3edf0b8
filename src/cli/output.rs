//! A command's product on standard output, and what a failed write means.
//!
//! A write that fails — a full disk (`supervise import x > ecosystem.yaml`),
//! a closed stdout (`>&-`) — is an error of the command: it says so and
//! exits [`exit::INVALID`], so that a script never takes an empty file for
//! the product. A reader that went away (`| head`) is not: the command ends
//! quietly, as Unix tools do (see [`Unwritten::exit_code`]).

use std::io::{self, IsTerminal, Write};
use std::os::fd::FromRawFd;
use std::process::ExitCode;

use super::exit;

/// Standard output did not take the whole product.
#[derive(Debug)]
pub(crate) struct Unwritten(io::Error);

impl From<io::Error> for Unwritten {
    fn from(error: io::Error) -> Unwritten {
        Unwritten(error)
    }
}

impl Unwritten {
    /// Whether the reader of stdout went away (EPIPE: `| head`, `| grep -q`).
    pub(crate) fn reader_left(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }

    /// 0 when the reader left: it stopped reading because it had what it
    /// wanted, so the command did its part — and under `set -o pipefail` a
    /// failure here (or 141, a death by SIGPIPE) would fail every
    /// `supervise logs | head` while the reader's own exit status already
    /// says whether the pipeline worked. Any other failure is 1, as for an
    /// output file that cannot be written.
    pub(crate) fn exit_code(&self) -> u8 {
        if self.reader_left() {
            exit::OK
        } else {
            exit::INVALID
        }
    }

    /// What went wrong, for `error: …`; `None` when the reader left, which
    /// deserves no word.
    pub(crate) fn message(&self) -> Option<String> {
        if self.reader_left() {
            return None;
        }
        // The system's words (strerror) without Rust's ` (os error 28)`.
        let text = self.0.to_string();
        let reason = match self.0.raw_os_error() {
            Some(code) => text
                .strip_suffix(&format!(" (os error {code})"))
                .unwrap_or(&text),
            None => &text,
        };
        Some(format!("cannot write to standard output: {reason}"))
    }

    /// Say what went wrong on stderr (nothing when the reader left), and
    /// the exit code.
    pub(crate) fn report(&self) -> ExitCode {
        if let Some(message) = self.message() {
            super::err(&format!("error: {message}\n"));
        }
        ExitCode::from(self.exit_code())
    }
}

/// Write `bytes` to stdout, all of them, now.
///
/// Through a descriptor of our own: [`std::io::Stdout`] buffers (a failure
/// of the last flush, at exit, would go unseen) and takes a write to a
/// closed descriptor (EBADF) for a success. (A stdout the caller closed is
/// held read-only from the start, see `main.rs`: EBADF here.)
pub(crate) fn write(bytes: &[u8]) -> Result<(), Unwritten> {
    // SAFETY: fd 1 is open for the whole life of the process (held even
    // when the caller closed it, see `main.rs`), and `ManuallyDrop` never
    // closes it: a borrowed view, without a `dup` per write.
    let mut stdout =
        std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(libc::STDOUT_FILENO) });
    stdout.write_all(bytes)?;
    Ok(())
}

/// What clap says instead of running a command. Help and version are a
/// product on stdout: through [`write`](fn@write) when stdout is not a terminal, so
/// a failed write is said as for any product (clap ignores it). On a
/// terminal (which a full disk cannot be), and for a usage error, clap
/// says it in its own way and exits (2 for a usage error).
pub fn clap_said(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let shown = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    if shown && !io::stdout().is_terminal() {
        return match write(error.render().to_string().as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(unwritten) => unwritten.report(),
        };
    }
    error.exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_the_system_reason_and_exits_1_except_for_a_reader_that_left() {
        let full = Unwritten::from(io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(
            full.message().as_deref(),
            Some("cannot write to standard output: No space left on device")
        );
        assert_eq!(full.exit_code(), exit::INVALID);
        let closed = Unwritten::from(io::Error::from_raw_os_error(libc::EBADF));
        assert_eq!(
            closed.message().as_deref(),
            Some("cannot write to standard output: Bad file descriptor")
        );
        let left = Unwritten::from(io::Error::from_raw_os_error(libc::EPIPE));
        assert!(left.reader_left());
        assert_eq!(left.message(), None);
        assert_eq!(left.exit_code(), exit::OK);
    }
}
