//! `max_memory`: measured every `memory_check` and once at a time, an
//! instance over it recycled (no crash), its ceiling, and edits of it.

use super::*;

#[test]
fn over_max_memory_is_replaced_first_and_measured_every_memory_check() {
    let mut spec = app(2);
    spec.max_memory = Some(1000);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_millis(4999));
    assert_eq!(shell.measuring, None);
    shell.advance(Duration::from_millis(1));
    let (round, pids) = shell.measuring.take().unwrap();
    assert_eq!(pids, [100, 101]);
    // No second measurement while one is out.
    shell.advance(Duration::from_secs(5));
    assert_eq!(shell.measuring, None);
    let usage = vec![(100, 999), (101, 1001)];
    shell
        .core
        .input(Input::MemoryMeasured { round, usage }, shell.now);
    shell.settle();
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::MemoryExceeded {
            pid: 101,
            rss_bytes: 1001,
            limit_bytes: 1000,
            ..
        }
    )));
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Recycling {
            pid: 101,
            why: Outcome::MemoryExceeded,
            ..
        }
    )));
    shell.advance(Duration::from_millis(100));
    assert_eq!(
        shell.stop_reasons(),
        [(101, StopReason::Recycled, Signal::SIGTERM)]
    );
    // Measured again, every memory_check after the last one was ordered.
    shell.advance(Duration::from_secs(5));
    assert!(shell.measuring.is_some());
}

impl Shell {
    /// Answer the measurement out (due now or after `memory_check`) with `usage`.
    fn measured(&mut self, usage: Vec<(i32, u64)>) {
        if self.measuring.is_none() {
            self.advance(Duration::from_secs(5));
        }
        let (round, _) = self.measuring.take().expect("a measurement out");
        self.core
            .input(Input::MemoryMeasured { round, usage }, self.now);
        self.settle();
    }
}

/// An instance over `max_memory` whose replacement takes a minute to be
/// ready (a crash backoff of 10 s would hold it back too).
fn slow_to_replace() -> Shell {
    let mut spec = app(1);
    spec.max_memory = Some(1000);
    spec.backoff.initial = Duration::from_secs(10);
    let mut shell = Shell::new(spec.clone());
    spec.ready = Readiness::Delay(Duration::from_secs(60));
    shell.edit(spec);
    shell.measured(vec![(100, 1001)]);
    shell
}

#[test]
fn a_recycle_for_memory_is_no_crash_its_replacement_starts_at_once() {
    let shell = slow_to_replace();
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Recycling { pid: 100, why: Outcome::MemoryExceeded, attempt: 0, delay, .. }
            if delay.is_zero()
    )));
    assert_eq!(
        shell.workers(),
        [(Some(100), "ready"), (Some(101), "starting")]
    );
    // Its ceiling, as every instance's: 1.5 × max_memory.
    assert_eq!(shell.ceilings, [(100, Some(1500)), (101, Some(1500))]);
    let worker = shell.newest_worker();
    assert_eq!((worker.restarts, worker.attempt), (1, 0));
}

#[test]
fn a_recycled_instance_serves_on_up_to_its_ceiling_and_stops_past_it() {
    let mut shell = slow_to_replace();
    shell.measured(vec![(100, 1500), (101, 10)]);
    assert!(shell.signals.is_empty(), "at its ceiling it serves on");
    shell.measured(vec![(100, 1501), (101, 10)]);
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::OverMemoryCeiling, Signal::SIGTERM)]
    );
    shell.gone(100, 143);
    assert_eq!(shell.workers(), [(Some(101), "starting")]);
    assert_eq!(
        shell.count(|e| matches!(e, Event::MemoryExceeded { .. })),
        1,
        "said once"
    );
}

#[test]
fn a_recycled_instance_that_dies_leaves_its_slot_to_its_replacement() {
    // Killed by the kernel at its cgroup's memory.max, say.
    let mut shell = slow_to_replace();
    shell.gone(100, 137);
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Exited {
            pid: 100,
            decision: crate::worker::Decision::Replaced,
            ..
        }
    )));
    assert_eq!(shell.workers(), [(Some(101), "starting")]);
    let worker = shell.oldest_worker();
    assert_eq!(worker.restarts, 1, "one restart, counted once");
}

#[test]
fn an_edit_of_max_memory_moves_the_ceiling_of_the_running_instances() {
    let mut spec = app(2);
    spec.max_memory = Some(1000);
    let mut shell = Shell::new(spec.clone());
    spec.max_memory = Some(2000);
    shell.edit(spec.clone());
    spec.max_memory = None;
    shell.edit(spec);
    assert_eq!(
        shell.ceilings,
        [
            (100, Some(1500)),
            (101, Some(1500)),
            (100, Some(3000)),
            (101, Some(3000)),
            (100, None),
            (101, None),
        ]
    );
    assert_eq!(
        shell.workers(),
        [(Some(100), "ready"), (Some(101), "ready")]
    );
}

#[test]
fn memory_is_measured_once_at_a_time_and_a_lost_answer_is_not_waited_for_forever() {
    let mut spec = app(1);
    spec.max_memory = Some(1000);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(5));
    assert!(shell.measuring.take().is_some());
    // Unanswered: nothing more, however many periods pass…
    for _ in 0..11 {
        shell.advance(Duration::from_secs(5));
        assert_eq!(shell.measuring, None);
    }
    // …until the answer counts as lost.
    shell.advance(Duration::from_secs(5));
    let (round, pids) = shell.measuring.take().unwrap();
    assert_eq!(round, 2);
    assert!(shell.core.next_wake() > shell.now, "no busy loop meanwhile");
    // The lost one's answer, late, is not taken for the one out now.
    let stale = Input::MemoryMeasured {
        round: 1,
        usage: vec![(pids[0], 10_000)],
    };
    shell.core.input(stale, shell.now);
    shell.settle();
    assert_eq!(
        shell.count(|e| matches!(e, Event::MemoryExceeded { .. })),
        0
    );
    shell.advance(Duration::from_secs(5));
    assert_eq!(shell.measuring, None, "round 2 is still out");
}
