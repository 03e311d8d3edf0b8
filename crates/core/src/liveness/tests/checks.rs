//! Health checks counted: consecutive failures, none within `grace`, no
//! overlap, an unanswered probe or exec check failed at its timeout, and an
//! edit of `health` counting afresh.

use super::*;

#[test]
fn consecutive_failures_make_an_instance_unhealthy_and_a_success_resets_them() {
    let mut spec = app(1);
    spec.health = Some(health(3, Duration::ZERO));
    let mut shell = Shell::new(spec);
    assert_eq!(shell.workers(), [(Some(100), "ready")]);
    assert!(
        shell.checks.is_empty(),
        "the first check is one `every` after ready"
    );
    for passed in [false, false, true, false, false] {
        shell.advance(Duration::from_secs(1));
        assert_eq!(shell.checks.len(), 1);
        shell.answer(passed);
    }
    assert_eq!(shell.count(|e| matches!(e, Event::Healthy { .. })), 1);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 0);
    // The third failure in a row.
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 1);
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Recycling {
            pid: 100,
            why: Outcome::Unhealthy,
            attempt: 1,
            ..
        }
    )));
    // Replaced first: the old one serves while the new one waits out its
    // backoff (100 ms), starts and becomes ready; then the old one stops.
    assert_eq!(shell.workers(), [(Some(100), "ready"), (None, "backoff")]);
    assert!(shell.signals.is_empty());
    shell.advance(Duration::from_millis(100));
    assert_eq!(shell.workers()[1], (Some(101), "ready"));
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::Recycled, Signal::SIGTERM)]
    );
    shell.gone(100, 0);
    assert_eq!(shell.workers(), [(Some(101), "ready")]);
    let app = shell.core.app("web").unwrap();
    let worker = app.workers.values().next().unwrap();
    assert_eq!(
        (worker.restarts, worker.attempt),
        (1, 1),
        "it counts as a restart"
    );
}

#[test]
fn failures_within_grace_do_not_count() {
    let mut spec = app(1);
    spec.health = Some(health(1, Duration::from_millis(1500)));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert!(
        shell
            .events
            .iter()
            .any(|e| matches!(e, Event::CheckFailed { counted: false, .. }))
    );
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 0);
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 1);
}

#[test]
fn checks_never_overlap_and_an_unanswered_probe_fails_a_grace_after_its_timeout() {
    let mut spec = app(1);
    spec.health = Some(health(3, Duration::ZERO));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.checks.len(), 1);
    // The shell times a probe from when it really starts (the loop may be
    // busy when it is due): the core waits longer, for a lost answer only.
    shell
        .advance(Duration::from_millis(300) + crate::CHECK_ANSWER_GRACE - Duration::from_millis(1));
    assert!(shell.cancelled.is_empty());
    assert_eq!(shell.checks.len(), 1, "no second check while one is out");
    shell.advance(Duration::from_millis(1));
    assert_eq!(shell.cancelled, [100], "the check in flight is cancelled");
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::CheckFailed { failures: 1, detail, .. } if detail == "no answer within 1s 300ms"
    )));
    // Its answer, late, changes nothing.
    shell.answer(true);
    assert_eq!(shell.count(|e| matches!(e, Event::Healthy { .. })), 0);
    assert_eq!(shell.core.anomalies(), 0);
    // The next one was due `every` after the previous one started: now.
    assert_eq!(shell.checks.len(), 1);
}

#[test]
fn an_exec_check_fails_at_its_timeout() {
    let mut spec = app(1);
    let mut health = health(3, Duration::ZERO);
    health.check = HealthCheck::Exec(vec![Template::literal("true")]);
    spec.health = Some(health);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.checks.len(), 1);
    shell.advance(Duration::from_millis(299));
    assert!(shell.cancelled.is_empty());
    shell.advance(Duration::from_millis(1));
    assert_eq!(
        shell.cancelled,
        [100],
        "its process is killed at its timeout"
    );
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::CheckFailed { failures: 1, detail, .. } if detail == "no answer within 300ms"
    )));
}

#[test]
fn a_health_edit_cancels_the_check_in_flight_and_counts_afresh() {
    let mut spec = app(1);
    spec.health = Some(health(3, Duration::ZERO));
    let mut shell = Shell::new(spec.clone());
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.checks.len(), 1, "a second check in flight");
    spec.health = Some(health(1, Duration::ZERO));
    shell.edit(spec);
    assert_eq!(shell.cancelled, [100]);
    // The old check's answer is not counted against the new settings.
    shell.answer(false);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 0);
    let worker = shell.oldest_worker().clone();
    assert_eq!(worker.health.failures, 0);
    assert_eq!(shell.core.anomalies(), 0);
}
