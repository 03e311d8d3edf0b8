//! Carrying out the core's actions through the effects, feeding back what
//! the core needs to know (a spawn's pid or failure) as inputs.

use std::os::fd::RawFd;
use std::time::Instant;

use super::{Supervisor, report};
use effects::{Effects, Start};
use model::orders::SpawnOrder;
use model::process::{StartError, StartStage};
use model::spec::{ListenAddress, SocketKey};
use supervise_core::{Action, Input};

impl<E: Effects> Supervisor<E> {
    /// Carry out one round of actions. Socket sweeps are done once, last.
    pub(super) fn execute(&mut self, actions: Vec<Action>, now: Instant) {
        let mut sweep = false;
        let mut actions = actions.into_iter().peekable();
        while let Some(action) = actions.next() {
            match action {
                Action::Spawn(order) => {
                    // The starts in a row go together, the spawner forking
                    // one while the next is sent; so do the starts of many
                    // apps, between which are only reports (`reconciled`),
                    // told once those starts are made.
                    let mut orders = vec![order];
                    let mut reports = Vec::new();
                    while let Some(Action::Spawn(_) | Action::Report(_)) = actions.peek() {
                        match actions.next() {
                            Some(Action::Spawn(next)) => orders.push(next),
                            Some(report) => reports.push(report),
                            None => break,
                        }
                    }
                    self.spawn(&orders, now);
                    self.execute(reports, now);
                }
                Action::Signal { pgid, signal } => self.effects.signal_group(pgid, signal),
                Action::ReleaseGroup {
                    pgid,
                    kill_leftovers,
                    instance,
                } => {
                    if kill_leftovers {
                        let count = self.effects.kill_leftovers(pgid);
                        if count > 0 {
                            report::group_killed(&instance, pgid, count);
                        }
                    }
                    self.effects.forget_group(pgid);
                }
                Action::CancelProbe { pid } => self.effects.cancel_probe(pid),
                Action::Check(order) => {
                    self.effects.check(&order);
                    // A check that could not even start answers at once.
                    for answer in self.effects.take_check_answers() {
                        self.check_answered(answer, now);
                    }
                }
                Action::CancelCheck { pid } => self.effects.cancel_check(pid),
                Action::MeasureMemory { round, pids } => self.effects.measure_memory(round, pids),
                Action::LimitMemory { pgid, bytes } => self.effects.limit_memory(pgid, bytes),
                Action::SweepSockets => sweep = true,
                Action::Bind { app, key } => {
                    let error = self.effects.bind(&key, &app).err().map(|e| e.to_string());
                    self.core.input(Input::Bound { app, key, error }, now);
                }
                Action::SampleLoad { app } => self.sample_load(app, now),
                Action::RouteOutput => self.effects.route_output(self.core.desired()),
                Action::Systemd(state) => self.effects.notify_systemd(state),
                Action::ForgetOutput { app, slot } => self.effects.forget_output(&app, slot),
                Action::Report(event) => {
                    self.tally.count(&event);
                    report::event(&event, &self.shown);
                }
            }
        }
        if sweep {
            self.sweep_sockets();
        }
    }

    /// Bind (or find) each order's sockets and start its process; what
    /// each start's result led to (its `spawned` report first) is carried
    /// out at once, not after the rest of the actions: a reader of the log
    /// sees each start as it happens.
    fn spawn(&mut self, orders: &[SpawnOrder], now: Instant) {
        let mut starts = Vec::with_capacity(orders.len());
        let mut unbound = Vec::new();
        for order in orders {
            match self.bind_all(order) {
                Ok(sockets) => starts.push(Start { order, sockets }),
                Err(detail) => unbound.push(Input::SpawnFailed {
                    app: order.app.clone(),
                    id: order.id,
                    error: StartError {
                        stage: StartStage::Prepare,
                        errno: libc::EADDRINUSE,
                    },
                    detail,
                }),
            }
        }
        let results = self.effects.spawn(&starts);
        let started = starts.iter().zip(results).map(|(start, result)| {
            let order = start.order;
            match result {
                Ok(pid) => Input::Spawned {
                    app: order.app.clone(),
                    id: order.id,
                    pid,
                },
                Err(failure) => Input::SpawnFailed {
                    app: order.app.clone(),
                    id: order.id,
                    error: failure.error,
                    detail: failure.detail,
                },
            }
        });
        let inputs: Vec<Input> = unbound.into_iter().chain(started).collect();
        for input in inputs {
            self.core.input(input, now);
            // The queue held nothing else: `settle` took it.
            let consequences = self.core.take_actions();
            if !consequences.is_empty() {
                self.execute(consequences, now);
            }
        }
    }

    /// Measure the load of autoscaled `app` (its accept queue, the CPU of
    /// its ready instances) and give it to the core.
    fn sample_load(&mut self, app: String, now: Instant) {
        let Some(spec) = self.core.app(&app).map(|a| &a.spec) else {
            return;
        };
        // A buffer kept from sample to sample, not one made per sample.
        self.leaders.clear();
        self.leaders.extend(self.core.ready_leaders(&app));
        let sample = self.effects.sample_load(spec, &self.leaders);
        self.core.input(Input::LoadSampled { app, sample }, now);
    }

    /// Bind (or find) the sockets of `order`; why not, in words.
    fn bind_all(&mut self, order: &SpawnOrder) -> Result<Vec<(RawFd, ListenAddress)>, String> {
        let mut sockets = Vec::with_capacity(order.definition.listen.len());
        for listen in &order.definition.listen {
            let key = SocketKey {
                address: listen.address.clone(),
                slot: listen.reuseport.then_some(order.slot),
            };
            let mut bound = self.effects.bind(&key, &order.app);
            if bound.is_err() {
                // An overlapping address that nobody wants any more may still
                // be open: close what is unwanted and try once more.
                self.sweep_sockets();
                bound = self.effects.bind(&key, &order.app);
            }
            sockets.push(bound.map_err(|error| error.to_string())?);
        }
        Ok(sockets)
    }

    /// Close every socket that no app's current definition, nor an older one
    /// a worker still runs, uses.
    pub(super) fn sweep_sockets(&mut self) {
        let wanted = self.core.wanted_sockets();
        for closed in self.effects.retain_sockets(&wanted) {
            report::unlistening(&closed);
        }
    }
}
