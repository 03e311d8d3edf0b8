//! How the loop starts: from the first version of the file (its sockets
//! bound by the caller, so a start that cannot bind is refused before
//! anything runs), or from the state the previous image handed over in an
//! upgrade — its sockets, its children and their pipes, the notify and
//! control sockets, the `/metrics` listener, the client that asked.
//!
//! Either way the sources are made first (the signal streams before
//! anything can exit unseen), then the supervisor; the children that exited
//! meanwhile — and, after an upgrade, what workers said in the exec window
//! — are its first events.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{error, info};

use super::run::{BATCH, Inbox, Loop, Signals};
use super::{Loaded, News, Supervisor};
use crate::control::server::{self as control_socket, CONTROL_QUEUE};
use crate::metrics::endpoint::{self as metrics_endpoint, Endpoint, MetricsState};
use crate::supervisor::upgrading::{self, Lineage};
use crate::upgrade::Handover;
use effects::notify::NotifySocket;
use effects::output::{LogHub, PumpState};
use effects::runtime::{Claim, FileIdentity};
use effects::signals;
use effects::sockets::SocketRegistry;
use effects::system::{Reports, Setup, System};
use effects::watch::FileWatcher;
use model::spec::Desired;

/// New versions of the file waiting for the loop (the loader waits when full).
const CONFIG_QUEUE: usize = 4;
/// Exec reports, probe results and notify datagrams waiting for the loop.
const EVENT_QUEUE: usize = 1024;

/// Everything the loop starts from: the effects' set-up, the watcher
/// (watching since before the first read), the claim on the runtime
/// directory, and where the state comes from.
pub(crate) struct Launch {
    pub(crate) shown: String,
    pub(crate) setup: Setup,
    pub(crate) watcher: FileWatcher,
    pub(crate) claim: Claim,
    pub(crate) logs: Arc<LogHub>,
    pub(crate) lineage: Lineage,
    pub(crate) origin: Origin,
}

/// Where the loop's state comes from.
pub(crate) enum Origin {
    /// A fresh start: the first version of the file (its sockets bound),
    /// read with this content hash, held under `identity`.
    Fresh {
        desired: Desired,
        sockets: SocketRegistry,
        initial_hash: [u8; 32],
        identity: FileIdentity,
    },
    /// The previous image handed over (an upgrade).
    Upgraded(Box<Handover>),
}

/// What an upgrade's previous image handed the loop itself.
struct Inherited {
    pumps: Vec<PumpState>,
    notify: Option<(RawFd, String)>,
    control: Option<RawFd>,
    metrics: MetricsState,
    from_version: String,
    requested_at: u64,
    client: Option<RawFd>,
}

/// Run until every worker has stopped after SIGINT/SIGTERM.
pub async fn run(launch: Launch) -> std::io::Result<()> {
    let mut looping = start(launch)?;
    looping.serve().await;
    looping.finish().await;
    Ok(())
}

/// The loop, its sources made and its first events handled.
fn start(launch: Launch) -> std::io::Result<Loop> {
    // No news is taken in from here until the loop's first wait: a stall
    // meanwhile counts from now.
    let deaf_since = std::time::Instant::now();
    let Launch {
        shown,
        setup,
        watcher,
        claim,
        logs,
        lineage,
        origin,
    } = launch;
    let signals = signal_streams()?;
    // Held back across an upgrade's exec: delivered now, to the handlers
    // above (nothing is held on a fresh start).
    effects::upgrade::exec::release_held_signals();
    let (seen_hash, identity) = match &origin {
        Origin::Fresh {
            initial_hash,
            identity,
            ..
        } => (*initial_hash, Some(identity.clone())),
        Origin::Upgraded(handover) => (handover.shell.seen_hash, handover.shell.identity.clone()),
    };
    let (loaded, configs) = mpsc::channel(CONFIG_QUEUE);
    let watched = watcher.path().to_path_buf();
    let rereader = watcher.spawn(seen_hash, identity.clone(), move |news| {
        loaded.blocking_send(Loaded::check(news, &watched)).is_ok()
    })?;
    // A SIGHUP during the start-up (see effects::signals) asked for this.
    if signals::take_early_hangup() {
        rereader.reread();
    }
    if matches!(origin, Origin::Upgraded(_)) {
        // An edit made while the previous image handed over is applied.
        rereader.look();
    }
    let (probes_sender, probes) = mpsc::channel(EVENT_QUEUE);
    let (exec_sender, exec_reports) = mpsc::channel(EVENT_QUEUE);
    // One pending "an instance's processes changed" is enough: they coalesce.
    let (groups_sender, group_changes) = mpsc::channel(1);
    let (checks_sender, check_answers) = mpsc::channel(EVENT_QUEUE);
    // One measurement runs at a time (the core waits for its answer).
    let (memory_sender, memory) = mpsc::channel(1);
    let reports = Reports {
        probes: probes_sender,
        exec: exec_sender,
        groups: groups_sender,
        checks: checks_sender,
        memory: memory_sender,
    };
    let (mut system, supervisor_state, mut inherited) = match origin {
        Origin::Fresh {
            desired, sockets, ..
        } => (System::new(setup, sockets, reports), Err(desired), None),
        Origin::Upgraded(handover) => {
            let Handover {
                from_version,
                requested_at,
                supervisor,
                system,
                shell,
                ..
            } = *handover;
            let (system, pumps) = System::restore(setup, system, reports)?;
            let inherited = Inherited {
                pumps,
                notify: shell.notify,
                control: shell.control,
                metrics: shell.metrics,
                from_version,
                requested_at,
                client: shell.client,
            };
            (system, Ok(supervisor), Some(inherited))
        }
    };

    let (notified, notifications) = mpsc::channel(EVENT_QUEUE);
    let adopted = inherited.as_mut().and_then(|i| i.notify.take());
    let upgraded = inherited.is_some();
    let (notify, waiting_notifications) =
        notify_socket(&claim, adopted, upgraded, &mut system, notified);
    let control_path: PathBuf = claim.socket_path().to_path_buf();
    let (control_sender, control_requests) = mpsc::channel(CONTROL_QUEUE);
    let adopted = inherited.as_mut().and_then(|i| i.control.take());
    let control = control_listener(&control_path, adopted, control_sender, &logs);

    // SAFETY: geteuid has no preconditions.
    let own_uid = unsafe { libc::geteuid() };
    let mut supervisor = match supervisor_state {
        Err(desired) => {
            let mut supervisor = Supervisor::new(&desired, &shown, own_uid, system);
            supervisor.start();
            supervisor
        }
        Ok(state) => {
            let mut supervisor = Supervisor::restored(state, system);
            let pumps = inherited.as_mut().map(|i| std::mem::take(&mut i.pumps));
            for pump in pumps.into_iter().flatten() {
                if let Err(error) = supervisor.effects_mut().resume_pump(pump) {
                    error!("upgrade: {error}; that output is lost");
                }
            }
            upgrading::resume_probes(&mut supervisor);
            supervisor
        }
    };
    let (snapshot_sender, snapshot_requests) = mpsc::channel(metrics_endpoint::SNAPSHOT_QUEUE);
    let mut metrics = match inherited.as_ref().map(|i| i.metrics.clone()) {
        Some(state) => Endpoint::restore(snapshot_sender, state)?,
        None => Endpoint::new(snapshot_sender),
    };
    metrics.follow(supervisor.core().desired().metrics);
    // Children that exited before the SIGCHLD stream existed (or, after an
    // upgrade, during the exec, with what workers said meanwhile).
    let lost = supervisor.effects().lost_at_restore();
    let mut first: Vec<News> = waiting_notifications
        .into_iter()
        .map(News::Notified)
        .collect();
    first.push(News::ChildExited);
    supervisor.handle_all(first);
    if let Some(inherited) = inherited {
        supervisor.effects_mut().took_over();
        upgrading::announce(
            inherited.client,
            &inherited.from_version,
            inherited.requested_at,
            lineage.upgrades,
            lost,
        );
    }
    Ok(Loop {
        supervisor,
        signals,
        inbox: Inbox {
            configs,
            exec_reports,
            probes,
            notifications,
            check_answers,
            memory,
            group_changes,
            control_requests,
            snapshot_requests,
        },
        rereader,
        claim,
        metrics,
        control_path,
        control,
        notify,
        lineage,
        seen_hash,
        identity,
        logs,
        upgrade: None,
        turn_began: deaf_since,
        asked: deaf_since,
        clock_set: effects::clock_set::ClockSet::new(),
        usage: effects::usage::Sampling::new(deaf_since),
    })
}

/// The signal streams, made before anything can exit unseen.
fn signal_streams() -> std::io::Result<Signals> {
    Ok(Signals {
        children: signal(SignalKind::child())?,
        interrupts: signal(SignalKind::interrupt())?,
        terminates: signal(SignalKind::terminate())?,
        hangups: signal(SignalKind::hangup())?,
        user1: signal(SignalKind::user_defined1())?,
        user2: signal(SignalKind::user_defined2())?,
    })
}

/// The notify socket of `ready: notify` workers: adopted after an upgrade
/// (with the datagrams sent during the exec, taken first), else bound
/// anew. Its fd and `NOTIFY_SOCKET` value, for a later upgrade.
fn notify_socket(
    claim: &Claim,
    adopted: Option<(RawFd, String)>,
    upgraded: bool,
    system: &mut System,
    notified: mpsc::Sender<effects::notify::Notification>,
) -> (Option<(RawFd, String)>, Vec<effects::notify::Notification>) {
    let name = format!(
        "supervise-{}-{}",
        claim
            .socket_path()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    );
    let notify = match adopted {
        Some((fd, env_value)) => NotifySocket::adopt(fd, env_value),
        None => NotifySocket::bind(&name),
    };
    let mut waiting_notifications = Vec::new();
    let kept = match notify {
        Ok(socket) => {
            system.set_notify_socket(OsString::from(&socket.env_value));
            if upgraded {
                // Sent during the exec: taken with the first events, before
                // a watchdog or readiness deadline is judged.
                waiting_notifications = socket.take_waiting(BATCH);
            }
            let kept = (socket.raw_fd(), socket.env_value.clone());
            tokio::spawn(socket.run(notified));
            Some(kept)
        }
        Err(error) => {
            error!(
                "cannot bind the notify socket @{name}: {error}; `ready: notify` workers will time out"
            );
            None
        }
    };
    (kept, waiting_notifications)
}

/// The control socket: adopted after an upgrade, else bound at
/// `control_path`; served from here on. Its fd, for a later upgrade.
fn control_listener(
    control_path: &std::path::Path,
    adopted: Option<RawFd>,
    control_sender: mpsc::Sender<crate::control::server::ControlRequest>,
    logs: &Arc<LogHub>,
) -> Option<RawFd> {
    let listener = match adopted {
        Some(fd) => control_socket::adopt(fd),
        None => control_socket::bind(control_path),
    };
    match listener {
        Ok(listener) => {
            let fd = listener.as_raw_fd();
            tokio::spawn(control_socket::serve(
                listener,
                control_sender,
                logs.clone(),
            ));
            // From here on a command reaches this supervisor (it waits in
            // the queue while the first version starts).
            info!(
                event = "control_listening",
                socket = %control_path.display(),
                "commands are taken on {}",
                control_path.display()
            );
            Some(fd)
        }
        Err(error) => {
            error!(
                "cannot create the control socket {}: {error}; status, reload and other commands will not reach this supervisor",
                control_path.display()
            );
            None
        }
    }
}
