//! The core on its own: inputs in, actions out, no processes.

use std::time::{Duration, Instant};

use super::*;
use crate::commands::Order;
use crate::reconcile::StopReason;
use model::orders::WatchdogMessage;
use model::process::{Exit, StartError, StartStage};
use model::spec::{AppSpec, Readiness, SocketKey};

fn core_with(apps: Vec<AppSpec>, now: Instant) -> Core {
    let desired = Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    Core::new(&desired, 1000, now)
}

fn spawns(actions: &[Action]) -> Vec<(String, WorkerId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Spawn(order) => Some((order.app.clone(), order.id)),
            _ => None,
        })
        .collect()
}

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
fn shutdown_is_a_phase_commands_are_refused_and_nothing_starts() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 2)], t0);
    core.input(Input::Shutdown { why: "SIGTERM" }, t0);
    core.converge(t0);
    assert!(spawns(&core.take_actions()).is_empty());
    assert!(core.finished());
    assert!(
        core.command(Order::Reload { app: "web".into() }, t0)
            .is_err()
    );
}

#[test]
fn start_while_a_held_stop_is_in_flight_starts_it_again_once_stopped() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 1)], t0);
    core.converge(t0);
    let (app, id) = spawns(&core.take_actions()).remove(0);
    core.input(Input::Spawned { app, id, pid: 300 }, t0);
    core.input(Input::ExecSucceeded { pid: 300 }, t0);
    core.converge(t0);
    core.command(
        Order::Hold {
            target: "web".into(),
        },
        t0,
    )
    .unwrap();
    core.converge(t0);
    let reply = core
        .command(
            Order::Release {
                target: "web".into(),
            },
            t0,
        )
        .unwrap();
    assert!(
        format!("{reply:?}").contains("start 1 instance"),
        "{reply:?}"
    );
    core.take_actions();
    let exited = Input::Exited {
        pid: 300,
        exit: model::process::Exit::Code(0),
        start_error: None,
    };
    core.input(exited, t0);
    core.input(Input::GroupEmpty { pgid: 300 }, t0);
    core.converge(t0);
    assert_eq!(
        spawns(&core.take_actions()).len(),
        1,
        "started again, not held"
    );
    assert_eq!(core.anomalies(), 0);
}

#[test]
fn stop_start_stop_while_the_stop_is_in_flight_ends_held() {
    let t0 = Instant::now();
    let mut core = core_with(vec![AppSpec::with_defaults("web", &["server"], 1)], t0);
    core.converge(t0);
    let (app, id) = spawns(&core.take_actions()).remove(0);
    core.input(Input::Spawned { app, id, pid: 300 }, t0);
    core.converge(t0);
    for order in [
        Order::Hold {
            target: "web".into(),
        },
        Order::Release {
            target: "web".into(),
        },
        Order::Hold {
            target: "web".into(),
        },
    ] {
        let reply = core.command(order, t0).unwrap();
        assert!(format!("{reply:?}").contains(" 1 instance"), "{reply:?}");
        core.converge(t0);
    }
    core.take_actions();
    let exited = Input::Exited {
        pid: 300,
        exit: model::process::Exit::Code(0),
        start_error: None,
    };
    core.input(exited, t0);
    core.input(Input::GroupEmpty { pgid: 300 }, t0);
    core.converge(t0);
    assert!(
        spawns(&core.take_actions()).is_empty(),
        "the last stop wins"
    );
    let worker = core.app("web").unwrap().workers.values().next().unwrap();
    assert_eq!(worker.state.name(), "stopped (held)");
}

/// An app of `instances` whose one socket has `inject`, ready at once.
fn injecting(instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.process.listen = vec![model::spec::ListenSpec {
        name: "web".into(),
        address: model::spec::ListenAddress::Tcp("127.0.0.1:8080".parse().expect("an address")),
        reuseport: false,
        inject: true,
    }];
    spec.ready = model::spec::Readiness::Immediate;
    spec
}

/// Start every spawn ordered so far with pids from `first`; returns them.
fn run_spawns(core: &mut Core, first: i32, now: Instant) -> Vec<i32> {
    let mut pids = Vec::new();
    for (i, (app, id)) in spawns(&core.take_actions()).into_iter().enumerate() {
        let pid = first + i as i32;
        core.input(Input::Spawned { app, id, pid }, now);
        core.input(Input::ExecSucceeded { pid }, now);
        pids.push(pid);
    }
    core.converge(now);
    pids
}

fn injected(core: &mut Core, pid: i32, now: Instant) {
    let notice = Input::Notified {
        leader: pid,
        uid: 1000,
        ready: false,
        status: None,
        watchdog: None,
        extend_timeout: None,
        injected: true,
    };
    core.input(notice, now);
}

fn not_injected(actions: &[Action]) -> Vec<i32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Report(Event::NotInjected { pid, addresses, .. }) => {
                assert_eq!(addresses, &["127.0.0.1:8080".to_string()]);
                Some(*pid)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_instance_never_handed_its_socket_is_said_once_per_version_after_the_grace() {
    let t0 = Instant::now();
    let mut core = core_with(vec![injecting(2)], t0);
    core.converge(t0);
    run_spawns(&mut core, 300, t0);
    assert!(
        not_injected(&core.take_actions()).is_empty(),
        "ready, but the grace has not passed"
    );
    assert_eq!(core.next_wake(), t0 + INJECT_GRACE);

    let later = t0 + INJECT_GRACE;
    core.input(Input::Tick, later);
    core.converge(later);
    assert_eq!(
        not_injected(&core.take_actions()).len(),
        1,
        "once for the app's version, not per instance"
    );
    core.input(Input::Tick, later + INJECT_GRACE);
    core.converge(later + INJECT_GRACE);
    assert!(not_injected(&core.take_actions()).is_empty());

    // A new version is looked at anew.
    core.command(Order::Reload { app: "web".into() }, later)
        .expect("reload");
    core.converge(later);
    let mut now = later;
    let mut seen = Vec::new();
    for round in 0..8 {
        let pids = run_spawns(&mut core, 400 + 10 * round, now);
        for pid in core
            .app("web")
            .expect("web")
            .workers
            .values()
            .filter_map(|w| w.state.pid())
            .collect::<Vec<_>>()
        {
            if !pids.contains(&pid) && pid < 400 {
                core.input(
                    Input::Exited {
                        pid,
                        exit: Exit::Signal {
                            signal: 15,
                            core: false,
                        },
                        start_error: None,
                    },
                    now,
                );
                core.input(Input::GroupEmpty { pgid: pid }, now);
            }
        }
        core.converge(now);
        now += INJECT_GRACE;
        core.input(Input::Tick, now);
        core.converge(now);
        seen.extend(not_injected(&core.take_actions()));
    }
    assert_eq!(
        seen.len(),
        1,
        "the reloaded version is said once too: {seen:?}"
    );
}

#[test]
fn an_instance_handed_its_socket_is_not_said() {
    let t0 = Instant::now();
    let mut core = core_with(vec![injecting(1)], t0);
    core.converge(t0);
    let pids = run_spawns(&mut core, 300, t0);
    // The library's report may come before or after ready.
    injected(&mut core, pids[0], t0 + Duration::from_secs(3));
    let later = t0 + 2 * INJECT_GRACE;
    core.input(Input::Tick, later);
    core.converge(later);
    assert!(not_injected(&core.take_actions()).is_empty());

    let mut plain = AppSpec::with_defaults("web", &["server"], 1);
    plain.ready = model::spec::Readiness::Immediate;
    let mut core = core_with(vec![plain], t0);
    core.converge(t0);
    run_spawns(&mut core, 300, t0);
    core.input(Input::Tick, later);
    core.converge(later);
    assert!(
        not_injected(&core.take_actions()).is_empty(),
        "only apps with `inject` are looked at"
    );
}

#[test]
fn an_instance_that_fails_at_start_unreached_is_said_once_before_it_is_ready() {
    let t0 = Instant::now();
    let mut spec = injecting(2);
    spec.ready = model::spec::Readiness::Delay(Duration::from_secs(1));
    let mut core = core_with(vec![spec], t0);
    core.converge(t0);
    let pids = run_spawns(&mut core, 300, t0);
    // A static binary's bind() is refused the port: it exits at once.
    for pid in pids {
        core.input(
            Input::Exited {
                pid,
                exit: Exit::Code(1),
                start_error: None,
            },
            t0,
        );
        core.input(Input::GroupEmpty { pgid: pid }, t0);
    }
    core.converge(t0);
    let said: Vec<bool> = core
        .take_actions()
        .iter()
        .filter_map(|a| match a {
            Action::Report(Event::NotInjected { before_ready, .. }) => Some(*before_ready),
            _ => None,
        })
        .collect();
    assert_eq!(said, [true], "once for the version, though both failed");
}

/// `web` listening on `port` (one shared socket).
fn listening(port: u16, instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.process.listen = vec![model::spec::ListenSpec {
        name: "http".into(),
        address: model::spec::ListenAddress::Tcp(([127, 0, 0, 1], port).into()),
        reuseport: false,
        inject: false,
    }];
    spec
}

fn desired_of(apps: Vec<AppSpec>) -> Desired {
    Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    }
}

fn binds(actions: &[Action]) -> Vec<(String, SocketKey)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Bind { app, key } => Some((app.clone(), key.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_socket_is_bound_before_its_version_applies() {
    let t0 = Instant::now();
    let mut core = core_with(vec![listening(8000, 1)], t0);
    core.converge(t0);
    core.take_actions();
    let trigger = "the file changed".to_string();
    core.input(
        Input::Apply {
            desired: desired_of(vec![listening(9000, 1)]),
            trigger,
        },
        t0,
    );
    let asked = binds(&core.take_actions());
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(core.file_version(), 1, "nothing applies before the bind");
    let (app, key) = asked.into_iter().next().unwrap();
    core.input(
        Input::Bound {
            app,
            key,
            error: None,
        },
        t0,
    );
    core.converge(t0);
    let actions = core.take_actions();
    assert_eq!(core.file_version(), 2);
    assert!(actions.iter().any(|a| matches!(a, Action::RouteOutput)));
    assert!(
        core.desired().apps[0].process.listen[0]
            .address
            .to_string()
            .ends_with(":9000"),
        "{:?}",
        core.desired()
    );
}

#[test]
fn an_app_that_cannot_bind_keeps_its_last_good_version_and_others_apply() {
    let t0 = Instant::now();
    let mut api = AppSpec::with_defaults("api", &["api"], 1);
    let mut core = core_with(vec![listening(8000, 1), api.clone()], t0);
    core.converge(t0);
    core.take_actions();
    api.instances = 3;
    core.input(
        Input::Apply {
            desired: desired_of(vec![listening(9000, 2), api]),
            trigger: "the file changed".into(),
        },
        t0,
    );
    for (app, key) in binds(&core.take_actions()) {
        let error = Some("Address already in use".to_string());
        core.input(Input::Bound { app, key, error }, t0);
    }
    core.converge(t0);
    let actions = core.take_actions();
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Report(Event::BindFailed { app, .. }) if app == "web"
        )),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| matches!(a, Action::SweepSockets)));
    let web = core.desired().app("web").unwrap();
    assert_eq!(web.instances, 1, "web keeps what runs");
    assert_eq!(core.desired().app("api").unwrap().instances, 3);
}

#[test]
fn a_bind_nobody_waited_for_is_an_anomaly_not_a_panic() {
    let t0 = Instant::now();
    let mut core = core_with(vec![listening(8000, 1)], t0);
    let key = SocketKey {
        address: model::spec::ListenAddress::Tcp(([127, 0, 0, 1], 1).into()),
        slot: None,
    };
    core.input(
        Input::Bound {
            app: "web".into(),
            key,
            error: None,
        },
        t0,
    );
    assert_eq!(core.anomalies(), 1);
}

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
