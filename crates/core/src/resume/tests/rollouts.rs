//! Apps in change: a rolling reload in progress, a halted rollout, a removed
//! app draining, and a shutdown.

use super::*;

#[test]
fn a_rolling_reload_in_progress() {
    let mut h = Harness::new(vec![web(3)]);
    wait(&mut h, 2 * SEC);
    command(&mut h, Order::Reload { app: "web".into() });
    wait(&mut h, 1500 * MS);
    let app = h.core.app("web").unwrap();
    assert!(app.outdated() > 0 && app.replaced() > 0);
    assert!(app.definitions.len() == 2);
    survives(&mut h, |h| wait(h, 10 * SEC));
}

#[test]
fn a_halted_rollout() {
    let mut spec = web(2);
    spec.restart = RestartPolicy::Never;
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 2 * SEC);
    command(&mut h, Order::Reload { app: "web".into() });
    // The replacement (the newest pid) fails before it is ready.
    let newest = *h.processes.keys().last().unwrap();
    h.exit(newest, 1);
    wait(&mut h, SEC);
    assert!(h.core.app("web").unwrap().rollout_halted);
    survives(&mut h, |h| {
        command(h, Order::Reload { app: "web".into() });
        wait(h, 10 * SEC);
    });
}

#[test]
fn a_removed_app_draining_and_a_shutdown() {
    let mut h = Harness::new(vec![web(2), AppSpec::with_defaults("old", &["old"], 2)]);
    wait(&mut h, 2 * SEC);
    h.signals_end = false;
    let now = h.now;
    let apply = Input::Apply {
        desired: Desired {
            source: "/srv/ecosystem.yaml".into(),
            apps: vec![web(2)],
            memory_check: model::spec::defaults::MEMORY_CHECK,
            metrics: Some("127.0.0.1:9100".parse().unwrap()),
        },
        trigger: "edit".into(),
    };
    h.core.input(apply, now);
    h.settle();
    // One leader of the removed app is reaped, its group not yet empty.
    let old = pid(&h, "old");
    h.processes.remove(&old);
    let exited = Input::Exited {
        pid: old,
        exit: Exit::Code(0),
        start_error: None,
    };
    h.core.input(exited, now);
    h.settle();
    assert!(h.core.app("old").unwrap().removed);
    assert_eq!(h.core.draining_groups().collect::<Vec<_>>(), [old]);
    survives(&mut h, |h| {
        let now = h.now;
        h.core.input(Input::GroupEmpty { pgid: old }, now);
        h.core.input(Input::Shutdown { why: "SIGTERM" }, now);
        h.settle();
        assert_eq!(h.core.phase(), Phase::ShuttingDown);
        wait(h, 3 * SEC);
    });
}
