//! Reconcile, driven by a simulated clock and simulated processes.

use std::time::{Duration, Instant};

use super::*;
use crate::spec::{AppSpec, Readiness, ReloadLimits};
use crate::worker::{Decision, Exit, StopEnd, Worker};

/// A tiny supervisor loop with fake processes: applies actions the way the
/// real one does, so whole scenarios can be played on a fake clock.
struct Sim {
    spec: AppSpec,
    generation: u64,
    halted: bool,
    recreate: bool,
    workers: Vec<Worker>,
    next_id: u64,
    next_pid: i32,
    now: Instant,
    /// Checked after every applied action once set: (max alive, min ready).
    bounds: Option<(usize, usize)>,
    log: Vec<String>,
}

impl Sim {
    fn new(instances: u32) -> Sim {
        let mut spec = AppSpec::with_defaults("web", &["server"], instances);
        spec.ready = Readiness::Immediate;
        Sim {
            spec,
            generation: 1,
            halted: false,
            recreate: false,
            workers: Vec::new(),
            next_id: 1,
            next_pid: 100,
            now: Instant::now(),
            bounds: None,
            log: Vec::new(),
        }
    }

    fn plan(&self) -> Plan {
        let target = Target {
            spec: &self.spec,
            generation: self.generation,
            rollout_halted: self.halted,
            recreate: self.recreate,
        };
        reconcile(target, &self.workers, self.now)
    }

    /// Reconcile and apply until nothing is left to do; returns the wake time.
    fn settle(&mut self) -> Option<Instant> {
        for _ in 0..1000 {
            let plan = self.plan();
            if plan.actions.is_empty() {
                return plan.wake_at;
            }
            for action in plan.actions {
                self.apply(action);
            }
        }
        panic!("reconcile did not settle: {:?}", self.plan());
    }

    fn worker(&mut self, id: u64) -> &mut Worker {
        self.workers
            .iter_mut()
            .find(|w| w.id == id)
            .expect("worker exists")
    }

    fn apply(&mut self, action: Action) {
        let now = self.now;
        let kill_timeout = self.spec.kill_timeout;
        self.log.push(format!("{action:?}"));
        match action {
            Action::Create { slot, generation } => {
                self.workers
                    .push(Worker::new(self.next_id, slot, generation));
                self.next_id += 1;
            }
            Action::Start { id } => {
                let pid = self.next_pid;
                self.next_pid += 1;
                self.worker(id).started(pid, now).unwrap();
            }
            Action::MarkReady { id } => self.worker(id).ready(now).unwrap(),
            Action::Stop { id, then, .. } => self.worker(id).stop(now, kill_timeout, then).unwrap(),
            Action::Kill { id } => self.worker(id).killed().unwrap(),
            Action::Remove { id } => self.workers.retain(|w| w.id != id),
            Action::HaltRollout { .. } => self.halted = true,
        }
        self.check_bounds();
    }

    fn check_bounds(&self) {
        if let Some((max_alive, min_ready)) = self.bounds {
            let alive = self
                .workers
                .iter()
                .filter(|w| w.state.pid().is_some())
                .count();
            let ready = self
                .workers
                .iter()
                .filter(|w| matches!(w.state, State::Ready { .. }))
                .count();
            assert!(
                alive <= max_alive,
                "{alive} alive > {max_alive}: {:#?}",
                self.log
            );
            assert!(
                ready >= min_ready,
                "{ready} ready < {min_ready}: {:#?}",
                self.log
            );
        }
    }

    /// The process of worker `id` exits (and its group empties).
    fn exit(&mut self, id: u64, exit: Exit) -> Option<Decision> {
        let now = self.now;
        let rules = self.spec.restart_rules();
        let worker = self.worker(id);
        let decision = worker.exited(exit, now, &rules).unwrap();
        if matches!(worker.state, State::Stopping { .. }) {
            match worker.group_empty(now, &rules).unwrap() {
                StopEnd::Remove => self.workers.retain(|w| w.id != id),
                StopEnd::Decided(decision) => return Some(decision),
                StopEnd::Restart | StopEnd::Held => {}
            }
        }
        decision
    }

    /// Every stopping worker's process obeys the stop signal.
    fn finish_stops(&mut self) {
        let stopping: Vec<u64> = self
            .workers
            .iter()
            .filter(|w| matches!(w.state, State::Stopping { .. }))
            .map(|w| w.id)
            .collect();
        for id in stopping {
            self.exit(
                id,
                Exit::Signal {
                    signal: 15,
                    core: false,
                },
            );
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
    }

    fn slots(&self) -> Vec<(u32, u64, &'static str)> {
        let mut slots: Vec<_> = self
            .workers
            .iter()
            .map(|w| (w.slot, w.generation, w.state.name()))
            .collect();
        slots.sort();
        slots
    }

    fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self.workers.iter().filter_map(|w| w.state.pid()).collect();
        pids.sort();
        pids
    }
}

#[test]
fn starts_every_slot_and_marks_them_ready() {
    let mut sim = Sim::new(3);
    assert_eq!(sim.settle(), None);
    assert_eq!(
        sim.slots(),
        [(0, 1, "ready"), (1, 1, "ready"), (2, 1, "ready")]
    );
}

#[test]
fn a_readiness_delay_is_waited_for() {
    let mut sim = Sim::new(1);
    sim.spec.ready = Readiness::Delay(Duration::from_secs(1));
    let wake = sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "starting")]);
    assert_eq!(wake, Some(sim.now + Duration::from_secs(1)));
    sim.advance(Duration::from_millis(999));
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "starting")]);
    sim.advance(Duration::from_millis(1));
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "ready")]);
}

#[test]
fn not_ready_within_the_timeout_is_a_failed_start() {
    let mut sim = Sim::new(1);
    sim.spec.ready = Readiness::Notify;
    sim.spec.ready_timeout = Duration::from_secs(5);
    assert_eq!(sim.settle(), Some(sim.now + Duration::from_secs(5)));
    sim.advance(Duration::from_secs(5));
    sim.settle();
    assert!(sim.log.iter().any(|l| l.contains("NotReady")));
    let id = sim.workers[0].id;
    let decision = sim.exit(
        id,
        Exit::Signal {
            signal: 15,
            core: false,
        },
    );
    assert_eq!(
        decision,
        Some(Decision::Restart {
            attempt: 1,
            delay: Duration::from_millis(100)
        })
    );
    assert_eq!(sim.slots(), [(0, 1, "backoff")]);
}

#[test]
fn a_crashed_worker_restarts_exactly_when_its_backoff_is_over() {
    let mut sim = Sim::new(1);
    sim.settle();
    let id = sim.workers[0].id;
    sim.exit(id, Exit::Code(1));
    let wake = sim.settle().expect("a wake-up for the restart");
    assert_eq!(wake, sim.now + Duration::from_millis(100));
    sim.advance(Duration::from_millis(99));
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "backoff")]);
    sim.advance(Duration::from_millis(1));
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "ready")]);
    assert_eq!(sim.workers[0].id, id, "the same worker restarts");
}

#[test]
fn scaling_down_stops_the_highest_slots_first() {
    let mut sim = Sim::new(4);
    sim.settle();
    sim.spec.instances = 2;
    let plan = sim.plan();
    let stopped: Vec<u32> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Stop {
                id,
                reason: StopReason::ScaleDown,
                ..
            } => sim.workers.iter().find(|w| w.id == *id).map(|w| w.slot),
            _ => None,
        })
        .collect();
    assert_eq!(stopped, [3, 2]);
    sim.settle();
    sim.finish_stops();
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "ready"), (1, 1, "ready")]);
}

#[test]
fn scaling_to_zero_and_back() {
    let mut sim = Sim::new(2);
    sim.settle();
    sim.spec.instances = 0;
    sim.settle();
    sim.finish_stops();
    assert_eq!(sim.settle(), None);
    assert!(sim.workers.is_empty());
    sim.spec.instances = 3;
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 1, "ready"), (1, 1, "ready"), (2, 1, "ready")]
    );
}

#[test]
fn a_stop_that_outlives_kill_timeout_becomes_a_kill() {
    let mut sim = Sim::new(1);
    sim.settle();
    sim.spec.instances = 0;
    let wake = sim.settle();
    assert_eq!(wake, Some(sim.now + sim.spec.kill_timeout));
    sim.advance(sim.spec.kill_timeout - Duration::from_millis(1));
    assert!(
        sim.plan().actions.is_empty(),
        "never a SIGKILL before kill_timeout"
    );
    sim.advance(Duration::from_millis(1));
    assert!(matches!(sim.plan().actions[..], [Action::Kill { .. }]));
    sim.settle();
    assert_eq!(sim.settle(), None, "once killed, nothing more to time");
}

#[test]
fn workers_in_backoff_above_the_count_are_forgotten() {
    let mut sim = Sim::new(2);
    sim.settle();
    let id = sim.workers.iter().find(|w| w.slot == 1).unwrap().id;
    sim.exit(id, Exit::Code(1));
    sim.spec.instances = 1;
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "ready")]);
    sim.advance(Duration::from_secs(60));
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 1, "ready")],
        "nothing respawned after removal"
    );
}

#[test]
fn failed_and_exited_workers_stay_until_the_definition_changes() {
    let mut sim = Sim::new(2);
    sim.spec.restart = crate::spec::RestartPolicy::Never;
    sim.settle();
    let ids: Vec<u64> = sim.workers.iter().map(|w| w.id).collect();
    sim.exit(ids[0], Exit::Code(0));
    sim.advance(Duration::from_secs(3600));
    assert_eq!(sim.settle(), None);
    assert_eq!(sim.slots(), [(0, 1, "exited"), (1, 1, "ready")]);
    sim.generation = 2;
    sim.settle();
    assert_eq!(
        sim.slots()[0],
        (0, 2, "ready"),
        "a fresh start with the new definition"
    );
}

/// Play a whole rollout, asserting the bounds after every single action.
fn rollout(instances: u32, surge: u32, unavailable: u32) -> Sim {
    let mut sim = Sim::new(instances);
    sim.spec.reload = ReloadLimits {
        max_surge: surge,
        max_unavailable: unavailable,
    };
    sim.settle();
    let old_pids = sim.pids();
    sim.generation = 2;
    sim.bounds = Some((
        (instances + surge) as usize,
        (instances - unavailable.min(instances)) as usize,
    ));
    for _ in 0..100 {
        sim.settle();
        if sim
            .workers
            .iter()
            .all(|w| w.generation == 2 && matches!(w.state, State::Ready { .. }))
            && sim.workers.len() == instances as usize
        {
            break;
        }
        sim.finish_stops();
    }
    assert_eq!(sim.workers.len(), instances as usize, "{:#?}", sim.log);
    assert!(sim.workers.iter().all(|w| w.generation == 2));
    let mut slots: Vec<u32> = sim.workers.iter().map(|w| w.slot).collect();
    slots.sort();
    assert_eq!(
        slots,
        (0..instances).collect::<Vec<_>>(),
        "slots keep their numbers"
    );
    assert!(sim.pids().iter().all(|p| !old_pids.contains(p)));
    sim
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
    let sim = rollout(3, 1, 0);
    let first_create = sim
        .log
        .iter()
        .position(|l| l.contains("Create { slot: 0, generation: 2 }"))
        .unwrap();
    let first_stop = sim.log.iter().position(|l| l.contains("Outdated")).unwrap();
    assert!(first_create < first_stop, "{:#?}", sim.log);
}

#[test]
fn a_replacement_not_yet_ready_does_not_let_the_old_one_go() {
    let mut sim = Sim::new(2);
    sim.settle();
    sim.spec.ready = Readiness::Delay(Duration::from_secs(1));
    sim.generation = 2;
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 1, "ready"), (0, 2, "starting"), (1, 1, "ready")]
    );
    sim.advance(Duration::from_secs(1));
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 1, "stopping"), (0, 2, "ready"), (1, 1, "ready")]
    );
}

#[test]
fn a_crashing_replacement_halts_the_rollout_and_old_workers_keep_serving() {
    let mut sim = Sim::new(3);
    sim.settle();
    let old_pids = sim.pids();
    sim.spec.ready = Readiness::Delay(Duration::from_secs(1));
    sim.generation = 2;
    sim.settle();
    let new = sim.workers.iter().find(|w| w.generation == 2).unwrap().id;
    sim.exit(new, Exit::Code(1));
    sim.settle();
    assert!(sim.halted);
    assert!(sim.log.iter().any(|l| l.contains("HaltRollout")));
    for _ in 0..5 {
        sim.advance(Duration::from_secs(10));
        sim.settle();
    }
    assert_eq!(
        sim.pids(),
        old_pids,
        "the old workers still run, nothing replaced"
    );
    assert!(sim.workers.iter().all(|w| w.generation == 1));

    // An old worker that crashes meanwhile restarts with its own definition.
    let old = sim.workers[0].id;
    sim.exit(old, Exit::Code(1));
    sim.advance(Duration::from_millis(100));
    sim.settle();
    sim.advance(Duration::from_secs(1));
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 1, "ready"), (1, 1, "ready"), (2, 1, "ready")]
    );

    // The next generation starts a new rollout.
    sim.generation = 3;
    sim.halted = false;
    sim.spec.ready = Readiness::Immediate;
    for _ in 0..10 {
        sim.settle();
        sim.finish_stops();
    }
    assert!(
        sim.workers.iter().all(|w| w.generation == 3),
        "{:?}",
        sim.slots()
    );
}

#[test]
fn a_replacement_that_times_out_halts_the_rollout() {
    let mut sim = Sim::new(2);
    sim.settle();
    sim.spec.ready = Readiness::Notify;
    sim.spec.ready_timeout = Duration::from_secs(2);
    sim.generation = 2;
    sim.settle();
    sim.advance(Duration::from_secs(2));
    sim.settle();
    sim.finish_stops();
    sim.settle();
    assert!(sim.halted);
    assert!(sim.workers.iter().all(|w| w.generation == 1));
    assert_eq!(sim.workers.len(), 2);
}

#[test]
fn outdated_workers_in_backoff_are_replaced_at_once() {
    let mut sim = Sim::new(2);
    sim.settle();
    let id = sim.workers[0].id;
    sim.exit(id, Exit::Code(1));
    sim.generation = 2;
    sim.settle();
    let slot0: Vec<_> = sim.slots().into_iter().filter(|s| s.0 == 0).collect();
    assert_eq!(slot0, [(0, 2, "ready")]);
}

#[test]
fn scaling_during_a_rollout_settles_at_the_new_count_and_generation() {
    let mut sim = Sim::new(4);
    sim.settle();
    sim.generation = 2;
    sim.settle();
    sim.spec.instances = 2;
    for _ in 0..10 {
        sim.settle();
        sim.finish_stops();
    }
    assert_eq!(sim.slots(), [(0, 2, "ready"), (1, 2, "ready")]);
}

#[test]
fn recreate_stops_every_old_worker_before_starting_new_ones() {
    let mut sim = Sim::new(3);
    sim.settle();
    sim.generation = 2;
    sim.recreate = true;
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 1, "stopping"), (1, 1, "stopping"), (2, 1, "stopping")],
        "nothing new while old ones hold the socket"
    );
    let first = sim.workers[0].id;
    sim.exit(
        first,
        Exit::Signal {
            signal: 15,
            core: false,
        },
    );
    sim.settle();
    assert!(
        sim.workers.iter().all(|w| w.generation == 1),
        "{:?}",
        sim.slots()
    );
    sim.finish_stops();
    sim.settle();
    assert_eq!(
        sim.slots(),
        [(0, 2, "ready"), (1, 2, "ready"), (2, 2, "ready")]
    );
}

#[test]
fn a_held_worker_keeps_its_slot_and_is_not_restarted() {
    let mut sim = Sim::new(2);
    sim.settle();
    let id = sim.workers[1].id;
    let kill_timeout = sim.spec.kill_timeout;
    let now = sim.now;
    sim.worker(id)
        .stop(now, kill_timeout, crate::worker::AfterStop::Hold)
        .unwrap();
    sim.exit(
        id,
        Exit::Signal {
            signal: 15,
            core: false,
        },
    );
    sim.advance(Duration::from_secs(3600));
    assert_eq!(sim.settle(), None, "nothing to do, nothing to wake for");
    assert_eq!(sim.slots(), [(0, 1, "ready"), (1, 1, "stopped (held)")]);
    sim.worker(id).revive().unwrap();
    sim.settle();
    assert_eq!(sim.slots(), [(0, 1, "ready"), (1, 1, "ready")]);
}
