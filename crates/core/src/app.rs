//! One app as the core keeps it: its desired spec, its workers, and the
//! definitions they run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use super::reconcile::Workers;
use super::worker::State;
use model::spec::{AppSpec, ProcessDefinition};

/// One app: its desired spec, its workers, and the definitions they run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct App {
    pub spec: AppSpec,
    /// The version of the app's process definition; bumped by a change of it
    /// in the file and by `supervise reload`.
    pub generation: u64,
    /// The process definition of every generation a worker still runs.
    pub definitions: BTreeMap<u64, Arc<ProcessDefinition>>,
    pub workers: Workers,
    pub rollout_halted: bool,
    /// The slots `stop` holds until `start` (or a change of the app in
    /// the file): whatever generation, rollout, `reload` or `restart`
    /// comes meanwhile, reconcile starts nothing in them. A property of
    /// the slot, not of a worker: the worker that stood for it may be
    /// replaced or gone (a rollout that recreates stops the old ones for
    /// good), and the hold stays. (Absent from a state an older image
    /// handed over: [`super::Core::resumed`] rebuilds it from the held
    /// workers.)
    #[serde(default)]
    pub held: BTreeSet<u32>,
    /// The current generation replaces by stop-all-then-start (overlapping listen).
    pub recreate: bool,
    /// Removed from the file: stopping, then forgotten.
    pub removed: bool,
    /// Whether its dependencies let it start processes.
    pub gate: super::dependencies::Gate,
    /// `on_dependency_restart: restart`: the processes of each dependency
    /// when they last met its condition.
    pub(super) dependency_seen:
        BTreeMap<String, std::collections::BTreeSet<super::dependencies::WorkerRun>>,
    /// Stopping everything: removed, or shutting down with no dependent left.
    pub(super) winding_down: bool,
    /// A scheduled app's runs.
    pub runs: Option<super::schedule::Runs>,
    /// An autoscaled app's load over time (its count is `spec.instances`).
    #[serde(default)]
    pub autoscaler: Option<super::autoscale::Autoscaler>,
    pub(super) dirty: bool,
    #[serde(with = "model::monotonic::option")]
    pub(super) wake_at: Option<Instant>,
    /// The generation whose instance was said to serve without the socket
    /// `inject` hands over (once per generation).
    pub(super) inject_warned: Option<u64>,
}

impl App {
    /// The generation said to serve without the socket `inject` hands over.
    pub fn inject_warned(&self) -> Option<u64> {
        self.inject_warned
    }

    /// Whether `generation` may still be said to serve without the socket
    /// `inject` hands over, when the last said is `warned`: never said for
    /// it, nor for a later one (an old version's worker that fails while a
    /// new one rolls out is on its way out; once per version means at most
    /// once). Takes the field, not the app: callers hold a worker borrowed.
    pub(super) fn inject_unsaid(warned: Option<u64>, generation: u64) -> bool {
        warned.is_none_or(|said| generation > said)
    }

    /// The addresses with `inject` of generation `generation`.
    pub(super) fn inject_addresses(
        definitions: &BTreeMap<u64, Arc<ProcessDefinition>>,
        generation: u64,
    ) -> Vec<String> {
        definitions
            .get(&generation)
            .map_or_else(Vec::new, |d| d.inject_addresses())
    }

    pub(super) fn new(spec: &AppSpec) -> App {
        App {
            spec: spec.clone(),
            generation: 1,
            definitions: BTreeMap::from([(1, Arc::new(spec.process.clone()))]),
            workers: Workers::new(),
            rollout_halted: false,
            held: BTreeSet::new(),
            recreate: false,
            removed: false,
            gate: Default::default(),
            dependency_seen: BTreeMap::new(),
            winding_down: false,
            runs: None,
            autoscaler: spec.autoscale.as_ref().map(|_| Default::default()),
            dirty: true,
            wake_at: None,
            inject_warned: None,
        }
    }

    /// Drop the definitions no worker runs any more (the current one stays).
    pub(super) fn prune_definitions(&mut self) {
        let current = self.generation;
        let workers = &self.workers;
        self.definitions
            .retain(|g, _| *g == current || workers.values().any(|w| w.generation == *g));
    }

    /// A new generation of the definition: the workers of older ones are replaced.
    pub(super) fn bump_generation(&mut self, definition: ProcessDefinition, recreate: bool) {
        // A worker being recycled is now simply outdated: the rollout
        // replaces it, and its checks resume meanwhile (broken again during
        // the rollout, it is stopped as a failed run).
        for worker in self.workers.values_mut() {
            worker.recycle = None;
        }
        self.generation += 1;
        self.definitions
            .insert(self.generation, Arc::new(definition));
        self.rollout_halted = false;
        self.recreate = recreate;
        self.dirty = true;
    }

    /// Held by `stop`: a slot held, or (a state from an older image) a
    /// worker held. A scheduled app so held is paused.
    pub fn paused_by_hold(&self) -> bool {
        !self.held.is_empty() || self.workers.values().any(|w| w.state == State::Held)
    }

    /// Instances of the current generation that are ready (or, one-shots,
    /// completed: `reload` of one is done when it has run).
    pub fn replaced(&self) -> usize {
        self.workers
            .values()
            .filter(|w| w.generation == self.generation && done_or_ready(w))
            .count()
    }

    /// Workers of older generations.
    pub fn outdated(&self) -> usize {
        self.workers
            .values()
            .filter(|w| w.generation < self.generation)
            .count()
    }

    /// Every wanted slot has a ready worker.
    /// (A one-shot that completed counts: it did what it is there for.)
    pub(super) fn all_ready(&self) -> bool {
        if self.spec.schedule.is_some() {
            // It runs at times: nothing to be ready for.
            return true;
        }
        self.every_slot(done_or_ready)
    }
}

/// Ready, or a one-shot that completed: it serves, or it did its job.
pub(super) fn done_or_ready(worker: &super::worker::Worker) -> bool {
    worker.state.is_ready() || matches!(worker.state, State::Completed { .. })
}
