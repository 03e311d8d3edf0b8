//! `supervise top` in a real terminal: tmux (on a private server, killed by
//! a guard even when a test fails) runs a shell, the shell runs `top`
//! against a real supervisor, and the tests read the pane with
//! `capture-pane`, polling it — never sleeping a fixed time — until it shows
//! what they wait for or a bound passes.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Supervised, binary, runtime_dir};

/// How long the pane may take to show what a test waits for.
const PANE_WAIT: Duration = Duration::from_secs(15);
/// How often the pane is read meanwhile.
const PANE_POLL: Duration = Duration::from_millis(100);

const THREE_SLEEPERS: &str = "
apps:
  work:
    command: sleep 100000
    instances: 3
    ready: none
";

/// A tmux server of this test's own, with one session `top` running `sh`.
struct Tmux {
    server: String,
}

impl Tmux {
    fn start(width: u16, height: u16) -> Tmux {
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let server = format!(
            "supervise-top-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::SeqCst)
        );
        let tmux = Tmux { server };
        let started = tmux.run(&[
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "-s",
            "top",
            "env PS1='shell$ ' sh",
        ]);
        assert!(
            started.status.success(),
            "tmux did not start (is it installed? .ci/run installs it): {}",
            String::from_utf8_lossy(&started.stderr)
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.server)
            .args(args)
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux runs")
    }

    /// Type `keys` (tmux key names: `Enter`, `Escape`, or text).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success(), "send-keys {keys:?}");
    }

    /// Type `text` literally.
    fn type_text(&self, text: &str) {
        assert!(
            self.run(&["send-keys", "-t", "top", "-l", text])
                .status
                .success()
        );
    }

    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    fn alternate_screen(&self) -> bool {
        let shown = self.run(&["display", "-p", "-t", "top", "#{alternate_on}"]);
        String::from_utf8_lossy(&shown.stdout).trim() == "1"
    }

    fn resize(&self, width: u16, height: u16) {
        let resized = self.run(&[
            "resize-window",
            "-t",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
        ]);
        assert!(
            resized.status.success(),
            "{}",
            String::from_utf8_lossy(&resized.stderr)
        );
    }

    /// The pane, once `condition` holds for it (polled, bounded).
    fn wait_for(&self, what: &str, condition: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PANE_WAIT;
        loop {
            let pane = self.pane();
            if condition(&pane) {
                return pane;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the pane shows:\n{pane}"
            );
            std::thread::sleep(PANE_POLL);
        }
    }

    /// Start `supervise top` for the supervisor in `dir` from the shell,
    /// which says how it exited.
    fn start_top(&self, dir: &Path, args: &str) {
        let command = format!(
            "cd '{}' && XDG_RUNTIME_DIR='{}' '{}' top --file ecosystem.yaml {args}; echo \"top exited $?\"",
            dir.display(),
            runtime_dir(dir).display(),
            binary().display()
        );
        self.type_text(&command);
        self.keys(&["Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The row of instance `target` in the pane, split into its cells (the
/// table puts two spaces between columns).
fn row(pane: &str, target: &str) -> Option<Vec<String>> {
    let line = pane
        .lines()
        .find(|l| l.split_whitespace().next() == Some(target))?;
    Some(
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect(),
    )
}

/// Wait until the table shows instances 0..3 of `work`; their pids.
fn three_rows(tmux: &Tmux) -> String {
    tmux.wait_for("a row for each instance", |pane| {
        (0..3).all(|slot| {
            row(pane, &format!("work.{slot}"))
                .is_some_and(|cells| cells.get(2).is_some_and(|state| state == "ready"))
        })
    })
}

fn pid_of(pane: &str, target: &str) -> i32 {
    row(pane, target)
        .and_then(|cells| cells.get(1).and_then(|pid| pid.parse().ok()))
        .unwrap_or_else(|| panic!("no pid for {target} in\n{pane}"))
}

#[test]
fn shows_every_instance_and_a_restart_then_q_gives_the_terminal_back() {
    let mut supervisor = Supervised::start(THREE_SLEEPERS);
    supervisor.wait_count("spawned", "work", 3);
    let tmux = Tmux::start(160, 50);
    tmux.start_top(supervisor.dir.path(), "");
    three_rows(&tmux);
    assert!(tmux.alternate_screen(), "top draws on the alternate screen");
    let pane = tmux.wait_for("the first instance's logs", |pane| {
        pane.contains("logs work.0")
    });
    let mut pids = supervisor.running_pids("work");
    pids.sort();
    let mut shown: Vec<i32> = (0..3)
        .map(|s| pid_of(&pane, &format!("work.{s}")))
        .collect();
    shown.sort();
    assert_eq!(shown, pids, "{pane}");

    let victim = pid_of(&pane, "work.1");
    // SAFETY: killing a worker of our own supervisor, by its pid.
    unsafe {
        libc::kill(victim, libc::SIGKILL);
    }
    let pane = tmux.wait_for("work.1 restarted once", |pane| {
        row(pane, "work.1").is_some_and(|cells| {
            cells.get(6).map(String::as_str) == Some("1")
                && cells.get(1) != Some(&victim.to_string())
        })
    });
    assert_eq!(
        row(&pane, "work.0")
            .and_then(|c| c.get(6).cloned())
            .as_deref(),
        Some("0")
    );

    tmux.keys(&["q"]);
    let pane = tmux.wait_for("the shell again", |pane| pane.contains("top exited 0"));
    assert!(
        !tmux.alternate_screen(),
        "the alternate screen is left:\n{pane}"
    );
    assert!(pane.contains("shell$"), "{pane}");
}

#[test]
fn survives_a_tiny_pane_mashed_keys_an_empty_filter_and_a_dead_supervisor() {
    let mut supervisor = Supervised::start(THREE_SLEEPERS);
    supervisor.wait_count("spawned", "work", 3);
    let tmux = Tmux::start(160, 50);
    tmux.start_top(supervisor.dir.path(), "");
    three_rows(&tmux);

    tmux.resize(20, 5);
    tmux.wait_for("the table in 20×5", |pane| {
        pane.lines().count() <= 5 && pane.lines().any(|l| l.starts_with("work.0"))
    });
    tmux.resize(160, 50);
    three_rows(&tmux);

    // Keys mashed: moves, sorts, scope, a prompt cancelled, unknown keys.
    for keys in [
        &[
            "j", "j", "j", "j", "k", "G", "g", "PageDown", "PageUp", "End", "Home",
        ][..],
        &[
            ">", ">", ">", "<", "i", "i", "a", "a", "x", "n", "r", "Escape", "F5", "Tab",
        ][..],
        &["z", "Z", "!", "Enter", "BSpace", "Left", "Right"][..],
    ] {
        tmux.keys(keys);
    }
    tmux.wait_for("a prompt cancelled", |pane| pane.contains(": cancelled"));
    three_rows(&tmux);

    tmux.keys(&["/"]);
    tmux.type_text("nothing-is-called-this");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the empty filter said", |pane| {
        pane.contains("no instance of 3 matches the filter `nothing-is-called-this`")
    });
    tmux.keys(&["r"]);
    tmux.wait_for("nothing to restart", |pane| {
        pane.contains("nothing selected to restart")
    });
    tmux.keys(&["Escape"]);
    three_rows(&tmux);

    supervisor.signal(libc::SIGKILL);
    supervisor.wait_exit(crate::common::WAIT);
    tmux.wait_for("the supervisor gone", |pane| {
        pane.contains("supervisor unreachable, retrying: no supervisor is running")
    });
    // The last rows stay on the screen.
    three_rows(&tmux);
    tmux.keys(&["q"]);
    tmux.wait_for("the shell again", |pane| pane.contains("top exited 0"));
    assert!(!tmux.alternate_screen());
}

#[test]
fn a_command_from_a_key_is_confirmed_and_its_reply_shown() {
    let mut supervisor = Supervised::start(THREE_SLEEPERS);
    supervisor.wait_count("spawned", "work", 3);
    let tmux = Tmux::start(160, 50);
    tmux.start_top(supervisor.dir.path(), "");
    three_rows(&tmux);
    tmux.keys(&["x"]);
    tmux.wait_for("the prompt", |pane| pane.contains("stop work.0? (y/n)"));
    tmux.keys(&["y"]);
    tmux.wait_for("work.0 held", |pane| {
        row(pane, "work.0").is_some_and(|cells| cells.iter().any(|c| c.contains("held")))
    });
    supervisor.wait_for("work.0 stopped", |e| {
        e["event"] == "stopped" && e["app"] == "work" && e["slot"] == 0
    });
    tmux.keys(&["s"]);
    tmux.wait_for("the prompt", |pane| pane.contains("start work.0? (y/n)"));
    tmux.keys(&["y"]);
    tmux.wait_for("work.0 running again", |pane| {
        row(pane, "work.0").is_some_and(|cells| cells.get(2).map(String::as_str) == Some("ready"))
    });
    tmux.keys(&["q"]);
    tmux.wait_for("the shell again", |pane| pane.contains("top exited 0"));
}

#[test]
fn a_stopped_supervisor_does_not_hold_up_the_keys() {
    let mut supervisor = Supervised::start(THREE_SLEEPERS);
    supervisor.wait_count("spawned", "work", 3);
    let tmux = Tmux::start(160, 50);
    tmux.start_top(supervisor.dir.path(), "");
    three_rows(&tmux);
    supervisor.signal(libc::SIGSTOP);
    tmux.wait_for("the silence said", |pane| {
        pane.contains("the supervisor has not answered for")
    });
    // Keys are still read and shown while a request waits.
    tmux.keys(&["/"]);
    tmux.type_text("wo");
    tmux.wait_for("the filter typed", |pane| pane.contains("filter: wo_"));
    let asked = Instant::now();
    tmux.keys(&["Enter", "q"]);
    tmux.wait_for("the shell again", |pane| pane.contains("top exited 0"));
    // Well within the 10 s a request may wait.
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert!(!tmux.alternate_screen());
    supervisor.signal(libc::SIGCONT);
}

#[test]
fn a_supervisor_started_again_is_found_again() {
    let mut supervisor = Supervised::start(THREE_SLEEPERS);
    supervisor.wait_count("spawned", "work", 3);
    let tmux = Tmux::start(160, 50);
    tmux.start_top(supervisor.dir.path(), "");
    let before = three_rows(&tmux);
    let old_pid = pid_of(&before, "work.0");
    supervisor.signal(libc::SIGTERM);
    supervisor.wait_exit(crate::common::WAIT);
    tmux.wait_for("the supervisor unreachable", |pane| {
        pane.contains("supervisor unreachable, retrying")
    });
    let mut again = Supervised::start_again(supervisor, &[]);
    again.wait_count("spawned", "work", 3);
    tmux.wait_for("the new supervisor's instances", |pane| {
        !pane.contains("unreachable")
            && row(pane, "work.0")
                .is_some_and(|cells| cells.get(1).is_some_and(|pid| *pid != old_pid.to_string()))
    });
    tmux.keys(&["q"]);
    tmux.wait_for("the shell again", |pane| pane.contains("top exited 0"));
}

/// The pid of the `top` running under the pane's shell.
fn top_pid(tmux: &Tmux) -> i32 {
    let shell: i32 = String::from_utf8_lossy(
        &tmux
            .run(&["display", "-p", "-t", "top", "#{pane_pid}"])
            .stdout,
    )
    .trim()
    .parse()
    .expect("the shell's pid");
    crate::common::children_of(shell)
        .into_iter()
        .find(|pid| crate::common::has_argument(*pid, b"top"))
        .expect("top runs under the shell")
}

/// A supervisor of three sleepers, `top` on it in a 160×50 pane showing
/// them, and `top`'s pid.
fn top_over_three_sleepers() -> (Supervised, Tmux, i32) {
    let mut supervisor = Supervised::start(THREE_SLEEPERS);
    supervisor.wait_count("spawned", "work", 3);
    let tmux = Tmux::start(160, 50);
    tmux.start_top(supervisor.dir.path(), "");
    three_rows(&tmux);
    let top = top_pid(&tmux);
    (supervisor, tmux, top)
}

/// Found by a hostile round: a terminal that goes away (here the tmux
/// server) made crossterm's wait for a key a busy loop, and `top` spun on
/// at a quarter of a core, an orphan, for ever.
#[test]
fn a_terminal_that_goes_away_ends_top() {
    let (_supervisor, tmux, top) = top_over_three_sleepers();
    let _ = tmux.run(&["kill-server"]);
    assert!(
        crate::common::eventually(Duration::from_secs(5), || crate::common::is_gone(top)),
        "top (pid {top}) outlived its terminal"
    );
}

#[test]
fn sigterm_quits_and_gives_the_terminal_back() {
    let (_supervisor, tmux, top) = top_over_three_sleepers();
    // SAFETY: signalling the `top` this test started, by its pid.
    unsafe {
        libc::kill(top, libc::SIGTERM);
    }
    tmux.wait_for("the shell again", |pane| pane.contains("top exited 0"));
    assert!(!tmux.alternate_screen());
}

#[test]
fn with_no_supervisor_it_says_so_and_exits_3() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("ecosystem.yaml"), THREE_SLEEPERS).expect("written");
    let tmux = Tmux::start(160, 20);
    tmux.start_top(dir.path(), "");
    let pane = tmux.wait_for("the error", |pane| pane.contains("top exited 3"));
    assert!(
        pane.contains("no supervisor is running for this file"),
        "{pane}"
    );
    assert!(!tmux.alternate_screen());
}

#[test]
fn without_a_terminal_it_refuses_with_exit_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = Command::new(binary())
        .args(["top", "--socket"])
        .arg(dir.path().join("none.sock"))
        .output()
        .expect("top runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs a terminal"), "{stderr}");
    assert!(stderr.contains("supervise status"), "{stderr}");
    assert!(output.stdout.is_empty());
}
