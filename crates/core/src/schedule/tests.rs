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

/// A clock set back an hour after the run of 03:00 is a correction (the
/// wall clock is UTC: daylight saving time is no step): the job runs at
/// 03:00 of the corrected clock, the next match after the new time.
#[test]
fn a_wall_clock_set_back_runs_at_the_next_match_of_the_new_time() {
    let (mut h, wall) = daily_at_three();
    h.advance(Duration::from_secs(40), Duration::from_secs(1));
    let pid = h.pids("job");
    assert_eq!(pid.len(), 1);
    h.exit(pid[0], 0);
    // Back an hour: 02:00:10.
    let now = h.now;
    let back = wall + Duration::from_secs(40) - Duration::from_secs(3600);
    h.core.set_wall_clock(back, now);
    h.advance(Duration::from_secs(10), Duration::from_secs(10));
    let runs = h.core.app("job").unwrap().runs.clone().unwrap();
    assert_eq!(
        runs.next_wall,
        Some(UNIX_EPOCH + Duration::from_secs(1_796_094_000)),
        "03:00 of the corrected clock"
    );
    h.advance(Duration::from_secs(3590), Duration::from_secs(10));
    assert_eq!(h.count(|e| matches!(e, Event::RunDue { .. })), 2);
}

/// `* * * * *`, 17 s before the next minute (10:00:43).
fn every_minute() -> (Harness, std::time::SystemTime) {
    let cron = std::str::FromStr::from_str("* * * * *").unwrap();
    let when = When::Cron {
        cron,
        timezone: chrono_tz::UTC,
    };
    let mut h = Harness::new(vec![]);
    // 2026-12-01 10:00:43 UTC.
    let wall = UNIX_EPOCH + Duration::from_secs(1_796_119_243);
    let now = h.now;
    h.core.set_wall_clock(wall, now);
    let desired = model::spec::Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![scheduled(when, Overlap::Skip, false)],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let apply = crate::Input::Apply {
        desired,
        trigger: "test".to_string(),
    };
    h.core.input(apply, now);
    h.settle();
    let runs = h.core.app("job").unwrap().runs.clone().unwrap();
    assert_eq!(runs.next_at, Some(now + Duration::from_secs(17)));
    (h, wall)
}

/// The shell's reading of the wall clock `elapsed` after `start`, set
/// `back` (negative: forward) since.
fn read(h: &mut Harness, start: std::time::SystemTime, elapsed: Duration, back: i64) {
    let moved = start + elapsed;
    let wall = if back >= 0 {
        moved - Duration::from_secs(back.unsigned_abs())
    } else {
        moved + Duration::from_secs(back.unsigned_abs())
    };
    let now = h.now;
    h.core.set_wall_clock(wall, now);
}

fn next_in(h: &Harness) -> Option<Duration> {
    let runs = h.core.app("job").unwrap().runs.clone().unwrap();
    runs.next_at.map(|at| at.saturating_duration_since(h.now))
}

fn steps(h: &Harness) -> Vec<(bool, Duration, Vec<String>)> {
    h.events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::ClockStepped {
                forward,
                by,
                rearmed,
            } => Some((*forward, *by, rearmed.clone())),
            _ => None,
        })
        .collect()
}

/// Issue 28: `* * * * *` with the clock set back an hour waited an hour
/// (the next run stayed at the old clock's next minute).
#[test]
fn a_wall_clock_set_back_an_hour_keeps_a_minutely_job_running_every_minute() {
    let (mut h, start) = every_minute();
    h.advance(Duration::from_secs(5), Duration::from_secs(1));
    // 10:00:48 becomes 09:00:48: the next minute is 12 s away.
    read(&mut h, start, Duration::from_secs(5), 3600);
    h.core.input(crate::Input::Tick, h.now);
    h.settle();
    assert_eq!(next_in(&h), Some(Duration::from_secs(12)));
    assert_eq!(
        steps(&h),
        [(false, Duration::from_secs(3600), vec!["job".to_string()])]
    );
    // The shell reads both clocks each turn: they move together again.
    let mut elapsed = Duration::from_secs(5);
    for _ in 0..12 {
        h.advance(Duration::from_secs(1), Duration::from_secs(1));
        elapsed += Duration::from_secs(1);
        read(&mut h, start, elapsed, 3600);
    }
    assert_eq!(h.pids("job").len(), 1, "the run of 09:01:00");
    assert_eq!(steps(&h).len(), 1, "one step, said once");
}

#[test]
fn a_wall_clock_set_forward_runs_at_the_next_match_and_makes_up_nothing() {
    let (mut h, start) = every_minute();
    h.advance(Duration::from_secs(5), Duration::from_secs(1));
    // 10:00:48 becomes 12:00:48: the runs of 10:01 … 12:00 are not made up.
    read(&mut h, start, Duration::from_secs(5), -7200);
    h.core.input(crate::Input::Tick, h.now);
    h.settle();
    assert!(h.pids("job").is_empty());
    assert_eq!(h.count(|e| matches!(e, Event::RunDue { .. })), 0);
    assert_eq!(next_in(&h), Some(Duration::from_secs(12)));
    assert_eq!(steps(&h).len(), 1);
}

#[test]
fn a_wall_clock_that_drifts_within_the_tolerance_is_no_step() {
    let (mut h, start) = every_minute();
    h.advance(Duration::from_secs(5), Duration::from_secs(1));
    // 900 ms behind the monotonic clock, as a slow clock could be.
    let now = h.now;
    let wall = start + Duration::from_secs(5) - Duration::from_millis(900);
    h.core.set_wall_clock(wall, now);
    h.core.input(crate::Input::Tick, h.now);
    h.settle();
    assert!(steps(&h).is_empty());
    assert_eq!(next_in(&h), Some(Duration::from_millis(12_900)));
    // Just past the tolerance, it is one.
    let wall = wall - super::WALL_CLOCK_STEP_TOLERANCE - Duration::from_millis(1);
    h.core.set_wall_clock(wall, now);
    assert_eq!(steps(&h).len(), 0, "reported with the next actions");
    h.settle();
    assert_eq!(steps(&h).len(), 1);
}

#[test]
fn a_new_cores_first_reading_of_the_wall_clock_is_no_step() {
    // Its placeholder is the epoch: the first reading is 56 years later.
    let (h, _) = every_minute();
    assert!(steps(&h).is_empty());
}

#[test]
fn a_step_leaves_every_schedules_alone_and_a_run_that_goes_goes_on() {
    let every = scheduled(When::Every(Duration::from_secs(30)), Overlap::Skip, false);
    let mut h = Harness::new(vec![every]);
    let wall = UNIX_EPOCH + Duration::from_secs(1_796_119_243);
    let now = h.now;
    h.core.set_wall_clock(wall, now);
    h.advance(Duration::from_secs(10), Duration::from_secs(1));
    let before = next_in(&h);
    h.core
        .set_wall_clock(wall - Duration::from_secs(3600), h.now);
    h.core.input(crate::Input::Tick, h.now);
    h.settle();
    assert_eq!(next_in(&h), before, "`every` is on the monotonic clock");
    assert_eq!(steps(&h), [(false, Duration::from_secs(3610), vec![])]);
    // A cron run that goes when the clock is set is not stopped.
    let (mut h, start) = every_minute();
    h.advance(Duration::from_secs(17), Duration::from_secs(1));
    assert_eq!(h.pids("job").len(), 1);
    read(&mut h, start, Duration::from_secs(17), 3600);
    h.core.input(crate::Input::Tick, h.now);
    h.settle();
    assert_eq!(h.pids("job").len(), 1);
    assert_eq!(h.core.anomalies(), 0);
}

/// Found trying it as a hostile user would: a held `every: 1s` job said
/// `run_skipped` every second for as long as it was held.
#[test]
fn a_held_schedule_passes_its_ticks_quietly_and_trigger_says_why() {
    let job = scheduled(When::Every(Duration::from_secs(1)), Overlap::Skip, false);
    let mut h = Harness::new(vec![job]);
    let now = h.now;
    h.core
        .command(
            Order::Hold {
                target: "job".into(),
            },
            now,
        )
        .expect("held");
    h.settle();
    h.advance(Duration::from_secs(10), Duration::from_millis(100));
    assert!(h.pids("job").is_empty());
    assert_eq!(h.count(|e| matches!(e, Event::RunSkipped { .. })), 0);
    let now = h.now;
    let refused = h.core.command(Order::Trigger { app: "job".into() }, now);
    assert!(refused.unwrap_err().contains("held"));
    // Released, it runs on its ticks again.
    h.core
        .command(
            Order::Release {
                target: "job".into(),
            },
            now,
        )
        .expect("released");
    h.settle();
    h.advance(Duration::from_millis(1100), Duration::from_millis(100));
    assert_eq!(h.pids("job").len(), 1);
}
