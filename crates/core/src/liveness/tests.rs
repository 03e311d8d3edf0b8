//! Health checks, memory limits and the watchdog, through the core alone: a
//! tiny shell answers spawns at once and records the rest.

use std::time::{Duration, Instant};

use model::Signal;

use super::super::harness::check_answer;
use super::super::reconcile::StopReason;
use super::super::worker::{Outcome, State};
use super::super::{Action, Core, Event, Input};
use model::orders::{CheckOrder, WatchdogMessage};
use model::spec::{
    AppSpec, Desired, HealthCheck, HealthSpec, MaxRestarts, Probe, ProbeKind, ProbeSpec, Readiness,
    ReloadLimits, RestartPolicy, Template,
};

/// The core and what a shell would have done with its actions.
struct Shell {
    core: Core,
    now: Instant,
    next_pid: i32,
    checks: Vec<CheckOrder>,
    cancelled: Vec<i32>,
    signals: Vec<(i32, Signal)>,
    /// The measurement out: its round and pids.
    measuring: Option<(u64, Vec<i32>)>,
    /// Memory ceilings given: at a spawn (by its pid) and by an edit.
    ceilings: Vec<(i32, Option<u64>)>,
    events: Vec<Event>,
}

fn health(failures: u32, grace: Duration) -> HealthSpec {
    HealthSpec {
        check: HealthCheck::Probe(ProbeSpec {
            kind: ProbeKind::Tcp,
            written: Template::literal("127.0.0.1:{instance+9000}"),
            targets: (0..4)
                .map(|i| Probe::Tcp(([127, 0, 0, 1], 9000 + i).into()))
                .collect(),
        }),
        every: Duration::from_secs(1),
        timeout: Duration::from_millis(300),
        failures,
        grace,
    }
}

fn app(instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.ready = Readiness::Immediate;
    spec.kill_timeout = Duration::from_secs(1);
    spec
}

/// The file with `spec` as its one app.
fn desired(spec: AppSpec) -> Desired {
    Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps: vec![spec],
        memory_check: Duration::from_secs(5),
        metrics: None,
    }
}

impl Shell {
    fn new(spec: AppSpec) -> Shell {
        let now = Instant::now();
        let mut shell = Shell {
            core: Core::new(&desired(spec), 1000, now),
            now,
            next_pid: 100,
            checks: Vec::new(),
            cancelled: Vec::new(),
            signals: Vec::new(),
            measuring: None,
            ceilings: Vec::new(),
            events: Vec::new(),
        };
        shell.settle();
        shell
    }

    /// Converge and carry out until nothing is left; spawns succeed and
    /// run the program at once.
    fn settle(&mut self) {
        for _ in 0..64 {
            self.core.converge(self.now);
            let actions = self.core.take_actions();
            if actions.is_empty() {
                return;
            }
            for action in actions {
                match action {
                    Action::Spawn(order) => {
                        let pid = self.next_pid;
                        self.next_pid += 1;
                        let spawned = Input::Spawned {
                            app: order.app,
                            id: order.id,
                            pid,
                        };
                        self.core.input(spawned, self.now);
                        self.core.input(Input::ExecSucceeded { pid }, self.now);
                        self.ceilings.push((pid, order.memory_max));
                    }
                    Action::Signal { pgid, signal } => self.signals.push((pgid, signal)),
                    Action::Check(order) => self.checks.push(order),
                    Action::CancelCheck { pid } => self.cancelled.push(pid),
                    Action::MeasureMemory { round, pids } => self.measuring = Some((round, pids)),
                    Action::LimitMemory { pgid, bytes } => self.ceilings.push((pgid, bytes)),
                    Action::Report(event) => self.events.push(event),
                    _ => {}
                }
            }
        }
        panic!("the core did not settle");
    }

    /// A new version of the file with `spec` as its one app.
    fn edit(&mut self, spec: AppSpec) {
        let apply = Input::Apply {
            desired: desired(spec),
            trigger: "edit".into(),
        };
        self.core.input(apply, self.now);
        self.settle();
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.core.input(Input::Tick, self.now);
        self.settle();
    }

    fn answer(&mut self, passed: bool) {
        let order = self.checks.remove(0);
        self.answer_order(&order, passed);
    }

    fn answer_order(&mut self, order: &CheckOrder, passed: bool) {
        self.core.input(check_answer(order, passed), self.now);
        self.settle();
    }

    /// Process `pid` (and its group) is gone.
    fn gone(&mut self, pid: i32, exit: i32) {
        let exited = Input::Exited {
            pid,
            exit: model::process::Exit::Code(exit),
            start_error: None,
        };
        self.core.input(exited, self.now);
        self.core.input(Input::GroupEmpty { pgid: pid }, self.now);
        self.settle();
    }

    /// `(pid, state)` of every worker, oldest first.
    fn workers(&self) -> Vec<(Option<i32>, &'static str)> {
        self.core
            .app("web")
            .map(|a| {
                a.workers
                    .values()
                    .map(|w| (w.state.pid(), w.state.name()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn oldest_worker(&self) -> &crate::worker::Worker {
        let app = self.core.app("web").expect("the app");
        app.workers.values().next().expect("a worker")
    }

    fn newest_worker(&self) -> &crate::worker::Worker {
        let app = self.core.app("web").expect("the app");
        app.workers.values().last().expect("a worker")
    }

    fn count(&self, what: fn(&Event) -> bool) -> usize {
        self.events.iter().filter(|e| what(e)).count()
    }

    fn stop_reasons(&self) -> Vec<(i32, StopReason, Signal)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Stopping {
                    pid,
                    reason,
                    signal,
                    ..
                } => Some((*pid, *reason, *signal)),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn consecutive_failures_make_an_instance_unhealthy_and_a_success_resets_them() {
    let mut spec = app(1);
    spec.health = Some(health(3, Duration::ZERO));
    let mut shell = Shell::new(spec);
    assert_eq!(shell.workers(), [(Some(100), "ready")]);
    assert!(
        shell.checks.is_empty(),
        "the first check is one `every` after ready"
    );
    for passed in [false, false, true, false, false] {
        shell.advance(Duration::from_secs(1));
        assert_eq!(shell.checks.len(), 1);
        shell.answer(passed);
    }
    assert_eq!(shell.count(|e| matches!(e, Event::Healthy { .. })), 1);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 0);
    // The third failure in a row.
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 1);
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Recycling {
            pid: 100,
            why: Outcome::Unhealthy,
            attempt: 1,
            ..
        }
    )));
    // Replaced first: the old one serves while the new one waits out its
    // backoff (100 ms), starts and becomes ready; then the old one stops.
    assert_eq!(shell.workers(), [(Some(100), "ready"), (None, "backoff")]);
    assert!(shell.signals.is_empty());
    shell.advance(Duration::from_millis(100));
    assert_eq!(shell.workers()[1], (Some(101), "ready"));
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::Recycled, Signal::SIGTERM)]
    );
    shell.gone(100, 0);
    assert_eq!(shell.workers(), [(Some(101), "ready")]);
    let app = shell.core.app("web").unwrap();
    let worker = app.workers.values().next().unwrap();
    assert_eq!(
        (worker.restarts, worker.attempt),
        (1, 1),
        "it counts as a restart"
    );
}

#[test]
fn failures_within_grace_do_not_count() {
    let mut spec = app(1);
    spec.health = Some(health(1, Duration::from_millis(1500)));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert!(
        shell
            .events
            .iter()
            .any(|e| matches!(e, Event::CheckFailed { counted: false, .. }))
    );
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 0);
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 1);
}

#[test]
fn checks_never_overlap_and_an_unanswered_probe_fails_a_grace_after_its_timeout() {
    let mut spec = app(1);
    spec.health = Some(health(3, Duration::ZERO));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.checks.len(), 1);
    // The shell times a probe from when it really starts (the loop may be
    // busy when it is due): the core waits longer, for a lost answer only.
    shell
        .advance(Duration::from_millis(300) + crate::CHECK_ANSWER_GRACE - Duration::from_millis(1));
    assert!(shell.cancelled.is_empty());
    assert_eq!(shell.checks.len(), 1, "no second check while one is out");
    shell.advance(Duration::from_millis(1));
    assert_eq!(shell.cancelled, [100], "the check in flight is cancelled");
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::CheckFailed { failures: 1, detail, .. } if detail == "no answer within 1s 300ms"
    )));
    // Its answer, late, changes nothing.
    shell.answer(true);
    assert_eq!(shell.count(|e| matches!(e, Event::Healthy { .. })), 0);
    assert_eq!(shell.core.anomalies(), 0);
    // The next one was due `every` after the previous one started: now.
    assert_eq!(shell.checks.len(), 1);
}

#[test]
fn an_exec_check_fails_at_its_timeout() {
    let mut spec = app(1);
    let mut health = health(3, Duration::ZERO);
    health.check = HealthCheck::Exec(vec![Template::literal("true")]);
    spec.health = Some(health);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.checks.len(), 1);
    shell.advance(Duration::from_millis(299));
    assert!(shell.cancelled.is_empty());
    shell.advance(Duration::from_millis(1));
    assert_eq!(
        shell.cancelled,
        [100],
        "its process is killed at its timeout"
    );
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::CheckFailed { failures: 1, detail, .. } if detail == "no answer within 300ms"
    )));
}

#[test]
fn with_max_surge_zero_the_unhealthy_instance_stops_first_and_restarts_with_backoff() {
    let mut spec = app(2);
    spec.health = Some(health(1, Duration::ZERO));
    spec.reload = ReloadLimits {
        max_surge: 0,
        max_unavailable: 1,
    };
    let mut shell = Shell::new(spec);
    for round in 1..=3u32 {
        shell.advance(Duration::from_secs(1));
        let at = shell.checks.iter().position(|c| c.slot == 0).unwrap();
        let order = shell.checks.remove(at);
        shell.checks.clear();
        shell.answer_order(&order, false);
        let stopped = shell.stop_reasons().last().copied().unwrap();
        assert_eq!(stopped, (order.pid, StopReason::Unhealthy, Signal::SIGTERM));
        shell.gone(order.pid, 0);
        let app = shell.core.app("web").unwrap();
        let slot0 = app.workers.values().find(|w| w.slot == 0).unwrap();
        assert_eq!((slot0.state.name(), slot0.restarts), ("backoff", round));
        // The backoff doubles: 100, 200, 400 ms.
        let delay = Duration::from_millis(100 << (round - 1));
        shell.advance(delay - Duration::from_millis(1));
        assert_eq!(shell.workers()[0].1, "backoff");
        shell.advance(Duration::from_millis(1));
        assert_eq!(shell.workers()[0].1, "ready");
    }
}

#[test]
fn a_readiness_probe_per_slot_makes_a_recycle_stop_first() {
    let mut spec = app(1);
    spec.health = Some(health(1, Duration::ZERO));
    spec.ready = Readiness::Probe(match health(1, Duration::ZERO).check {
        HealthCheck::Probe(probe) => probe,
        HealthCheck::Exec(_) => unreachable!(),
    });
    let mut shell = Shell::new(spec);
    let probe = Input::ProbeSucceeded { pid: 100 };
    shell.core.input(probe, shell.now);
    shell.settle();
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::Unhealthy, Signal::SIGTERM)],
        "the old one would answer its replacement's probe"
    );
    assert_eq!(shell.count(|e| matches!(e, Event::Recycling { .. })), 0);
}

#[test]
fn a_replacement_that_fails_stops_the_broken_one_and_restarts_with_backoff() {
    let mut spec = app(1);
    spec.health = Some(health(1, Duration::ZERO));
    spec.ready = Readiness::Delay(Duration::from_millis(500));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_millis(500));
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    shell.advance(Duration::from_millis(100));
    assert_eq!(shell.workers()[1], (Some(101), "starting"));
    assert!(shell.stop_reasons().is_empty());
    // The replacement could not bind the port the broken one holds.
    let exited = Input::Exited {
        pid: 101,
        exit: model::process::Exit::Code(1),
        start_error: None,
    };
    shell.core.input(exited, shell.now);
    shell.settle();
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::Recycled, Signal::SIGTERM)]
    );
    shell.gone(100, 0);
    assert_eq!(shell.workers(), [(None, "backoff")]);
}

#[test]
fn an_unhealthy_replacement_during_a_rollout_halts_it() {
    let mut spec = app(2);
    spec.health = Some(health(1, Duration::ZERO));
    spec.ready = Readiness::Immediate;
    let mut shell = Shell::new(spec.clone());
    // A new generation: slot 0 is replaced, slot 1 still runs the old one.
    spec.process.env = vec![("VERSION".into(), Template::literal("2"))];
    shell.edit(spec);
    let app = shell.core.app("web").unwrap();
    let replacement = app
        .workers
        .values()
        .find(|w| w.generation == 2 && w.state.is_ready())
        .and_then(|w| w.state.pid())
        .unwrap();
    shell.checks.clear();
    shell.advance(Duration::from_secs(1));
    let at = shell
        .checks
        .iter()
        .position(|c| c.pid == replacement)
        .unwrap();
    let order = shell.checks.remove(at);
    shell.answer_order(&order, false);
    assert!(
        shell
            .stop_reasons()
            .contains(&(replacement, StopReason::Unhealthy, Signal::SIGTERM))
    );
    shell.gone(replacement, 0);
    assert!(shell.core.app("web").unwrap().rollout_halted);
    assert_eq!(shell.count(|e| matches!(e, Event::Recycling { .. })), 0);
}

#[test]
fn restart_never_or_max_restarts_reached_stops_an_unhealthy_instance() {
    for (restart, max_restarts, end) in [
        (RestartPolicy::Never, None, "exited"),
        (
            RestartPolicy::Always,
            Some(MaxRestarts {
                count: 0,
                within: Duration::from_secs(60),
            }),
            "failed",
        ),
    ] {
        let mut spec = app(1);
        spec.health = Some(health(1, Duration::ZERO));
        spec.restart = restart;
        spec.max_restarts = max_restarts;
        let mut shell = Shell::new(spec);
        shell.advance(Duration::from_secs(1));
        shell.answer(false);
        assert_eq!(
            shell.stop_reasons(),
            [(100, StopReason::Unhealthy, Signal::SIGTERM)]
        );
        shell.gone(100, 0);
        assert_eq!(shell.workers(), [(None, end)]);
    }
}

#[test]
fn over_max_memory_is_replaced_first_and_measured_every_memory_check() {
    let mut spec = app(2);
    spec.max_memory = Some(1000);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_millis(4999));
    assert_eq!(shell.measuring, None);
    shell.advance(Duration::from_millis(1));
    let (round, pids) = shell.measuring.take().unwrap();
    assert_eq!(pids, [100, 101]);
    // No second measurement while one is out.
    shell.advance(Duration::from_secs(5));
    assert_eq!(shell.measuring, None);
    let usage = vec![(100, 999), (101, 1001)];
    shell
        .core
        .input(Input::MemoryMeasured { round, usage }, shell.now);
    shell.settle();
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::MemoryExceeded {
            pid: 101,
            rss_bytes: 1001,
            limit_bytes: 1000,
            ..
        }
    )));
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Recycling {
            pid: 101,
            why: Outcome::MemoryExceeded,
            ..
        }
    )));
    shell.advance(Duration::from_millis(100));
    assert_eq!(
        shell.stop_reasons(),
        [(101, StopReason::Recycled, Signal::SIGTERM)]
    );
    // Measured again, every memory_check after the last one was ordered.
    shell.advance(Duration::from_secs(5));
    assert!(shell.measuring.is_some());
}

impl Shell {
    /// Answer the measurement out (due now or after `memory_check`) with `usage`.
    fn measured(&mut self, usage: Vec<(i32, u64)>) {
        if self.measuring.is_none() {
            self.advance(Duration::from_secs(5));
        }
        let (round, _) = self.measuring.take().expect("a measurement out");
        self.core
            .input(Input::MemoryMeasured { round, usage }, self.now);
        self.settle();
    }
}

/// An instance over `max_memory` whose replacement takes a minute to be
/// ready (a crash backoff of 10 s would hold it back too).
fn slow_to_replace() -> Shell {
    let mut spec = app(1);
    spec.max_memory = Some(1000);
    spec.backoff.initial = Duration::from_secs(10);
    let mut shell = Shell::new(spec.clone());
    spec.ready = Readiness::Delay(Duration::from_secs(60));
    shell.edit(spec);
    shell.measured(vec![(100, 1001)]);
    shell
}

#[test]
fn a_recycle_for_memory_is_no_crash_its_replacement_starts_at_once() {
    let shell = slow_to_replace();
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Recycling { pid: 100, why: Outcome::MemoryExceeded, attempt: 0, delay, .. }
            if delay.is_zero()
    )));
    assert_eq!(
        shell.workers(),
        [(Some(100), "ready"), (Some(101), "starting")]
    );
    // Its ceiling, as every instance's: 1.5 × max_memory.
    assert_eq!(shell.ceilings, [(100, Some(1500)), (101, Some(1500))]);
    let worker = shell.newest_worker();
    assert_eq!((worker.restarts, worker.attempt), (1, 0));
}

#[test]
fn a_recycled_instance_serves_on_up_to_its_ceiling_and_stops_past_it() {
    let mut shell = slow_to_replace();
    shell.measured(vec![(100, 1500), (101, 10)]);
    assert!(shell.signals.is_empty(), "at its ceiling it serves on");
    shell.measured(vec![(100, 1501), (101, 10)]);
    assert_eq!(
        shell.stop_reasons(),
        [(100, StopReason::OverMemoryCeiling, Signal::SIGTERM)]
    );
    shell.gone(100, 143);
    assert_eq!(shell.workers(), [(Some(101), "starting")]);
    assert_eq!(
        shell.count(|e| matches!(e, Event::MemoryExceeded { .. })),
        1,
        "said once"
    );
}

#[test]
fn a_recycled_instance_that_dies_leaves_its_slot_to_its_replacement() {
    // Killed by the kernel at its cgroup's memory.max, say.
    let mut shell = slow_to_replace();
    shell.gone(100, 137);
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::Exited {
            pid: 100,
            decision: crate::worker::Decision::Replaced,
            ..
        }
    )));
    assert_eq!(shell.workers(), [(Some(101), "starting")]);
    let worker = shell.oldest_worker();
    assert_eq!(worker.restarts, 1, "one restart, counted once");
}

#[test]
fn an_edit_of_max_memory_moves_the_ceiling_of_the_running_instances() {
    let mut spec = app(2);
    spec.max_memory = Some(1000);
    let mut shell = Shell::new(spec.clone());
    spec.max_memory = Some(2000);
    shell.edit(spec.clone());
    spec.max_memory = None;
    shell.edit(spec);
    assert_eq!(
        shell.ceilings,
        [
            (100, Some(1500)),
            (101, Some(1500)),
            (100, Some(3000)),
            (101, Some(3000)),
            (100, None),
            (101, None),
        ]
    );
    assert_eq!(
        shell.workers(),
        [(Some(100), "ready"), (Some(101), "ready")]
    );
}

#[test]
fn a_missed_watchdog_sends_its_signal_and_restarts_with_backoff() {
    let mut spec = app(1);
    spec.process.watchdog = Some(Duration::from_secs(1));
    let mut shell = Shell::new(spec);
    let ping = |shell: &mut Shell, message| {
        let notified = Input::Notified {
            leader: 100,
            uid: 1000,
            ready: false,
            status: None,
            watchdog: Some(message),
            extend_timeout: None,
            injected: false,
        };
        shell.core.input(notified, shell.now);
        shell.settle();
    };
    for _ in 0..3 {
        shell.advance(Duration::from_millis(900));
        ping(&mut shell, WatchdogMessage::Ping);
    }
    assert!(shell.signals.is_empty(), "kept alive by its pings");
    shell.advance(Duration::from_millis(999));
    assert!(shell.signals.is_empty());
    shell.advance(Duration::from_millis(1));
    assert_eq!(shell.signals, [(100, Signal::SIGABRT)]);
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::WatchdogMissed { pid: 100, triggered: false, silent_for, .. }
            if *silent_for == Duration::from_secs(1)
    )));
    shell.gone(100, 134);
    assert_eq!(shell.workers(), [(None, "backoff")]);
    shell.advance(Duration::from_millis(100));
    assert_eq!(shell.workers(), [(Some(101), "ready")]);
    // WATCHDOG=trigger fails it at once.
    ping(&mut shell, WatchdogMessage::Ping);
    shell.signals.clear();
    let trigger = Input::Notified {
        leader: 101,
        uid: 1000,
        ready: false,
        status: None,
        watchdog: Some(WatchdogMessage::Trigger),
        extend_timeout: None,
        injected: false,
    };
    shell.core.input(trigger, shell.now);
    shell.settle();
    assert_eq!(shell.signals, [(101, Signal::SIGABRT)]);
}

#[test]
fn extend_timeout_moves_the_ready_deadline_while_starting() {
    let mut spec = app(1);
    spec.ready = Readiness::Notify;
    spec.ready_timeout = Duration::from_secs(2);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_millis(1500));
    let extend = Input::Notified {
        leader: 100,
        uid: 1000,
        ready: false,
        status: None,
        watchdog: None,
        extend_timeout: Some(Duration::from_secs(3)),
        injected: false,
    };
    shell.core.input(extend, shell.now);
    shell.settle();
    shell.advance(Duration::from_millis(2999));
    assert!(
        shell.signals.is_empty(),
        "extended to 4.5 s after the start"
    );
    shell.advance(Duration::from_millis(1));
    assert_eq!(shell.signals, [(100, Signal::SIGTERM)]);
    let app = shell.core.app("web").unwrap();
    assert!(matches!(
        app.workers.values().next().unwrap().state,
        State::Stopping { .. }
    ));
}

#[test]
fn memory_is_measured_once_at_a_time_and_a_lost_answer_is_not_waited_for_forever() {
    let mut spec = app(1);
    spec.max_memory = Some(1000);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(5));
    assert!(shell.measuring.take().is_some());
    // Unanswered: nothing more, however many periods pass…
    for _ in 0..11 {
        shell.advance(Duration::from_secs(5));
        assert_eq!(shell.measuring, None);
    }
    // …until the answer counts as lost.
    shell.advance(Duration::from_secs(5));
    let (round, pids) = shell.measuring.take().unwrap();
    assert_eq!(round, 2);
    assert!(shell.core.next_wake() > shell.now, "no busy loop meanwhile");
    // The lost one's answer, late, is not taken for the one out now.
    let stale = Input::MemoryMeasured {
        round: 1,
        usage: vec![(pids[0], 10_000)],
    };
    shell.core.input(stale, shell.now);
    shell.settle();
    assert_eq!(
        shell.count(|e| matches!(e, Event::MemoryExceeded { .. })),
        0
    );
    shell.advance(Duration::from_secs(5));
    assert_eq!(shell.measuring, None, "round 2 is still out");
}

#[test]
fn a_stop_command_during_a_watchdog_stop_holds_the_instance() {
    let mut spec = app(1);
    spec.process.watchdog = Some(Duration::from_secs(1));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.signals, [(100, Signal::SIGABRT)]);
    let hold = crate::commands::Order::Hold {
        target: "web".into(),
    };
    let reply = shell.core.command(hold, shell.now).unwrap();
    assert!(format!("{reply:?}").contains(" 1 instance"), "{reply:?}");
    shell.settle();
    shell.gone(100, 134);
    shell.advance(Duration::from_secs(5));
    assert_eq!(shell.workers(), [(None, "stopped (held)")]);
}

#[test]
fn a_health_edit_cancels_the_check_in_flight_and_counts_afresh() {
    let mut spec = app(1);
    spec.health = Some(health(3, Duration::ZERO));
    let mut shell = Shell::new(spec.clone());
    shell.advance(Duration::from_secs(1));
    shell.answer(false);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.checks.len(), 1, "a second check in flight");
    spec.health = Some(health(1, Duration::ZERO));
    shell.edit(spec);
    assert_eq!(shell.cancelled, [100]);
    // The old check's answer is not counted against the new settings.
    shell.answer(false);
    assert_eq!(shell.count(|e| matches!(e, Event::Unhealthy { .. })), 0);
    let worker = shell.oldest_worker().clone();
    assert_eq!(worker.health.failures, 0);
    assert_eq!(shell.core.anomalies(), 0);
}
