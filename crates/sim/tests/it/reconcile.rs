//! Reconcile, played through the real supervisor over the fake process table
//! ([`sim::World`]) on a simulated clock, with the simulation's invariants
//! checked after every step. (The pure function on its own, where one call
//! is the point, is tested in the core.)

use std::time::Duration;

use model::Signal;
use model::process::Exit;
use model::protocol::Command;
use model::spec::AppSpec;
use model::spec::{ListenAddress, ListenSpec, Readiness, ReloadLimits};
use sim::fake::Behaviour;
use sim::{CommandKind, Edit, Step, World, app};
use supervise_core::worker::Outcome;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn world(instances: u32, ready: Readiness) -> World {
    World::new(vec![app("web", instances, ready)])
}

/// A step that must keep every invariant.
fn step(world: &mut World, step: Step) {
    if let Err(violation) = world.step(step) {
        panic!(
            "{}\ntrace: {:?}\nhistory: {:#?}",
            violation.0,
            world.trace,
            world.history()
        );
    }
}

fn wait(world: &mut World, millis: u64) {
    step(world, Step::Wait(millis));
}

fn ready(n: u32, generation: u64) -> Vec<(u32, u64, &'static str)> {
    (0..n).map(|slot| (slot, generation, "ready")).collect()
}

fn worker_id(world: &World, slot: u32) -> u64 {
    world
        .supervisor
        .core()
        .app("web")
        .unwrap()
        .workers
        .values()
        .find(|w| w.slot == slot)
        .unwrap()
        .id
}

fn pid_of(world: &World, slot: u32) -> i32 {
    world
        .supervisor
        .core()
        .app("web")
        .unwrap()
        .workers
        .values()
        .find(|w| w.slot == slot)
        .and_then(|w| w.state.pid())
        .unwrap()
}

/// The file with `web` changed by `change`.
fn edit(world: &mut World, change: impl FnOnce(&mut AppSpec)) {
    let mut apps = world.desired.apps.clone();
    change(&mut apps[0]);
    world.apply(apps);
    world.deliver();
    if let Err(violation) = world.check() {
        panic!("{}", violation.0);
    }
}

#[test]
fn starts_every_slot_and_marks_them_ready_once_the_program_runs() {
    let w = world(3, Readiness::Immediate);
    assert_eq!(w.slots("web"), ready(3, 1));
}

#[test]
fn a_readiness_delay_is_waited_for() {
    let mut w = world(1, Readiness::Delay(Duration::from_secs(1)));
    assert_eq!(w.slots("web"), [(0, 1, "starting")]);
    wait(&mut w, 999);
    assert_eq!(w.slots("web"), [(0, 1, "starting")]);
    wait(&mut w, 1);
    assert_eq!(w.slots("web"), ready(1, 1));
}

#[test]
fn not_ready_within_the_timeout_is_a_failed_start() {
    let mut w = world(1, Readiness::Notify);
    wait(&mut w, 2999);
    assert_eq!(w.slots("web"), [(0, 1, "starting")]);
    wait(&mut w, 1);
    assert_eq!(w.slots("web"), [(0, 1, "backoff")]);
    let worker = w
        .supervisor
        .core()
        .app("web")
        .unwrap()
        .workers
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(worker.last_outcome, Some(Outcome::NotReady));
    assert_eq!(worker.restarts, 1);
}

#[test]
fn a_crashed_worker_restarts_exactly_when_its_backoff_is_over() {
    let mut w = world(1, Readiness::Immediate);
    let id = worker_id(&w, 0);
    step(
        &mut w,
        Step::Crash {
            process: 0,
            code: 2,
        },
    );
    assert_eq!(w.slots("web"), [(0, 1, "backoff")]);
    assert_eq!(w.supervisor.next_wake(), w.now() + ms(100));
    wait(&mut w, 99);
    assert_eq!(w.slots("web"), [(0, 1, "backoff")]);
    wait(&mut w, 1);
    assert_eq!(w.slots("web"), ready(1, 1));
    assert_eq!(worker_id(&w, 0), id, "the same worker restarts");
}

#[test]
fn scaling_down_stops_the_highest_slots_first() {
    let mut w = world(4, Readiness::Immediate);
    let (three, two) = (pid_of(&w, 3), pid_of(&w, 2));
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 2,
        }),
    );
    let stops: Vec<i32> = w
        .fake()
        .signals
        .iter()
        .filter(|(_, s)| *s == Signal::SIGTERM)
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(stops, [three, two]);
    wait(&mut w, 10);
    assert_eq!(w.slots("web"), ready(2, 1));
}

#[test]
fn scaling_to_zero_and_back() {
    let mut w = world(2, Readiness::Immediate);
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 0,
        }),
    );
    wait(&mut w, 10);
    assert!(w.slots("web").is_empty());
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 3,
        }),
    );
    assert_eq!(w.slots("web"), ready(3, 1));
}

#[test]
fn a_stop_that_outlives_kill_timeout_becomes_a_kill_never_before() {
    let mut w = world(1, Readiness::Immediate);
    step(
        &mut w,
        Step::Crash {
            process: 0,
            code: 2,
        },
    );
    step(
        &mut w,
        Step::Plan(Behaviour {
            ignores_stop: true,
            ..Behaviour::default()
        }),
    );
    wait(&mut w, 100);
    let pid = pid_of(&w, 0);
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 0,
        }),
    );
    wait(&mut w, 1999);
    assert!(
        !w.fake().signals.contains(&(pid, Signal::SIGKILL)),
        "never a SIGKILL before kill_timeout"
    );
    assert_eq!(w.slots("web"), [(0, 1, "stopping")]);
    wait(&mut w, 1);
    assert!(w.fake().signals.contains(&(pid, Signal::SIGKILL)));
    assert!(w.slots("web").is_empty());
}

#[test]
fn workers_in_backoff_above_the_count_are_forgotten() {
    let mut w = world(2, Readiness::Immediate);
    let pid = pid_of(&w, 1);
    w.fake().crash(pid, Exit::Code(1));
    w.deliver();
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 1,
        }),
    );
    assert_eq!(w.slots("web"), ready(1, 1));
    wait(&mut w, 60_000);
    assert_eq!(
        w.slots("web"),
        ready(1, 1),
        "nothing respawned after removal"
    );
}

#[test]
fn failed_and_exited_workers_stay_until_the_definition_changes() {
    let mut w = World::new(vec![{
        let mut spec = app("web", 2, Readiness::Immediate);
        spec.restart = model::spec::RestartPolicy::Never;
        spec
    }]);
    let pid = pid_of(&w, 0);
    w.fake().crash(pid, Exit::Code(0));
    w.deliver();
    wait(&mut w, 3_600_000);
    assert_eq!(w.slots("web"), [(0, 1, "completed"), (1, 1, "ready")]);
    let pid = pid_of(&w, 1);
    w.fake().crash(pid, Exit::Code(3));
    w.deliver();
    wait(&mut w, 10);
    assert_eq!(w.slots("web"), [(0, 1, "completed"), (1, 1, "exited")]);
    // A policy edit gives the failed one a fresh start; the one that
    // completed stays done: a one-shot runs again only for a new definition.
    step(
        &mut w,
        Step::Edit(Edit::KillTimeout {
            app: 0,
            millis: 700,
        }),
    );
    wait(&mut w, 10);
    assert_eq!(w.slots("web"), [(0, 1, "completed"), (1, 1, "ready")]);
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    wait(&mut w, 10);
    assert_eq!(
        w.slots("web"),
        ready(2, 2),
        "a fresh start with the new definition"
    );
}

/// Play a whole rollout with a readiness delay, checking the invariants
/// (surge and unavailability bounds among them) every 50 ms.
fn rollout(instances: u32, surge: u32, unavailable: u32) -> World {
    let mut spec = app("web", instances, Readiness::Delay(ms(300)));
    spec.reload = ReloadLimits {
        max_surge: surge,
        max_unavailable: unavailable,
    };
    let mut w = World::new(vec![spec]);
    wait(&mut w, 300);
    assert_eq!(w.slots("web"), ready(instances, 1));
    let old = w.pids("web");
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    for _ in 0..200 {
        if w.slots("web") == ready(instances, 2) {
            break;
        }
        wait(&mut w, 50);
    }
    assert_eq!(
        w.slots("web"),
        ready(instances, 2),
        "{instances}/{surge}/{unavailable}: {:#?}",
        w.history()
    );
    assert!(w.pids("web").iter().all(|p| !old.contains(p)));
    w
}

#[test]
fn rolling_replacement_respects_surge_and_unavailability() {
    for instances in 1..=5 {
        for surge in 0..=2 {
            for unavailable in 0..=2 {
                if surge == 0 && unavailable == 0 {
                    continue;
                }
                rollout(instances, surge, unavailable);
            }
        }
    }
}

#[test]
fn with_surge_one_the_new_worker_starts_before_the_old_one_stops() {
    let w = rollout(3, 1, 0);
    let history = w.history();
    let first_new = history.iter().position(|l| l.contains(" g2 ")).unwrap();
    let first_stop = history
        .iter()
        .position(|l| l.starts_with("SIGTERM"))
        .unwrap();
    assert!(first_new < first_stop, "{history:#?}");
}

#[test]
fn a_replacement_not_yet_ready_does_not_let_the_old_one_go() {
    let mut w = world(2, Readiness::Delay(ms(1000)));
    wait(&mut w, 1000);
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    assert_eq!(
        w.slots("web"),
        [(0, 1, "ready"), (0, 2, "starting"), (1, 1, "ready")]
    );
    wait(&mut w, 999);
    assert_eq!(
        w.slots("web"),
        [(0, 1, "ready"), (0, 2, "starting"), (1, 1, "ready")]
    );
    wait(&mut w, 1);
    assert!(w.slots("web").contains(&(0, 2, "ready")));
    assert!(!w.slots("web").contains(&(0, 1, "ready")));
}

#[test]
fn a_crashing_replacement_halts_the_rollout_and_old_workers_keep_serving() {
    let mut w = world(3, Readiness::Delay(ms(1000)));
    wait(&mut w, 1000);
    let old = w.pids("web");
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    let new = *w.pids("web").iter().find(|p| !old.contains(p)).unwrap();
    w.fake().crash(new, Exit::Code(1));
    w.deliver();
    assert!(w.supervisor.core().app("web").unwrap().rollout_halted);
    wait(&mut w, 50_000);
    assert_eq!(
        w.pids("web"),
        old,
        "the old workers still run, nothing replaced"
    );
    assert_eq!(w.slots("web"), ready(3, 1));

    // An old worker that crashes meanwhile restarts with its own definition.
    w.fake().crash(old[0], Exit::Code(1));
    w.deliver();
    wait(&mut w, 1100);
    assert_eq!(w.slots("web"), ready(3, 1));

    // The next generation starts a new rollout.
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 3 }));
    wait(&mut w, 10_000);
    assert_eq!(w.slots("web"), ready(3, 3));
}

#[test]
fn a_replacement_that_times_out_halts_the_rollout() {
    let mut w = world(2, Readiness::Notify);
    w.ready_everything();
    assert_eq!(w.slots("web"), ready(2, 1));
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    wait(&mut w, 3000);
    wait(&mut w, 10);
    assert!(w.supervisor.core().app("web").unwrap().rollout_halted);
    assert_eq!(w.slots("web"), ready(2, 1));
}

#[test]
fn outdated_workers_in_backoff_are_replaced_at_once() {
    let mut w = world(2, Readiness::Immediate);
    let pid = pid_of(&w, 0);
    w.fake().crash(pid, Exit::Code(1));
    w.deliver();
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    let slot0: Vec<_> = w.slots("web").into_iter().filter(|s| s.0 == 0).collect();
    assert_eq!(slot0, [(0, 2, "ready")]);
}

#[test]
fn scaling_during_a_rollout_settles_at_the_new_count_and_generation() {
    let mut w = world(4, Readiness::Delay(ms(200)));
    wait(&mut w, 200);
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 2,
        }),
    );
    wait(&mut w, 5000);
    assert_eq!(w.slots("web"), ready(2, 2));
}

#[test]
fn a_definition_changed_again_mid_rollout_supersedes_the_one_in_flight() {
    // The hang found by hand: instances 2, ready after 2 s; env changed, then
    // changed again 0.5 s later while the first replacement was starting.
    let mut w = world(2, Readiness::Delay(ms(2000)));
    wait(&mut w, 2000);
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 2 }));
    wait(&mut w, 500);
    assert!(w.slots("web").contains(&(0, 2, "starting")));
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 3 }));
    // The generation-2 replacement is stopped; generation 3 rolls out.
    assert!(!w.slots("web").iter().any(|s| s.1 == 2 && s.2 == "starting"));
    for _ in 0..100 {
        wait(&mut w, 100);
    }
    assert_eq!(w.slots("web"), ready(2, 3));
    // A reload, then an edit before it finishes: the same.
    w.command(Command::Reload { app: "web".into() });
    wait(&mut w, 500);
    step(&mut w, Step::Edit(Edit::Env { app: 0, value: 4 }));
    for _ in 0..100 {
        wait(&mut w, 100);
    }
    let generation = w.supervisor.core().app("web").unwrap().generation;
    assert_eq!(w.slots("web"), ready(2, generation));
    let status = w.supervisor.status();
    assert!(
        status.apps[0].rollout.complete,
        "{:?}",
        status.apps[0].rollout
    );
}

#[test]
fn recreate_stops_every_old_worker_before_starting_new_ones() {
    let listen = |address: &str| ListenSpec {
        name: "web".into(),
        address: ListenAddress::Tcp(address.parse().unwrap()),
        reuseport: false,
        inject: false,
    };
    let mut spec = app("web", 3, Readiness::Immediate);
    spec.process.listen = vec![listen("127.0.0.1:8000")];
    let mut w = World::new(vec![spec]);
    edit(&mut w, |spec| {
        spec.process.listen = vec![listen("0.0.0.0:8000")]
    });
    assert!(w.supervisor.core().app("web").unwrap().recreate);
    wait(&mut w, 10);
    assert_eq!(w.slots("web"), ready(3, 2));
    let history = w.history();
    let last_stop = history
        .iter()
        .rposition(|l| l.starts_with("SIGTERM"))
        .unwrap();
    let first_new = history.iter().position(|l| l.contains(" g2 ")).unwrap();
    assert!(
        last_stop < first_new,
        "every old worker stops before a new one starts: {history:#?}"
    );
}

#[test]
fn a_held_worker_keeps_its_slot_and_is_not_restarted() {
    let mut w = world(2, Readiness::Immediate);
    step(
        &mut w,
        Step::Command {
            kind: CommandKind::Stop,
            app: 0,
            slot: Some(1),
        },
    );
    wait(&mut w, 3_600_000);
    assert_eq!(w.slots("web"), [(0, 1, "ready"), (1, 1, "stopped (held)")]);
    assert_eq!(
        w.supervisor.next_wake(),
        w.supervisor.core().next_wake(),
        "nothing to poll"
    );
    step(
        &mut w,
        Step::Command {
            kind: CommandKind::Start,
            app: 0,
            slot: Some(1),
        },
    );
    assert_eq!(w.slots("web"), ready(2, 1));
}

#[test]
fn an_exec_failure_with_ready_none_is_never_ready_and_shutdown_completes() {
    // The other hang found by hand: an executable text file without a
    // shebang (ENOEXEC) with `ready: none` showed ready workers with pids that
    // never ran a program, and SIGTERM waited for them for ever.
    let failing = Behaviour {
        exec_error: Some(model::process::StartError {
            stage: model::process::StartStage::Exec,
            errno: libc::ENOEXEC,
        }),
        ..Behaviour::default()
    };
    let mut w = World::new(vec![]);
    for _ in 0..50 {
        w.fake().plans.push_back(failing.clone());
    }
    w.apply(vec![app("web", 2, Readiness::Immediate)]);
    w.deliver();
    for _ in 0..20 {
        assert!(
            !w.slots("web").iter().any(|s| s.2 == "ready"),
            "{:?}",
            w.slots("web")
        );
        wait(&mut w, 50);
    }
    let worker = w
        .supervisor
        .core()
        .app("web")
        .unwrap()
        .workers
        .values()
        .next()
        .unwrap()
        .clone();
    assert!(
        matches!(worker.last_outcome, Some(Outcome::StartFailed(e)) if e.errno == libc::ENOEXEC),
        "{:?}",
        worker.last_outcome
    );
    if let Err(violation) = w.shuts_down() {
        panic!("{}", violation.0);
    }
}

#[test]
fn the_kept_output_of_a_slot_or_app_that_goes_away_is_dropped() {
    let mut w = world(4, Readiness::Immediate);
    step(
        &mut w,
        Step::Crash {
            process: 1,
            code: 2,
        },
    );
    wait(&mut w, 200);
    assert!(
        !w.history().iter().any(|l| l.starts_with("forget output")),
        "a restart keeps its slot's output"
    );
    step(
        &mut w,
        Step::Edit(Edit::Scale {
            app: 0,
            instances: 2,
        }),
    );
    wait(&mut w, 10);
    let mut forgotten: Vec<&String> = w
        .history()
        .iter()
        .filter(|l| l.starts_with("forget output"))
        .collect();
    forgotten.sort();
    assert_eq!(forgotten, ["forget output web.2", "forget output web.3"]);
    step(&mut w, Step::Edit(Edit::Remove { app: 0 }));
    wait(&mut w, 10);
    assert_eq!(
        w.history().last().map(String::as_str),
        Some("forget output web")
    );
}
