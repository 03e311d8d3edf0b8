//! Playing a schedule against the real supervisor in a [`sim::World`],
//! checking the invariants after every step and, at the end, that the
//! system converges to the file and shuts down in time; and what a failing
//! schedule comes to: shrunk to a minimal trace that fails the same way,
//! and reported with its seed, its apps and that trace. The seeded sweeps
//! and the replayed found cases share it.

use std::panic::{AssertUnwindSafe, catch_unwind};

use model::spec::AppSpec;
use sim::{Step, Violation, World};

use crate::schedule::{Groups, dependencies_of, groups_of, schedule};

/// Play a schedule; the first violation (or panic) and the step it came at.
pub(crate) fn play(
    apps: &[AppSpec],
    steps: &[Step],
    groups: Groups,
) -> Result<(), (usize, Violation)> {
    play_with(apps, steps, groups, false)
}

/// Play a schedule; `verbose`: print each step and the slots after it.
fn play_with(
    apps: &[AppSpec],
    steps: &[Step],
    groups: Groups,
    verbose: bool,
) -> Result<(), (usize, Violation)> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut world = match groups {
            Groups::Polled => World::new(apps.to_vec()),
            Groups::Announced => World::with_cgroups(apps.to_vec()),
        };
        let with_history = |world: &World, (at, violation): (usize, Violation)| {
            let history = world.history();
            let tail = &history[history.len().saturating_sub(40)..];
            (
                at,
                Violation(format!("{}\n  last effects: {tail:#?}", violation.0)),
            )
        };
        world.check().map_err(|v| with_history(&world, (0, v)))?;
        for (index, step) in steps.iter().enumerate() {
            let result = world.step(step.clone());
            if verbose {
                println!("step {}: {step:?}", index + 1);
                for app in world.supervisor.core().apps() {
                    println!("  {}: {:?}", app.spec.name, world.slots(&app.spec.name));
                }
            }
            result.map_err(|v| with_history(&world, (index + 1, v)))?;
        }
        world
            .converges()
            .map_err(|v| with_history(&world, (steps.len() + 1, v)))?;
        world
            .shuts_down()
            .map_err(|v| with_history(&world, (steps.len() + 2, v)))
    }));
    match outcome {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err((steps.len() + 3, Violation(format!("panic: {message}"))))
        }
    }
}

/// What kind of failure a violation is, for the shrinker to keep: its
/// first words, without their numbers.
fn kind_of(violation: &Violation) -> String {
    violation
        .0
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .take(60)
        .collect()
}

/// Drop steps while the schedule still fails the same way (chunks, then
/// one by one).
fn shrink(
    apps: &[AppSpec],
    mut steps: Vec<Step>,
    groups: Groups,
    failure: &Violation,
) -> Vec<Step> {
    let kind = kind_of(failure);
    let mut budget = 3000;
    let mut chunk = steps.len() / 2;
    while chunk >= 1 && budget > 0 {
        let mut start = 0;
        let mut removed = false;
        while start < steps.len() && budget > 0 {
            budget -= 1;
            let mut candidate = steps.clone();
            let end = (start + chunk).min(candidate.len());
            candidate.drain(start..end);
            let same = play(apps, &candidate, groups)
                .err()
                .is_some_and(|(_, violation)| kind_of(&violation) == kind);
            if same {
                steps = candidate;
                removed = true;
            } else {
                start += chunk;
            }
        }
        if !removed {
            chunk /= 2;
        }
    }
    steps
}

pub(crate) fn check_seed(seed: u64) {
    check_schedule(seed, dependencies_of(seed));
}

/// A seed found before files had dependencies, replayed with the schedule
/// it was found with (the seeds of the third bit have others now).
pub(crate) fn check_seed_found_before_dependencies(seed: u64) {
    check_schedule(seed, false);
}

fn check_schedule(seed: u64, dependencies: bool) {
    let (apps, steps) = schedule(seed, dependencies);
    let groups = groups_of(seed);
    if let Err(failure) = play(&apps, &steps, groups) {
        report(seed, dependencies, &apps, &steps, failure);
    }
}

/// Shrink a failing schedule and panic with the failure and the minimal trace.
pub(crate) fn report(
    seed: u64,
    dependencies: bool,
    apps: &[AppSpec],
    steps: &[Step],
    (at, violation): (usize, Violation),
) -> ! {
    let groups = groups_of(seed);
    let minimal = shrink(apps, steps.to_vec(), groups, &violation);
    let verbose = std::env::var_os("SIM_VERBOSE").is_some();
    if verbose {
        // The supervisor's log, as the minimal trace plays.
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .without_time()
            .try_init();
    }
    let (_, minimal_violation) = play_with(apps, &minimal, groups, verbose)
        .err()
        .unwrap_or((at, violation.clone()));
    panic!(
        "seed {seed} ({groups:?} groups, dependencies {dependencies}) fails at step {at} of {}: {}\n\
         replay: SIM_SEED={seed} cargo test -p supervise-sim --test it\n\
         apps: {:#?}\n\
         minimal trace ({} steps, failing with: {}):\n{:#?}",
        steps.len(),
        violation.0,
        apps.iter()
            .map(|a| (
                (
                    &a.name,
                    a.instances,
                    &a.ready,
                    a.reload,
                    a.restart,
                    a.max_restarts.map(|m| m.count),
                    a.kill_timeout,
                    &a.health,
                    a.max_memory,
                    a.process.watchdog
                ),
                (
                    a.process
                        .argv
                        .iter()
                        .map(|w| w.expand(0))
                        .collect::<Vec<_>>(),
                    &a.depends_on,
                    a.on_dependency_restart,
                    &a.schedule
                )
            ))
            .collect::<Vec<_>>(),
        minimal.len(),
        minimal_violation.0,
        minimal
    );
}

/// Replay a minimal trace a seed once failed with; it must hold now, with
/// emptied groups polled and announced.
pub(crate) fn replay(apps: Vec<AppSpec>, steps: Vec<Step>) {
    for groups in [Groups::Polled, Groups::Announced] {
        if let Err((at, violation)) = play(&apps, &steps, groups) {
            panic!("{groups:?}: step {at}: {}", violation.0);
        }
    }
}
