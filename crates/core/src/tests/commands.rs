//! Commands: refused once shutting down, and stops and starts of a worker
//! whose stop is in flight ending as the last one says.

use super::*;

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
