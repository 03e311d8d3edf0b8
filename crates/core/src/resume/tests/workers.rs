//! Workers restored in every state: ready, starting, in backoff or failed,
//! stopping with their deadline, held.

use super::*;

#[test]
fn ready_instances() {
    let mut h = Harness::new(vec![web(3)]);
    wait(&mut h, 2 * SEC);
    assert_eq!(states(&h, "web"), ["ready"; 3]);
    survives(&mut h, crash_and_wait);
}

#[test]
fn starting_instances_then_not_ready_in_time() {
    let mut spec = web(2);
    spec.ready = Readiness::Notify;
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 2 * SEC);
    assert_eq!(states(&h, "web"), ["starting"; 2]);
    survives(&mut h, |h| {
        let leader = pid(h, "web");
        let now = h.now;
        let notified = Input::Notified {
            leader,
            uid: 1000,
            ready: true,
            status: Some("up".into()),
            watchdog: None,
            extend_timeout: None,
            injected: false,
        };
        h.core.input(notified, now);
        h.settle();
        // The other is not ready within `ready_timeout`.
        wait(h, 35 * SEC);
    });
}

#[test]
fn backoff_and_a_failed_worker() {
    let mut spec = web(2);
    spec.max_restarts = Some(MaxRestarts {
        count: 1,
        within: 60 * SEC,
    });
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, 2 * SEC);
    let first = pid(&h, "web");
    h.exit(first, 1);
    wait(&mut h, SEC);
    let again = *h.pids("web").last().unwrap();
    h.exit(again, 1);
    assert!(
        states(&h, "web").contains(&"failed"),
        "{:?}",
        states(&h, "web")
    );
    let other = pid(&h, "web");
    h.exit(other, 1);
    assert!(
        states(&h, "web").contains(&"backoff"),
        "{:?}",
        states(&h, "web")
    );
    survives(&mut h, crash_and_wait);
}

#[test]
fn a_stop_with_its_deadline_and_a_held_instance() {
    let mut h = Harness::new(vec![web(2), {
        let mut spec = AppSpec::with_defaults("api", &["api"], 1);
        spec.restart = RestartPolicy::OnFailure;
        spec
    }]);
    wait(&mut h, 2 * SEC);
    command(
        &mut h,
        Order::Hold {
            target: "api".into(),
        },
    );
    assert_eq!(states(&h, "api"), ["stopped (held)"]);
    h.signals_end = false;
    command(
        &mut h,
        Order::Restart {
            target: "web".into(),
        },
    );
    wait(&mut h, SEC);
    assert_eq!(states(&h, "web"), ["stopping"; 2]);
    survives(&mut h, |h| {
        // SIGKILL at the deadline, then the groups empty.
        wait(h, 2 * SEC);
        for pid in h.pids("web") {
            h.end(
                pid,
                Exit::Signal {
                    signal: 9,
                    core: false,
                },
            );
        }
        h.signals_end = true;
        h.settle();
        command(
            h,
            Order::Release {
                target: "api".into(),
            },
        );
        crash_and_wait(h);
    });
}
