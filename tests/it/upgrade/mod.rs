//! `supervise upgrade`: the supervisor re-executes a new binary and keeps
//! every worker, socket, pipe and timer. Real supervisors, real workers,
//! real requests; the new binary is this build's own (or a wrapper that
//! stretches the exec window, or one that refuses).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

mod keeps;
mod leftovers;
mod probe;
mod window;

/// The most requests one client loop sends (a bound, whatever happens).
const MAX_REQUESTS: usize = 50_000;

/// `examples/hello`, as shipped but for its port (any free one) and its
/// instance count.
fn hello(instances: u32) -> Supervised {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let yaml = std::fs::read_to_string(example.join("ecosystem.yaml")).expect("the example");
    assert!(yaml.contains("127.0.0.1:8080") && yaml.contains("instances: 2"));
    let yaml = yaml
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("instances: 2", &format!("instances: {instances}"));
    Supervised::start_with(&yaml, &[], |dir| {
        std::fs::copy(example.join("server.py"), dir.join("server.py")).expect("copy");
    })
}

/// One GET on a new connection: whether it was answered 200.
fn get(port: u16) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.starts_with("HTTP/1.1 200"))
}

#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    refused: usize,
    failed: usize,
}

/// Requests one after another until `stop` (bounded by [`MAX_REQUESTS`]),
/// counting the answered ones in `answered` as they come.
fn client_loop(
    port: u16,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let mut tally = Tally::default();
        for _ in 0..MAX_REQUESTS {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match get(port) {
                Ok(true) => {
                    tally.ok += 1;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                Ok(false) => tally.failed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => tally.refused += 1,
                Err(_) => tally.failed += 1,
            }
        }
        tally
    })
}

/// `supervise upgrade ARGS`; its output, asserting it succeeded.
fn upgrade(s: &Supervised, args: &[&str]) -> String {
    let mut all = vec!["upgrade"];
    all.extend(args);
    let output = run_client(s, &all);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "upgrade failed: {text}\n{}",
        s.dump()
    );
    text
}

/// `supervise upgrade --binary BINARY` in a thread of its own (the test acts
/// while it waits): its output once it ends.
fn upgrade_in_background(
    s: &Supervised,
    binary_path: &str,
) -> std::thread::JoinHandle<std::process::Output> {
    let dir = s.dir.path().to_path_buf();
    let binary_path = binary_path.to_string();
    std::thread::spawn(move || {
        Command::new(binary())
            .current_dir(&dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(&dir))
            .args([
                "upgrade",
                "--binary",
                &binary_path,
                "--file",
                "ecosystem.yaml",
            ])
            .output()
            .expect("the client runs")
    })
}

/// `supervise upgrade ARGS`, which must be refused: its stderr.
fn refused_upgrade(s: &Supervised, args: &[&str]) -> String {
    let mut all = vec!["upgrade"];
    all.extend(args);
    let output = run_client(s, &all);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "the upgrade was not refused: {stderr}"
    );
    assert!(stderr.contains("upgrade refused"), "{stderr}");
    stderr
}

/// Each worker of `app`: `(slot, pid, restarts, uptime)`.
fn workers(status: &Value, app: &str) -> Vec<(u64, i64, u64, f64)> {
    app_status(status, app)["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            (
                w["slot"].as_u64().unwrap_or(0),
                w["pid"].as_i64().unwrap_or(0),
                w["restarts"].as_u64().unwrap_or(0),
                w["uptime_s"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

/// The fds a process has open.
fn open_fds(pid: i64) -> BTreeSet<i32> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// `web`, `instances` sleepers ready at exec, as written to the file.
fn sleepers_yaml(instances: u32) -> String {
    format!(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: {instances}\n    ready: none\n"
    )
}

/// A supervisor of [`sleepers_yaml`], every one ready: with their workers.
fn sleepers(instances: u32) -> (Supervised, Vec<(u64, i64, u64, f64)>) {
    sleepers_under(&[], instances)
}

/// How the tests that time a probe run the supervisor: with a probe deadline
/// of 30 s, far past what they assert (a probe judged as it exits, not at
/// its deadline), whatever the load of the machine.
const PATIENT_PROBE: &[&str] = &["env", "SUPERVISE_PROBE_TIMEOUT=30s"];

/// [`sleepers`], the supervisor run under `wrapper`.
fn sleepers_under(wrapper: &[&str], instances: u32) -> (Supervised, Vec<(u64, i64, u64, f64)>) {
    let mut s = Supervised::start_wrapped(&sleepers_yaml(instances), wrapper, &[], |_| {});
    s.wait_count("ready", "web", instances as usize);
    let workers = workers(&status_json(&s), "web");
    (s, workers)
}

/// An executable script at `dir/name`.
fn script(dir: &Path, name: &str, body: &str, mode: u32) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path.display().to_string()
}

/// A process that sleeps with the mark that follows among its arguments
/// (`sleep` would take the mark for an interval and exit at once).
const SLEEPER: &str = "perl -e 'sleep 1000'";
