//! The control socket itself: owner-only (the peer's uid checked), hostile
//! and idle clients harmless and capped, a back-off when out of fds, a stale
//! socket replaced, and clients told (exit 3) when no supervisor runs.

use super::*;

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

#[test]
fn idle_clients_are_capped_and_the_rest_wait() {
    let s = started(APPS);
    let socket = socket(&s);
    let before = held_fds(s.pid());
    let held: Vec<UnixStream> = (0..150)
        .filter_map(|_| UnixStream::connect(&socket).ok())
        .collect();
    assert!(eventually(WAIT, || held_fds(s.pid()) >= before + 64));
    let during = held_fds(s.pid());
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
