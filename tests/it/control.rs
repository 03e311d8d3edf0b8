//! The control socket and the everyday commands, against a real supervisor.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;
use supervise::client::REPLY_TIMEOUT;
use supervise::control::server::MAX_FOLLOWERS;

const APPS: &str = r#"# two apps
apps:
  web:
    command: [sh, -c, "echo hello from $SUPERVISE_INSTANCE; exec sleep 1000"]
    instances: 2
    ready: none
  api:
    command: [sleep, "1000"]
    ready: {delay: 100ms}
"#;

/// Run `supervise ARGS` as a client of the supervisor `s`.
fn client(s: &Supervised, args: &[&str]) -> Output {
    std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(args)
        .output()
        .expect("the client runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn socket(s: &Supervised) -> PathBuf {
    let dir = runtime_dir(s.dir.path()).join("supervise");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the control socket exists")
}

fn status(s: &Supervised) -> Value {
    let output = client(s, &["status", "--json"]);
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn pids_of(status: &Value, app: &str) -> Vec<i64> {
    status["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == app)
        .map(|a| {
            a["workers"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|w| w["pid"].as_i64())
                .collect()
        })
        .unwrap_or_default()
}

fn started(yaml: &str) -> Supervised {
    let mut s = Supervised::start(yaml);
    s.wait_count("ready", "web", 2);
    s.wait_count("ready", "api", 1);
    s
}

#[test]
fn status_matches_the_processes() {
    let s = started(APPS);
    let json = status(&s);
    assert_eq!(json["version"], 1);
    for app in ["web", "api"] {
        let pids = pids_of(&json, app);
        assert_eq!(pids.len(), if app == "web" { 2 } else { 1 });
        for pid in pids {
            let stat =
                std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the pid is alive");
            assert!(stat.contains("(sleep)"), "{stat}");
            assert_eq!(
                crate::common::process_state(pid as i32).map(|c| c != 'Z'),
                Some(true)
            );
        }
    }
    let worker = &json["apps"][0]["workers"][0];
    assert_eq!(worker["state"], "ready");
    assert!(worker["rss_bytes"].as_u64().unwrap() > 0);
    let table = stdout(&client(&s, &["ls"]));
    assert!(table.contains("app") && table.contains("memory"), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.trim_start().starts_with("web"))
            .count(),
        2,
        "{table}"
    );
}

#[test]
fn reload_replaces_every_pid_of_the_app_and_no_other() {
    let s = started(APPS);
    let before = status(&s);
    let output = client(&s, &["reload", "web"]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).contains("web: 2/2 replaced"),
        "{}",
        stdout(&output)
    );
    let after = status(&s);
    let (old, new) = (pids_of(&before, "web"), pids_of(&after, "web"));
    assert_eq!(new.len(), 2);
    assert!(new.iter().all(|p| !old.contains(p)), "{old:?} → {new:?}");
    assert_eq!(pids_of(&before, "api"), pids_of(&after, "api"));
}

#[test]
fn a_halted_reload_exits_4() {
    let mut s = started(APPS);
    // Make replacements fail: the file changes the command, the rollout halts,
    // and a reload of the halted app halts again.
    let broken = APPS.replace(
        "command: [sh, -c, \"echo hello from $SUPERVISE_INSTANCE; exec sleep 1000\"]",
        "command: [sh, -c, \"exit 1\"]\n    ready: {delay: 500ms}",
    );
    let temp = s.path(".tmp");
    std::fs::write(&temp, broken.replace("    ready: none\n  api", "  api")).unwrap();
    std::fs::rename(&temp, s.path("ecosystem.yaml")).unwrap();
    s.wait_for("the halt", |e| e["event"] == "rollout_halted");
    let output = client(&s, &["reload", "web"]);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
}

#[test]
fn restart_stop_and_start() {
    let mut s = started(APPS);
    let before = pids_of(&status(&s), "web");
    assert!(client(&s, &["restart", "web.1"]).status.success());
    s.wait_count("spawned", "web", 3);
    let after = pids_of(&status(&s), "web");
    assert!(
        after.contains(&before[0]) && !after.contains(&before[1]),
        "{before:?} → {after:?}"
    );

    assert!(client(&s, &["stop", "web"]).status.success());
    s.wait_count("stopped", "web", 3);
    let held = status(&s);
    let states: Vec<&str> = held["apps"][0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["stopped (held)", "stopped (held)"]);
    assert!(stdout(&client(&s, &["status"])).contains("stopped (held)"));
    // Held, not waiting out a backoff (status says so): nothing was or is
    // to be started, by anything the supervisor did before the barrier.
    s.barrier();
    assert_eq!(s.count("spawned", "web"), 3, "held\n{}", s.dump());

    assert!(client(&s, &["start", "web.0"]).status.success());
    s.wait_count("spawned", "web", 4);
    assert_eq!(pids_of(&status(&s), "web").len(), 1);
    let unknown = client(&s, &["stop", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no app `nope`"));
}

#[test]
fn scale_edits_only_that_value_and_waits() {
    let s = started(APPS);
    let original = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    let output = client(&s, &["scale", "web", "+1"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "web: instances 2 → 3 (edited ecosystem.yaml)\n"
    );
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert_eq!(edited, original.replace("instances: 2", "instances: 3"));
    assert_eq!(pids_of(&status(&s), "web").len(), 3);

    let output = client(&s, &["scale", "web", "-1"]);
    assert!(
        output.status.success(),
        "`scale web -1` is a count, not a flag: {output:?}"
    );
    let output = client(&s, &["scale", "api", "2"]);
    assert!(output.status.success(), "{output:?}");
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(
        edited.contains("  api:\n    instances: 2\n    command: [sleep"),
        "{edited}"
    );
}

/// Ten `scale +1` at once: each edit holds the file's lock from its read to
/// its write, so none is lost, each says the step it made, and each waits
/// for what the file says in the end.
#[test]
fn concurrent_scales_lose_no_update() {
    const SCALES: u32 = 10;
    let s = started(APPS);
    let children: Vec<Child> = (0..SCALES)
        .map(|_| {
            std::process::Command::new(binary())
                .current_dir(s.dir.path())
                .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
                .args([
                    "scale",
                    "-f",
                    "ecosystem.yaml",
                    "web",
                    "+1",
                    "--timeout",
                    "20s",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the client runs")
        })
        .collect();
    let mut steps: Vec<String> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("the client ends");
            assert!(output.status.success(), "{output:?}");
            let said = stdout(&output);
            let step = said.lines().find(|l| l.contains('→'));
            step.unwrap_or_else(|| panic!("no step in {said:?}"))
                .to_string()
        })
        .collect();
    steps.sort();
    let mut expected: Vec<String> = (2..2 + SCALES)
        .map(|n| format!("web: instances {n} → {} (edited ecosystem.yaml)", n + 1))
        .collect();
    expected.sort();
    assert_eq!(steps, expected);
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(edited.contains("    instances: 12\n"), "{edited}");
    assert_eq!(pids_of(&status(&s), "web").len(), 12);
}

/// A hard link is the same file: a scale through one name is written in
/// place (a rename would give that name a new inode, which the supervisor,
/// watching the other name, would never see), and the names stay linked.
#[test]
fn scale_through_a_hard_link_keeps_the_link_and_is_applied() {
    use std::os::unix::fs::MetadataExt;
    let s = started(APPS);
    std::fs::hard_link(s.path("ecosystem.yaml"), s.path("hard.yaml")).unwrap();
    let inode = std::fs::metadata(s.path("ecosystem.yaml")).unwrap().ino();
    let output = client(&s, &["-f", "hard.yaml", "scale", "web", "3"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "web: instances 2 → 3 (edited hard.yaml)\n");
    for name in ["ecosystem.yaml", "hard.yaml"] {
        let metadata = std::fs::metadata(s.path(name)).unwrap();
        assert_eq!((metadata.ino(), metadata.nlink()), (inode, 2), "{name}");
    }
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(edited.contains("    instances: 3\n"), "{edited}");
    assert_eq!(pids_of(&status(&s), "web").len(), 3);
}

/// A file bind-mounted over another (Docker's `-v file:file`, a Kubernetes
/// `subPath`) cannot be renamed over (EBUSY): it is written in place, and
/// the supervisor of the file mounted applies it.
#[test]
#[ignore = "needs root"]
fn scale_through_a_bind_mounted_file_writes_it_in_place() {
    require_root();
    /// Unmounts what the test mounted, and only that, when it ends.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let s = started(APPS);
    let mounted = s.path("mounted.yaml");
    std::fs::write(&mounted, "").unwrap();
    let mount = std::process::Command::new("mount")
        .arg("--bind")
        .arg(s.path("ecosystem.yaml"))
        .arg(&mounted)
        .status()
        .expect("mount runs");
    assert!(mount.success(), "mount --bind failed");
    let _unmount = Unmount(mounted.clone());
    let output = client(&s, &["-f", "mounted.yaml", "scale", "web", "3"]);
    assert!(output.status.success(), "{output:?}");
    let edited = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    assert!(edited.contains("    instances: 3\n"), "{edited}");
    assert_eq!(std::fs::read_to_string(&mounted).unwrap(), edited);
    assert_eq!(pids_of(&status(&s), "web").len(), 3);
    let left: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn scale_refuses_an_invalid_file_and_leaves_it_untouched() {
    let s = started(APPS);
    let broken = format!("{APPS}    instnces: 3\n");
    std::fs::write(s.path("ecosystem.yaml"), &broken).unwrap();
    let output = client(&s, &["scale", "web", "5"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid"));
    assert_eq!(
        std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap(),
        broken
    );
}

#[test]
fn logs_return_what_the_workers_printed() {
    let s = started(APPS);
    let output = client(&s, &["logs", "web", "-n", "5"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    assert!(
        text.contains("web.0 | hello from 0") && text.contains("web.1 | hello from 1"),
        "{text}"
    );
    let one = stdout(&client(&s, &["logs", "web.1"]));
    assert_eq!(one, "web.1 | hello from 1\n");
}

#[test]
fn without_a_supervisor_clients_exit_3_naming_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), APPS).unwrap();
    let output = std::process::Command::new(binary())
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(dir.path()))
        .args(["status"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no supervisor is running") && stderr.contains(".sock"),
        "{stderr}"
    );
}

fn raw_request(socket: &Path, bytes: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

#[test]
fn hostile_clients_do_not_disturb_the_supervisor() {
    let s = started(APPS);
    let socket = socket(&s);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A client that connects and says nothing, held open meanwhile.
    let silent = UnixStream::connect(&socket).unwrap();
    assert!(raw_request(&socket, &vec![b'x'; 1 << 20]).contains("\"ok\":false"));
    assert!(raw_request(&socket, b"{\"v\":1,\"cmd\":\"sta").contains("malformed"));
    assert!(
        raw_request(&socket, b"{\"v\":9,\"cmd\":\"status\"}\n")
            .contains("unsupported protocol version 9")
    );
    assert!(raw_request(&socket, b"{\"v\":1,\"cmd\":\"explode\"}\n").contains("bad request"));
    let good = raw_request(&socket, b"{\"v\":1,\"cmd\":\"status\"}\n");
    assert!(good.contains("\"ok\":true"), "{good}");
    drop(silent);
    assert!(client(&s, &["status"]).status.success());
}

#[test]
#[ignore = "needs root"]
fn the_peer_uid_is_checked_even_when_permissions_are_loosened() {
    require_root();
    let mut s = started(APPS);
    let socket = socket(&s);
    // Loosen what the 0700 directory and the 0600 socket would refuse anyway.
    for dir in [
        runtime_dir(s.dir.path()),
        runtime_dir(s.dir.path()).join("supervise"),
        s.dir.path().to_path_buf(),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let output = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={}", nobody.uid),
            &format!("--regid={}", nobody.gid),
            "--clear-groups",
            binary().to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
            "status",
        ])
        .output()
        .expect("setpriv runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    let refused = s.wait_for("the refusal in the log", |e| {
        e["event"] == "control_refused"
    });
    assert_eq!(refused["uid"], nobody.uid.as_raw());
}

#[test]
fn a_stale_socket_from_a_killed_supervisor_is_replaced() {
    let mut first = started(APPS);
    let stale = socket(&first);
    first.signal(libc::SIGKILL);
    let _ = first.wait_exit(WAIT);
    assert!(stale.exists(), "SIGKILL left the socket file behind");
    // A new supervisor on the same file and runtime directory takes over.
    let dir = first.dir.path().to_path_buf();
    let mut second = std::process::Command::new(binary())
        .current_dir(&dir)
        .env("XDG_RUNTIME_DIR", runtime_dir(&dir))
        .args(["--log-format", "json", "-f", "ecosystem.yaml"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let answered = eventually(WAIT, || {
        std::process::Command::new(binary())
            .current_dir(&dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(&dir))
            .args(["status", "--json"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    // SAFETY: signalling the supervisor this test started.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    let _ = second.wait();
    assert!(
        answered,
        "the new supervisor answers on the replaced socket"
    );
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn idle_clients_are_capped_and_the_rest_wait() {
    let s = started(APPS);
    let socket = socket(&s);
    let before = fd_count(s.pid());
    let held: Vec<UnixStream> = (0..150)
        .filter_map(|_| UnixStream::connect(&socket).ok())
        .collect();
    assert!(eventually(WAIT, || fd_count(s.pid()) >= before + 64));
    let during = fd_count(s.pid());
    assert!(
        during <= before + 64 + 2,
        "{during} fds with 150 idle clients ({before} before): at most 64 are served at once"
    );
    drop(held);
    assert!(eventually(WAIT, || client(&s, &["status"])
        .status
        .success()));
}

#[test]
fn out_of_fds_the_control_socket_backs_off_and_recovers() {
    // A hard limit of 40 fds: a hundred idle clients exhaust them.
    let mut s = Supervised::start_wrapped(APPS, &["prlimit", "--nofile=40:40", "--"], &[], |_| {});
    s.wait_count("ready", "web", 2);
    s.wait_count("ready", "api", 1);
    let socket = socket(&s);
    let held: Vec<UnixStream> = (0..100)
        .filter_map(|_| UnixStream::connect(&socket).ok())
        .collect();
    s.wait_for("the accept failure", |e| {
        e["event"] == "control_accept_failed"
    });
    // It pauses between attempts instead of spinning on EMFILE: over a
    // second, well under 0.2 s of CPU (the busy loop it replaced took all).
    let ticks = cpu_ticks(s.pid());
    let window = std::time::Instant::now();
    while window.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let used = cpu_ticks(s.pid()) - ticks;
    assert!(used < 20, "{used} ticks of CPU in 1 s while out of fds");
    drop(held);
    assert!(
        eventually(Duration::from_secs(15), || client(&s, &["status"])
            .status
            .success()),
        "a client is served once fds are free again\n{}",
        s.dump()
    );
}

/// One app that prints a line when it starts, then nothing.
const QUIET: &str = r#"apps:
  quiet:
    command: [sh, -c, "echo up; exec sleep 1000"]
    ready: none
"#;

/// A supervisor running [`QUIET`], its one line printed and its start
/// settled: the exec-status pipe of the spawn is closed once the instance is
/// ready (by exec), and the line may come before that, so a count of the
/// supervisor's fds taken after the line alone may hold that pipe.
fn quiet() -> Supervised {
    let mut s = Supervised::start(QUIET);
    s.wait_line("up");
    s.wait_event("ready", "quiet");
    s
}

/// `count` clients running `supervise logs quiet -n 1 -f`. Returns them once
/// `served` of them have printed the tail line — so the supervisor is past
/// the tail and follows for each of those — or fails the test after [`WAIT`].
fn followers(s: &Supervised, count: usize, served: usize) -> Vec<Child> {
    let (printed, lines) = channel();
    let mut children = Vec::new();
    for _ in 0..count {
        let mut child = std::process::Command::new(binary())
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .args(["logs", "quiet", "-n", "1", "-f"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a follower starts");
        let stdout = child.stdout.take().expect("stdout");
        let printed = printed.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut reader = BufReader::new(stdout);
            if reader.read_line(&mut line).is_ok() {
                let _ = printed.send(line);
            }
            // Reading on: a follow whose reader leaves ends.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        children.push(child);
    }
    let deadline = Instant::now() + WAIT;
    for _ in 0..served {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left);
        assert_eq!(
            line.as_deref().ok(),
            Some("quiet.0 | up\n"),
            "every follower served prints the tail"
        );
    }
    children
}

/// SIGTERM each of `children` (by pid) and reap them.
fn terminate(children: Vec<Child>) {
    for child in &children {
        // SAFETY: signalling a client this test started, by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    for mut child in children {
        let _ = child.wait();
    }
}

/// How long a command may take while every follower's place is taken: far
/// under the client's [`REPLY_TIMEOUT`], which is what a command waiting
/// behind the followers ran into.
const ANSWERED_AT_ONCE: Duration = Duration::from_secs(3);

/// Run the command `args` and check that it succeeds within [`ANSWERED_AT_ONCE`].
fn answers_at_once(s: &Supervised, args: &[&str]) {
    let asked = Instant::now();
    let output = client(s, args);
    let took = asked.elapsed();
    assert!(output.status.success(), "{args:?}: {output:?}");
    assert!(
        took < ANSWERED_AT_ONCE,
        "{args:?} took {took:?} with every follower's place taken"
    );
}

#[test]
fn followers_have_their_own_places_and_every_command_still_answers() {
    let s = quiet();
    let baseline = fd_count(s.pid());
    let children = followers(&s, MAX_FOLLOWERS, MAX_FOLLOWERS);
    let during = fd_count(s.pid());
    assert!(
        during >= baseline + MAX_FOLLOWERS,
        "{during} fds with {MAX_FOLLOWERS} followers served ({baseline} before)"
    );
    // Every command answers at once, though each follower holds its place.
    answers_at_once(&s, &["status", "--json"]);
    answers_at_once(&s, &["reload", "quiet"]);
    answers_at_once(&s, &["stop", "quiet"]);
    answers_at_once(&s, &["start", "quiet"]);
    // One follower more is refused at once, saying why, not left waiting.
    let asked = Instant::now();
    let refused = client(&s, &["logs", "quiet", "-f"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        stderr.contains(&format!("{MAX_FOLLOWERS} `logs -f` followers")),
        "{stderr}"
    );
    assert!(asked.elapsed() < ANSWERED_AT_ONCE, "{:?}", asked.elapsed());
    // The app prints nothing more: only the closed connections can tell the
    // supervisor that the followers are gone, and free their places.
    terminate(children);
    assert!(
        eventually(WAIT, || fd_count(s.pid()) <= baseline),
        "{} fds after the followers left ({baseline} before)\n{}",
        fd_count(s.pid()),
        s.dump()
    );
    let again = followers(&s, MAX_FOLLOWERS, MAX_FOLLOWERS);
    answers_at_once(&s, &["status"]);
    terminate(again);
}

/// More followers than the supervisor takes, all at once, while it is
/// told to stop an app and then to exit: the commands answer, the
/// supervisor exits, and every follower ends — served ones quietly when
/// the supervisor is gone, the others refused, saying why.
#[test]
fn a_follower_storm_while_stopping_locks_nothing_out_and_every_follower_ends() {
    const STORM: usize = MAX_FOLLOWERS * 2 + 10;
    let mut s = quiet();
    let storm: Vec<Child> = (0..STORM)
        .map(|_| {
            std::process::Command::new(binary())
                .current_dir(s.dir.path())
                .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
                .args(["logs", "quiet", "-f"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a follower starts")
        })
        .collect();
    answers_at_once(&s, &["stop", "quiet"]);
    answers_at_once(&s, &["status"]);
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
    let deadline = Instant::now() + WAIT;
    let mut refused = 0;
    for mut child in storm {
        let ended = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                _ if Instant::now() >= deadline => break None,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let Some(status) = ended else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a follower went on after the supervisor exited");
        };
        let mut stderr = String::new();
        let _ = child
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut stderr));
        match status.code() {
            Some(0) => {}
            Some(1) if stderr.contains("`logs -f` followers") => refused += 1,
            // Came after the supervisor had gone: there is none to follow.
            Some(3) if stderr.contains("no supervisor is running") => {}
            _ => panic!("a follower ended with {status:?}: {stderr}"),
        }
    }
    println!("{refused} of {STORM} followers were refused");
}

#[test]
fn a_stopped_supervisor_times_out_clients_but_not_followers() {
    let s = quiet();
    let mut follower = followers(&s, 1, 1);
    s.signal(libc::SIGSTOP);
    let asked = Instant::now();
    let output = client(&s, &["status"]);
    let took = asked.elapsed();
    // Still following, though the supervisor has said nothing for longer
    // than the timeout: a follow waits as long as the stream is open.
    let still_following = follower[0].try_wait().is_ok_and(|exit| exit.is_none());
    s.signal(libc::SIGCONT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert!(
        stderr.contains("did not answer") && stderr.contains(".sock"),
        "names the socket and says why: {stderr}"
    );
    assert!(
        took >= REPLY_TIMEOUT && took < REPLY_TIMEOUT + Duration::from_secs(5),
        "gave up after {took:?} (the timeout is {REPLY_TIMEOUT:?})"
    );
    assert!(still_following, "the follower gave up");
    terminate(follower);
    assert!(client(&s, &["status"]).status.success());
}

/// `status --json` into a stdout that cannot take it (a full disk, a closed
/// stdout) is an error that says so; a follow ends, quietly, once its reader
/// leaves, though the app it follows prints nothing more.
#[test]
fn a_status_stdout_cannot_take_is_an_error_and_a_follow_ends_when_its_reader_leaves() {
    let s = quiet();
    let client_of = |args: &[&str]| {
        let mut command = std::process::Command::new(binary());
        command
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .args(args);
        command
    };
    crate::common::assert_unwritable_stdout_is_an_error(|| client_of(&["status", "--json"]));

    let mut follower = client_of(&["logs", "quiet", "-n", "1", "-f"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a follower starts");
    let mut line = String::new();
    BufReader::new(follower.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the tail line");
    assert_eq!(line, "quiet.0 | up\n");
    // The reader is dropped: the pipe has no reader any more.
    let ended = eventually(WAIT, || {
        follower.try_wait().is_ok_and(|exit| exit.is_some())
    });
    if !ended {
        terminate(vec![follower]);
        panic!("the follow went on after its reader left");
    }
    let output = follower.wait_with_output().expect("reaped");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    assert!(client(&s, &["status"]).status.success());
}

#[test]
fn help_and_version_stdout_cannot_take_are_an_error_too() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["status", "--help"],
        &["help"],
    ] {
        crate::common::assert_unwritable_stdout_is_an_error(|| {
            let mut command = std::process::Command::new(binary());
            command.args(args);
            command
        });
    }
    let mut help = std::process::Command::new(binary());
    help.arg("--help");
    let (code, stderr, first) = crate::common::into_head(help);
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "{first}");
    assert!(first.contains("supervisor"), "{first}");
}
