//! Scheduled apps in the core: ticks, overlap, `trigger`, cron on a wall
//! clock given as an input.

use std::time::{Duration, UNIX_EPOCH};

use super::super::harness::Harness;
use crate::Event;
use crate::commands::Order;
use model::spec::{AppSpec, Overlap, Readiness, RestartPolicy, ScheduleSpec, When};

fn scheduled(when: When, overlap: Overlap, run_on_start: bool) -> AppSpec {
    let mut spec = AppSpec::with_defaults("job", &["job"], 1);
    spec.restart = RestartPolicy::Never;
    spec.ready = Readiness::Immediate;
    spec.schedule = Some(ScheduleSpec {
        when,
        overlap,
        run_on_start,
    });
    spec
}

/// `every: 1s` with a job of 2.5 s, over `seconds`: how many runs started,
/// were skipped, were queued, and how many processes ran at once at most.
fn run_for(overlap: Overlap, seconds: u64) -> (usize, usize, usize, usize) {
    let job = scheduled(When::Every(Duration::from_secs(1)), overlap, false);
    let mut h = Harness::new(vec![job]);
    let step = Duration::from_millis(50);
    let mut started: Vec<(i32, std::time::Instant)> = Vec::new();
    let mut most = 0;
    let end = h.now + Duration::from_secs(seconds);
    while h.now < end {
        h.advance(step, step);
        for pid in h.pids("job") {
            if !started.iter().any(|(p, _)| *p == pid) {
                started.push((pid, h.now));
            }
        }
        let due: Vec<i32> = started
            .iter()
            .filter(|(p, at)| {
                h.now >= *at + Duration::from_millis(2500) && h.pids("job").contains(p)
            })
            .map(|(p, _)| *p)
            .collect();
        for pid in due {
            h.exit(pid, 0);
        }
        most = most.max(h.pids("job").len());
    }
    assert_eq!(h.core.anomalies(), 0);
    let skipped = h.count(|e| matches!(e, Event::RunSkipped { .. }));
    let queued = h.count(|e| matches!(e, Event::RunQueued { .. }));
    (started.len(), skipped, queued, most)
}

#[test]
fn every_second_with_a_job_of_two_and_a_half_seconds_in_each_overlap_mode() {
    // Ticks at 1, 2, … 7 s (not at start: run_on_start is false).
    // skip: runs at 1 and 4 (ending 3.5, 6.5) and 7; 2, 3, 5, 6 skipped.
    assert_eq!(run_for(Overlap::Skip, 7), (3, 4, 0, 1));
    // queue (one waits at most): runs at 1, 3.5, 6; 2 queued, 3 skipped,
    // 4 queued, 5 skipped, 6 starts the queued one… 7 queued.
    let (started, skipped, queued, most) = run_for(Overlap::Queue, 7);
    assert_eq!((started, most), (3, 1));
    assert!(
        queued >= 2 && skipped >= 2,
        "queued {queued}, skipped {skipped}"
    );
    // replace: every tick stops the run that goes and starts a new one.
    assert_eq!(run_for(Overlap::Replace, 7), (7, 0, 0, 1));
}

#[test]
fn run_on_start_runs_at_once_and_status_keeps_the_last_run() {
    let job = scheduled(When::Every(Duration::from_secs(3600)), Overlap::Skip, true);
    let mut h = Harness::new(vec![job]);
    let pid = h.pids("job");
    assert_eq!(pid.len(), 1);
    h.advance(Duration::from_millis(2100), Duration::from_millis(100));
    h.exit(pid[0], 3);
    let runs = h.core.app("job").unwrap().runs.clone().unwrap();
    let last = runs.last.unwrap();
    assert_eq!(
        (last.result.as_str(), last.ok),
        ("exited with code 3", false)
    );
    assert_eq!(last.took, Duration::from_millis(2100));
    assert!(!runs.armed);
    // Nothing more until the next tick, an hour after the start.
    h.advance(Duration::from_secs(60), Duration::from_secs(1));
    assert!(h.pids("job").is_empty());
}

#[test]
fn trigger_starts_a_run_now_and_overlap_applies_while_one_goes() {
    let job = scheduled(When::Every(Duration::from_secs(3600)), Overlap::Skip, false);
    let mut h = Harness::new(vec![job]);
    assert!(h.pids("job").is_empty());
    let now = h.now;
    let reply = h.core.command(Order::Trigger { app: "job".into() }, now);
    h.settle();
    assert!(reply.is_ok(), "{reply:?}");
    assert_eq!(h.pids("job").len(), 1);
    let again = h.core.command(Order::Trigger { app: "job".into() }, now);
    assert!(again.unwrap_err().contains("overlap: skip"));
    let not_scheduled = AppSpec::with_defaults("web", &["web"], 1);
    let mut h = Harness::new(vec![not_scheduled]);
    let now = h.now;
    let refused = h.core.command(Order::Trigger { app: "web".into() }, now);
    assert_eq!(refused.unwrap_err(), "web has no schedule");
    let refused = h.core.command(Order::Trigger { app: "nope".into() }, now);
    assert_eq!(refused.unwrap_err(), "no app `nope`");
}

/// A job at 03:00 UTC every day, applied with the wall clock at 2026-12-01
/// 02:59:30 UTC (returned with the harness).
fn daily_at_three() -> (Harness, std::time::SystemTime) {
    let cron = std::str::FromStr::from_str("0 3 * * *").unwrap();
    let when = When::Cron {
        cron,
        timezone: chrono_tz::UTC,
    };
    let mut h = Harness::new(vec![]);
    // 2026-12-01 02:59:30 UTC.
    let wall = UNIX_EPOCH + Duration::from_secs(1_796_093_970);
    let now = h.now;
    h.core.set_wall_clock(wall, now);
    let desired = model::spec::Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![scheduled(when, Overlap::Skip, false)],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let trigger = "test".to_string();
    let apply = crate::Input::Apply { desired, trigger };
    h.core.input(apply, now);
    h.settle();
    (h, wall)
}

#[test]
fn a_cron_schedule_runs_on_the_wall_clock_the_shell_gives() {
    let (mut h, _) = daily_at_three();
    let now = h.now;
    let runs = h.core.app("job").unwrap().runs.clone().unwrap();
    assert_eq!(runs.next_at, Some(now + Duration::from_secs(30)));
    assert_eq!(
        runs.next_wall,
        Some(UNIX_EPOCH + Duration::from_secs(1_796_094_000))
    );
    assert!(h.core.next_wake() <= now + Duration::from_secs(30));
    h.advance(Duration::from_secs(29), Duration::from_secs(1));
    assert!(h.pids("job").is_empty());
    h.advance(Duration::from_secs(1), Duration::from_secs(1));
    assert_eq!(h.pids("job").len(), 1);
    let runs = h.core.app("job").unwrap().runs.clone().unwrap();
    assert_eq!(
        runs.next_wall,
        Some(UNIX_EPOCH + Duration::from_secs(1_796_094_000 + 86_400))
    );
}

/// Cron times are on the wall clock: a clock set back an hour after the
/// run of 03:00 does not run it again when 03:00 comes round once more.
#[test]
fn a_wall_clock_set_back_does_not_repeat_a_run() {
    let (mut h, wall) = daily_at_three();
    h.advance(Duration::from_secs(40), Duration::from_secs(1));
    let pid = h.pids("job");
    assert_eq!(pid.len(), 1);
    h.exit(pid[0], 0);
    // Back an hour: 02:00:10.
    let now = h.now;
    let back = wall + Duration::from_secs(40) - Duration::from_secs(3600);
    h.core.set_wall_clock(back, now);
    h.advance(Duration::from_secs(3700), Duration::from_secs(10));
    assert!(h.pids("job").is_empty());
    assert_eq!(h.count(|e| matches!(e, Event::RunDue { .. })), 1);
}
