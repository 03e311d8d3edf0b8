//! A core serialized and restored is the same core: the same down to its
//! `Debug`, and fed the same inputs afterwards it decides the same actions.

use std::str::FromStr;
use std::time::Duration;

use super::super::commands::Order;
use super::super::harness::{Harness, check_answer};
use super::super::worker::State;
use super::super::{Action, Core, Input, Phase};
use model::process::Exit;
use model::spec::{
    AppSpec, Condition, Dependency, Desired, HealthCheck, HealthSpec, Identity, ListenAddress,
    ListenSpec, LogFormat, LogSpec, MaxRestarts, OnDependencyRestart, Overlap, Probe, ProbeKind,
    ProbeSpec, Readiness, RestartPolicy, ScheduleSpec, Template, When,
};

mod format;
mod gates;
mod liveness;
mod rollouts;
mod workers;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn round_trip(core: &Core) -> Core {
    model::monotonic::set_anchor(std::time::Instant::now(), 1 << 40);
    let json = serde_json::to_vec(core).expect("a core serializes");
    let restored: Core = serde_json::from_slice(&json).expect("and deserializes");
    let again = serde_json::to_vec(&restored).expect("a restored core serializes");
    assert_eq!(
        String::from_utf8_lossy(&json),
        String::from_utf8_lossy(&again),
        "serializing the restored core gives the same text"
    );
    restored
}

/// Serialize `h`'s core and restore it; check that it is the same, then
/// that the two, resumed, decide the same under the inputs of `follow`.
fn survives(h: &mut Harness, follow: impl Fn(&mut Harness)) {
    assert!(h.core.take_actions().is_empty(), "the harness settled");
    // The turn's budget is not kept: a restored core begins a turn.
    h.core.begin_turn(crate::SPAWNS_PER_TURN);
    let restored = round_trip(&h.core);
    assert_eq!(format!("{:?}", h.core), format!("{restored:?}"));
    assert_eq!(restored.spawn_budget, super::super::SPAWNS_PER_TURN);

    let mut twin = h.around(restored);
    h.actions.clear();
    h.checks.clear();
    for side in [&mut *h, &mut twin] {
        let now = side.now;
        side.core.resumed(now);
    }
    assert_eq!(format!("{:?}", h.core), format!("{:?}", twin.core));
    for side in [&mut *h, &mut twin] {
        side.settle();
        follow(side);
    }
    assert!(!h.actions.is_empty(), "the follow-up did something");
    assert_eq!(h.actions, twin.actions);
    assert_eq!(format!("{:?}", h.core), format!("{:?}", twin.core));
    assert_eq!(h.core.anomalies(), 0);
}

/// Time passes through every moment something is due.
fn wait(h: &mut Harness, by: Duration) {
    h.advance(by, 50 * MS);
}

/// The first live pid of `app`.
fn pid(h: &Harness, app: &str) -> i32 {
    h.pids(app)[0]
}

fn command(h: &mut Harness, order: Order) {
    let now = h.now;
    h.core.command(order, now).expect("the command is taken");
    h.settle();
}

fn states(h: &Harness, app: &str) -> Vec<&'static str> {
    h.core
        .app(app)
        .map(|a| a.workers.values().map(|w| w.state.name()).collect())
        .unwrap_or_default()
}

fn web(instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.kill_timeout = 2 * SEC;
    spec
}

/// Crash, wait, crash: what every scenario goes on with.
fn crash_and_wait(h: &mut Harness) {
    wait(h, 3 * SEC);
    if let Some(&pid) = h.processes.keys().next() {
        h.exit(pid, 1);
    }
    wait(h, 40 * SEC);
}

fn scheduled(name: &str, when: When) -> AppSpec {
    let mut spec = AppSpec::with_defaults(name, &["job"], 1);
    spec.restart = RestartPolicy::Never;
    spec.ready = Readiness::Immediate;
    spec.schedule = Some(ScheduleSpec {
        when,
        overlap: Overlap::Queue,
        run_on_start: true,
    });
    spec
}
