//! The rules of `autoscale`, on instants the tests choose.

use std::time::{Duration, Instant};

use super::*;
use crate::Input;
use crate::harness::Harness;
use model::spec::{AppSpec, Readiness};

const SECOND: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(250);

fn range(min: u32, max: u32, queue: Option<u32>, cpu: Option<u32>) -> AutoscaleSpec {
    AutoscaleSpec {
        min,
        max,
        max_from_cpus: false,
        queue,
        cpu_percent: cpu,
        up_after: 2 * SECOND,
        down_after: 10 * SECOND,
    }
}

fn queued(waiting: u32) -> LoadSample {
    LoadSample {
        queue: Some(waiting),
        cpu_percent: None,
        measured: 0,
    }
}

fn busy(each: u32, instances: u32) -> LoadSample {
    LoadSample {
        queue: None,
        cpu_percent: Some(each * instances),
        measured: instances,
    }
}

/// Feed `sample` every [`TICK`] for `lasting`, from `from`: the changes
/// decided, with when.
fn feed(
    scaler: &mut Autoscaler,
    range: &AutoscaleSpec,
    current: &mut u32,
    sample: impl Fn(u32) -> LoadSample,
    from: Instant,
    lasting: Duration,
) -> Vec<(Duration, u32)> {
    let mut changes = Vec::new();
    let mut at = Duration::ZERO;
    while at <= lasting {
        if let Some(scaling) = scaler.sample(range, *current, *current, sample(*current), from + at)
        {
            changes.push((at, scaling.to));
            *current = scaling.to;
        }
        at += TICK;
    }
    changes
}

#[test]
fn a_queue_over_its_target_for_up_after_scales_up_by_what_it_asks() {
    let range = range(1, 8, Some(10), None);
    let mut scaler = Autoscaler::default();
    let mut current = 1;
    let start = Instant::now();
    // 27 waiting for one instance, target 10: ceil(1 × 2.7) = 3.
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(27),
        start,
        2 * SECOND,
    );
    assert_eq!(changes, vec![(2 * SECOND, 3)]);
}

#[test]
fn nothing_changes_before_up_after_nor_within_the_tolerance() {
    let range = range(1, 8, Some(10), None);
    let mut scaler = Autoscaler::default();
    let mut current = 1;
    let start = Instant::now();
    let early = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(50),
        start,
        SECOND + TICK * 3,
    );
    assert!(early.is_empty(), "{early:?}");
    let mut scaler = Autoscaler::default();
    // 10.5 per instance is within 10 % of the target: noise, not load.
    let near = feed(
        &mut scaler,
        &range,
        &mut current,
        |n| queued(21 * n / 2),
        start,
        10 * SECOND,
    );
    assert!(near.is_empty(), "{near:?}");
}

#[test]
fn the_step_up_is_capped_at_max_and_the_next_needs_another_up_after() {
    let range = range(1, 4, Some(10), None);
    let mut scaler = Autoscaler::default();
    let mut current = 1;
    let start = Instant::now();
    // Always 1,000 waiting per instance: up to the cap at once, then never past it.
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |n| queued(1000 * n),
        start,
        10 * SECOND,
    );
    assert_eq!(changes, vec![(2 * SECOND, 4)]);
    // A cap of 6 and 30 waiting per instance: 1 → 3 at 2 s; the overload
    // is counted again from the next sample (2.25 s): 3 → 6 at 4.25 s.
    let range = AutoscaleSpec { max: 6, ..range };
    let mut scaler = Autoscaler::default();
    let mut current = 1;
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |n| queued(30 * n),
        start,
        10 * SECOND,
    );
    assert_eq!(changes, vec![(2 * SECOND, 3), (4 * SECOND + TICK, 6)]);
}

#[test]
fn a_break_in_the_overload_starts_the_count_afresh() {
    let range = range(1, 8, Some(10), None);
    let mut scaler = Autoscaler::default();
    let mut current = 1;
    let start = Instant::now();
    // Overloaded for 1.75 s, then under the target for one sample.
    let waiting = |at: Duration| if at == 2 * SECOND { 5 } else { 30 };
    let mut changes = Vec::new();
    let mut at = Duration::ZERO;
    while at <= 5 * SECOND {
        if let Some(s) = scaler.sample(&range, current, current, queued(waiting(at)), start + at) {
            changes.push((at, s.to));
            current = s.to;
        }
        at += TICK;
    }
    // Counted again from 2.25 s: the step up comes 2 s later.
    assert_eq!(changes, vec![(4 * SECOND + TICK, 3)]);
}

#[test]
fn a_gap_in_the_samples_is_not_evidence() {
    let range = range(1, 8, Some(10), None);
    let mut scaler = Autoscaler::default();
    let mut current = 1;
    let start = Instant::now();
    let before = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(30),
        start,
        SECOND + TICK * 2,
    );
    assert!(before.is_empty());
    // Nothing for 5 s (a stall of ours): the overload is counted from the
    // first sample after it.
    let late = start + 7 * SECOND;
    let after = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(30),
        late,
        3 * SECOND,
    );
    assert_eq!(after, vec![(2 * SECOND, 3)]);
}

#[test]
fn below_half_of_every_target_scales_down_by_one_per_down_after_to_min() {
    let range = range(2, 8, Some(10), Some(70));
    let mut scaler = Autoscaler::default();
    let mut current = 5;
    let start = Instant::now();
    let idle = |n| LoadSample {
        queue: Some(0),
        cpu_percent: Some(10 * n),
        measured: n,
    };
    let changes = feed(&mut scaler, &range, &mut current, idle, start, 60 * SECOND);
    assert_eq!(
        changes,
        vec![(10 * SECOND, 4), (20 * SECOND, 3), (30 * SECOND, 2)],
        "one per down_after, never below min"
    );
}

#[test]
fn one_target_still_busy_keeps_every_instance() {
    let range = range(1, 8, Some(10), Some(70));
    let mut scaler = Autoscaler::default();
    let mut current = 4;
    // No queue, but CPU at 50 % of one CPU: above half of 70 %.
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |n| LoadSample {
            queue: Some(0),
            cpu_percent: Some(50 * n),
            measured: n,
        },
        Instant::now(),
        60 * SECOND,
    );
    assert!(changes.is_empty(), "{changes:?}");
}

#[test]
fn unmeasured_cpu_never_scales_down() {
    let range = range(1, 8, None, Some(70));
    let mut scaler = Autoscaler::default();
    let mut current = 3;
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| LoadSample::default(),
        Instant::now(),
        60 * SECOND,
    );
    assert!(changes.is_empty(), "{changes:?}");
}

#[test]
fn cpu_over_its_target_scales_up_by_kubernetes_arithmetic() {
    let range = range(1, 8, None, Some(50));
    let mut scaler = Autoscaler::default();
    let mut current = 2;
    // 2 instances at 90 % each, target 50 %: ceil(2 × 1.8) = 4.
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| busy(90, 2),
        Instant::now(),
        2 * SECOND,
    );
    assert_eq!(changes, vec![(2 * SECOND, 4)]);
}

#[test]
fn no_step_down_within_down_after_of_a_step_up() {
    let range = AutoscaleSpec {
        down_after: 10 * SECOND,
        ..range(1, 8, Some(10), None)
    };
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    let mut current = 1;
    let up = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(30),
        start,
        2 * SECOND,
    );
    assert_eq!(up, vec![(2 * SECOND, 3)]);
    // The load stops at once: below half for the whole down_after after the
    // step up, and the step down waits until down_after has passed since it.
    let after_up = start + 2 * SECOND + TICK;
    let down = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(0),
        after_up,
        20 * SECOND,
    );
    let first_down = down.first().map(|(at, _)| after_up + *at);
    assert!(
        first_down.is_some_and(|at| at >= start + 2 * SECOND + range.down_after),
        "{down:?}"
    );
}

#[test]
fn a_queue_with_no_instance_asks_for_one() {
    let range = range(0, 4, Some(10), None);
    let mut scaler = Autoscaler::default();
    let mut current = 0;
    let changes = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| queued(5),
        Instant::now(),
        2 * SECOND,
    );
    assert_eq!(changes, vec![(2 * SECOND, 1)]);
}

fn autoscaled(min: u32, max: u32) -> AppSpec {
    let mut app = AppSpec::with_defaults("web", &["server"], min);
    app.ready = Readiness::Immediate;
    app.autoscale = Some(range(min, max, Some(10), None));
    app
}

#[test]
fn the_core_samples_every_tick_and_starts_what_the_load_asks_for() {
    let mut harness = Harness::new(vec![autoscaled(1, 8)]);
    assert_eq!(harness.pids("web").len(), 1);
    harness.load.insert("web".into(), (27, 0));
    harness.advance(2 * SECOND + TICK, TICK);
    assert_eq!(harness.pids("web").len(), 3, "{:?}", harness.events);
    let said = harness.count(|e| {
        matches!(e, Event::Autoscaled { from: 1, to: 3, why, .. } if why.contains("queue 27/10"))
    });
    assert_eq!(said, 1, "{:?}", harness.events);
    let samples = harness
        .actions
        .iter()
        .filter(|a| a.starts_with("SampleLoad"))
        .count();
    // One at the start, then one per tick.
    assert!((9..=11).contains(&samples), "{samples} samples");
}

#[test]
fn an_edit_of_the_range_keeps_the_count_within_it() {
    let mut harness = Harness::new(vec![autoscaled(1, 8)]);
    harness.load.insert("web".into(), (60, 0));
    // Overloaded from the first sample after the load came (0.25 s).
    harness.advance(2 * SECOND + TICK, TICK);
    assert_eq!(harness.pids("web").len(), 6);
    // The same file again (instances still says min): the count stays.
    let same = Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![autoscaled(1, 8)],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    harness.core.input(
        Input::Apply {
            desired: same.clone(),
            trigger: "edit".into(),
        },
        harness.now,
    );
    harness.settle();
    assert_eq!(
        harness.pids("web").len(),
        6,
        "an edit does not reset the count"
    );
    // A lower max takes the count down to it.
    let mut lower = same;
    lower.apps = vec![autoscaled(1, 4)];
    harness.core.input(
        Input::Apply {
            desired: lower,
            trigger: "edit".into(),
        },
        harness.now,
    );
    harness.settle();
    assert_eq!(harness.pids("web").len(), 4);
}

#[test]
fn the_count_and_the_timers_go_across_an_upgrade() {
    let mut harness = Harness::new(vec![autoscaled(1, 8)]);
    harness.load.insert("web".into(), (27, 0));
    // Overloaded for 1.25 s (from 0.25 s) of the 2 s needed.
    harness.advance(SECOND + 2 * TICK, TICK);
    assert_eq!(harness.pids("web").len(), 1);
    let state = serde_json::to_string(&harness.core).expect("the core serializes");
    let restored: Core = serde_json::from_str(&state).expect("and reads back");
    let mut upgraded = harness.around(restored);
    let now = upgraded.now;
    upgraded.core.resumed(now);
    upgraded.advance(2 * TICK, TICK);
    assert_eq!(upgraded.pids("web").len(), 1, "not yet: 1.75 s");
    upgraded.advance(TICK, TICK);
    assert_eq!(upgraded.pids("web").len(), 3, "{:?}", upgraded.events);
}

#[test]
fn a_hold_beyond_a_step_down_is_dropped_and_a_step_up_starts_the_slot() {
    let mut harness = Harness::new(vec![autoscaled(1, 4)]);
    harness.load.insert("web".into(), (60, 0));
    harness.advance(2 * SECOND + TICK, TICK);
    assert_eq!(harness.pids("web").len(), 4);
    let now = harness.now;
    let hold = crate::commands::Order::Hold {
        target: "web.3".into(),
    };
    assert!(harness.core.command(hold, now).is_ok(), "web.3 is held");
    harness.settle();
    assert_eq!(harness.pids("web").len(), 3);
    // Idle: down one per down_after (10 s), to 2.
    harness.load.insert("web".into(), (0, 0));
    harness.advance(21 * SECOND, TICK);
    assert_eq!(harness.core.app("web").map(|a| a.spec.instances), Some(2));
    assert!(
        harness.core.app("web").is_some_and(|a| a.held.is_empty()),
        "no hold beyond the count"
    );
    // Busy again: back to 4, every slot serving.
    harness.load.insert("web".into(), (60, 0));
    harness.advance(2 * SECOND + TICK, TICK);
    assert_eq!(harness.pids("web").len(), 4, "{:?}", harness.events);
}

#[test]
fn instances_still_starting_do_not_multiply_the_step_up() {
    let mut app = autoscaled(1, 8);
    // Ready a minute after the start: the new instances stay starting.
    app.ready = Readiness::Delay(60 * SECOND);
    app.ready_timeout = 300 * SECOND;
    let mut harness = Harness::new(vec![app]);
    harness.advance(61 * SECOND, SECOND);
    assert_eq!(harness.core.ready_leaders("web").count(), 1);
    harness.load.insert("web".into(), (30, 0));
    // 30 waiting for the one ready instance, target 10: 3.
    harness.advance(2 * SECOND + TICK, TICK);
    assert_eq!(harness.pids("web").len(), 3);
    // Still 30 waiting, still one ready: 3 asked again, nothing more.
    harness.advance(5 * SECOND, TICK);
    assert_eq!(harness.pids("web").len(), 3, "{:?}", harness.events);
}

#[test]
fn an_app_removed_and_added_again_starts_from_min_with_no_timer_of_before() {
    let mut harness = Harness::new(vec![autoscaled(1, 8)]);
    harness.load.insert("web".into(), (27, 0));
    // Overloaded for 1.5 s of the 2 s needed, then removed and added back.
    harness.advance(SECOND + 3 * TICK, TICK);
    let file = |apps| Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let now = harness.now;
    harness.core.input(
        Input::Apply {
            desired: file(Vec::new()),
            trigger: "edit".into(),
        },
        now,
    );
    harness.core.input(
        Input::Apply {
            desired: file(vec![autoscaled(1, 8)]),
            trigger: "edit".into(),
        },
        now,
    );
    harness.settle();
    harness.advance(2 * TICK, TICK);
    assert_eq!(
        harness.core.app("web").map(|a| a.spec.instances),
        Some(1),
        "the overload is counted afresh: {:?}",
        harness.events
    );
    harness.advance(2 * SECOND, TICK);
    assert_eq!(harness.core.app("web").map(|a| a.spec.instances), Some(3));
}

#[test]
fn a_sample_asked_for_and_never_answered_is_asked_again() {
    let mut core = Core::new(
        &Desired {
            source: "/srv/ecosystem.yaml".into(),
            apps: vec![autoscaled(1, 4)],
            memory_check: model::spec::defaults::MEMORY_CHECK,
            metrics: None,
        },
        1000,
        Instant::now(),
    );
    let start = Instant::now();
    let asked = |core: &mut Core, at| {
        core.converge(at);
        core.take_actions()
            .iter()
            .filter(|a| matches!(a, Action::SampleLoad { .. }))
            .count()
    };
    assert_eq!(asked(&mut core, start), 1, "the first sample");
    // Its answer is lost: the core wakes to ask again, and does.
    let again = core.next_wake();
    assert!(again <= start + TICK + SAMPLE_GAP, "{:?}", again - start);
    assert_eq!(asked(&mut core, start + TICK), 0, "not while it may come");
    assert_eq!(asked(&mut core, again), 1, "asked again");
}

mod saturation;
