//! Liveness restored: health checks and a memory measurement in flight are
//! ordered again at once (and not counted), and an armed watchdog.

use super::*;

fn checked(every: Duration) -> AppSpec {
    let mut spec = web(2);
    spec.ready = Readiness::Immediate;
    spec.health = Some(HealthSpec {
        check: HealthCheck::Probe(ProbeSpec {
            kind: ProbeKind::Http,
            written: Template::parse("127.0.0.1:{instance+9000}").unwrap(),
            targets: (0..2)
                .map(|i| Probe::Http {
                    address: ([127, 0, 0, 1], 9000 + i).into(),
                    path: "/health".into(),
                })
                .collect(),
        }),
        every,
        timeout: 2 * SEC,
        failures: 2,
        grace: Duration::ZERO,
    });
    spec
}

/// Answer every check ordered since the last call: `passed`.
fn answer_checks(h: &mut Harness, passed: bool) {
    let now = h.now;
    for order in std::mem::take(&mut h.checks) {
        h.core.input(check_answer(&order, passed), now);
    }
    h.settle();
}

#[test]
fn health_checks_in_flight_are_ordered_again_at_once_and_not_counted() {
    let mut h = Harness::new(vec![checked(SEC)]);
    wait(&mut h, 1100 * MS);
    assert_eq!(h.checks.len(), 2, "a check of each instance is out");
    let in_flight = |h: &Harness| {
        h.core
            .app("web")
            .unwrap()
            .workers
            .values()
            .filter(|w| w.health.in_flight.is_some())
            .count()
    };
    assert_eq!(in_flight(&h), 2);
    // The original, kept, would time the checks out and count failures.
    let json = serde_json::to_vec(&h.core).unwrap();
    let mut restored: Core = serde_json::from_slice(&json).unwrap();
    let now = h.now;
    restored.resumed(now);
    restored.converge(now);
    let orders: Vec<_> = restored
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Check(order) => Some(order),
            _ => None,
        })
        .collect();
    assert_eq!(orders.len(), 2, "both checks are ordered again at once");
    let numbers: Vec<u64> = h.checks.iter().map(|c| c.check).collect();
    assert!(
        orders.iter().all(|o| !numbers.contains(&o.check)),
        "with new numbers"
    );
    let app = restored.app("web").unwrap();
    assert!(app.workers.values().all(|w| w.health.failures == 0));
    assert_eq!(restored.broken(), 0);

    survives(&mut h, |h| {
        answer_checks(h, true);
        wait(h, 1100 * MS);
        answer_checks(h, false);
        wait(h, 1100 * MS);
        answer_checks(h, false);
        wait(h, 5 * SEC);
    });
}

#[test]
fn an_armed_watchdog() {
    let mut spec = web(1);
    spec.ready = Readiness::Immediate;
    spec.process.watchdog = Some(3 * SEC);
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, SEC);
    let worker = h.core.app("web").unwrap().workers.values().next().unwrap();
    assert!(worker.watchdog.is_some());
    survives(&mut h, |h| {
        let leader = pid(h, "web");
        let now = h.now;
        let ping = Input::Notified {
            leader,
            uid: 1000,
            ready: false,
            status: None,
            watchdog: Some(model::orders::WatchdogMessage::Ping),
            extend_timeout: None,
            injected: false,
        };
        h.core.input(ping, now);
        h.settle();
        // Silent past its deadline: stopped with `watchdog_signal`.
        wait(h, 10 * SEC);
    });
}

#[test]
fn a_memory_measurement_out_is_ordered_again_at_once() {
    let mut spec = web(2);
    spec.max_memory = Some(1 << 20);
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 5100 * MS);
    assert!(h.core.measuring.is_some());
    let round = h.core.memory_rounds;
    let mut restored = round_trip(&h.core);
    let now = h.now;
    restored.resumed(now);
    let measure: Vec<_> = restored
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::MeasureMemory { round, pids } => Some((round, pids.len())),
            _ => None,
        })
        .collect();
    assert_eq!(measure, [(round + 1, 2)]);
    // The lost measurement's answer is not taken, the new one's is.
    let usage = |pid| vec![(pid, 2 << 20)];
    let first = pid(&h, "web");
    restored.input(
        Input::MemoryMeasured {
            round,
            usage: usage(first),
        },
        now,
    );
    assert_eq!(restored.broken(), 0);
    restored.input(
        Input::MemoryMeasured {
            round: round + 1,
            usage: usage(first),
        },
        now,
    );
    assert_eq!(restored.broken(), 1);

    survives(&mut h, |h| {
        let round = h.core.memory_rounds;
        let now = h.now;
        let first = pid(h, "web");
        h.core.input(
            Input::MemoryMeasured {
                round,
                usage: usage(first),
            },
            now,
        );
        h.settle();
        wait(h, 12 * SEC);
    });
}
