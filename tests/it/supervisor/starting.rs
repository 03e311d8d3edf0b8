//! Starting up: one supervisor per file, a taken port or an invalid file
//! refused, and what systemd hears (`READY=1` once every start is decided,
//! `STOPPING=1`).

use super::*;

#[test]
fn one_supervisor_per_file() {
    let mut s =
        Supervised::start("apps:\n  one:\n    command: [sleep, \"1000\"]\n    ready: none\n");
    s.wait_event("ready", "one");
    let second = std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .args(["-f", "ecosystem.yaml"])
        .env("XDG_RUNTIME_DIR", s.path("run"))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("already supervised by pid {}", s.pid())),
        "{stderr}"
    );
}

#[test]
fn a_port_in_use_refuses_the_start_naming_app_and_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut s = Supervised::start(&format!(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    listen: 127.0.0.1:{port}\n"
    ));
    let status = s.wait_exit(WAIT);
    assert_eq!(status.code(), Some(1));
    let error = s
        .events
        .iter()
        .find(|e| e["level"] == "ERROR")
        .expect("an error event");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("app web") && message.contains(&format!("127.0.0.1:{port}")),
        "{message}"
    );
    assert_eq!(s.count("spawned", "web"), 0);
}

#[test]
fn an_invalid_file_is_refused_with_the_check_diagnostics() {
    let yaml = "apps:\n  web:\n    command: sleep 1\n    instnces: 2\n";
    let mut s = Supervised::start(yaml);
    assert_eq!(s.wait_exit(WAIT).code(), Some(1));
    let check = std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .args(["check", "-f", "ecosystem.yaml"])
        .output()
        .unwrap();
    let check_out = String::from_utf8_lossy(&check.stdout);
    let diagnostics = check_out.rsplit_once("ecosystem.yaml: invalid").unwrap().0;
    let stderr = s.stderr();
    assert!(
        stderr.starts_with(diagnostics),
        "run:\n{stderr}\ncheck:\n{check_out}"
    );
    assert!(stderr.contains("nothing was started"));
}

/// A supervisor of `yaml` (in a fresh dir) whose `NOTIFY_SOCKET` is a
/// datagram socket the test reads as systemd would, with JSON event lines
/// on its piped stdout; the dir, the socket and the supervisor.
fn under_systemd(
    yaml: &str,
) -> (
    tempfile::TempDir,
    std::os::unix::net::UnixDatagram,
    std::process::Child,
) {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let systemd = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    systemd.set_read_timeout(Some(WAIT)).unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    let child = std::process::Command::new(binary())
        .current_dir(dir.path())
        .args(["--log-format", "json"])
        .env("XDG_RUNTIME_DIR", runtime_dir(dir.path()))
        .env("NOTIFY_SOCKET", &socket_path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    (dir, systemd, child)
}

/// systemd hears `READY=1` from `child`, and `STOPPING=1` once it is sent
/// SIGTERM; its event lines, once it exited 0.
fn ready_then_stopping(
    systemd: &std::os::unix::net::UnixDatagram,
    child: std::process::Child,
) -> Vec<serde_json::Value> {
    let mut message = [0u8; 256];
    let n = systemd.recv(&mut message).expect("READY=1 arrives");
    assert_eq!(&message[..n], b"READY=1");
    // SAFETY: signalling the supervisor this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let n = systemd.recv(&mut message).expect("STOPPING=1 arrives");
    assert_eq!(&message[..n], b"STOPPING=1");
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    output
        .stdout
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect()
}

#[test]
fn systemd_hears_ready_and_stopping() {
    let (_dir, systemd, child) = under_systemd(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: 2\n    ready: {delay: 200ms}\n",
    );
    let events = ready_then_stopping(&systemd, child);
    assert!(
        events.iter().any(|e| e["event"] == "all_ready"),
        "{events:?}"
    );
}

#[test]
fn systemd_hears_ready_once_every_start_is_decided_though_an_app_never_comes_up() {
    // Under Type=notify, no READY=1 would have systemd kill every app at its
    // start timeout, and start them all again, for one broken app.
    let (_dir, systemd, child) = under_systemd(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    ready: {delay: 200ms}\n  typo:\n    command: [no-such-program-here]\n",
    );
    let events = ready_then_stopping(&systemd, child);
    let said = events
        .iter()
        .find(|e| e["event"] == "started_partly")
        .unwrap_or_else(|| panic!("started_partly is said: {events:?}"));
    assert_eq!(said["not_ready"], "[\"typo.0\"]", "{said}");
    assert!(
        !events.iter().any(|e| e["event"] == "all_ready"),
        "{events:?}"
    );
}
