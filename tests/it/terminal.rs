//! What a worker prints, on the terminal of whoever reads it: escape
//! sequences (OSC 0 sets the window's title, OSC 52 writes the clipboard,
//! CSI 2J clears the screen) must not reach it — a worker running as
//! `nobody` would drive root's terminal — while files, pipes and
//! `--log-format json` keep the bytes as printed. The terminal is a real
//! one, a pty of the test's own (`openpty`): its master side shows every
//! byte written to it.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;

/// A worker that prints escape sequences (the backslashes doubled for
/// YAML, so that `printf` gets them) — the first split across two
/// writes, the UTF-8 form of the C1 CSI split across two more — a carriage
/// return, and a tab, then `END`, on one line.
const HOSTILE: &str = r#"apps:
  hostile:
    command: [sh, -c, "printf 'A\\033]0;pwn'; sleep 0.2; printf 'ed\\007B\\033]52;c;cHduZWQ=\\007C\\033[2JD\\302'; sleep 0.2; printf '\\233E\\rF\\tG END\\n'; exec sleep 1000"]
    ready: none
    log: {file: hostile.log}
"#;

/// The line as the worker printed it (without its newline).
const PRINTED: &[u8] = b"A\x1b]0;pwned\x07B\x1b]52;c;cHduZWQ=\x07C\x1b[2JD\xc2\x9bE\rF\tG END";

/// The line as a terminal is given it: every control character a `?`, the
/// tab kept.
const SHOWN: &str = "A?]0;pwned?B?]52;c;cHduZWQ=?C?[2JD?E?F\tG END";

/// A pty; its slave side, for a child's stdout and stderr.
struct Terminal {
    master: OwnedFd,
    slave: OwnedFd,
}

impl Terminal {
    fn open() -> Terminal {
        let pty = nix::pty::openpty(None, None).expect("a pty");
        Terminal {
            master: pty.master,
            slave: pty.slave,
        }
    }

    /// Run `command` with its stdout and stderr on the terminal (stdin
    /// /dev/null); what it writes there is gathered, from now on, in the
    /// returned buffer, until every holder of the slave side has closed it.
    fn run(self, command: &mut Command) -> (Child, Arc<Mutex<Vec<u8>>>) {
        let stdout = self.slave.try_clone().expect("dup the slave");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(self.slave))
            .spawn()
            .expect("the command starts");
        // The slave is the child's alone now: once it (and what it started)
        // closes it, reading the master fails with EIO, the end.
        let shown = Arc::new(Mutex::new(Vec::new()));
        let gathered = Arc::clone(&shown);
        let mut master = std::fs::File::from(self.master);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = master.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                gathered
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend_from_slice(&buffer[..n]);
            }
        });
        (child, shown)
    }
}

/// What was shown so far, once it holds `marker` (or [`WAIT`] passed).
fn shown_when(shown: &Mutex<Vec<u8>>, marker: &str) -> Vec<u8> {
    let deadline = Instant::now() + WAIT;
    loop {
        let bytes = shown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) || Instant::now() > deadline
        {
            return bytes;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for `child` (at most [`WAIT`], then kill it).
fn ended(mut child: Child) -> ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not end: {:?}", child.wait());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No byte of a control sequence but the line ends (the terminal's `\r\n`)
/// and tabs: no ESC, BEL, C1 control (UTF-8 or raw) or carriage return of
/// the worker's.
fn assert_harmless(shown: &[u8]) {
    let text = String::from_utf8_lossy(shown);
    for line in text.split("\r\n") {
        let bad: Vec<char> = line
            .chars()
            .filter(|c| c.is_control() && *c != '\t')
            .collect();
        assert!(bad.is_empty(), "{bad:?} reached the terminal in {line:?}");
    }
}

/// Run a supervisor of [`HOSTILE`] in a fresh folder, with `args`, on a
/// terminal, until its worker has printed the line; then SIGTERM it. What
/// the terminal was shown, and the folder.
fn foreground_on_a_terminal(args: &[&str]) -> (Vec<u8>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), HOSTILE).unwrap();
    let (supervisor, shown) = Terminal::open().run(
        Command::new(binary())
            .current_dir(dir.path())
            .args(["-f", "ecosystem.yaml"])
            .args(args)
            .env("XDG_RUNTIME_DIR", runtime_dir(dir.path()))
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG"),
    );
    shown_when(&shown, "END");
    // SAFETY: signalling the supervisor this test started, by its pid.
    unsafe { libc::kill(supervisor.id() as i32, libc::SIGTERM) };
    let status = ended(supervisor);
    let all = shown_when(&shown, "exiting");
    assert!(status.success(), "{status:?}");
    (all, dir)
}

#[test]
fn the_foreground_output_on_a_terminal_shows_control_characters_as_question_marks() {
    let (all, dir) = foreground_on_a_terminal(&[]);
    let text = String::from_utf8_lossy(&all);
    assert!(
        text.contains(&format!("hostile.0 | {SHOWN}\r\n")),
        "{text:?}"
    );
    assert_harmless(&all);
    // The file keeps the bytes.
    let file = std::fs::read(dir.path().join("hostile.log")).unwrap();
    assert!(
        file.windows(PRINTED.len()).any(|w| w == PRINTED),
        "{:?}",
        String::from_utf8_lossy(&file)
    );
}

/// `--log-format json` on a terminal: each line a JSON object that says
/// exactly what the worker printed, and not a control character on the
/// terminal (serde escapes C0 controls; DEL and C1 are escaped too, which
/// JSON allows: U+009B is CSI to a terminal).
#[test]
fn json_on_a_terminal_keeps_the_text_and_passes_no_control_character() {
    let (all, _dir) = foreground_on_a_terminal(&["--log-format", "json"]);
    assert_harmless(&all);
    let text = String::from_utf8_lossy(&all);
    let line = text
        .split("\r\n")
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "output")
        .unwrap_or_else(|| panic!("no output event in {text:?}"));
    assert_eq!(line["line"].as_str().unwrap().as_bytes(), PRINTED, "{line}");
}

#[test]
fn logs_on_a_terminal_show_control_characters_as_question_marks_and_a_pipe_gets_the_bytes() {
    let mut s = Supervised::start(HOSTILE);
    let line = s.wait_for("the line", |e| {
        e["event"] == "output" && e["line"].as_str().is_some_and(|l| l.ends_with("END"))
    });
    // `--log-format json` keeps the bytes (escaped as JSON escapes them).
    assert_eq!(line["line"].as_str().unwrap().as_bytes(), PRINTED, "{line}");
    let (client, shown) = Terminal::open().run(
        Command::new(binary())
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .args(["logs", "hostile", "-f"]),
    );
    let text = String::from_utf8_lossy(&shown_when(&shown, "END")).into_owned();
    let _ = client_gone(client);
    assert!(
        text.contains(&format!("hostile.0 | {SHOWN}\r\n")),
        "{text:?}"
    );
    assert_harmless(text.as_bytes());

    // Into a pipe (`supervise logs > file`, `| grep`), the bytes as printed.
    let piped = run_client(&s, &["logs", "hostile"]);
    assert!(piped.status.success(), "{piped:?}");
    let mut expected = b"hostile.0 | ".to_vec();
    expected.extend_from_slice(PRINTED);
    expected.push(b'\n');
    assert_eq!(
        String::from_utf8_lossy(&piped.stdout),
        String::from_utf8_lossy(&expected)
    );
}

/// End a follower (SIGTERM, by pid) and reap it.
fn client_gone(child: Child) -> ExitStatus {
    // SAFETY: signalling a client this test started, by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    ended(child)
}

/// A worker's `STATUS=` text (the notify protocol) is its own words too:
/// the `status` table shows its control characters as `?`; `--json` keeps
/// them.
#[test]
fn a_status_text_with_escapes_is_shown_printable_in_the_status_table() {
    let mut s = Supervised::start(
        r#"apps:
  noisy:
    command: ["python3", "-c", "import os, socket, time\na = os.environ['NOTIFY_SOCKET']\na = '\\0' + a[1:] if a.startswith('@') else a\nsocket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'READY=1\\nSTATUS=up\\x1b]0;pwned\\x07\\x1b[2J\\tnow', a)\ntime.sleep(1000)"]
    ready: notify
"#,
    );
    s.wait_event("ready", "noisy");
    let json = status_json(&s);
    let worker = &app_status(&json, "noisy")["workers"][0];
    assert_eq!(
        worker["status"], "up\x1b]0;pwned\x07\x1b[2J\tnow",
        "{worker}"
    );
    let table = run_client(&s, &["status"]);
    assert!(table.status.success(), "{table:?}");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("up?]0;pwned??[2J now"), "{text}");
    let bad: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(bad.is_empty(), "{bad:?} in {text}");
}
