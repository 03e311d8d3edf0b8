//! The heavy ones: the CPU of a crash loop, and 1,000 instances.

use std::time::Instant;

use crate::common::*;

fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A crash loop on a short backoff (10 ms doubling to 2.56 s): the nine
/// logged delays are the schedule, then the maximum holds; each restart
/// comes no sooner than its delay and at most 1 s later; and at the
/// maximum the supervisor sleeps between restarts: over three restarts at
/// 2.56 s its CPU stays under 0.5 % of a core (a restart costs it about
/// 4 ms in a debug build, 0.16 %; a loop that polled while it waits would
/// cost more).
#[test]
fn a_crash_loop_costs_almost_nothing_and_follows_the_schedule() {
    /// Restarts at the maximum delay the CPU is measured over.
    const AT_MAX: usize = 3;
    let mut s = Supervised::start(
        "apps:\n  crash:\n    command: [sh, -c, \"date +%s%N >> starts; exit 1\"]\n    backoff: {initial: 10ms, max: 2560ms}\n",
    );
    // The ninth exit is the first followed by the maximum delay.
    s.wait_count("exited", "crash", 9);
    let ticks = 100.0; // USER_HZ on Linux
    let before = cpu_ticks(s.pid());
    let start = Instant::now();
    s.wait_count("exited", "crash", 9 + AT_MAX);
    let window = start.elapsed();
    let used = (cpu_ticks(s.pid()) - before) as f64 / ticks;
    let percent = used / window.as_secs_f64() * 100.0;
    println!(
        "a crash loop at its maximum backoff, {AT_MAX} restarts in {window:?}: supervisor CPU {percent:.3} % of a core ({:.1} ms a restart)",
        used * 1000.0 / AT_MAX as f64
    );
    assert!(percent < 0.5, "{percent} % CPU over {window:?}");

    let delays: Vec<u64> = s
        .events
        .iter()
        .filter(|e| e["event"] == "exited")
        .filter_map(|e| e["delay_ms"].as_u64())
        .collect();
    assert_eq!(
        &delays[..9 + AT_MAX],
        [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 2560, 2560, 2560],
        "the logged schedule"
    );
    let starts: Vec<u128> = std::fs::read_to_string(s.path("starts"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(starts.len() >= 9 + AT_MAX, "{starts:?}");
    for (i, pair) in starts.windows(2).enumerate().take(9 + AT_MAX - 1) {
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
