//! What workers print: prefixed with app and slot in human output, and a
//! flood of it keeps the supervisor's memory bounded.

use super::*;

#[test]
fn a_flood_of_output_keeps_memory_bounded() {
    /// The bound we promise: the output queue (4 MiB) plus the process itself
    /// (a debug build idles near 6 MiB).
    const RSS_BOUND_KB: u64 = 32 * 1024;
    let mut s = Supervised::start(
        r#"
apps:
  flood:
    command: [sh, -c, "yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -c 50000000; echo done"]
    restart: never
"#,
    );
    // Half a million lines, each an event this test reads as JSON: a loaded
    // machine takes longer than the usual wait.
    let ended = s.next_within(Duration::from_secs(180), |e| {
        e["event"] == "exited" && e["app"] == "flood"
    });
    assert!(ended.is_some(), "the flood did not end\n{}", s.dump());
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    println!("supervisor peak RSS during a 50 MB flood: {peak_kb} kB");
    assert!(peak_kb < RSS_BOUND_KB, "peak RSS {peak_kb} kB");
}

#[test]
fn human_output_prefixes_worker_lines_with_app_and_slot() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: [sh, -c, \"echo hello; echo oops >&2\"]\n    restart: never\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(binary())
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(dir.path()))
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    while !(text.contains("web.0 | hello")
        && text.contains("web.0 | oops")
        && text.contains("not restarted"))
    {
        assert!(Instant::now() < deadline, "{text}");
        let n = stdout.read(&mut buffer).unwrap();
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    // SAFETY: signalling the supervisor this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert!(text.contains(" supervise | web.0 started (pid "), "{text}");
    assert!(!text.contains('\x1b'), "no colour with NO_COLOR");
}
