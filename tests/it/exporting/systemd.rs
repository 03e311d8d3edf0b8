//! systemd units: every example's pass `systemd-analyze verify`; restart
//! steps and backoff for the systemd version; `examples/hello` served from
//! fd 3 under socket activation; absolute programs; huge values.

use super::*;

#[test]
fn every_example_exports_to_units_that_systemd_analyze_verify_accepts() {
    let settings = snapshot_settings();
    for example in examples() {
        let file = format!("examples/{example}/ecosystem.yaml");
        let dir = tempfile::tempdir().expect("temp dir");
        let units = dir.path().join("units");
        let run = supervise(
            root(),
            &[
                "export",
                "systemd",
                "-f",
                &file,
                "--dir",
                units.to_str().expect("UTF-8 path"),
            ],
        );
        assert_eq!(run.code, 0, "{file}:\n{}", run.stderr);
        // Every program the examples run exists here (python3, node, sh and
        // the examples' scripts), so verify has nothing to say about a
        // missing executable either: it has nothing to say at all.
        let complaints = systemd_verify(&units);
        assert!(
            complaints.is_empty(),
            "systemd-analyze verify on {file}:\n{}\n{}",
            complaints.join("\n"),
            supervise(root(), &["export", "systemd", "-f", &file]).stdout
        );
        let printed = supervise(root(), &["export", "systemd", "-f", &file]);
        assert_eq!(printed.code, 0);
        settings.bind(|| {
            insta::assert_snapshot!(format!("systemd_{example}"), printed.stdout);
        });
    }
}

#[test]
fn restart_steps_are_written_only_for_a_systemd_that_has_them() {
    let file = "examples/crashy/ecosystem.yaml";
    let old = supervise(root(), &["export", "systemd", "-f", file]);
    assert!(!old.stdout.contains("RestartSteps="), "{}", old.stdout);
    assert!(
        old.stderr.contains(
            "ecosystem.yaml:10:5: warning: systemd 252 has no RestartSteps= (254 and later): \
             the backoff doubles from 200ms to 5s, but every restart waits RestartSec=200ms"
        ),
        "{}",
        old.stderr
    );
    // 200ms doubling to 5s: 5s/200ms = 25 = 2^4.6, so 5 steps, of 1.90.
    let new = supervise(
        root(),
        &["export", "systemd", "-f", file, "--systemd-version", "254"],
    );
    assert!(new.stdout.contains("RestartSec=200ms\n"), "{}", new.stdout);
    assert!(new.stdout.contains("RestartSteps=5\n"), "{}", new.stdout);
    assert!(
        new.stdout.contains("RestartMaxDelaySec=5s\n"),
        "{}",
        new.stdout
    );
    assert!(
        !new.stderr.contains("has no RestartSteps"),
        "{}",
        new.stderr
    );
    assert!(
        new.stderr.contains(
            "note: crashy: the backoff doubles from 200ms to 5s, in whole steps under systemd: \
             RestartSteps=5 makes each delay 1.90 times the last, not 2"
        ),
        "{}",
        new.stderr
    );
    // And the 252 here would not know the keys: that is why 252 is the default.
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path().join("units");
    let run = supervise(
        root(),
        &[
            "export",
            "systemd",
            "-f",
            file,
            "--systemd-version",
            "254",
            "--dir",
            units.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0);
    let lines = systemd_verify(&units);
    if systemd_version() < 254 {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("Unknown key 'RestartSteps'")),
            "{lines:?}"
        );
    }
}

/// The default backoff is exponential too: under systemd 252 its loss is
/// said for every app that restarts (at the app's name when `backoff` is
/// not written), and under 254 whole steps that change the factor are noted.
#[test]
fn an_exponential_backoff_lost_to_systemd_252_is_said_even_when_it_is_the_default() {
    let yaml = "apps:\n  plain:\n    command: sleep 77\n  once:\n    command: sleep 77\n    restart: never\n\
                \x20 flat:\n    command: sleep 77\n    backoff: {initial: 1s, factor: 1}\n\
                \x20 exact:\n    command: sleep 77\n    backoff: {initial: 100ms, max: 25600ms}\n";
    let old = export_yaml("systemd", yaml, &[], &[]);
    assert_eq!(old.code, 0, "{}", old.stderr);
    let lost: Vec<&str> = old
        .stderr
        .lines()
        .filter(|l| l.contains("the exponential part is lost"))
        .collect();
    assert_eq!(
        lost,
        [
            "ecosystem.yaml:2:3: warning: systemd 252 has no RestartSteps= (254 and later): \
             by default the backoff doubles from 100ms to 30s, but every restart waits \
             RestartSec=100ms; the exponential part is lost",
            "ecosystem.yaml:12:5: warning: systemd 252 has no RestartSteps= (254 and later): \
             the backoff doubles from 100ms to 25s600ms, but every restart waits \
             RestartSec=100ms; the exponential part is lost",
        ],
        "{}",
        old.stderr
    );
    assert!(
        old.stderr.contains("--systemd-version 254 to keep it"),
        "{}",
        old.stderr
    );
    let strict = export_yaml("systemd", yaml, &[], &["--strict"]);
    assert_eq!(strict.code, 1, "a lost backoff fails --strict");

    let new = export_yaml(
        "systemd",
        yaml,
        &[],
        &["--systemd-version", "254", "--strict"],
    );
    assert_eq!(new.code, 0, "{}", new.stderr);
    assert!(
        new.stderr.contains(
            "note: plain: the backoff doubles from 100ms to 30s, in whole steps under systemd: \
             RestartSteps=8 makes each delay 2.04 times the last, not 2"
        ),
        "{}",
        new.stderr
    );
    // 25.6s / 100ms = 256 = 2^8: whole steps, the same delays.
    assert!(!new.stderr.contains("note: exact"), "{}", new.stderr);
    assert!(
        unit_text(&new.stdout, "exact@.service")
            .contains("RestartSteps=8\nRestartMaxDelaySec=25600ms\n"),
        "{}",
        new.stdout
    );
}

fn systemd_version() -> u32 {
    let output = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .expect("systemd-analyze");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What systemd does to a unit's words for instance `slot`: `%i` is the
/// instance, `%%` a percent sign; quotes are taken off (the words we write
/// for hello are plain or fully quoted, with no escapes inside).
fn instance_text(text: &str, slot: &str) -> String {
    text.replace("%i", slot).replace("%%", "%")
}

fn unquote(text: &str) -> String {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
        .to_string()
}

/// Kills the process (by pid) when dropped, even when the test fails.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn hello_serves_from_fd_3_under_systemd_socket_activation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    std::fs::copy(
        root().join("examples/hello/server.py"),
        dir.path().join("server.py"),
    )
    .expect("copy server.py");
    let example =
        std::fs::read_to_string(root().join("examples/hello/ecosystem.yaml")).expect("hello");
    let yaml = example.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    assert_ne!(yaml, example, "the example listens on 127.0.0.1:8080");
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let socket = std::fs::read_to_string(units.join("hello.socket")).expect("hello.socket");
    let service = std::fs::read_to_string(units.join("hello@.service")).expect("hello@.service");
    let [address] = directives(&socket, "ListenStream")[..] else {
        panic!("one ListenStream=:\n{socket}");
    };
    let [name] = directives(&socket, "FileDescriptorName")[..] else {
        panic!("one FileDescriptorName=:\n{socket}");
    };
    assert_eq!(directives(&service, "Sockets"), ["hello.socket"]);
    let [exec] = directives(&service, "ExecStart")[..] else {
        panic!("one ExecStart=:\n{service}");
    };
    let argv: Vec<String> = exec
        .split(' ')
        .map(|word| unquote(&instance_text(word, "0")))
        .collect();
    let [cwd] = directives(&service, "WorkingDirectory")[..] else {
        panic!("one WorkingDirectory=:\n{service}");
    };
    let env: Vec<String> = directives(&service, "Environment")
        .into_iter()
        .map(|value| unquote(&instance_text(value, "0")))
        .collect();
    assert!(env.contains(&format!("PORT={port}")), "{env:?}");

    // The exported socket, name, environment and command, given to
    // systemd's own socket passing. It binds the port itself, so a worker
    // that tried to bind PORT instead would fail: an answer proves fd 3.
    let mut command = Command::new("systemd-socket-activate");
    command
        .arg("-l")
        .arg(address)
        .arg(format!("--fdname={name}"));
    for assignment in &env {
        command.arg("-E").arg(assignment);
    }
    let child = command
        .args(&argv)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("systemd-socket-activate starts (install systemd, as .ci/run does)");
    let mut child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut stream) => {
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                break answer;
            }
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("nothing listens on {port}: {error}"),
        }
    };
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    assert!(
        answer.contains("hello from instance 0"),
        "GREETING and SUPERVISE_INSTANCE came through: {answer}"
    );
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut err = String::new();
    if let Some(mut stderr) = child.0.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    assert!(
        err.contains(&format!("Listening on 127.0.0.1:{port} as 3")),
        "systemd-socket-activate passed the socket as fd 3: {err}"
    );
}

#[test]
fn systemd_gets_an_absolute_program_even_when_this_machine_lacks_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: ./bin/run --x\n    cwd: app\n",
    )
    .unwrap();
    let run = supervise(dir.path(), &["export", "systemd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let folder = dir.path().canonicalize().unwrap();
    assert!(
        run.stdout
            .contains(&format!("ExecStart={}/app/bin/run --x\n", folder.display())),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("does not exist"),
        "check's own warning is shown too: {}",
        run.stderr
    );
}

#[test]
fn a_program_is_absolute_with_an_instance_in_it_or_a_prefix_character_first() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  relinst:\n    command: ./bin/run{instance} x\n    instances: 2\n\
         \x20 q:\n    command: [\"-zzznotfound\", \"1000\"]\n\
         \x20 shelled:\n    command: ./bin/run{instance+1}\n",
    )
    .unwrap();
    let run = supervise(dir.path(), &["export", "systemd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let folder = dir.path().canonicalize().unwrap();
    let folder = folder.display();
    assert_eq!(
        directives(&run.stdout, "ExecStart"),
        [
            format!("{folder}/bin/run%i x"),
            format!("{folder}/-zzznotfound 1000"),
            // sh runs it from WorkingDirectory=.
            "/bin/sh -c \"exec './bin/run'$$((1+%i))\"".to_string(),
        ],
        "{}",
        run.stdout
    );
}

#[test]
fn huge_durations_and_counts_are_values_systemd_takes() {
    let yaml = "apps:\n  ev:\n    command: /bin/true\n    schedule: {every: 31days}\n\
                \x20 kt:\n    command: /bin/sleep 100\n    kill_timeout: 400days\n    max_restarts: {count: 4294967295, within: 45days}\n    max_memory: 18446744073709551615\n";
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}\n{printed}");
    // 31 days, not humantime's `1month 13h 30m 36s` (a month of 30.44 days).
    assert_eq!(directives(&printed, "OnActiveSec"), ["2678400s"]);
    assert_eq!(directives(&printed, "TimeoutStopSec")[1], "34560000s");
    assert_eq!(directives(&printed, "StartLimitIntervalSec")[1], "3888000s");
    assert_eq!(directives(&printed, "StartLimitBurst"), ["4294967295"]);
    assert_eq!(directives(&printed, "MemoryMax"), ["infinity"]);
}
