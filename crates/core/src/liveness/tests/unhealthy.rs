//! What becomes of an unhealthy instance: replaced first, or stopped first
//! (`max_surge: 0`, a readiness probe per slot), its failed replacement, a
//! halted rollout, and no restart when the policy says so.

use super::*;

#[test]
fn with_max_surge_zero_the_unhealthy_instance_stops_first_and_restarts_with_backoff() {
    let mut spec = app(2);
    spec.health = Some(health(1, Duration::ZERO));
    spec.reload = ReloadLimits {
        max_surge: 0,
        max_unavailable: 1,
    };
    let mut shell = Shell::new(spec);
    for round in 1..=3u32 {
        shell.advance(Duration::from_secs(1));
        let at = shell.checks.iter().position(|c| c.slot == 0).unwrap();
        let order = shell.checks.remove(at);
        shell.checks.clear();
        shell.answer_order(&order, false);
        let stopped = shell.stop_reasons().last().copied().unwrap();
        assert_eq!(stopped, (order.pid, StopReason::Unhealthy, Signal::SIGTERM));
        shell.gone(order.pid, 0);
        let app = shell.core.app("web").unwrap();
        let slot0 = app.workers.values().find(|w| w.slot == 0).unwrap();
        assert_eq!((slot0.state.name(), slot0.restarts), ("backoff", round));
        // The backoff doubles: 100, 200, 400 ms.
        let delay = Duration::from_millis(100 << (round - 1));
        shell.advance(delay - Duration::from_millis(1));
        assert_eq!(shell.workers()[0].1, "backoff");
        shell.advance(Duration::from_millis(1));
        assert_eq!(shell.workers()[0].1, "ready");
    }
}

#[test]
fn a_readiness_probe_per_slot_makes_a_recycle_stop_first() {
    let mut spec = app(1);
    spec.health = Some(health(1, Duration::ZERO));
    spec.ready = Readiness::Probe(match health(1, Duration::ZERO).check {
        HealthCheck::Probe(probe) => probe,
        HealthCheck::Exec(_) => unreachable!(),
    });
    let mut shell = Shell::new(spec);
    let probe = Input::ProbeSucceeded { pid: 100 };
    shell.core.input(probe, shell.now);
    shell.settle();
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::Unhealthy, Signal::SIGTERM)],
        "the old one would answer its replacement's probe"
    );
    assert_eq!(shell.count(|e| matches!(e, Event::Recycling { .. })), 0);
}

#[test]
fn a_replacement_that_fails_stops_the_broken_one_and_restarts_with_backoff() {
    let mut spec = app(1);
    spec.health = Some(health(1, Duration::ZERO));
    spec.ready = Readiness::Delay(Duration::from_millis(500));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_millis(500));
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    shell.advance(Duration::from_millis(100));
    assert_eq!(shell.workers()[1], (Some(101), "starting"));
    assert!(shell.stop_reasons().is_empty());
    // The replacement could not bind the port the broken one holds.
    let exited = Input::Exited {
        pid: 101,
        exit: model::process::Exit::Code(1),
        start_error: None,
    };
    shell.core.input(exited, shell.now);
    shell.settle();
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::Recycled, Signal::SIGTERM)]
    );
    shell.gone(100, 0);
    assert_eq!(shell.workers(), [(None, "backoff")]);
}

#[test]
fn an_unhealthy_replacement_during_a_rollout_halts_it() {
    let mut spec = app(2);
    spec.health = Some(health(1, Duration::ZERO));
    spec.ready = Readiness::Immediate;
    let mut shell = Shell::new(spec.clone());
    // A new generation: slot 0 is replaced, slot 1 still runs the old one.
    spec.process.env = vec![("VERSION".into(), Template::literal("2"))];
    shell.edit(spec);
    let app = shell.core.app("web").unwrap();
    let replacement = app
        .workers
        .values()
        .find(|w| w.generation == 2 && w.state.is_ready())
        .and_then(|w| w.state.pid())
        .unwrap();
    shell.checks.clear();
    shell.advance(Duration::from_secs(1));
    let at = shell
        .checks
        .iter()
        .position(|c| c.pid == replacement)
        .unwrap();
    let order = shell.checks.remove(at);
    shell.answer_order(&order, false);
    assert!(
        shell
            .stop_reasons()
            .contains(&(replacement, StopReason::Unhealthy, Signal::SIGTERM))
    );
    shell.gone(replacement, 0);
    assert!(shell.core.app("web").unwrap().rollout_halted);
    assert_eq!(shell.count(|e| matches!(e, Event::Recycling { .. })), 0);
}

#[test]
fn restart_never_or_max_restarts_reached_stops_an_unhealthy_instance() {
    for (restart, max_restarts, end) in [
        (RestartPolicy::Never, None, "exited"),
        (
            RestartPolicy::Always,
            Some(MaxRestarts {
                count: 0,
                within: Duration::from_secs(60),
            }),
            "failed",
        ),
    ] {
        let mut spec = app(1);
        spec.health = Some(health(1, Duration::ZERO));
        spec.restart = restart;
        spec.max_restarts = max_restarts;
        let mut shell = Shell::new(spec);
        shell.advance(Duration::from_secs(1));
        shell.answer(false);
        assert_eq!(
            shell.stop_reasons(),
            [(100, StopReason::Unhealthy, Signal::SIGTERM)]
        );
        shell.gone(100, 0);
        assert_eq!(shell.workers(), [(None, end)]);
    }
}
