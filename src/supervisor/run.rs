//! The real event sources around a [`Supervisor`]: signals (one SIGCHLD
//! stream, SIGINT, SIGTERM, SIGHUP, SIGUSR1 to reopen the log files; SIGUSR2
//! asks for an upgrade: [`super::upgrading`]), the config loader, exec-status reports, probes, the notify
//! socket, the control socket, and the timer the core asks for. One task owns
//! the supervisor; everything else sends it messages.
//!
//! News that comes in bursts (5,000 exec reports at start, a storm of exits)
//! is taken in batches of at most [`BATCH`] before the core converges once,
//! so a burst costs one reconcile per app, not one per message.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{error, info};

use super::{Event, Loaded, Supervisor};
use crate::control::server::{self as control_socket, CONTROL_QUEUE};
use crate::metrics::endpoint::{self as metrics_endpoint, Endpoint};
use crate::supervisor::upgrading::{self, Kept, Lineage, Upgrading};
use crate::upgrade::Handover;
use effects::notify::NotifySocket;
use effects::output::LogHub;
use effects::runtime::{Claim, FileIdentity};
use effects::signals;
use effects::sockets::SocketRegistry;
use effects::system::{Reports, Setup, System};
use effects::watch::FileWatcher;
use effects::{procfs, usage};
use model::protocol::{Command, error_reply};
use model::spec::Desired;

/// New versions of the file waiting for the loop (the loader waits when full).
const CONFIG_QUEUE: usize = 4;
/// Exec reports, probe results and notify datagrams waiting for the loop.
const EVENT_QUEUE: usize = 1024;
/// The most messages of one kind taken before the core converges.
const BATCH: usize = 4096;
/// How long the log files may take to be written at shutdown.
const LOG_FILES_FINISH_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for the undertaker and the spawner to exit at shutdown.
const HELPER_EXIT_WAIT: Duration = Duration::from_secs(2);

/// Everything the loop starts from: the effects' set-up, the watcher
/// (watching since before the first read), the claim on the runtime
/// directory, and where the state comes from.
pub struct Launch {
    pub shown: String,
    pub setup: Setup,
    pub watcher: FileWatcher,
    pub claim: Claim,
    pub logs: std::sync::Arc<LogHub>,
    pub lineage: Lineage,
    pub origin: Origin,
}

/// Where the loop's state comes from.
pub enum Origin {
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
struct Carried {
    pumps: Vec<effects::output::PumpState>,
    notify: Option<(std::os::fd::RawFd, String)>,
    control: Option<std::os::fd::RawFd>,
    metrics: Option<crate::metrics::endpoint::MetricsState>,
    from_version: String,
    requested_at: u64,
    client: Option<std::os::fd::RawFd>,
}

/// Run until every worker has stopped after SIGINT/SIGTERM.
pub async fn run(launch: Launch) -> std::io::Result<()> {
    let Launch {
        shown,
        setup,
        watcher,
        mut claim,
        logs,
        lineage,
        origin,
    } = launch;
    let mut children = signal(SignalKind::child())?;
    let mut interrupts = signal(SignalKind::interrupt())?;
    let mut terminates = signal(SignalKind::terminate())?;
    let mut hangups = signal(SignalKind::hangup())?;
    let mut user1 = signal(SignalKind::user_defined1())?;
    let mut user2 = signal(SignalKind::user_defined2())?;
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
    let mut seen_hash = seen_hash;
    let mut identity = identity;
    let (loaded, mut configs) = mpsc::channel(CONFIG_QUEUE);
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
    let (probes_sender, mut probes) = mpsc::channel(EVENT_QUEUE);
    let (exec_sender, mut exec_reports) = mpsc::channel(EVENT_QUEUE);
    // One pending "an instance's processes changed" is enough: they coalesce.
    let (groups_sender, mut group_changes) = mpsc::channel(1);
    let (checks_sender, mut check_answers) = mpsc::channel(EVENT_QUEUE);
    // One measurement runs at a time (the core waits for its answer).
    let (memory_sender, mut memory) = mpsc::channel(1);
    let reports = Reports {
        probes: probes_sender,
        exec: exec_sender,
        groups: groups_sender,
        checks: checks_sender,
        memory: memory_sender,
    };
    let (mut system, supervisor_state, mut carried) = match origin {
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
            let carried = Carried {
                pumps,
                notify: shell.notify,
                control: shell.control,
                metrics: Some(shell.metrics),
                from_version,
                requested_at,
                client: shell.client,
            };
            (system, Ok(supervisor), Some(carried))
        }
    };

    let (notified, mut notifications) = mpsc::channel(EVENT_QUEUE);
    let name = format!(
        "supervise-{}-{}",
        claim
            .socket_path()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    );
    let notify = match carried.as_mut().and_then(|c| c.notify.take()) {
        Some((fd, env_value)) => NotifySocket::adopt(fd, env_value),
        None => NotifySocket::bind(&name),
    };
    let mut waiting_notifications = Vec::new();
    let notify_kept = match notify {
        Ok(socket) => {
            system.set_notify_socket(OsString::from(&socket.env_value));
            if carried.is_some() {
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
    let control_path: PathBuf = claim.socket_path().to_path_buf();
    let (control_sender, mut control_requests) = mpsc::channel(CONTROL_QUEUE);
    let listener = match carried.as_mut().and_then(|c| c.control.take()) {
        Some(fd) => control_socket::adopt(fd),
        None => control_socket::bind(&control_path),
    };
    let control_kept = match listener {
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
    };

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
            let pumps = carried.as_mut().map(|c| std::mem::take(&mut c.pumps));
            for pump in pumps.into_iter().flatten() {
                if let Err(error) = supervisor.effects_mut().resume_pump(pump) {
                    error!("upgrade: {error}; that output is lost");
                }
            }
            upgrading::resume_probes(&mut supervisor);
            supervisor
        }
    };
    let (snapshot_sender, mut snapshot_requests) = mpsc::channel(metrics_endpoint::SNAPSHOT_QUEUE);
    let mut metrics = match carried.as_mut().and_then(|c| c.metrics.take()) {
        Some(state) => Endpoint::restore(snapshot_sender, state)?,
        None => Endpoint::new(snapshot_sender),
    };
    metrics.follow(supervisor.core().desired().metrics);
    // Children that exited before the SIGCHLD stream existed (or, after an
    // upgrade, during the exec, with what workers said meanwhile).
    let lost = supervisor.effects().lost_at_restore();
    let mut first: Vec<Event> = waiting_notifications
        .into_iter()
        .map(Event::Notified)
        .collect();
    first.push(Event::ChildExited);
    supervisor.handle_all(first);
    if let Some(carried) = carried {
        supervisor.effects_mut().took_over();
        upgrading::announce(
            carried.client,
            &carried.from_version,
            carried.requested_at,
            lineage.upgrades,
            lost,
        );
    }
    let mut upgrade: Option<Upgrading> = None;
    // The wall clock set: a turn, in which the core re-arms cron schedules.
    let mut clock_set = effects::clock_set::ClockSet::new();
    while !supervisor.finished() {
        let wake = supervisor.next_wake();
        let wake = upgrade.as_ref().map_or(wake, |u| wake.min(u.deadline()));
        // What the select decided about an upgrade: one asked for (the
        // binary, the client), or the probe's verdict.
        let mut agreed = None;
        let mut asked = None;
        tokio::select! {
            _ = children.recv() => {
                supervisor.handle(Event::ChildExited);
                if upgrade.is_some() {
                    agreed = Some(upgrading::progress(&mut upgrade, &mut supervisor));
                }
            }
            _ = interrupts.recv() => {
                upgrading::cancel(&mut upgrade, &mut supervisor);
                supervisor.handle(Event::Interrupt);
            }
            _ = terminates.recv() => {
                upgrading::cancel(&mut upgrade, &mut supervisor);
                supervisor.handle(Event::Terminate);
            }
            _ = hangups.recv() => rereader.reread(),
            _ = user1.recv() => supervisor.effects().log_files().reopen(),
            _ = user2.recv() => asked = Some((None, None)),
            () = async { match upgrade.as_mut() { Some(u) => u.heard().await, None => std::future::pending().await } } => {
                agreed = Some(upgrading::progress(&mut upgrade, &mut supervisor));
            }
            Some(loaded) = configs.recv() => {
                if let Some(changed) = &loaded.identity {
                    claim.follow(changed);
                    identity = Some(changed.clone());
                }
                if let Some(hash) = loaded.hash {
                    seen_hash = hash;
                }
                supervisor.handle(Event::Config(loaded));
                metrics.follow(supervisor.core().desired().metrics);
            }
            scrape = metrics.accept() => scrape.serve(),
            Some(reply) = snapshot_requests.recv() => {
                // The state now, from the core; /proc is read by the
                // endpoint, off this thread.
                let mut snapshot = supervisor.metrics_snapshot();
                snapshot.cgroups = supervisor.effects().cgroups();
                let _ = reply.send(snapshot);
            }
            Some((pid, status)) = exec_reports.recv() => {
                let mut batch = vec![Event::ExecStatus { pid, status }];
                while batch.len() < BATCH && let Ok((pid, status)) = exec_reports.try_recv() {
                    batch.push(Event::ExecStatus { pid, status });
                }
                supervisor.handle_all(batch);
            }
            Some(pid) = probes.recv() => {
                let mut batch = vec![Event::ProbeSucceeded { pid }];
                while batch.len() < BATCH && let Ok(pid) = probes.try_recv() {
                    batch.push(Event::ProbeSucceeded { pid });
                }
                supervisor.handle_all(batch);
            }
            Some(notification) = notifications.recv() => {
                let mut batch = vec![Event::Notified(notification)];
                while batch.len() < BATCH && let Ok(notification) = notifications.try_recv() {
                    batch.push(Event::Notified(notification));
                }
                supervisor.handle_all(batch);
            }
            Some(request) = control_requests.recv() => {
                if let Command::Upgrade { binary } = &request.command {
                    asked = Some((binary.clone(), Some(request)));
                } else if request.command == Command::Status {
                    // The state now, from the core; each instance's CPU and
                    // memory from its cgroup or a pass over /proc, off this
                    // thread.
                    let mut status = supervisor.status();
                    status.tracking = Some(supervisor.effects().tracking().describe());
                    status.supervisor = Some(lineage.describe());
                    status.add_log_errors(supervisor.effects().log_files().errors());
                    let cgroups = supervisor.effects().cgroups();
                    tokio::task::spawn_blocking(move || {
                        status.add_usage(&usage::all(&cgroups), procfs::ticks_per_second());
                        let line = serde_json::to_string(&status)
                            .unwrap_or_else(|e| error_reply(&format!("cannot encode the status: {e}")).to_string());
                        let _ = request.reply.try_send(line);
                    });
                } else {
                    let reply = supervisor.control(request.command);
                    // The client may be gone; that is its business.
                    let _ = request.reply.try_send(reply.to_string());
                }
            }
            Some(answer) = check_answers.recv() => {
                let mut batch = vec![Event::Checked(answer)];
                while batch.len() < BATCH && let Ok(answer) = check_answers.try_recv() {
                    batch.push(Event::Checked(answer));
                }
                supervisor.handle_all(batch);
            }
            Some((round, usage)) = memory.recv() => {
                supervisor.handle(Event::MemoryMeasured { round, usage });
            }
            Some(()) = group_changes.recv() => supervisor.handle(Event::GroupsChanged),
            () = clock_set.changed() => supervisor.handle(Event::Timer),
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {
                supervisor.handle(Event::Timer);
                if upgrade.is_some() {
                    agreed = Some(upgrading::progress(&mut upgrade, &mut supervisor));
                }
            }
        }
        let agreed = match agreed {
            Some(upgrading::Next::Exec(agreed)) => Some(agreed),
            _ => None,
        };
        if asked.is_some() || agreed.is_some() {
            let kept = Kept {
                control: control_kept,
                notify: notify_kept.clone(),
                claim: claim.export(),
                lineage: &lineage,
                seen_hash,
                identity: identity.clone(),
                logs: &logs,
                metrics: metrics.export(),
            };
            if let Some((binary, client)) = asked {
                upgrading::begin(&mut upgrade, &mut supervisor, &kept, binary, client);
            }
            if let Some(agreed) = agreed {
                // What is queued is handled first: nothing waiting in a
                // channel is lost with this image.
                drain(
                    &mut supervisor,
                    &mut exec_reports,
                    &mut probes,
                    &mut notifications,
                    &mut check_answers,
                    &mut memory,
                );
                // Returns only when the exec failed.
                upgrading::carry_out(*agreed, &mut supervisor, &kept);
            }
        }
    }
    let mut system = supervisor.into_effects();
    // Every instance has stopped: what they printed last is still in their
    // pipes, and goes out before we do.
    system.output_finished().await;
    system.kill_adopted();
    info!(event = "exiting", "all processes stopped; exiting");
    let _ = std::fs::remove_file(&control_path);
    drop(claim);
    let files = std::sync::Arc::clone(system.log_files());
    let (helpers, sink, tracking) = system.finish();
    files.finish(LOG_FILES_FINISH_WAIT);
    let deadline = Instant::now() + HELPER_EXIT_WAIT;
    for helper in helpers {
        reap_helper(helper, deadline);
    }
    tracking.teardown();
    sink.flush(Duration::from_secs(1));
    Ok(())
}

/// Handle every event already queued (before an exec).
fn drain(
    supervisor: &mut Supervisor<System>,
    exec_reports: &mut mpsc::Receiver<effects::system::ExecReport>,
    probes: &mut mpsc::Receiver<i32>,
    notifications: &mut mpsc::Receiver<effects::notify::Notification>,
    check_answers: &mut mpsc::Receiver<effects::CheckAnswer>,
    memory: &mut mpsc::Receiver<(u64, Vec<(i32, u64)>)>,
) {
    let mut batch = Vec::new();
    while let Ok((pid, status)) = exec_reports.try_recv() {
        batch.push(Event::ExecStatus { pid, status });
    }
    while let Ok(pid) = probes.try_recv() {
        batch.push(Event::ProbeSucceeded { pid });
    }
    while let Ok(notification) = notifications.try_recv() {
        batch.push(Event::Notified(notification));
    }
    while let Ok(answer) = check_answers.try_recv() {
        batch.push(Event::Checked(answer));
    }
    while let Ok((round, usage)) = memory.try_recv() {
        batch.push(Event::MemoryMeasured { round, usage });
    }
    batch.push(Event::ChildExited);
    supervisor.handle_all(batch);
}

/// Wait for our child `pid` to exit (told to: its pipe or socket closed),
/// until `deadline` at most, and reap it. Woken by its pidfd, not polled.
fn reap_helper(pid: i32, deadline: Instant) {
    // SAFETY: pidfd_open on our own child, not yet reaped (so the pid is
    // still its); the kernel makes the fd close-on-exec.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if let Ok(raw) = i32::try_from(raw)
        && raw >= 0
    {
        // SAFETY: a fresh fd that nothing else owns.
        let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut poll = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let timeout = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, timeout) };
            let interrupted = ready < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if !interrupted || left.is_zero() {
                break;
            }
        }
    }
    let mut status = 0;
    // SAFETY: reaping our own child, with a valid status pointer.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}
