//! Deterministic simulation of the real supervisor loop (FoundationDB and
//! TigerBeetle style): the real [`Supervisor`] over [`FakeEffects`], a clock
//! that only moves when told, and the invariants every state must satisfy.
//!
//! A [`World`] is driven by [`Step`]s — time passing, crashes, exec failures,
//! processes that ignore SIGTERM or drain slowly, readiness from probes and
//! the notify socket, control commands, edits of the file (valid or not) and
//! shutdown at any moment. A step names its target by an index taken modulo
//! what exists *then*, so any subsequence of a schedule is a valid schedule:
//! a failing one can be shrunk by dropping steps. After every step,
//! [`World::check`] checks the invariants:
//! - no worker is ready (or starting) without a live process behind it, and
//!   no worker waits in `Spawning` once an event is handled;
//! - no stop waits on a process that does not exist, and every live process
//!   belongs to a worker (nothing escapes the books);
//! - a rollout never has more than `N + max_surge` processes, and only a
//!   fault, a command, an edit or shutdown may take the ready count below
//!   `N − max_unavailable`;
//! - the core never refuses one of its own decisions (an anomaly);
//! - no process starts while its app's dependencies do not meet their
//!   conditions, and each app's gate agrees with its dependencies' states;
//! - a scheduled app never has two processes at once;
//! - no process starts for a slot held by `stop` (the world keeps the holds
//!   itself, from the commands' replies and the edits: `stop` holds, `start`
//!   releases, and so does a change of that app in the file), and no worker
//!   is held in a slot the core does not hold;
//! - during a shutdown, no app gets a signal while an app that depends on
//!   it still has a process.
//!
//! Some of these are about a moment inside a step — a spawn, a signal — that
//! a look after the step could no longer judge (time passes within a step,
//! and dependencies may come and go meanwhile): the world looks after every
//! event it hands the supervisor ([`World::witness`]), and the fake records
//! what it saw when it signalled and spawned.
//!
//! [`World::converges`] then lets time pass with healthy processes and checks
//! that the running system equals the file (apps whose dependencies cannot
//! be met wait, and scheduled apps run on their ticks), and
//! [`World::shuts_down`] that a shutdown completes within the `kill_timeout`s
//! of the longest chain of dependencies plus a bound. `tests/simulation.rs`
//! generates schedules from seeds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::fake::{EXIT_AFTER_MS, FAIL_RUNS, FakeEffects, Life};
use effects::CheckAnswer;
use effects::Effects;
use effects::notify::Notification;
use model::orders::WatchdogMessage;
use model::protocol::Command;
use model::spec::{AppSpec, Desired, Probe, ProbeKind, ProbeSpec, Readiness, Template};
use supervise::supervisor::{Load, Loaded};
use supervise::supervisor::{News, Supervisor};
use supervise_core::Phase;

mod answers;
mod autoscaling;
pub mod dependencies;
pub mod fake;
mod invariants;
mod step;
mod upgrading;

pub use step::{CommandKind, Edit, Step};

/// Make `app` follow its load within `min..=max` (the simulation's targets).
pub fn autoscale(app: &mut AppSpec, min: u32, max: u32) {
    autoscaling::edit(std::slice::from_mut(app), 0, min, max);
}

/// What the simulated loop hands over in an upgrade besides the supervisor
/// and the effects: no sockets of its own, no claim.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct SimShellState {
    /// How many upgrades came before this one.
    pub(crate) upgrades: u32,
}

impl effects::upgrade::KeptOpen for SimShellState {
    fn kept_open(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }
}

/// The simulated loop's part of an upgrade.
struct SimShell {
    logs: std::sync::Arc<effects::output::LogHub>,
    binary: std::path::PathBuf,
    upgrades: u32,
}

impl supervise::supervisor::upgrading::Shell for SimShell {
    type State = SimShellState;

    fn state(&self, _client: Option<std::os::fd::RawFd>) -> SimShellState {
        SimShellState {
            upgrades: self.upgrades,
        }
    }

    fn logs(&self) -> &effects::output::LogHub {
        &self.logs
    }

    fn default_binary(&self) -> &std::path::Path {
        &self.binary
    }
}

/// The uid the simulated supervisor runs as.
pub(crate) const UID: u32 = 1000;
/// Time steps taken by one `advance` before it is called stuck (a liveness bug).
const MAX_TICKS: usize = 100_000;

/// What an invariant found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

/// The simulated world: the real supervisor, its fake effects, the file.
pub struct World {
    pub supervisor: Supervisor<FakeEffects>,
    /// The file as the supervisor should be running it now.
    pub desired: Desired,
    /// The file's apps as written last, valid or not (edits build on it).
    written: Vec<AppSpec>,
    added: usize,
    /// Per app, the rollout being watched: (generation, instances, checked).
    rollouts: HashMap<String, (u64, u32, bool)>,
    /// Ready counts before the current step, per app.
    ready_before: HashMap<String, usize>,
    /// The last thing that may take workers away on purpose or by fault.
    disruptive: bool,
    pub(crate) shutdown_at: Option<Instant>,
    /// How long the supervisor stalled since the shutdown began: the
    /// shutdown may take that much longer.
    pub(crate) stalled_in_shutdown: Duration,
    /// The second SIGINT came: everything is killed at once, in no order.
    killed_all: bool,
    /// The event being handled is the signal that begins the shutdown.
    shutdown_turn: bool,
    /// The first violation seen at a moment inside a step (a spawn, a
    /// signal, a file written), for the next [`World::check`].
    witnessed: Option<Violation>,
    /// The workers of each app that were not stopping before the event
    /// being handled (see [`World::witness`]).
    going_before: HashMap<String, Vec<model::orders::WorkerId>>,
    /// The first pid and the first signal [`World::witness`] has not
    /// looked at yet.
    unseen_pid: i32,
    unseen_signal: usize,
    /// The steps taken, for a failure's report.
    pub trace: Vec<Step>,
    /// How many times the supervisor upgraded itself (state written out and
    /// read back) in this schedule.
    pub upgrades: u64,
    /// Per app, the generation last seen said to serve without the socket
    /// `inject` hands over.
    inject_warned: HashMap<String, Option<u64>>,
    /// What systemd was told, as far as [`World::witness`] has read it: the
    /// count of messages read, whether the start was told, and whether a
    /// reload is open.
    told: Told,
    /// The slots `stop` holds, per app, as the world works them out from
    /// what it asked and what the supervisor answered.
    pub(crate) holds: HashMap<String, std::collections::BTreeSet<u32>>,
    /// Each autoscaled app as last seen (see [`autoscaling`]).
    pub(crate) scaling: HashMap<String, autoscaling::Scaled>,
}

/// What [`World::witness`] has read of the messages to systemd.
#[derive(Debug, Default)]
struct Told {
    read: usize,
    started: bool,
    reloading: bool,
}

/// An app for the simulation: `sleep`-like, small timeouts so simulated time
/// stays short, the readiness given.
pub fn app(name: &str, instances: u32, ready: Readiness) -> AppSpec {
    let mut spec = AppSpec::with_defaults(name, &["/bin/worker"], instances);
    spec.ready = match ready {
        Readiness::Probe(_) => probe(instances),
        other => other,
    };
    spec.ready_timeout = Duration::from_secs(3);
    spec.kill_timeout = Duration::from_secs(2);
    spec.backoff.max = Duration::from_secs(2);
    spec
}

/// `spec` whose program ends on its own `after` its spawn, as a one-shot or
/// a scheduled job does: with code 1 for each instance's first
/// `failing_runs` processes, 0 after (see [`crate::fake`]).
pub fn ending_on_its_own(mut spec: AppSpec, after: Duration, failing_runs: u32) -> AppSpec {
    spec.process.argv = vec![
        Template::literal("/bin/job"),
        Template::literal(format!("{EXIT_AFTER_MS}{}", after.as_millis())),
        Template::literal(format!("{FAIL_RUNS}{failing_runs}")),
    ];
    spec
}

/// A tcp probe on `127.0.0.1:{instance+9000}`, parsed for `instances` slots.
pub fn probe(instances: u32) -> Readiness {
    let written =
        Template::parse("127.0.0.1:{instance+9000}").unwrap_or_else(|_| Template::literal(""));
    Readiness::Probe(ProbeSpec {
        kind: ProbeKind::Tcp,
        targets: (0..instances.max(1))
            .map(|i| Probe::Tcp(([127, 0, 0, 1], 9000 + i as u16).into()))
            .collect(),
        written,
    })
}

impl World {
    /// A world running `apps`, started; emptied groups are polled (process
    /// groups, the environment mode).
    pub fn new(apps: Vec<AppSpec>) -> World {
        World::with_effects(apps, FakeEffects::new(Instant::now()))
    }

    /// A world running `apps` whose emptied groups are announced, as
    /// `cgroup.events` does in cgroup mode.
    pub fn with_cgroups(apps: Vec<AppSpec>) -> World {
        World::with_effects(
            apps,
            FakeEffects::new(Instant::now()).announcing_empty_groups(),
        )
    }

    fn with_effects(apps: Vec<AppSpec>, fake: FakeEffects) -> World {
        // As the shell sets it: an upgrade serializes instants through it.
        model::monotonic::set_anchor(std::time::Instant::now(), 1 << 40);
        let desired = Desired {
            source: "/sim/ecosystem.yaml".into(),
            apps: apps.clone(),
            memory_check: model::spec::defaults::MEMORY_CHECK,
            metrics: None,
        };
        let written = dependencies::refusal(&apps);
        let mut supervisor = Supervisor::new(&desired, "ecosystem.yaml", UID, fake);
        supervisor.start();
        let mut world = World {
            supervisor,
            desired,
            written: apps,
            added: 0,
            rollouts: HashMap::new(),
            ready_before: HashMap::new(),
            disruptive: false,
            shutdown_at: None,
            stalled_in_shutdown: Duration::ZERO,
            killed_all: false,
            shutdown_turn: false,
            witnessed: written.map(refused_file),
            going_before: HashMap::new(),
            unseen_pid: 0,
            unseen_signal: 0,
            trace: Vec::new(),
            upgrades: 0,
            inject_warned: HashMap::new(),
            told: Told::default(),
            holds: HashMap::new(),
            scaling: HashMap::new(),
        };
        world.witness();
        world.deliver();
        world
    }

    /// Hand the supervisor one event, then look at what it did.
    pub(crate) fn handle(&mut self, event: News) {
        self.handle_all([event]);
    }

    /// Hand the supervisor a batch of events, then look at what it did.
    pub(crate) fn handle_all(&mut self, events: impl IntoIterator<Item = News>) {
        self.going_before = self.going_workers();
        self.supervisor.handle_all(events);
        self.witness();
    }

    pub fn now(&self) -> Instant {
        self.supervisor.effects().now()
    }

    /// What the fake effects did, in order.
    pub fn history(&self) -> &[String] {
        &self.supervisor.effects().history
    }

    pub fn fake(&mut self) -> &mut FakeEffects {
        self.supervisor.effects_mut()
    }

    /// Hand the supervisor what the fake world has for it now: exec
    /// statuses that are due, SIGCHLD for exited children, emptied groups
    /// (when they are announced).
    pub fn deliver(&mut self) {
        for _ in 0..MAX_TICKS {
            let reports = self.fake().due_exec_reports();
            if !reports.is_empty() {
                // A program the preload library reaches says so as it binds,
                // right after its exec.
                let binding: Vec<i32> = reports
                    .iter()
                    .filter(|(_, status)| *status == effects::spawn::ExecStatus::Succeeded)
                    .map(|(pid, _)| *pid)
                    .filter(|pid| {
                        self.supervisor
                            .effects()
                            .process(*pid)
                            .is_some_and(|p| p.reached_by_preload())
                    })
                    .collect();
                self.handle_all(
                    reports
                        .into_iter()
                        .map(|(pid, status)| News::ExecStatus { pid, status }),
                );
                for pid in binding {
                    self.report_injected(pid);
                }
                continue;
            }
            let mut reaped = false;
            if self.supervisor.effects().sigchld_pending() {
                let before = self.zombies();
                self.handle(News::ChildExited);
                // Zombies the supervisor cannot reap yet wait for their exec
                // status, which is still to come.
                reaped = self.zombies() != before;
            }
            if self.fake().take_emptied_groups() {
                self.handle(News::GroupsChanged);
                continue;
            }
            if !reaped {
                return;
            }
        }
        panic!("deliver: the world does not calm down");
    }

    fn zombies(&self) -> usize {
        self.supervisor
            .effects()
            .processes()
            .filter(|p| matches!(p.life, Life::Zombie(_)))
            .count()
    }

    /// Let `by` pass, stopping at every moment the supervisor or a process
    /// has something due.
    pub fn advance(&mut self, by: Duration) {
        let target = self.now() + by;
        for _ in 0..MAX_TICKS {
            self.deliver();
            let now = self.now();
            if self.supervisor.finished() {
                // The real loop has exited: time passes for the fake alone.
                self.fake().advance_to(target);
                return;
            }
            let wake = self.supervisor.next_wake();
            if wake <= now {
                self.handle(News::Timer);
                continue;
            }
            let next = self
                .supervisor
                .effects()
                .next_due()
                .filter(|t| *t > now)
                .map_or(wake, |t| t.min(wake));
            if next > target {
                self.fake().advance_to(target);
                self.deliver();
                return;
            }
            self.fake().advance_to(next);
            if next >= wake {
                // The loop's sleep until `wake` ended.
                self.deliver();
                self.handle(News::Timer);
            }
        }
        panic!("advance: no progress after {MAX_TICKS} steps: a busy loop");
    }

    /// Every probing process's probe succeeds and every notify process says
    /// READY=1; every running check passes, memory is measured low, and
    /// every process with a watchdog pings it.
    pub fn ready_everything(&mut self) {
        let checks: Vec<(i32, u64)> = self.supervisor.effects().checks().collect();
        for (pid, number) in checks {
            self.answer_check(pid, number, true);
        }
        // No instance is over: nothing to break.
        let _ = self.answer_memory(None, false);
        let watched: Vec<i32> = self
            .supervisor
            .core()
            .apps()
            .flat_map(|a| a.workers.values())
            .filter(|w| w.watchdog.is_some())
            .filter_map(|w| w.state.pid())
            .collect();
        for pid in watched {
            self.notify_with(pid, UID, false, Some(WatchdogMessage::Ping), None);
        }
        let probing: Vec<i32> = self.supervisor.effects().probing().collect();
        let probing: Vec<i32> = probing
            .into_iter()
            .filter(|pid| self.runs_program(*pid))
            .collect();
        if !probing.is_empty() {
            self.handle_all(probing.into_iter().map(|pid| News::ProbeSucceeded { pid }));
        }
        let notifying: Vec<i32> = self
            .supervisor
            .effects()
            .processes()
            .filter(|p| p.readiness == Readiness::Notify && p.runs_program())
            .map(|p| p.pid)
            .collect();
        for pid in notifying {
            self.notify(pid, UID);
        }
        self.deliver();
    }

    /// Apply a new version of the file (as the config loader would hand it).
    pub fn apply(&mut self, apps: Vec<AppSpec>) {
        if let Some(reason) = dependencies::refusal(&apps) {
            self.witnessed.get_or_insert(refused_file(reason));
        }
        self.written = apps.clone();
        let desired = Desired {
            source: self.desired.source.clone(),
            apps,
            memory_check: self.desired.memory_check,
            metrics: self.desired.metrics,
        };
        if self.supervisor.core().phase() == Phase::Running {
            // What the new version starts is judged with its holds.
            self.release_changed(&desired);
        }
        self.handle(News::Config(Loaded {
            trigger: "the file changed".into(),
            load: Load::Valid {
                desired: desired.clone(),
                diagnostics: String::new(),
            },
            identity: None,
            hash: None,
        }));
        if self.supervisor.core().phase() == Phase::Running {
            self.desired = self.supervisor.core().desired().clone();
        }
    }

    /// A change of an app in the file releases its holds (a scheduled
    /// app's runs start on its schedule: its hold stays); a slot the file
    /// no longer wants holds nothing.
    fn release_changed(&mut self, next: &Desired) {
        let before = &self.desired;
        self.holds.retain(|name, slots| {
            let Some(new) = next.app(name) else {
                return false;
            };
            if before.app(name) != Some(new) && new.schedule.is_none() {
                return false;
            }
            slots.retain(|slot| *slot < new.instances);
            !slots.is_empty()
        });
    }

    /// A control command; its reply.
    pub fn command(&mut self, command: Command) -> serde_json::Value {
        self.going_before = self.going_workers();
        let held = match &command {
            Command::Stop { target } => Some((target.clone(), true)),
            Command::Start { target } => Some((target.clone(), false)),
            _ => None,
        };
        let reply = self.supervisor.control(command);
        if reply["ok"] == true
            && let Some((target, hold)) = held
        {
            self.follow_hold(&target, hold);
        }
        self.witness();
        reply
    }

    /// `stop` (`hold`) or `start` of `target` was carried out.
    fn follow_hold(&mut self, target: &str, hold: bool) {
        let (name, slot) = match target.rsplit_once('.') {
            Some((name, slot)) => (name, slot.parse::<u32>().ok()),
            None => (target, None),
        };
        let instances = self.desired.app(name).map_or(0, |a| a.instances);
        let slots: Vec<u32> = slot.map_or_else(|| (0..instances).collect(), |s| vec![s]);
        let held = self.holds.entry(name.to_string()).or_default();
        for slot in slots {
            if hold {
                held.insert(slot);
            } else {
                held.remove(&slot);
            }
        }
    }

    /// The live processes (running or stopping), by pid.
    pub fn live(&self) -> Vec<i32> {
        self.supervisor
            .effects()
            .processes()
            .filter(|p| p.is_alive())
            .map(|p| p.pid)
            .collect()
    }

    /// `(slot, generation, state)` of an app's workers, sorted.
    pub fn slots(&self, app: &str) -> Vec<(u32, u64, &'static str)> {
        let mut slots: Vec<_> = self
            .supervisor
            .core()
            .app(app)
            .map(|a| {
                a.workers
                    .values()
                    .map(|w| (w.slot, w.generation, w.state.name()))
                    .collect()
            })
            .unwrap_or_default();
        slots.sort();
        slots
    }

    /// The pids of an app's workers, sorted.
    pub fn pids(&self, app: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .supervisor
            .core()
            .app(app)
            .map(|a| a.workers.values().filter_map(|w| w.state.pid()).collect())
            .unwrap_or_default();
        pids.sort();
        pids
    }
}

/// The simulation wrote a file `check` refuses: a bug of the simulation,
/// not of the core.
fn refused_file(reason: String) -> Violation {
    Violation(format!(
        "the simulation wrote a file `check` refuses ({reason}): fix the simulation"
    ))
}
