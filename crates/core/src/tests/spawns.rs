//! Spawns and the news of them: one spawn per slot, a failed spawn's
//! backoff, late or unknown news a no-op, a result for a worker not spawning
//! killed, and starts that wait for room.

use super::*;

#[test]
fn the_first_convergence_orders_one_spawn_per_slot_and_waits_for_the_results() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 3)], t0);
    core.converge(t0);
    let actions = core.take_actions();
    assert_eq!(spawns(&actions).len(), 3);
    // Until the results come, nothing more is ordered.
    core.input(Input::Tick, t0);
    core.converge(t0);
    assert!(spawns(&core.take_actions()).is_empty());
    for (i, (app, id)) in spawns(&actions).into_iter().enumerate() {
        core.input(
            Input::Spawned {
                app,
                id,
                pid: 100 + i as i32,
            },
            t0,
        );
    }
    core.converge(t0);
    let app = core.app("web").unwrap();
    assert!(app.workers.values().all(|w| w.state.pid().is_some()));
}

#[test]
fn a_failed_spawn_backs_off_and_is_reported() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 1)], t0);
    core.converge(t0);
    let (app, id) = spawns(&core.take_actions()).remove(0);
    let error = StartError {
        stage: StartStage::Fork,
        errno: crate::harness::errno::EAGAIN,
    };
    core.input(
        Input::SpawnFailed {
            app,
            id,
            error,
            detail: "fork failed".into(),
        },
        t0,
    );
    core.converge(t0);
    let actions = core.take_actions();
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Report(Event::StartFailed { .. })))
    );
    assert_eq!(core.next_wake(), t0 + Duration::from_millis(100));
}

#[test]
fn late_and_unknown_news_is_a_no_op() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 1)], t0);
    for input in [
        Input::ExecSucceeded { pid: 4242 },
        Input::ProbeSucceeded { pid: 4242 },
        Input::GroupEmpty { pgid: 4242 },
        Input::Exited {
            pid: 4242,
            exit: Exit::Code(0),
            start_error: None,
        },
        Input::Notified {
            leader: 4242,
            uid: 0,
            ready: true,
            status: None,
            watchdog: Some(WatchdogMessage::Trigger),
            extend_timeout: Some(Duration::from_secs(1)),
            injected: false,
        },
        Input::Checked {
            pid: 4242,
            check: 1,
            passed: false,
            detail: "HTTP 500".into(),
        },
        Input::MemoryMeasured {
            round: 1,
            usage: vec![(4242, u64::MAX)],
        },
    ] {
        core.input(input, t0);
    }
    core.converge(t0);
    assert_eq!(core.anomalies(), 0);
}

#[test]
fn a_spawn_result_for_a_worker_that_is_not_spawning_kills_the_process() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 1)], t0);
    core.input(
        Input::Spawned {
            app: "web".into(),
            id: 77,
            pid: 555,
        },
        t0,
    );
    let actions = core.take_actions();
    assert!(
        actions.iter().any(
            |a| matches!(a, Action::Signal { pgid: 555, signal } if *signal == Signal::SIGKILL)
        )
    );
    assert_eq!(core.anomalies(), 1, "a shell bug, counted, never a panic");
}

#[test]
fn without_room_for_a_start_starts_wait_said_once_and_come_with_room() {
    let now = Instant::now();
    let mut spec = AppSpec::with_defaults("web", &["server"], 3);
    spec.ready = Readiness::Immediate;
    let desired = Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![spec],
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let mut core = Core::new(&desired, 1000, now);
    let spawns = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Spawn(_)))
            .count()
    };
    let said = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Report(Event::StartsWaitForRoom)))
            .count()
    };
    core.begin_turn(0);
    core.converge(now);
    let actions = core.take_actions();
    assert_eq!((spawns(&actions), said(&actions)), (0, 1));
    assert_eq!(core.next_wake(), now + NO_ROOM_RETRY, "no busy loop");
    let later = now + NO_ROOM_RETRY;
    core.begin_turn(0);
    core.input(Input::Tick, later);
    core.converge(later);
    let actions = core.take_actions();
    assert_eq!((spawns(&actions), said(&actions)), (0, 0), "said once");
    let room = later + NO_ROOM_RETRY;
    core.begin_turn(2);
    core.input(Input::Tick, room);
    core.converge(room);
    assert_eq!(
        spawns(&core.take_actions()),
        2,
        "as many as there is room for"
    );
}
