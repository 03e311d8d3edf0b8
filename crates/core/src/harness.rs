//! A small stand-in for the shell in the core's own tests: it answers every
//! spawn with a pid that runs its program at once, and lets a test end
//! processes; the core's actions are kept for the test to read.

use std::collections::BTreeMap;
use std::time::Instant;

use model::Signal;

use super::{Action, Core, Event, Input};
use model::orders::CheckOrder;
use model::process::Exit;
use model::spec::{AppSpec, Desired};

/// The answer to check `order`: passed, or failed with `HTTP 500`.
pub(crate) fn check_answer(order: &CheckOrder, passed: bool) -> Input {
    Input::Checked {
        pid: order.pid,
        check: order.check,
        passed,
        detail: if passed {
            String::new()
        } else {
            "HTTP 500".into()
        },
    }
}

/// The core with a pretend shell around it.
pub(crate) struct Harness {
    pub core: Core,
    pub now: Instant,
    next_pid: i32,
    /// Live processes: pid → app.
    pub processes: BTreeMap<i32, String>,
    /// Every event reported, in order, with when.
    pub events: Vec<(Instant, Event)>,
    /// Every signal sent, in order: (app, pid, signal).
    pub signals: Vec<(String, i32, Signal)>,
    /// Every spawn, in order: (when, app).
    pub spawns: Vec<(Instant, String)>,
    /// A stop signal ends the process at once (else it lives on until
    /// the test ends it).
    pub signals_end: bool,
    /// Every action, in order, as `Debug` writes it (what two cores fed the
    /// same inputs must agree on).
    pub actions: Vec<String>,
    /// Every liveness check ordered, in order (the harness answers none).
    pub checks: Vec<CheckOrder>,
    /// The load each autoscaled app's samples find: the connections
    /// waiting, and the CPU of each ready instance (none: an idle app).
    pub load: BTreeMap<String, (u32, u32)>,
}

impl Harness {
    pub(crate) fn new(apps: Vec<AppSpec>) -> Harness {
        let now = Instant::now();
        // As the shell sets it: a core serializes its instants through it.
        model::monotonic::set_anchor(now, 1 << 40);
        let desired = Desired {
            source: "/srv/ecosystem.yaml".into(),
            apps,
            memory_check: model::spec::defaults::MEMORY_CHECK,
            metrics: None,
        };
        let mut harness = Harness {
            core: Core::new(&desired, 1000, now),
            now,
            next_pid: 100,
            processes: BTreeMap::new(),
            events: Vec::new(),
            signals: Vec::new(),
            spawns: Vec::new(),
            signals_end: true,
            actions: Vec::new(),
            checks: Vec::new(),
            load: BTreeMap::new(),
        };
        harness.settle();
        harness
    }

    /// The same pretend shell around another core (one restored from this
    /// one's), with nothing recorded yet.
    pub(crate) fn around(&self, core: Core) -> Harness {
        Harness {
            core,
            now: self.now,
            next_pid: self.next_pid,
            processes: self.processes.clone(),
            events: Vec::new(),
            signals: Vec::new(),
            spawns: Vec::new(),
            signals_end: self.signals_end,
            actions: Vec::new(),
            checks: Vec::new(),
            load: self.load.clone(),
        }
    }

    /// Converge and answer until nothing is left: spawns succeed and run
    /// their program; a signal ends the process (exit by that signal) and
    /// its group empties.
    pub(crate) fn settle(&mut self) {
        for _ in 0..1000 {
            self.core.converge(self.now);
            let actions = self.core.take_actions();
            if actions.is_empty() && !self.core.unsettled() {
                return;
            }
            for action in actions {
                self.act(action);
            }
        }
        panic!("the core did not settle");
    }

    fn act(&mut self, action: Action) {
        let now = self.now;
        self.actions.push(format!("{action:?}"));
        match action {
            Action::Spawn(order) => {
                let pid = self.next_pid;
                self.next_pid += 1;
                self.processes.insert(pid, order.app.clone());
                self.spawns.push((now, order.app.clone()));
                let spawned = Input::Spawned {
                    app: order.app,
                    id: order.id,
                    pid,
                };
                self.core.input(spawned, now);
                self.core.input(Input::ExecSucceeded { pid }, now);
            }
            Action::Signal { pgid, signal } => {
                if let Some(app) = self.processes.get(&pgid) {
                    self.signals.push((app.clone(), pgid, signal));
                    if self.signals_end {
                        let exit = Exit::Signal {
                            signal: signal as i32,
                            core: false,
                        };
                        self.end(pgid, exit);
                    }
                }
            }
            Action::Report(event) => self.events.push((now, event)),
            Action::Check(order) => self.checks.push(order),
            Action::SampleLoad { app } => {
                let (queue, cpu_each) = self.load.get(&app).copied().unwrap_or_default();
                let measured = self.core.ready_leaders(&app).count() as u32;
                let sample = super::autoscale::LoadSample {
                    queue: Some(queue),
                    cpu_percent: (measured > 0).then_some(cpu_each * measured),
                    measured,
                };
                self.core.input(Input::LoadSampled { app, sample }, now);
            }
            _ => {}
        }
    }

    /// Process `pid` ends with `exit` (its group empties with it).
    pub(crate) fn end(&mut self, pid: i32, exit: Exit) {
        self.processes.remove(&pid);
        let now = self.now;
        let exited = Input::Exited {
            pid,
            exit,
            start_error: None,
        };
        self.core.input(exited, now);
        self.core.input(Input::GroupEmpty { pgid: pid }, now);
    }

    /// Process `pid` exits with `code`, then everything settles.
    pub(crate) fn exit(&mut self, pid: i32, code: i32) {
        self.end(pid, Exit::Code(code));
        self.settle();
    }

    /// Time passes by `by`, in steps of at most `step`, ticking at each.
    pub(crate) fn advance(&mut self, by: std::time::Duration, step: std::time::Duration) {
        let until = self.now + by;
        while self.now < until {
            self.now = (self.now + step).min(until);
            let now = self.now;
            self.core.input(Input::Tick, now);
            self.settle();
        }
    }

    /// The pids of `app`'s live processes.
    pub(crate) fn pids(&self, app: &str) -> Vec<i32> {
        self.processes
            .iter()
            .filter(|(_, a)| *a == app)
            .map(|(p, _)| *p)
            .collect()
    }

    /// The reported events that `pick` selects.
    pub(crate) fn count(&self, pick: impl Fn(&Event) -> bool) -> usize {
        self.events.iter().filter(|(_, e)| pick(e)).count()
    }
}

/// The errnos the tests start processes with (Linux's numbers; the core
/// only carries them).
pub(crate) mod errno {
    pub(crate) const ENOENT: i32 = 2;
    pub(crate) const ENOEXEC: i32 = 8;
    pub(crate) const EAGAIN: i32 = 11;
}
