//! A step down held by what a saturated instance burns: the queue reads
//! empty both when the app is idle and when its count is just enough.

use super::*;

/// `waiting` in the queue, `each` percent of CPU for each of `n` instances.
fn load(waiting: u32, each: u32, n: u32) -> LoadSample {
    LoadSample {
        queue: Some(waiting),
        cpu_percent: Some(each * n),
        measured: n,
    }
}

/// One instance with requests waiting, 10 % of a CPU: saturated at 10 %.
/// It steps up to `max` at `up_after`; the count, and when the step was.
fn saturate(scaler: &mut Autoscaler, range: &AutoscaleSpec, start: Instant) -> (u32, Duration) {
    let mut current = 1;
    let up = feed(
        scaler,
        range,
        &mut current,
        |n| load(100, 10, n),
        start,
        range.up_after,
    );
    assert_eq!(up, vec![(range.up_after, range.max)]);
    (current, range.up_after)
}

fn queue_range() -> AutoscaleSpec {
    AutoscaleSpec {
        up_after: TICK,
        down_after: SECOND,
        ..range(1, 10, Some(4), None)
    }
}

#[test]
fn a_count_just_enough_for_its_load_is_kept_though_the_queue_is_empty() {
    let range = queue_range();
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    let (mut current, up_at) = saturate(&mut scaler, &range, start);
    // The load needs 8 saturated instances: 80 % of CPU in all. 9 would
    // each burn 8.9 %, above 80 % of 10 %: no step down at all.
    let after = start + up_at + TICK;
    let down = feed(
        &mut scaler,
        &range,
        &mut current,
        |n| load(0, 80 / n, n),
        after,
        5 * SECOND,
    );
    assert!(down.is_empty(), "{down:?}");
    assert_eq!(current, 10);
}

#[test]
fn a_lighter_load_steps_down_to_the_count_that_keeps_headroom_and_stops_there() {
    let range = queue_range();
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    let (mut current, up_at) = saturate(&mut scaler, &range, start);
    // 60 % in all: 9 at 6.7 %, 8 at 7.5 % are below 8 %; 7 at 8.6 % is not.
    let after = start + up_at + TICK;
    let down = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| LoadSample {
            queue: Some(0),
            cpu_percent: Some(60),
            measured: 10,
        },
        after,
        8 * SECOND,
    );
    let counts: Vec<u32> = down.iter().map(|(_, to)| *to).collect();
    assert_eq!(counts, vec![9, 8], "{down:?}");
}

#[test]
fn an_idle_app_still_goes_back_to_min_one_per_down_after() {
    let range = queue_range();
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    let (mut current, up_at) = saturate(&mut scaler, &range, start);
    let after = start + up_at + TICK;
    let down = feed(
        &mut scaler,
        &range,
        &mut current,
        |n| load(0, 0, n),
        after,
        12 * SECOND,
    );
    assert_eq!(down.len(), 9, "{down:?}");
    assert_eq!(current, range.min);
}

#[test]
fn a_saturation_learned_long_ago_is_forgotten() {
    let range = queue_range();
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    let (mut current, up_at) = saturate(&mut scaler, &range, start);
    let after = start + up_at + TICK;
    // Idle instances that read as busy (80 % in all) hold the step down
    // only until SATURATION_KEPT_AT_LEAST has passed (ten down_afters are
    // less here).
    let down = feed(
        &mut scaler,
        &range,
        &mut current,
        |_| LoadSample {
            queue: Some(0),
            cpu_percent: Some(80),
            measured: 10,
        },
        after,
        SATURATION_KEPT_AT_LEAST + 15 * SECOND,
    );
    assert!(range.down_after * SATURATION_KEPT_FOR < SATURATION_KEPT_AT_LEAST);
    let forgotten = start + up_at + SATURATION_KEPT_AT_LEAST;
    let first = down.first().map(|(at, _)| after + *at);
    assert!(first.is_some_and(|at| at >= forgotten), "{down:?}");
}

#[test]
fn the_first_sample_of_an_overload_teaches_nothing() {
    // It may cover idle time before the load began: 2 % then is no
    // measure of a saturated instance.
    let range = AutoscaleSpec {
        up_after: 10 * SECOND,
        ..queue_range()
    };
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    assert_eq!(scaler.sample(&range, 3, 3, load(100, 2, 3), start), None);
    assert_eq!(scaler.saturation, None);
    assert_eq!(
        scaler.sample(&range, 3, 3, load(100, 2, 3), start + TICK),
        None
    );
    assert!(scaler.saturation.is_some());
}

#[test]
fn a_server_that_computes_nothing_or_is_not_all_measured_teaches_nothing() {
    let range = AutoscaleSpec {
        up_after: 10 * SECOND,
        ..queue_range()
    };
    let start = Instant::now();
    let mut waiting = Autoscaler::default();
    for tick in 0..3 {
        waiting.sample(&range, 3, 3, load(100, 0, 3), start + TICK * tick);
    }
    assert_eq!(waiting.saturation, None, "below SATURATED_AT_LEAST");
    let mut partly = Autoscaler::default();
    let two_of_three = LoadSample {
        queue: Some(100),
        cpu_percent: Some(20),
        measured: 2,
    };
    for tick in 0..3 {
        partly.sample(&range, 3, 3, two_of_three, start + TICK * tick);
    }
    assert_eq!(partly.saturation, None, "one ready instance not measured");
}

#[test]
fn the_saturation_goes_across_an_upgrade() {
    let range = queue_range();
    let mut scaler = Autoscaler::default();
    let start = Instant::now();
    model::monotonic::set_anchor(start, 1 << 40);
    saturate(&mut scaler, &range, start);
    let handed: Autoscaler =
        serde_json::from_str(&serde_json::to_string(&scaler).expect("serialize"))
            .expect("deserialize");
    let (before, after) = (
        scaler.saturation.expect("learned"),
        handed.saturation.expect("handed"),
    );
    assert_eq!(before.cpu_percent, after.cpu_percent);
}
