//! A stall of the supervisor's own (its loop did not run): it moves the
//! readiness deadline and the watchdog instead of failing the workers.

use super::*;

/// What a worker said on the notify socket: ready, or its watchdog ping.
fn notified(leader: i32, ready: bool, ping: bool) -> Input {
    Input::Notified {
        leader,
        uid: 1000,
        ready,
        status: None,
        watchdog: ping.then_some(WatchdogMessage::Ping),
        extend_timeout: None,
        injected: false,
    }
}

/// The supervisor did not run from `h.now` for `stall`: the clock jumps,
/// the lateness is said first (as the loop says it), then time is judged.
fn stall(h: &mut crate::harness::Harness, stall: Duration, said: bool) {
    h.now += stall;
    let now = h.now;
    if said {
        h.core.input(Input::Stalled { by: stall }, now);
    }
    h.core.input(Input::Tick, now);
    h.settle();
}

#[test]
fn a_stall_of_ours_moves_the_readiness_deadline_and_the_ready_sent_meanwhile_counts() {
    for said in [true, false] {
        let mut spec = AppSpec::with_defaults("web", &["server"], 1);
        spec.ready = Readiness::Notify;
        spec.ready_timeout = Duration::from_secs(1);
        let mut h = crate::harness::Harness::new(vec![spec]);
        let pid = h.pids("web")[0];
        stall(&mut h, Duration::from_secs(3), said);
        let not_ready = h.count(
            |e| matches!(e, Event::Stopping { reason, .. } if *reason == StopReason::NotReady),
        );
        if !said {
            assert_eq!(
                not_ready, 1,
                "without the stall said, the timeout is judged"
            );
            continue;
        }
        assert_eq!(not_ready, 0, "{:?}", h.events);
        let now = h.now;
        h.core.input(notified(pid, true, false), now);
        h.settle();
        assert!(
            h.core
                .app("web")
                .unwrap()
                .workers
                .values()
                .all(|w| w.state.is_ready())
        );
        assert_eq!(h.count(|e| matches!(e, Event::Stalled { .. })), 1);
    }
}

#[test]
fn a_stall_of_ours_moves_the_watchdog_and_a_ping_after_it_keeps_the_worker() {
    for said in [true, false] {
        let mut spec = AppSpec::with_defaults("web", &["server"], 1);
        spec.ready = Readiness::Immediate;
        spec.process.watchdog = Some(Duration::from_secs(1));
        let mut h = crate::harness::Harness::new(vec![spec]);
        let pid = h.pids("web")[0];
        let now = h.now;
        h.core.input(notified(pid, false, true), now);
        h.settle();
        stall(&mut h, Duration::from_secs(3), said);
        let missed = h.count(|e| matches!(e, Event::WatchdogMissed { .. }));
        assert_eq!(missed, usize::from(!said), "{:?}", h.events);
        if said {
            let now = h.now;
            h.core.input(notified(pid, false, true), now);
            h.settle();
            assert_eq!(h.count(|e| matches!(e, Event::WatchdogMissed { .. })), 0);
        }
    }
}
