//! When `READY=1` goes to systemd: with `all_ready`, or once every start is
//! decided, whatever the apps that never become ready.

use std::time::Duration;

use super::super::harness::Harness;
use crate::Event;
use model::spec::{AppSpec, Condition, Dependency, Readiness};

const STEP: Duration = Duration::from_millis(100);

fn app(name: &str, instances: u32, ready_after: Duration) -> AppSpec {
    let mut spec = AppSpec::with_defaults(name, &[name], instances);
    spec.ready = Readiness::Delay(ready_after);
    spec
}

fn depending(mut spec: AppSpec, on: &str) -> AppSpec {
    spec.depends_on = vec![Dependency {
        app: on.to_string(),
        condition: Condition::Ready,
    }];
    spec
}

/// How many times `READY=1` was told to systemd.
fn readies(h: &Harness) -> usize {
    h.actions
        .iter()
        .filter(|a| a.as_str() == r#"Systemd("READY=1")"#)
        .count()
}

fn started_partly(h: &Harness) -> Vec<Vec<String>> {
    h.events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::StartedPartly { not_ready } => Some(not_ready.clone()),
            _ => None,
        })
        .collect()
}

fn all_ready(h: &Harness) -> usize {
    h.count(|e| matches!(e, Event::AllReady))
}

#[test]
fn every_instance_ready_tells_systemd_once_with_all_ready() {
    let mut h = Harness::new(vec![app("web", 2, Duration::from_secs(1))]);
    assert_eq!(readies(&h), 0, "not before the instances are ready");
    h.advance(Duration::from_secs(2), STEP);
    assert_eq!((readies(&h), all_ready(&h)), (1, 1));
    assert!(started_partly(&h).is_empty());
    // A crash and a restart later: nothing more is told.
    let pid = h.pids("web")[0];
    h.exit(pid, 1);
    h.advance(Duration::from_secs(3), STEP);
    assert_eq!((readies(&h), all_ready(&h)), (1, 1));
}

#[test]
fn an_app_that_crashes_at_start_does_not_keep_the_supervisor_from_starting() {
    let mut h = Harness::new(vec![
        app("good", 1, Duration::from_secs(1)),
        app("bad", 2, Duration::from_secs(1)),
    ]);
    h.advance(Duration::from_millis(500), STEP);
    for pid in h.pids("bad") {
        h.end(pid, model::process::Exit::Code(1));
    }
    h.settle();
    assert_eq!(readies(&h), 0, "good is not ready yet");
    h.advance(Duration::from_millis(600), STEP);
    assert_eq!(readies(&h), 1, "{:?}", h.events);
    assert_eq!(
        started_partly(&h),
        vec![vec!["bad.0".to_string(), "bad.1".to_string()]]
    );
    assert_eq!(all_ready(&h), 0);
    // bad comes up after its restart: all_ready is said, READY=1 is not again.
    h.advance(Duration::from_secs(3), STEP);
    assert_eq!((readies(&h), all_ready(&h)), (1, 1));
    assert_eq!(started_partly(&h).len(), 1);
}

#[test]
fn an_instance_not_ready_in_time_has_had_its_start() {
    let mut never = app("never", 1, Duration::ZERO);
    never.ready = Readiness::Notify;
    never.ready_timeout = Duration::from_secs(2);
    let mut h = Harness::new(vec![never, app("good", 1, Duration::ZERO)]);
    h.advance(Duration::from_millis(1500), STEP);
    assert_eq!(readies(&h), 0, "still within its ready_timeout");
    h.advance(Duration::from_secs(1), STEP);
    assert_eq!(readies(&h), 1, "{:?}", h.events);
    assert_eq!(started_partly(&h), vec![vec!["never.0".to_string()]]);
}

#[test]
fn apps_waiting_along_a_chain_on_a_crashed_app_are_decided_too() {
    let mut h = Harness::new(vec![
        depending(app("front", 1, Duration::ZERO), "api"),
        depending(app("api", 1, Duration::ZERO), "db"),
        app("db", 1, Duration::from_secs(1)),
        app("other", 1, Duration::ZERO),
    ]);
    assert_eq!(readies(&h), 0);
    let db = h.pids("db")[0];
    h.exit(db, 1);
    assert_eq!(readies(&h), 1, "{:?}", h.events);
    assert_eq!(
        started_partly(&h),
        vec![vec![
            "front.0".to_string(),
            "api.0".to_string(),
            "db.0".to_string()
        ]]
    );
}

#[test]
fn an_app_waiting_on_one_still_starting_is_not_decided() {
    let mut h = Harness::new(vec![
        depending(app("api", 1, Duration::ZERO), "db"),
        app("db", 1, Duration::from_secs(2)),
    ]);
    h.advance(Duration::from_secs(1), STEP);
    assert_eq!(readies(&h), 0, "db is starting: api will start after it");
    h.advance(Duration::from_millis(1500), STEP);
    assert_eq!((readies(&h), all_ready(&h)), (1, 1));
    assert!(started_partly(&h).is_empty());
}

/// Apply `apps` as an edit of the file.
fn edit(h: &mut Harness, apps: Vec<AppSpec>) {
    let desired = model::spec::Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    let now = h.now;
    h.core.input(
        crate::Input::Apply {
            desired,
            trigger: "test".into(),
        },
        now,
    );
    h.settle();
}

/// What systemd was told, in order.
fn told(h: &Harness) -> Vec<&str> {
    h.actions
        .iter()
        .filter_map(|a| a.strip_prefix(r#"Systemd(""#)?.strip_suffix(r#"")"#))
        .collect()
}

#[test]
fn an_edit_before_the_start_is_told_is_part_of_the_start() {
    let mut h = Harness::new(vec![app("web", 1, Duration::from_secs(2))]);
    h.advance(Duration::from_millis(500), STEP);
    edit(&mut h, vec![app("web", 2, Duration::from_secs(2))]);
    assert_eq!(told(&h), Vec::<&str>::new(), "no reload before the start");
    h.advance(Duration::from_secs(3), STEP);
    assert_eq!(told(&h), vec!["READY=1"]);
    // Once started, an edit is a reload.
    edit(&mut h, vec![app("web", 3, Duration::from_secs(2))]);
    assert_eq!(told(&h), vec!["READY=1", "RELOADING=1", "READY=1"]);
}

#[test]
fn started_partly_names_a_bounded_few_and_counts_the_rest() {
    let mut h = Harness::new(vec![app("many", 20, Duration::from_secs(1))]);
    for pid in h.pids("many") {
        h.end(pid, model::process::Exit::Code(1));
    }
    h.settle();
    let said = started_partly(&h);
    assert_eq!(said.len(), 1, "{said:?}");
    let names = &said[0];
    assert_eq!(names.len(), super::MAX_NOT_READY_NAMED + 1, "{names:?}");
    assert_eq!(names[0], "many.0");
    assert_eq!(names.last().map(String::as_str), Some("and 4 more"));
}

#[test]
fn an_instance_held_by_stop_is_not_named_not_ready() {
    let mut h = Harness::new(vec![app("web", 2, Duration::from_secs(1))]);
    let now = h.now;
    h.core
        .command(
            crate::commands::Order::Hold {
                target: "web.1".into(),
            },
            now,
        )
        .expect("the command is taken");
    h.settle();
    let crashed = h.pids("web")[0];
    h.end(crashed, model::process::Exit::Code(1));
    h.settle();
    assert_eq!(started_partly(&h), vec![vec!["web.0".to_string()]]);
}

/// An app of `instances` whose every slot but the last crashes at once:
/// the start is decided only when the last slot is, whether the slots are
/// counted in one word (up to 64) or one by one (more).
fn the_last_slot_decides(instances: u32) {
    let mut h = Harness::new(vec![app("many", instances, Duration::from_secs(1))]);
    // Spawns go out at most `SPAWNS_PER_TURN` a turn: more turns, each
    // due at once, for the rest.
    for _ in 0..instances as usize / crate::SPAWNS_PER_TURN {
        h.core.begin_turn(crate::SPAWNS_PER_TURN);
        h.advance(Duration::from_millis(1), Duration::from_millis(1));
    }
    let mut pids = h.pids("many");
    assert_eq!(pids.len(), instances as usize);
    pids.sort_unstable();
    let last = pids.pop().expect("the app has instances");
    for pid in pids {
        h.end(pid, model::process::Exit::Code(1));
    }
    h.settle();
    assert_eq!(readies(&h), 0, "{instances}: one slot is still starting");
    h.end(last, model::process::Exit::Code(1));
    h.settle();
    assert_eq!(readies(&h), 1, "{instances}: every slot has had its start");
    assert_eq!(started_partly(&h).len(), 1);
}

#[test]
fn the_start_is_decided_by_the_last_slot_on_either_side_of_a_word() {
    for instances in [1, 2, 63, 64, 65, 130] {
        the_last_slot_decides(instances);
    }
}
