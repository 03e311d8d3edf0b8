//! The deterministic simulation's long runs: the real supervisor loop over
//! a fake process table (`sim`), played with seeded random schedules
//! ([`crate::schedule`]) on every core, with and without upgrades of the
//! supervisor between its steps, and the simulation at scale (a thousand
//! instances rolled out, ten thousand reconciled against the clock). These
//! are the CPU-bound tests `.config/nextest.toml` gives every thread, by
//! these paths. After every step the invariants are checked; at the end
//! the system must converge to the file and shut down in time.
//!
//! CI runs [`SEEDS`] fixed seeds. More: `SIM_SEEDS=100000 cargo test --release -p
//! supervise-sim --test it simulation::` (RELIABILITY.md has the figures); `SIM_FIRST=N` starts
//! elsewhere; a failing seed prints itself and a minimal trace, and
//! `SIM_SEED=N` replays it alone (with `SIM_VERBOSE=1`, its minimal trace
//! plays step by step with the supervisor's log); `SIM_KEEP_GOING=1` lists
//! every failing seed of a run instead of stopping at the first.

use std::time::{Duration, Instant};

use model::spec::{AppSpec, Readiness, ReloadLimits};
use sim::{Edit, Step, Violation, World, app};
use supervise_core::reconcile::{Step as Decide, Target, Workers, reconcile};
use supervise_core::worker::Worker;

use crate::play::{check_seed, play, report};
use crate::schedule::{Groups, dependencies_of, groups_of, schedule};

/// Seeds CI runs.
const SEEDS: u64 = 2000;

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The failure of a seed of a sweep, shrunk and reported.
fn sweep_failed(seed: u64, failure: (usize, Violation)) -> ! {
    let dependencies = dependencies_of(seed);
    let (apps, steps) = schedule(seed, dependencies);
    report(seed, dependencies, &apps, &steps, failure)
}

/// `SIM_KEEP_GOING=1`: play every seed (without shrinking) and list each
/// failure's seed, step and first line, to see the classes of failures of a
/// large run at once.
fn survey(first: u64, seeds: u64) {
    let started = Instant::now();
    let mut failed = Vec::new();
    for seed in first..first + seeds {
        let (apps, steps) = schedule(seed, dependencies_of(seed));
        if let Err((at, violation)) = play(&apps, &steps, groups_of(seed)) {
            let what = violation.0.lines().next().unwrap_or_default().to_string();
            println!("seed {seed}: step {at}: {what}");
            failed.push(seed);
        }
    }
    println!(
        "{seeds} seeds from {first}: {} failed ({:.1?})",
        failed.len(),
        started.elapsed()
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

/// Play `play` for each seed of `seeds` on as many threads as there are
/// cores (each seed is its own world: nothing is shared), each thread
/// taking the next seed not yet played. The outcomes in seed order, up to
/// the lowest seed that failed: a thread stops at a seed past the lowest
/// failure found so far, so that seed is the same as in a run on one
/// thread, however the seeds were shared out.
fn on_every_core<T: Send, F: Send>(
    seeds: std::ops::Range<u64>,
    play: impl Fn(u64) -> Result<T, F> + Sync,
) -> Result<Vec<T>, (u64, F)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let next = AtomicU64::new(seeds.start);
    let lowest_failure = AtomicU64::new(u64::MAX);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut outcomes: Vec<(u64, Result<T, F>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut played = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= seeds.end || seed > lowest_failure.load(Ordering::Relaxed) {
                            return played;
                        }
                        let outcome = play(seed);
                        if outcome.is_err() {
                            lowest_failure.fetch_min(seed, Ordering::Relaxed);
                        }
                        played.push((seed, outcome));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a seed's thread panicked"))
            .collect()
    });
    outcomes.sort_by_key(|(seed, _)| *seed);
    let mut passed = Vec::new();
    for (seed, outcome) in outcomes {
        match outcome {
            Ok(value) => passed.push(value),
            Err(failure) => return Err((seed, failure)),
        }
    }
    Ok(passed)
}

/// The supervisor upgrades itself in the schedules too (one wait in five
/// is preceded by an upgrade: its state written out and read back, what an
/// exec loses lost): every invariant holds across them, with workers
/// crashing, rolling out and shutting down around them.
#[test]
fn seeded_schedules_upgrade_the_supervisor_and_keep_every_invariant() {
    let played = on_every_core(1..201, |seed| {
        let (apps, steps) = schedule(seed, dependencies_of(seed));
        let mut world = match groups_of(seed) {
            Groups::Polled => World::new(apps.clone()),
            Groups::Announced => World::with_cgroups(apps.clone()),
        };
        for (index, step) in steps.iter().enumerate() {
            world
                .step(step.clone())
                .map_err(|violation| (index + 1, violation))?;
        }
        Ok(world.upgrades)
    });
    let upgrades: u64 = match played {
        Ok(upgrades) => upgrades.into_iter().sum(),
        Err((seed, failure)) => {
            let dependencies = dependencies_of(seed);
            let (apps, steps) = schedule(seed, dependencies);
            report(seed, dependencies, &apps, &steps, failure)
        }
    };
    assert!(upgrades > 1000, "only {upgrades} upgrades in 200 seeds");
    println!("200 seeds: {upgrades} upgrades, every invariant held");
}

#[test]
fn seeded_schedules_keep_every_invariant() {
    if let Some(seed) = env_number("SIM_SEED") {
        check_seed(seed);
        println!("seed {seed}: ok");
        return;
    }
    let first = env_number("SIM_FIRST").unwrap_or(1);
    let seeds = env_number("SIM_SEEDS").unwrap_or(SEEDS);
    let started = Instant::now();
    if std::env::var_os("SIM_KEEP_GOING").is_some() {
        return survey(first, seeds);
    }
    let played = on_every_core(first..first + seeds, |seed| {
        let (apps, steps) = schedule(seed, dependencies_of(seed));
        play(&apps, &steps, groups_of(seed))
    });
    if let Err((seed, failure)) = played {
        sweep_failed(seed, failure);
    }
    println!(
        "{seeds} seeds from {first}: every invariant held ({:.1?})",
        started.elapsed()
    );
}

#[test]
fn an_app_of_a_thousand_instances_rolls_out_within_its_bounds() {
    let mut spec = app("big", 1000, Readiness::Delay(Duration::from_millis(100)));
    spec.reload = ReloadLimits {
        max_surge: 50,
        max_unavailable: 10,
    };
    let started = Instant::now();
    let mut world = World::new(vec![spec]);
    world
        .step(Step::Wait(100))
        .unwrap_or_else(|v| panic!("{}", v.0));
    let ready = |world: &World, generation: u64| {
        world
            .slots("big")
            .iter()
            .filter(|s| s.1 == generation && s.2 == "ready")
            .count()
    };
    assert_eq!(ready(&world, 1), 1000);
    let up = started.elapsed();
    world
        .step(Step::Edit(Edit::Env { app: 0, value: 2 }))
        .unwrap_or_else(|v| panic!("{}", v.0));
    for _ in 0..2000 {
        if ready(&world, 2) == 1000 && world.slots("big").len() == 1000 {
            break;
        }
        world
            .step(Step::Wait(50))
            .unwrap_or_else(|v| panic!("{}", v.0));
    }
    assert_eq!(ready(&world, 2), 1000);
    world.shuts_down().unwrap_or_else(|v| panic!("{}", v.0));
    println!(
        "1,000 instances in the simulation: started and ready in {up:.1?}, rolled out and shut down in {:.1?} (wall time)",
        started.elapsed() - up
    );
}

#[test]
fn ten_thousand_instances_reconcile_quickly_and_app_by_app() {
    const APPS: usize = 100;
    const PER_APP: u32 = 100;
    let t0 = Instant::now();
    let mut next_id = 1;
    let fleet: Vec<(AppSpec, Workers)> = (0..APPS)
        .map(|a| {
            let mut spec = AppSpec::with_defaults(&format!("app{a}"), &["server"], PER_APP);
            spec.ready = Readiness::Immediate;
            let workers = (0..PER_APP)
                .map(|slot| {
                    let mut worker = Worker::new(next_id, slot, 1);
                    worker.begin_start().unwrap();
                    worker.spawned(10_000 + next_id as i32, t0).unwrap();
                    worker.exec_succeeded().unwrap();
                    worker.ready(t0).unwrap();
                    next_id += 1;
                    (worker.id, worker)
                })
                .collect();
            (spec, workers)
        })
        .collect();
    let target = |spec| Target {
        spec,
        generation: 1,
        rollout_halted: false,
        recreate: false,
        winding_down: false,
        may_start: true,
        holding: false,
        held: &supervise_core::reconcile::NOTHING_HELD,
    };
    for (spec, workers) in &fleet {
        assert!(reconcile(target(spec), workers, t0).steps.is_empty());
    }
    // A crash in app 42 concerns only app 42: reconciling it alone yields the restart.
    let mut crashed = fleet[42].1.clone();
    let rules = supervise_core::worker::RestartRules::of(&fleet[42].0);
    let id = *crashed.keys().nth(7).unwrap();
    crashed
        .get_mut(&id)
        .unwrap()
        .exited(model::process::Exit::Code(1), None, t0, &rules)
        .unwrap();
    let later = t0 + Duration::from_secs(1);
    let plan = reconcile(target(&fleet[42].0), &crashed, later);
    assert_eq!(plan.steps, [Decide::Start { id }]);

    let rounds = 50;
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(reconcile(
            target(&fleet[42].0),
            std::hint::black_box(&crashed),
            later,
        ));
    }
    let one_app = start.elapsed() / rounds;
    let start = Instant::now();
    for _ in 0..rounds {
        for (spec, workers) in &fleet {
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
        one_app * 10 < full_pass,
        "one app {one_app:?} vs all {full_pass:?}"
    );
}
