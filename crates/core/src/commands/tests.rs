//! Holds (`stop APP[.N]`) against rollouts, `reload` and `restart`: a held
//! slot starts nothing until `start` (issue 28, finding 1).

use std::time::Duration;

use super::super::harness::Harness;
use super::{Order, Reply};
use model::spec::AppSpec;

const MS: Duration = Duration::from_millis(1);

/// `web` of `instances`, ready 1 s after its start (the default).
fn web(instances: u32) -> Harness {
    let mut h = Harness::new(vec![AppSpec::with_defaults("web", &["server"], instances)]);
    h.advance(1500 * MS, 100 * MS);
    assert_eq!(h.pids("web").len(), instances as usize);
    h
}

fn command(h: &mut Harness, order: Order) -> String {
    let now = h.now;
    let reply = h.core.command(order, now);
    h.settle();
    match reply {
        Ok(Reply::Done { message }) => message,
        Ok(Reply::Reloading { apps }) => format!("reloading {apps:?}"),
        Err(refused) => format!("refused: {refused}"),
    }
}

fn hold(target: &str) -> Order {
    Order::Hold {
        target: target.into(),
    }
}

fn release(target: &str) -> Order {
    Order::Release {
        target: target.into(),
    }
}

/// `(slot, generation, state)` of web's workers, sorted.
fn slots(h: &Harness) -> Vec<(u32, u64, &'static str)> {
    let mut slots: Vec<_> = h
        .core
        .app("web")
        .map(|a| {
            a.workers
                .values()
                .map(|w| (w.slot, w.generation, w.state.name()))
                .collect()
        })
        .unwrap_or_default();
    slots.sort();
    slots
}

/// Spawns of `web` since the `since`-th.
fn spawned_since(h: &Harness, since: usize) -> usize {
    h.spawns.len() - since
}

#[test]
fn stop_during_a_rollout_holds_the_slots_it_had_not_reached() {
    let mut h = web(4);
    assert_eq!(
        command(&mut h, Order::Reload { app: "web".into() }),
        "reloading [\"web\"]"
    );
    // The first replacement starts beside the four old ones.
    assert_eq!(h.pids("web").len(), 5);
    let message = command(&mut h, hold("web"));
    assert_eq!(message, "web: stop (held) 4 instances");
    assert!(h.pids("web").is_empty(), "{:?}", slots(&h));
    let spawns = h.spawns.len();
    h.advance(Duration::from_secs(30), 100 * MS);
    assert_eq!(
        spawned_since(&h, spawns),
        0,
        "a held slot started again: {:?}",
        slots(&h)
    );
    assert!(
        slots(&h)
            .iter()
            .all(|(_, _, state)| *state == "stopped (held)"),
        "{:?}",
        slots(&h)
    );
    // `start` releases them, and the rollout goes on to its end.
    assert_eq!(command(&mut h, release("web")), "web: start 4 instances");
    h.advance(Duration::from_secs(10), 100 * MS);
    assert_eq!(
        slots(&h),
        (0..4).map(|s| (s, 2, "ready")).collect::<Vec<_>>()
    );
    assert_eq!(h.core.anomalies(), 0);
}

#[test]
fn stop_of_one_instance_during_a_rollout_holds_it_while_the_rest_roll_out() {
    let mut h = web(4);
    command(&mut h, Order::Reload { app: "web".into() });
    assert_eq!(
        command(&mut h, hold("web.3")),
        "web.3: stop (held) 1 instance"
    );
    h.advance(Duration::from_secs(30), 100 * MS);
    assert_eq!(
        slots(&h),
        [
            (0, 2, "ready"),
            (1, 2, "ready"),
            (2, 2, "ready"),
            (3, 1, "stopped (held)")
        ]
    );
    assert_eq!(h.pids("web").len(), 3);
    command(&mut h, release("web.3"));
    h.advance(Duration::from_secs(5), 100 * MS);
    assert_eq!(
        slots(&h),
        (0..4).map(|s| (s, 2, "ready")).collect::<Vec<_>>()
    );
    assert_eq!(h.core.anomalies(), 0);
}

#[test]
fn reload_does_not_start_an_instance_held_by_stop() {
    let mut h = web(3);
    command(&mut h, hold("web.1"));
    assert_eq!(h.pids("web").len(), 2);
    command(&mut h, Order::Reload { app: "web".into() });
    h.advance(Duration::from_secs(30), 100 * MS);
    assert_eq!(
        slots(&h),
        [(0, 2, "ready"), (1, 1, "stopped (held)"), (2, 2, "ready")]
    );
    assert_eq!(h.pids("web").len(), 2);
    assert_eq!(h.core.anomalies(), 0);
}

#[test]
fn restart_leaves_a_held_instance_held_and_says_so() {
    let mut h = web(3);
    command(&mut h, hold("web.2"));
    let message = command(
        &mut h,
        Order::Restart {
            target: "web".into(),
        },
    );
    assert_eq!(
        message,
        "web: restart 2 instances (web.2 is held: `supervise start web.2` releases it)"
    );
    h.advance(Duration::from_secs(10), 100 * MS);
    assert_eq!(
        slots(&h),
        [(0, 1, "ready"), (1, 1, "ready"), (2, 1, "stopped (held)")]
    );
    let message = command(
        &mut h,
        Order::Restart {
            target: "web.2".into(),
        },
    );
    assert_eq!(
        message,
        "refused: web.2 is held: `supervise start web.2` releases it"
    );
    h.advance(Duration::from_secs(10), 100 * MS);
    assert_eq!(h.pids("web").len(), 2);
}

#[test]
fn stop_in_a_rollout_that_recreates_holds_slots_whose_worker_was_leaving() {
    // With `recreate` (an overlapping listen address), every old worker is
    // stopped first, for good, and the new ones come after: a `stop` while
    // the old ones drain finds no worker of its own in the slot to hold.
    let mut h = web(2);
    h.signals_end = false;
    let app = h.core.apps.get_mut("web").unwrap();
    let process = app.spec.process.clone();
    app.bump_generation(process, true);
    h.settle();
    assert!(
        slots(&h).iter().all(|(_, _, state)| *state == "stopping"),
        "{:?}",
        slots(&h)
    );
    assert_eq!(command(&mut h, hold("web")), "web: stop (held) 2 instances");
    for pid in h.pids("web") {
        h.exit(pid, 0);
    }
    h.signals_end = true;
    let spawns = h.spawns.len();
    h.advance(Duration::from_secs(30), 100 * MS);
    assert_eq!(spawned_since(&h, spawns), 0, "{:?}", slots(&h));
    command(&mut h, release("web"));
    h.advance(Duration::from_secs(5), 100 * MS);
    assert_eq!(slots(&h), [(0, 2, "ready"), (1, 2, "ready")]);
    assert_eq!(h.core.anomalies(), 0);
}

#[test]
fn a_crashed_instance_stopped_while_it_backs_off_stays_held() {
    let mut h = web(2);
    let pid = h.pids("web")[0];
    h.exit(pid, 1);
    assert!(slots(&h).iter().any(|(_, _, s)| *s == "backoff"));
    command(&mut h, hold("web"));
    h.advance(Duration::from_secs(30), 100 * MS);
    assert!(h.pids("web").is_empty());
    command(&mut h, Order::Reload { app: "web".into() });
    h.advance(Duration::from_secs(30), 100 * MS);
    assert!(h.pids("web").is_empty(), "{:?}", slots(&h));
}

#[test]
fn a_state_from_an_image_without_held_slots_holds_its_held_workers() {
    let mut h = web(3);
    command(&mut h, hold("web.1"));
    model::monotonic::set_anchor(std::time::Instant::now(), 1 << 40);
    let mut json = serde_json::to_value(&h.core).expect("a core serializes");
    // As an older image wrote it: no `held` of the app.
    let removed = json["apps"]["web"]
        .as_object_mut()
        .and_then(|app| app.remove("held"));
    assert_eq!(removed, Some(serde_json::json!([1])));
    let mut restored: crate::Core = serde_json::from_value(json).expect("it deserializes");
    let now = h.now;
    restored.resumed(now);
    let mut h = h.around(restored);
    h.settle();
    command(&mut h, Order::Reload { app: "web".into() });
    h.advance(Duration::from_secs(10), 100 * MS);
    assert_eq!(
        slots(&h),
        [(0, 2, "ready"), (1, 1, "stopped (held)"), (2, 2, "ready")]
    );
    assert_eq!(h.core.anomalies(), 0);
}

#[test]
fn restart_of_an_app_held_whole_is_refused_and_names_a_bounded_few() {
    let mut h = web(12);
    command(&mut h, hold("web"));
    let message = command(
        &mut h,
        Order::Restart {
            target: "web".into(),
        },
    );
    assert_eq!(
        message,
        "refused: web.0, web.1, web.2, web.3, web.4, web.5, web.6, web.7, and 4 more are held: `supervise start web` releases them"
    );
    assert!(h.pids("web").is_empty());
}
