//! The heavy ones: a crash loop over a minute, and 1,000 instances.

use std::time::{Duration, Instant};

use crate::common::*;

fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn a_crash_loop_costs_almost_nothing_and_follows_the_schedule() {
    const WINDOW: Duration = Duration::from_secs(60);
    let mut s = Supervised::start(
        "apps:\n  crash:\n    command: [sh, -c, \"date +%s%N >> starts; exit 1\"]\n    backoff: {initial: 100ms, max: 30s}\n",
    );
    s.wait_count("spawned", "crash", 1);
    let ticks = 100.0; // USER_HZ on Linux
    let before = cpu_ticks(s.pid());
    let start = Instant::now();
    // Nothing to wait for but time itself: the supervisor is meant to sleep.
    s.until(WINDOW, |_| false);
    let used = (cpu_ticks(s.pid()) - before) as f64 / ticks;
    let percent = used / start.elapsed().as_secs_f64() * 100.0;
    println!(
        "a crash loop for {:?}: supervisor CPU {percent:.3} % of a core",
        start.elapsed()
    );
    assert!(percent < 0.5, "{percent} % CPU");

    let delays: Vec<u64> = s
        .events
        .iter()
        .filter(|e| e["event"] == "exited")
        .filter_map(|e| e["delay_ms"].as_u64())
        .collect();
    assert_eq!(
        &delays[..9],
        [100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600],
        "the logged schedule"
    );
    let starts: Vec<u128> = std::fs::read_to_string(s.path("starts"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    for (i, pair) in starts.windows(2).enumerate() {
        let gap_ms = (pair[1] - pair[0]) as f64 / 1e6;
        assert!(
            gap_ms >= delays[i] as f64,
            "restart {} after {gap_ms}ms, before its {}ms",
            i + 1,
            delays[i]
        );
        assert!(
            gap_ms <= delays[i] as f64 + 1000.0,
            "restart {} after {gap_ms}ms",
            i + 1
        );
    }
}

#[test]
fn a_thousand_instances_start_list_scale_to_zero_and_back() {
    /// The bound we state for 1,000 instances (a debug build).
    const RSS_BOUND_KB: u64 = 64 * 1024;
    let mut s = Supervised::start(
        "apps:\n  many:\n    command: [sleep, \"100000\"]\n    instances: 1000\n    ready: none\n",
    );
    let start = Instant::now();
    s.until(WAIT * 3, |s| s.count("ready", "many") >= 1000);
    assert_eq!(
        s.count("ready", "many"),
        1000,
        "{}",
        s.dump()
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "1,000 instances running {:?} after the start",
        start.elapsed()
    );
    let rss_up = rss_kb(s.pid());

    let status = std::process::Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(["status", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["apps"][0]["workers"].as_array().unwrap().len(), 1000);
    assert_eq!(json["apps"][0]["running"], 1000);

    let dir = s.dir.path().to_path_buf();
    let scale = |count: &str| {
        let output = std::process::Command::new(binary())
            .current_dir(&dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(&dir))
            .args(["scale", "many", count])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    };
    scale("0");
    assert!(s.until(WAIT, |s| s.count("stopped", "many") >= 1000));
    scale("1000");
    assert!(s.until(WAIT * 3, |s| s.count("ready", "many") >= 2000));
    let rss_back = rss_kb(s.pid());
    println!("supervisor RSS with 1,000 instances: {rss_up} kB, after 0 and back: {rss_back} kB");
    assert!(
        rss_up < RSS_BOUND_KB && rss_back < RSS_BOUND_KB,
        "{rss_up} / {rss_back} kB"
    );
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success());
}
