//! The supervisor loop: one task owns all state and turns events into calls of
//! the pure core, then carries out the actions it returns.
//!
//! Events are child exits (one SIGCHLD stream and a `waitpid(-1, WNOHANG)`
//! loop: no zombie survives, adopted grandchildren included), signals to the
//! supervisor, and timers. An event marks its app *dirty*; only dirty apps are
//! reconciled, and a full pass over every app runs every
//! [`FULL_PASS_INTERVAL`] as a guard. When nothing is due the loop sleeps.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{debug, error, info, warn};

use crate::config::{self, Host, diagnostic, validate};
use crate::control::{self as protocol, Command};
use crate::effects::control::{self, CONTROL_QUEUE, ControlRequest, LogHub};
use crate::effects::notify::{Notification, NotifySocket};
use crate::effects::output::{self, LogFormat, LogSink, Source, Stream};
use crate::effects::probe::Probe;
use crate::effects::procfs;
use crate::effects::runtime::file_key;
use crate::effects::sockets::{BindError, SocketKey, SocketRegistry};
use crate::effects::spawn::{self, SpawnRequest};
use crate::effects::systemd::SystemdNotifier;
use crate::effects::undertaker::Undertaker;
use crate::effects::watch::FileWatcher;
use crate::plan::{self, AppChange};
use crate::reconcile::{self, Action, StopReason, Target};
use crate::spec::{AppSpec, Desired, ProcessDefinition, Readiness};
use crate::worker::{AfterStop, Decision, Exit, State, StopEnd, Worker, WorkerId};

/// The guard: every app is reconciled at least this often.
pub const FULL_PASS_INTERVAL: Duration = Duration::from_secs(10);
/// While a stopped worker's leader is gone but its group is not yet empty.
pub const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Reconcile passes for one app before giving the loop back (a bug guard).
const MAX_PASSES: usize = 64;
/// New versions of the file waiting for the loop (the watcher waits when full).
const CONFIG_QUEUE: usize = 4;
/// Readiness reports (probes, notify datagrams) waiting for the loop.
const EVENT_QUEUE: usize = 1024;
/// How long to wait for the undertaker to exit at shutdown.
const UNDERTAKER_EXIT_WAIT: Duration = Duration::from_secs(2);

/// What the supervisor needs from its environment.
pub struct Context {
    pub sink: LogSink,
    pub format: LogFormat,
    pub undertaker: Undertaker,
    /// The supervisor's environment minus `NOTIFY_SOCKET`, `LISTEN_*`, `WATCHDOG_*`.
    pub base_env: Vec<(OsString, OsString)>,
    pub nofile_soft: libc::rlim_t,
    pub systemd: Option<SystemdNotifier>,
    /// Where the control socket goes.
    pub control_path: std::path::PathBuf,
    /// The last lines of every instance, for `supervise logs`.
    pub logs: Arc<LogHub>,
}

/// The environment workers inherit: ours, without what describes *our* sockets.
pub fn worker_base_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(name, _)| {
            let name = name.as_bytes();
            name != b"NOTIFY_SOCKET"
                && !name.starts_with(b"LISTEN_")
                && !name.starts_with(b"WATCHDOG_")
        })
        .collect()
}

/// One app: its desired spec, its workers, and the definitions they run.
struct AppState {
    spec: AppSpec,
    generation: u64,
    /// The process definition of every generation a worker still runs.
    definitions: HashMap<u64, Arc<ProcessDefinition>>,
    workers: Vec<Worker>,
    rollout_halted: bool,
    /// The current generation replaces by stop-all-then-start (overlapping listen).
    recreate: bool,
    /// Removed from the file: stopping, then forgotten.
    removed: bool,
    dirty: bool,
    wake_at: Option<Instant>,
}

impl AppState {
    fn new(spec: &AppSpec) -> AppState {
        AppState {
            spec: spec.clone(),
            generation: 1,
            definitions: HashMap::from([(1, Arc::new(spec.process.clone()))]),
            workers: Vec::new(),
            rollout_halted: false,
            recreate: false,
            removed: false,
            dirty: true,
            wake_at: None,
        }
    }

    /// Drop the definitions no worker runs any more (the current one stays).
    fn prune_definitions(&mut self) {
        let current = self.generation;
        let workers = &self.workers;
        self.definitions
            .retain(|g, _| *g == current || workers.iter().any(|w| w.generation == *g));
    }
}

/// What the supervisor keeps for a running process besides its worker state.
struct ProcessHandle {
    app: String,
    id: WorkerId,
    spawned_at: Instant,
    exec_status: OwnedFd,
    /// The readiness probe running for it, if any.
    probe: Option<tokio::task::AbortHandle>,
    /// The last `STATUS=` it sent over the notify socket.
    status: Option<String>,
}

impl Drop for ProcessHandle {
    fn drop(&mut self) {
        if let Some(probe) = &self.probe {
            probe.abort();
        }
    }
}

/// A worker reported ready by a probe: (app, worker, pid).
type ProbeReady = (String, WorkerId, i32);

pub struct Supervisor {
    ctx: Context,
    /// The last good version of the file, as applied.
    desired: Desired,
    /// The file as the user named it (for messages).
    shown: String,
    /// The diagnostics of the last edit, while the file is invalid.
    config_error: Option<String>,
    /// Counts the applied versions of the file.
    config_generation: u64,
    /// When the current version of the file was applied.
    applied_at: std::time::SystemTime,
    apps: IndexMap<String, AppState>,
    /// Leader pid → its process.
    processes: HashMap<i32, ProcessHandle>,
    sockets: SocketRegistry,
    next_worker: WorkerId,
    shutting_down: bool,
    sent_ready: bool,
    /// `NOTIFY_SOCKET` for workers with `ready: notify` (once the socket is bound).
    notify_env: Option<OsString>,
    /// Probes report here.
    probe_ready: tokio::sync::mpsc::Sender<ProbeReady>,
    probe_results: Option<tokio::sync::mpsc::Receiver<ProbeReady>>,
    last_full_pass: Instant,
}

/// `web.2`, as in the output prefix.
fn label(app: &str, slot: u32) -> String {
    format!("{app}.{slot}")
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// `800ms`, `1.2s`, `2m5s`: short and exact enough for a log line.
pub fn short_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

impl Supervisor {
    /// Bind every app's sockets. A socket that cannot be bound refuses the start.
    pub fn new(
        desired: &Desired,
        shown: &str,
        ctx: Context,
    ) -> Result<Supervisor, (String, BindError)> {
        let mut sockets = SocketRegistry::default();
        let mut apps = IndexMap::new();
        for spec in &desired.apps {
            for key in socket_keys(spec) {
                if let Err(error) = sockets.ensure(&key, &spec.name) {
                    return Err((spec.name.clone(), error));
                }
            }
            apps.insert(spec.name.clone(), AppState::new(spec));
        }
        let (probe_ready, probe_results) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        Ok(Supervisor {
            ctx,
            desired: desired.clone(),
            shown: shown.to_string(),
            config_error: None,
            config_generation: 1,
            applied_at: std::time::SystemTime::now(),
            apps,
            processes: HashMap::new(),
            sockets,
            next_worker: 1,
            shutting_down: false,
            sent_ready: false,
            notify_env: None,
            probe_ready,
            probe_results: Some(probe_results),
            last_full_pass: Instant::now(),
        })
    }

    /// Run until every worker has stopped after SIGINT/SIGTERM.
    pub async fn run(mut self, watcher: FileWatcher, initial: [u8; 32]) -> std::io::Result<()> {
        let mut children = signal(SignalKind::child())?;
        let mut interrupts = signal(SignalKind::interrupt())?;
        let mut terminates = signal(SignalKind::terminate())?;
        let mut hangups = signal(SignalKind::hangup())?;
        let (changed, mut changes) = tokio::sync::mpsc::channel(CONFIG_QUEUE);
        tokio::spawn(watcher.run(initial, changed));
        let (notified, mut notifications) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        let name = format!(
            "supervise-{}-{}",
            file_key(&self.desired.source),
            std::process::id()
        );
        match NotifySocket::bind(&name) {
            Ok(socket) => {
                self.notify_env = Some(OsString::from(&socket.env_value));
                tokio::spawn(socket.run(notified));
            }
            Err(error) => error!(
                "cannot bind the notify socket @{name}: {error}; `ready: notify` workers will time out"
            ),
        }
        let (control_sender, mut control_requests) = tokio::sync::mpsc::channel(CONTROL_QUEUE);
        match control::bind(&self.ctx.control_path) {
            Ok(listener) => {
                let logs = self.ctx.logs.clone();
                tokio::spawn(control::serve(listener, control_sender, logs));
            }
            Err(error) => error!(
                "cannot create the control socket {}: {error}; status, reload and other commands will not reach this supervisor",
                self.ctx.control_path.display()
            ),
        }
        let mut probe_results = self
            .probe_results
            .take()
            .unwrap_or_else(|| tokio::sync::mpsc::channel(1).1);
        let instances: u32 = self.apps.values().map(|a| a.spec.instances).sum();
        info!(
            event = "applied",
            file = %self.shown,
            generation = 1,
            "applied {}: {}, {}",
            self.shown,
            plural(self.apps.len(), "app"),
            plural(instances as usize, "instance")
        );
        // Children that exited before the SIGCHLD stream existed.
        self.reap();
        loop {
            self.converge();
            if self.shutting_down && self.apps.values().all(|a| a.workers.is_empty()) {
                break;
            }
            let wake = self.next_wake();
            tokio::select! {
                _ = children.recv() => self.reap(),
                _ = interrupts.recv() => {
                    if self.shutting_down {
                        self.kill_everything();
                    } else {
                        self.begin_shutdown("SIGINT");
                    }
                }
                _ = terminates.recv() => self.begin_shutdown("SIGTERM"),
                _ = hangups.recv() => match std::fs::read(&self.desired.source) {
                    Ok(bytes) => self.reload(&bytes, "SIGHUP"),
                    Err(error) => error!(
                        event = "config_invalid",
                        "SIGHUP: cannot read {}: {error}; still running the last good version", self.shown
                    ),
                },
                Some(bytes) = changes.recv() => self.reload(&bytes, "the file changed"),
                Some((app, id, pid)) = probe_results.recv() => self.ready_signal(&app, id, pid, "probe"),
                Some(notification) = notifications.recv() => self.on_notification(notification),
                Some(request) = control_requests.recv() => self.on_control(request),
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => self.on_timer(),
            }
        }
        self.finish();
        Ok(())
    }

    /// A new version of the file: check it exactly as `supervise check` does;
    /// apply it if valid, else keep running the last good version.
    fn reload(&mut self, bytes: &[u8], trigger: &str) {
        if self.shutting_down {
            return;
        }
        let checked = config::check_bytes(bytes, &self.desired.source, &Host::detect());
        let rendered = diagnostic::render(&self.shown, &checked.text, &checked.diagnostics);
        let Some(desired) = checked.desired else {
            error!(
                event = "config_invalid",
                file = %self.shown,
                "{trigger}: {} is invalid ({}); still running the last good version",
                self.shown,
                diagnostic::summary_line(&checked.diagnostics)
            );
            self.ctx.sink.send(rendered.clone().into_bytes());
            self.config_error = Some(rendered);
            return;
        };
        if !rendered.is_empty() {
            self.ctx.sink.send(rendered.into_bytes());
        }
        self.config_error = None;
        self.notify_systemd("RELOADING=1");
        let mut applied = desired.clone();
        for change in plan::diff(&self.desired, &desired) {
            if self.apply_change(&change, &desired, &mut applied)
                && !matches!(change, AppChange::Unchanged { .. })
            {
                info!(event = "plan", app = change_app(&change), "{change}");
            }
        }
        self.desired = applied;
        self.config_generation += 1;
        self.applied_at = std::time::SystemTime::now();
        info!(
            event = "applied",
            file = %self.shown,
            generation = self.config_generation,
            "{trigger}: applied {} (version {})",
            self.shown,
            self.config_generation
        );
        self.notify_systemd("READY=1");
    }

    /// Carry out one app's change. Returns false when it could not be applied
    /// (its sockets cannot be bound): the app then keeps its last good version,
    /// in `applied` too.
    fn apply_change(
        &mut self,
        change: &AppChange,
        desired: &Desired,
        applied: &mut Desired,
    ) -> bool {
        match change {
            AppChange::Unchanged { .. } => true,
            AppChange::Removed { name, .. } => {
                if let Some(app) = self.apps.get_mut(name) {
                    app.removed = true;
                    app.spec.instances = 0;
                    app.dirty = true;
                }
                self.sweep_sockets();
                true
            }
            AppChange::Added { name, .. } | AppChange::Changed(plan::Changed { name, .. }) => {
                let Some(spec) = desired.app(name) else {
                    return false;
                };
                let overlapping =
                    matches!(change, AppChange::Changed(c) if c.overlapping_rebind.is_some());
                // An overlapping address binds once the old workers are gone.
                if !overlapping && let Err(error) = self.bind_all(spec) {
                    error!(event = "bind_failed", app = %name, "{name}: {error}; this app keeps its last good version");
                    match self.desired.app(name) {
                        Some(old) => {
                            if let Some(kept) = applied.apps.iter_mut().find(|a| a.name == *name) {
                                *kept = old.clone();
                            }
                        }
                        None => applied.apps.retain(|a| a.name != *name),
                    }
                    return false;
                }
                let app = self
                    .apps
                    .entry(name.clone())
                    .or_insert_with(|| AppState::new(spec));
                if app.spec != *spec || app.removed {
                    // A failed or exited worker gets a fresh start when its
                    // app's definition changes, and only then.
                    for worker in &mut app.workers {
                        if matches!(worker.state, State::Failed | State::Exited | State::Held) {
                            let _ = worker.revive();
                        }
                    }
                }
                if app.spec.process != spec.process {
                    app.generation += 1;
                    app.definitions
                        .insert(app.generation, Arc::new(spec.process.clone()));
                    app.rollout_halted = false;
                    app.recreate = overlapping;
                }
                app.spec = spec.clone();
                app.removed = false;
                app.dirty = true;
                true
            }
        }
    }

    /// Bind (or find) every socket of `spec`.
    fn bind_all(&mut self, spec: &AppSpec) -> Result<(), BindError> {
        for key in socket_keys(spec) {
            self.sockets.ensure(&key, &spec.name)?;
        }
        Ok(())
    }

    /// Start the readiness probe of a new process, if its app has one.
    fn start_probe(
        &self,
        app: &str,
        id: WorkerId,
        slot: u32,
        pid: i32,
        readiness: &Readiness,
    ) -> Option<tokio::task::AbortHandle> {
        let target = match readiness {
            Readiness::Tcp(template) => {
                validate::parse_host_port(&template.expand(slot)).map(Probe::Tcp)
            }
            Readiness::Http(template) => validate::parse_http_url(&template.expand(slot))
                .map(|(address, path)| Probe::Http { address, path }),
            Readiness::Immediate | Readiness::Notify | Readiness::Delay(_) => return None,
        };
        let probe = match target {
            Ok(probe) => probe,
            Err(error) => {
                error!(app, slot, "{}: cannot probe: {error}", label(app, slot));
                return None;
            }
        };
        let report = self.probe_ready.clone();
        let app = app.to_string();
        let task = tokio::spawn(async move {
            probe.until_ready().await;
            let _ = report.send((app, id, pid)).await;
        });
        Some(task.abort_handle())
    }

    /// A probe or a notification says worker `id` (process `pid`) is ready.
    fn ready_signal(&mut self, app_name: &str, id: WorkerId, pid: i32, via: &str) {
        let now = Instant::now();
        let spawned_at = self.processes.get(&pid).map(|p| p.spawned_at);
        let Some(app) = self.apps.get_mut(app_name) else {
            return;
        };
        app.dirty = true;
        let Some(worker) = app.workers.iter_mut().find(|w| w.id == id) else {
            return;
        };
        if !matches!(worker.state, State::Starting { pid: p, .. } if p == pid) {
            return;
        }
        let (slot, generation) = (worker.slot, worker.generation);
        if worker.ready(now).is_ok() {
            let after = spawned_at
                .map(|t| short_duration(now - t))
                .unwrap_or_default();
            info!(
                event = "ready",
                app = app_name,
                slot,
                pid,
                generation,
                via,
                "{} is ready (pid {pid}, after {after}, by {via})",
                label(app_name, slot)
            );
        }
    }

    /// A datagram on the notify socket: find its worker by the sender's
    /// process group, check the sender's uid, and act on what it says.
    fn on_notification(&mut self, notification: Notification) {
        let leader = [
            notification.sender_pgid,
            Some(notification.sender_pid),
            notification.main_pid,
        ]
        .into_iter()
        .flatten()
        .find(|pid| self.processes.contains_key(pid));
        let Some(leader) = leader else {
            debug!(
                pid = notification.sender_pid,
                "notify datagram from pid {} which belongs to no worker; ignored",
                notification.sender_pid
            );
            return;
        };
        let Some(process) = self.processes.get(&leader) else {
            return;
        };
        let (app_name, id) = (process.app.clone(), process.id);
        let Some(app) = self.apps.get(&app_name) else {
            return;
        };
        let definition = app
            .workers
            .iter()
            .find(|w| w.id == id)
            .and_then(|w| app.definitions.get(&w.generation));
        // SAFETY: geteuid has no preconditions.
        let expected_uid = definition
            .and_then(|d| d.identity.as_ref().map(|i| i.uid))
            .unwrap_or_else(|| unsafe { libc::geteuid() });
        if notification.sender_uid != expected_uid && notification.sender_uid != 0 {
            warn!(
                app = %app_name, pid = notification.sender_pid,
                "notify datagram for {app_name} from uid {}, not the worker's uid {expected_uid}; ignored",
                notification.sender_uid
            );
            return;
        }
        let notify_ready = matches!(app.spec.ready, Readiness::Notify);
        if let Some(process) = self.processes.get_mut(&leader)
            && let Some(status) = notification.status
        {
            debug!(app = %app_name, pid = leader, "STATUS={status}");
            process.status = Some(status);
        }
        if notification.stopping {
            debug!(app = %app_name, pid = leader, "the worker says it is stopping");
        }
        if notification.ready && notify_ready {
            self.ready_signal(&app_name, id, leader, "notify");
        }
    }

    /// A request from a client of the control socket.
    fn on_control(&mut self, request: ControlRequest) {
        let reply = match request.command {
            Command::Status => Ok(self.status()),
            Command::Reload { app } => self.command_reload(&app),
            Command::Restart { target } => self.command_on_workers(&target, TargetAction::Restart),
            Command::Stop { target } => self.command_on_workers(&target, TargetAction::Hold),
            Command::Start { target } => self.command_on_workers(&target, TargetAction::Release),
            // Served by the control task itself, from the log hub.
            Command::Logs { .. } => Err("logs are served by the control socket".to_string()),
        };
        let value = reply.unwrap_or_else(|message| protocol::error_reply(&message));
        // The client may be gone; that is its business.
        let _ = request.reply.try_send(value);
    }

    /// `supervise reload APP|all`: bump the generation, which the reconciler
    /// turns into a rolling replacement.
    fn command_reload(&mut self, target: &str) -> Result<serde_json::Value, String> {
        let names: Vec<String> = if target == "all" {
            self.apps
                .iter()
                .filter(|(_, a)| !a.removed)
                .map(|(n, _)| n.clone())
                .collect()
        } else if self.apps.get(target).is_some_and(|a| !a.removed) {
            vec![target.to_string()]
        } else {
            return Err(format!("no app `{target}`"));
        };
        for name in &names {
            let Some(app) = self.apps.get_mut(name) else {
                continue;
            };
            app.generation += 1;
            app.definitions
                .insert(app.generation, Arc::new(app.spec.process.clone()));
            app.rollout_halted = false;
            app.recreate = false;
            app.dirty = true;
            info!(event = "reload", app = %name, generation = app.generation, "{name}: reload requested; rolling replace of {}", plural(app.spec.instances as usize, "instance"));
        }
        Ok(serde_json::json!({"ok": true, "apps": names}))
    }

    /// `restart`, `stop` and `start` of an app or one instance.
    fn command_on_workers(
        &mut self,
        target: &str,
        action: TargetAction,
    ) -> Result<serde_json::Value, String> {
        let (name, slot) = protocol::parse_target(target)?;
        let now = Instant::now();
        let app = self
            .apps
            .get_mut(name)
            .filter(|a| !a.removed)
            .ok_or_else(|| format!("no app `{name}`"))?;
        if let Some(slot) = slot
            && slot >= app.spec.instances
        {
            return Err(format!(
                "{name} has {}; there is no {name}.{slot}",
                plural(app.spec.instances as usize, "instance")
            ));
        }
        let (signal, kill_timeout) = (app.spec.stop_signal, app.spec.kill_timeout);
        let mut touched = 0;
        for worker in app
            .workers
            .iter_mut()
            .filter(|w| slot.is_none_or(|s| w.slot == s))
        {
            let running = matches!(worker.state, State::Starting { .. } | State::Ready { .. });
            let pid = worker.state.pid();
            let done = match (action, running) {
                (TargetAction::Restart, true) => {
                    worker.stop(now, kill_timeout, AfterStop::Restart).is_ok()
                }
                (TargetAction::Hold, true) => {
                    worker.stop(now, kill_timeout, AfterStop::Hold).is_ok()
                }
                (TargetAction::Restart | TargetAction::Release, false) => {
                    matches!(
                        worker.state,
                        State::Failed | State::Exited | State::Held | State::Backoff { .. }
                    ) && worker.revive().is_ok()
                }
                (TargetAction::Hold, false) => {
                    !matches!(worker.state, State::Stopping { .. }) && worker.hold().is_ok()
                }
                (TargetAction::Release, true) => false,
            };
            if done {
                touched += 1;
                if running && let Some(pid) = pid {
                    info!(
                        event = "stopping",
                        app = name,
                        slot = worker.slot,
                        pid,
                        generation = worker.generation,
                        reason = action.reason(),
                        "{} stopping ({}): {} to process group {pid}",
                        label(name, worker.slot),
                        action.reason(),
                        signal.as_str()
                    );
                    killpg(pid, signal as i32);
                }
            }
        }
        app.dirty = true;
        Ok(
            serde_json::json!({"ok": true, "message": format!("{target}: {} {}", action.reason(), plural(touched, "instance"))}),
        )
    }

    /// The state of every app and instance, for `supervise status`.
    fn status(&self) -> serde_json::Value {
        let usage = procfs::group_usage();
        let ticks = procfs::ticks_per_second() as f64;
        let now = Instant::now();
        let apps: Vec<serde_json::Value> = self
            .apps
            .iter()
            .filter(|(_, a)| !a.removed)
            .map(|(name, app)| {
                let mut workers: Vec<&Worker> = app.workers.iter().collect();
                workers.sort_by_key(|w| (w.slot, w.generation));
                let current_ready = app
                    .workers
                    .iter()
                    .filter(|w| {
                        w.generation == app.generation && matches!(w.state, State::Ready { .. })
                    })
                    .count();
                let outdated = app
                    .workers
                    .iter()
                    .filter(|w| w.generation < app.generation)
                    .count();
                let running = app
                    .workers
                    .iter()
                    .filter(|w| matches!(w.state, State::Starting { .. } | State::Ready { .. }))
                    .count();
                let workers: Vec<serde_json::Value> = workers
                    .iter()
                    .map(|w| {
                        let pid = w.state.pid();
                        let handle = pid.and_then(|p| self.processes.get(&p));
                        let uptime = handle
                            .map(|h| now.saturating_duration_since(h.spawned_at).as_secs_f64());
                        let group = pid.and_then(|p| usage.get(&p)).copied().unwrap_or_default();
                        let cpu = uptime
                            .filter(|u| *u > 0.0)
                            .map(|u| group.cpu_ticks as f64 / ticks / u * 100.0);
                        serde_json::json!({
                            "slot": w.slot,
                            "generation": w.generation,
                            "pid": pid,
                            "state": w.state.name(),
                            "ready": matches!(w.state, State::Ready { .. }),
                            "restarts": w.restarts,
                            "uptime_s": uptime,
                            "cpu_percent": cpu,
                            "rss_bytes": pid.map(|_| group.rss_bytes),
                            "last_exit": w.last_outcome.map(|o| o.to_string()),
                            "status": handle.and_then(|h| h.status.clone()),
                        })
                    })
                    .collect();
                serde_json::json!({
                    "name": name,
                    "instances": app.spec.instances,
                    "running": running,
                    "generation": app.generation,
                    "rollout": {
                        "replaced": current_ready,
                        "total": app.spec.instances,
                        "outdated": outdated,
                        "halted": app.rollout_halted,
                        "complete": outdated == 0 && current_ready >= app.spec.instances as usize,
                    },
                    "workers": workers,
                })
            })
            .collect();
        serde_json::json!({
            "ok": true,
            "file": self.desired.source.display().to_string(),
            "version": self.config_generation,
            "applied_at": humantime::format_rfc3339_seconds(self.applied_at).to_string(),
            "config_error": self.config_error,
            "apps": apps,
        })
    }

    fn begin_shutdown(&mut self, why: &str) {
        if self.shutting_down {
            return;
        }
        let running: usize = self
            .apps
            .values()
            .map(|a| a.workers.iter().filter(|w| w.state.pid().is_some()).count())
            .sum();
        info!(
            event = "shutdown",
            signal = why,
            "{why}: stopping {running} processes (SIGINT again kills them at once)"
        );
        self.notify_systemd("STOPPING=1");
        self.shutting_down = true;
        for app in self.apps.values_mut() {
            app.spec.instances = 0;
            app.dirty = true;
        }
    }

    /// The second SIGINT: SIGKILL every group now.
    fn kill_everything(&mut self) {
        warn!(
            event = "kill_all",
            "second SIGINT: killing every process group now"
        );
        let now = Instant::now();
        for app in self.apps.values_mut() {
            for worker in &mut app.workers {
                let Some(pid) = worker.state.pid() else {
                    continue;
                };
                if matches!(worker.state, State::Starting { .. } | State::Ready { .. }) {
                    let _ = worker.stop(now, Duration::ZERO, AfterStop::Remove);
                }
                if matches!(worker.state, State::Stopping { killed: false, .. }) {
                    let _ = worker.killed();
                }
                killpg(pid, libc::SIGKILL);
            }
        }
    }

    fn finish(self) {
        info!(event = "exiting", "all processes stopped; exiting");
        let _ = std::fs::remove_file(&self.ctx.control_path);
        let undertaker = self.ctx.undertaker.dismiss();
        let deadline = Instant::now() + UNDERTAKER_EXIT_WAIT;
        while Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            let reaped = unsafe { libc::waitpid(undertaker, &mut status, libc::WNOHANG) };
            if reaped != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.ctx.sink.flush(Duration::from_secs(1));
    }

    fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let mut wake = self.last_full_pass + FULL_PASS_INTERVAL;
        for app in self.apps.values() {
            if let Some(at) = app.wake_at {
                wake = wake.min(at);
            }
            let draining = app.workers.iter().any(|w| {
                matches!(
                    w.state,
                    State::Stopping {
                        leader_exit: Some(_),
                        ..
                    }
                )
            });
            if draining {
                wake = wake.min(now + GROUP_POLL_INTERVAL);
            }
        }
        wake
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        let full = now >= self.last_full_pass + FULL_PASS_INTERVAL;
        if full {
            self.last_full_pass = now;
        }
        for app in self.apps.values_mut() {
            if full || app.wake_at.is_some_and(|at| at <= now) {
                app.dirty = true;
            }
        }
        self.check_draining_groups();
    }

    /// Reconcile every dirty app until it has nothing left to do.
    fn converge(&mut self) {
        let names: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| a.dirty)
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            for pass in 0.. {
                let Some(app) = self.apps.get_mut(&name) else {
                    break;
                };
                app.dirty = false;
                let target = Target {
                    spec: &app.spec,
                    generation: app.generation,
                    rollout_halted: app.rollout_halted,
                    recreate: app.recreate,
                };
                let plan = reconcile::reconcile(target, &app.workers, Instant::now());
                if plan.actions.is_empty() {
                    app.wake_at = plan.wake_at;
                    debug!(event = "reconciled", app = %name, passes = pass + 1, "{name}: reconciled");
                    break;
                }
                if pass >= MAX_PASSES {
                    error!(app = %name, "reconcile did not settle after {MAX_PASSES} passes: {:?}", plan.actions);
                    app.wake_at = Some(Instant::now() + GROUP_POLL_INTERVAL);
                    break;
                }
                for action in plan.actions {
                    self.apply(&name, action);
                }
            }
        }
        let before = self.apps.len();
        self.apps
            .retain(|_, app| !(app.removed && app.workers.is_empty()));
        if self.apps.len() != before {
            self.sweep_sockets();
        }
        self.maybe_report_ready();
    }

    /// Close every socket that no app's current definition, nor an older one a
    /// worker still runs, uses.
    fn sweep_sockets(&mut self) {
        let mut wanted: HashSet<SocketKey> = HashSet::new();
        for app in self.apps.values() {
            // Reuseport sockets are per slot: wanted slots, and slots with a worker.
            let slots = || (0..app.spec.instances).chain(app.workers.iter().map(|w| w.slot));
            for (generation, definition) in &app.definitions {
                if app.removed && !app.workers.iter().any(|w| w.generation == *generation) {
                    continue;
                }
                for listen in &definition.listen {
                    if listen.reuseport {
                        wanted.extend(slots().map(|slot| SocketKey {
                            address: listen.address.clone(),
                            slot: Some(slot),
                        }));
                    } else {
                        wanted.insert(SocketKey {
                            address: listen.address.clone(),
                            slot: None,
                        });
                    }
                }
            }
        }
        for closed in self.sockets.retain(&wanted) {
            let address = &closed.address;
            match closed.slot {
                Some(slot) => {
                    info!(event = "unlistening", address = %address, slot, "closed the socket on {address} of slot {slot}")
                }
                None => {
                    info!(event = "unlistening", address = %address, "closed the socket on {address}")
                }
            }
        }
    }

    fn worker_mut(&mut self, app: &str, id: WorkerId) -> Option<&mut Worker> {
        self.apps
            .get_mut(app)?
            .workers
            .iter_mut()
            .find(|w| w.id == id)
    }

    fn apply(&mut self, app_name: &str, action: Action) {
        let now = Instant::now();
        let Some(app) = self.apps.get_mut(app_name) else {
            return;
        };
        match action {
            Action::Create { slot, generation } => {
                app.workers
                    .push(Worker::new(self.next_worker, slot, generation));
                self.next_worker += 1;
            }
            Action::Start { id } => self.start(app_name, id),
            Action::MarkReady { id } => {
                let pid = app
                    .workers
                    .iter()
                    .find(|w| w.id == id)
                    .and_then(|w| w.state.pid());
                if let Some(pid) = pid {
                    self.ready_signal(app_name, id, pid, "delay");
                }
            }
            Action::Stop { id, reason, then } => {
                let signal = app.spec.stop_signal;
                let kill_timeout = app.spec.kill_timeout;
                let Some(worker) = self.worker_mut(app_name, id) else {
                    return;
                };
                let Some(pid) = worker.state.pid() else {
                    return;
                };
                let (slot, generation) = (worker.slot, worker.generation);
                let started = match worker.state {
                    State::Starting { since, .. } => since,
                    State::Ready { started, .. } => started,
                    _ => now,
                };
                let uptime_ms = now.saturating_duration_since(started).as_millis() as u64;
                if worker.stop(now, kill_timeout, then).is_ok() {
                    let why = match reason {
                        StopReason::ScaleDown if self.shutting_down => "shutdown",
                        StopReason::ScaleDown => "scale down",
                        StopReason::Outdated => "replaced",
                        StopReason::NotReady => "not ready in time",
                    };
                    info!(
                        event = "stopping",
                        app = app_name,
                        slot,
                        pid,
                        generation,
                        reason = why,
                        uptime_ms,
                        "{} stopping ({why}): {} to process group {pid}",
                        label(app_name, slot),
                        signal.as_str()
                    );
                    killpg(pid, signal as i32);
                }
            }
            Action::Kill { id } => {
                let kill_timeout = app.spec.kill_timeout;
                let Some(worker) = self.worker_mut(app_name, id) else {
                    return;
                };
                let Some(pid) = worker.state.pid() else {
                    return;
                };
                let slot = worker.slot;
                if worker.killed().is_ok() {
                    warn!(
                        event = "killing",
                        app = app_name,
                        slot,
                        pid,
                        "{} did not stop within kill_timeout {}: SIGKILL to process group {pid}",
                        label(app_name, slot),
                        short_duration(kill_timeout)
                    );
                    killpg(pid, libc::SIGKILL);
                }
            }
            Action::Remove { id } => {
                app.workers.retain(|w| w.id != id);
                app.prune_definitions();
                self.sweep_sockets();
            }
            Action::HaltRollout { generation, slot } => {
                app.rollout_halted = true;
                error!(
                    event = "rollout_halted",
                    app = app_name,
                    slot,
                    generation,
                    "{app_name}: rollout halted: the replacement for slot {slot} failed; the old instances keep serving"
                );
            }
        }
    }

    /// Fork and exec the process of worker `id`.
    fn start(&mut self, app_name: &str, id: WorkerId) {
        let now = Instant::now();
        let Some(app) = self.apps.get(app_name) else {
            return;
        };
        let Some(worker) = app.workers.iter().find(|w| w.id == id) else {
            return;
        };
        let (slot, generation) = (worker.slot, worker.generation);
        let Some(definition) = app.definitions.get(&generation).cloned() else {
            error!(
                app = app_name,
                generation, "no definition for generation {generation}"
            );
            return;
        };
        let readiness = app.spec.ready.clone();
        let rules = app.spec.restart_rules();
        let mut fds = Vec::with_capacity(definition.listen.len());
        let mut bound = Vec::with_capacity(definition.listen.len());
        for listen in &definition.listen {
            let key = SocketKey {
                address: listen.address.clone(),
                slot: listen.reuseport.then_some(slot),
            };
            let mut result = self.sockets.ensure(&key, app_name);
            if result.is_err() {
                // An overlapping address that nobody wants any more may still
                // be open: close what is unwanted and try once more.
                self.sweep_sockets();
                result = self.sockets.ensure(&key, app_name);
            }
            match result {
                Ok((fd, local)) => {
                    fds.push(fd);
                    bound.push(local);
                }
                Err(error) => {
                    error!(app = app_name, "{error}");
                    let errno = libc::EADDRINUSE;
                    self.record_start_failure(app_name, id, errno, &error.to_string(), now, &rules);
                    return;
                }
            }
        }
        let request = SpawnRequest {
            app: app_name,
            slot,
            process: &definition,
            readiness: &readiness,
            listen_fds: &fds,
            listen_bound: &bound,
            notify_socket: self.notify_env.as_deref(),
            base_env: &self.ctx.base_env,
            nofile_soft: self.ctx.nofile_soft,
        };
        match spawn::spawn(&request) {
            Ok(spawned) => {
                let pid = spawned.pid;
                if let Some(worker) = self.worker_mut(app_name, id) {
                    let _ = worker.started(pid, now);
                }
                if let Err(error) = self.ctx.undertaker.watch(pid) {
                    warn!("cannot tell the undertaker about process group {pid}: {error}");
                }
                let source = Source {
                    app: app_name.into(),
                    slot,
                };
                let format = self.ctx.format;
                for (fd, stream) in [
                    (spawned.stdout, Stream::Stdout),
                    (spawned.stderr, Stream::Stderr),
                ] {
                    let sink = self.ctx.sink.clone();
                    let logs = self.ctx.logs.clone();
                    tokio::spawn(output::pump(fd, source.clone(), stream, sink, logs, format));
                }
                let probe = self.start_probe(app_name, id, slot, pid, &readiness);
                self.processes.insert(
                    pid,
                    ProcessHandle {
                        app: app_name.to_string(),
                        id,
                        spawned_at: now,
                        exec_status: spawned.exec_status,
                        probe,
                        status: None,
                    },
                );
                info!(
                    event = "spawned",
                    app = app_name,
                    slot,
                    pid,
                    generation,
                    "{} started (pid {pid})",
                    label(app_name, slot)
                );
            }
            Err(error) => {
                let errno = error.errno;
                self.record_start_failure(app_name, id, errno, &error.to_string(), now, &rules);
            }
        }
    }

    fn record_start_failure(
        &mut self,
        app_name: &str,
        id: WorkerId,
        errno: i32,
        why: &str,
        now: Instant,
        rules: &crate::worker::RestartRules,
    ) {
        let Some(worker) = self.worker_mut(app_name, id) else {
            return;
        };
        let slot = worker.slot;
        let generation = worker.generation;
        if let Ok(decision) = worker.start_failed(errno, now, rules) {
            let what = describe_decision(&decision);
            let (decision_name, attempt, delay_ms) = decision_fields(&decision);
            warn!(
                event = "start_failed",
                app = app_name,
                slot,
                generation,
                errno,
                decision = decision_name,
                attempt,
                delay_ms,
                "{} failed to start: {why}; {what}",
                label(app_name, slot)
            );
        }
    }

    /// Reap every child that has exited and feed the exits to their workers.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer; -1 = any child.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            let exit = if libc::WIFEXITED(status) {
                Exit::Code(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                Exit::Signal {
                    signal: libc::WTERMSIG(status),
                    core: libc::WCOREDUMP(status),
                }
            } else {
                continue;
            };
            self.on_exit(pid, exit);
        }
        self.check_draining_groups();
    }

    fn on_exit(&mut self, pid: i32, exit: Exit) {
        let now = Instant::now();
        let Some(process) = self.processes.remove(&pid) else {
            if pid == self.ctx.undertaker.pid() {
                error!(
                    event = "undertaker_died",
                    "the undertaker (pid {pid}) {exit}; workers may outlive a crash of the supervisor"
                );
            } else {
                debug!(pid, "reaped adopted process {pid} ({exit})");
            }
            return;
        };
        let exec_errno = spawn::exec_error(&process.exec_status);
        let ran = now - process.spawned_at;
        let app_name = process.app.clone();
        let Some(app) = self.apps.get_mut(&app_name) else {
            return;
        };
        let rules = app.spec.restart_rules();
        app.dirty = true;
        let Some(worker) = app.workers.iter_mut().find(|w| w.id == process.id) else {
            return;
        };
        let (slot, generation) = (worker.slot, worker.generation);
        let stopping = matches!(worker.state, State::Stopping { .. });
        if let (Some(errno), false) = (exec_errno, stopping) {
            // exec itself failed: a failed start, not an exit of the program.
            if let Ok(decision) = worker.exec_failed(errno, now, &rules) {
                let (decision_name, attempt, delay_ms) = decision_fields(&decision);
                warn!(
                    event = "start_failed", app = %app_name, slot, pid, generation, errno,
                    decision = decision_name, attempt, delay_ms,
                    "{} failed to start: exec: {}; {}", label(&app_name, slot),
                    nix::errno::Errno::from_raw(errno).desc(), describe_decision(&decision)
                );
            }
            self.forget_group(pid);
            return;
        }
        match worker.exited(exit, now, &rules) {
            Ok(Some(decision)) => {
                let (code, signal) = exit_fields(exit);
                let (decision_name, attempt, delay_ms) = decision_fields(&decision);
                info!(
                    event = "exited", app = %app_name, slot, pid, generation, code, signal,
                    decision = decision_name, attempt, delay_ms,
                    "{} {exit} after {}; {}", label(&app_name, slot), short_duration(ran), describe_decision(&decision)
                );
                // The leader is gone; anything left of its group must not linger.
                if group_alive(pid) {
                    let count = procfs::group_members(pid);
                    killpg(pid, libc::SIGKILL);
                    warn!(
                        event = "group_killed", app = %app_name, slot, pid, count,
                        "{}: killed {count} leftover processes of its group", label(&app_name, slot)
                    );
                }
                self.forget_group(pid);
            }
            Ok(None) => {}
            Err(error) => error!("{error}"),
        }
    }

    /// Complete the stops whose leader is reaped and whose group is empty.
    fn check_draining_groups(&mut self) {
        let now = Instant::now();
        let mut done = Vec::new();
        for (name, app) in &self.apps {
            for worker in &app.workers {
                if let State::Stopping {
                    pid,
                    leader_exit: Some(_),
                    ..
                } = worker.state
                    && !group_alive(pid)
                {
                    done.push((name.clone(), worker.id, pid));
                }
            }
        }
        for (name, id, pid) in done {
            let Some(app) = self.apps.get_mut(&name) else {
                continue;
            };
            let rules = app.spec.restart_rules();
            app.dirty = true;
            let Some(index) = app.workers.iter().position(|w| w.id == id) else {
                continue;
            };
            let worker = &mut app.workers[index];
            let (slot, generation) = (worker.slot, worker.generation);
            let State::Stopping {
                since,
                killed,
                leader_exit,
                ..
            } = worker.state.clone()
            else {
                continue;
            };
            let took = short_duration(now - since);
            let took_ms = now.saturating_duration_since(since).as_millis() as u64;
            let how = match (killed, leader_exit) {
                (true, _) => "killed with SIGKILL".to_string(),
                (false, Some(exit)) => format!("{exit}"),
                (false, None) => "gone".to_string(),
            };
            match worker.group_empty(now, &rules) {
                Ok(StopEnd::Remove) => {
                    app.workers.remove(index);
                    info!(
                        event = "stopped", app = %name, slot, pid, generation, killed, took_ms,
                        "{} stopped in {took} ({how})", label(&name, slot)
                    );
                }
                Ok(StopEnd::Restart) => info!(
                    event = "stopped", app = %name, slot, pid, generation, killed, took_ms,
                    "{} stopped in {took} ({how}); starting it again", label(&name, slot)
                ),
                Ok(StopEnd::Held) => info!(
                    event = "stopped", app = %name, slot, pid, generation, killed, took_ms,
                    "{} stopped in {took} ({how}); held until `supervise start`", label(&name, slot)
                ),
                Ok(StopEnd::Decided(decision)) => {
                    let (decision_name, attempt, delay_ms) = decision_fields(&decision);
                    info!(
                        event = "stopped", app = %name, slot, pid, generation, killed, took_ms,
                        decision = decision_name, attempt, delay_ms,
                        "{} stopped in {took} ({how}); {}", label(&name, slot), describe_decision(&decision)
                    );
                }
                Err(error) => error!("{error}"),
            }
            app.prune_definitions();
            self.forget_group(pid);
            self.sweep_sockets();
        }
    }

    fn forget_group(&mut self, pgid: i32) {
        if let Err(error) = self.ctx.undertaker.forget(pgid) {
            debug!("cannot tell the undertaker to forget {pgid}: {error}");
        }
    }

    /// Tell systemd we are ready once every wanted instance is ready (once).
    fn maybe_report_ready(&mut self) {
        if self.sent_ready || self.shutting_down {
            return;
        }
        let all_ready = self.apps.values().all(|app| {
            (0..app.spec.instances).all(|slot| {
                app.workers
                    .iter()
                    .any(|w| w.slot == slot && matches!(w.state, State::Ready { .. }))
            })
        });
        if all_ready {
            self.sent_ready = true;
            info!(event = "all_ready", "every instance is ready");
            self.notify_systemd("READY=1");
        }
    }

    fn notify_systemd(&self, state: &str) {
        if let Some(systemd) = &self.ctx.systemd
            && let Err(error) = systemd.notify(state)
        {
            warn!("cannot notify systemd ({state}): {error}");
        }
    }
}

/// A decision as event fields: (`decision`, `attempt`, `delay_ms`).
fn decision_fields(decision: &Decision) -> (&'static str, Option<u32>, Option<u64>) {
    match decision {
        Decision::Restart { attempt, delay } => {
            ("restart", Some(*attempt), Some(delay.as_millis() as u64))
        }
        Decision::GiveUp { .. } => ("failed", None, None),
        Decision::Done => ("done", None, None),
    }
}

/// The sockets an app needs now: one per address, or one per slot with reuseport.
fn socket_keys(spec: &AppSpec) -> Vec<SocketKey> {
    spec.process
        .listen
        .iter()
        .flat_map(|listen| {
            let slots: Vec<Option<u32>> = if listen.reuseport {
                (0..spec.instances).map(Some).collect()
            } else {
                vec![None]
            };
            slots.into_iter().map(|slot| SocketKey {
                address: listen.address.clone(),
                slot,
            })
        })
        .collect()
}

/// What `restart`, `stop` and `start` do to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetAction {
    Restart,
    Hold,
    Release,
}

impl TargetAction {
    fn reason(self) -> &'static str {
        match self {
            TargetAction::Restart => "restart",
            TargetAction::Hold => "stop (held)",
            TargetAction::Release => "start",
        }
    }
}

fn change_app(change: &AppChange) -> &str {
    match change {
        AppChange::Added { name, .. }
        | AppChange::Removed { name, .. }
        | AppChange::Unchanged { name } => name,
        AppChange::Changed(changed) => &changed.name,
    }
}

fn describe_decision(decision: &Decision) -> String {
    match decision {
        Decision::Restart { attempt, delay } => {
            format!("restart {attempt} in {}", short_duration(*delay))
        }
        Decision::GiveUp { restarts, within } => format!(
            "{restarts} restarts within {}: giving up (failed)",
            short_duration(*within)
        ),
        Decision::Done => "not restarted (restart policy)".to_string(),
    }
}

fn exit_fields(exit: Exit) -> (Option<i32>, Option<&'static str>) {
    match exit {
        Exit::Code(code) => (Some(code), None),
        Exit::Signal { signal, .. } => (
            None,
            nix::sys::signal::Signal::try_from(signal)
                .ok()
                .map(|s| s.as_str()),
        ),
    }
}

/// Send `signal` to process group `pgid` (ESRCH — already empty — is fine).
fn killpg(pgid: i32, signal: i32) {
    if pgid > 1 {
        // SAFETY: signalling a process group we created; pgid > 1 so never "all".
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Does process group `pgid` still have a member (`kill(-pgid, 0)` ≠ ESRCH)?
/// EPERM means it exists but belongs to another user.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pgid > 1
        && (unsafe { libc::kill(-pgid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}
