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

mod checks;
mod memory;
mod unhealthy;
mod watchdog;

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
