//! Reconcile at scale, with no processes: 10,000 instances over 100 apps.
//!
//! An event marks only its own app dirty, so what one event costs is one app's
//! reconcile; the guard pass every 10 s reconciles all of them. Both are
//! measured here and printed (the figures are in BENCHMARKS.md); the bounds
//! asserted are generous, for slow CI machines.

use std::time::{Duration, Instant};

use supervise::reconcile::{Action, Target, reconcile};
use supervise::spec::{AppSpec, Readiness};
use supervise::worker::Worker;

const APPS: usize = 100;
const PER_APP: u32 = 100;

/// Every app fully started and ready.
fn fleet() -> (Vec<AppSpec>, Vec<Vec<Worker>>) {
    let t0 = Instant::now();
    let mut next_id = 1;
    let mut specs = Vec::new();
    let mut fleets = Vec::new();
    for a in 0..APPS {
        let mut spec = AppSpec::with_defaults(&format!("app{a}"), &["server"], PER_APP);
        spec.ready = Readiness::Immediate;
        let workers = (0..PER_APP)
            .map(|slot| {
                let mut worker = Worker::new(next_id, slot, 1);
                next_id += 1;
                worker.started(10_000 + next_id as i32, t0).unwrap();
                worker.ready(t0).unwrap();
                worker
            })
            .collect();
        specs.push(spec);
        fleets.push(workers);
    }
    (specs, fleets)
}

fn target(spec: &AppSpec) -> Target<'_> {
    Target {
        spec,
        generation: 1,
        rollout_halted: false,
        recreate: false,
    }
}

#[test]
fn ten_thousand_instances_reconcile_quickly_and_app_by_app() {
    let (specs, fleets) = fleet();
    let now = Instant::now();
    assert_eq!(fleets.iter().map(Vec::len).sum::<usize>(), 10_000);

    // A steady state needs nothing.
    for (spec, workers) in specs.iter().zip(&fleets) {
        assert!(reconcile(target(spec), workers, now).actions.is_empty());
    }

    // One event (a crash in app 42) concerns only app 42: reconciling it alone
    // yields the restart; no other app's input changed, so none is looked at.
    let mut crashed = fleets[42].clone();
    let rules = specs[42].restart_rules();
    crashed[7]
        .exited(supervise::worker::Exit::Code(1), now, &rules)
        .unwrap();
    let later = now + Duration::from_secs(1);
    let plan = reconcile(target(&specs[42]), &crashed, later);
    assert_eq!(plan.actions, [Action::Start { id: crashed[7].id }]);

    let rounds = 50;
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(reconcile(
            target(&specs[42]),
            std::hint::black_box(&crashed),
            later,
        ));
    }
    let one_app = start.elapsed() / rounds;

    let start = Instant::now();
    for _ in 0..rounds {
        for (spec, workers) in specs.iter().zip(&fleets) {
            std::hint::black_box(reconcile(
                target(spec),
                std::hint::black_box(workers),
                later,
            ));
        }
    }
    let full_pass = start.elapsed() / rounds;
    println!(
        "reconcile, 100 apps x 100 instances: one app (one event) {one_app:?}; the full pass over 10,000 instances {full_pass:?}"
    );
    assert!(
        full_pass < Duration::from_millis(500),
        "full pass {full_pass:?}"
    );
    assert!(
        one_app * 10 < full_pass,
        "one app {one_app:?} vs all {full_pass:?}"
    );
}
