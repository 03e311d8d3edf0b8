//! The real event sources around a [`Supervisor`]: signals (one SIGCHLD
//! stream, SIGINT, SIGTERM, SIGHUP, SIGUSR1 to reopen the log files; SIGUSR2
//! is logged and ignored), the config loader, exec-status reports, probes, the notify
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

use super::{Event, Supervisor};
use crate::control::{Command, error_reply};
use crate::effects::control::{self as control_socket, CONTROL_QUEUE, LogHub};
use crate::effects::metrics::{self as metrics_endpoint, Endpoint};
use crate::effects::notify::NotifySocket;
use crate::effects::runtime::{Claim, FileIdentity};
use crate::effects::signals;
use crate::effects::sockets::SocketRegistry;
use crate::effects::system::{Reports, Setup, System};
use crate::effects::watch::FileWatcher;
use crate::effects::{procfs, usage};
use crate::spec::Desired;

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

/// Everything the loop starts from: the first version of the file (its
/// sockets bound), the effects' set-up, the watcher (watching since before
/// the first read), and the claim on the runtime directory (held under
/// `identity`, what the file was at the first read).
pub struct Launch {
    pub desired: Desired,
    pub shown: String,
    pub setup: Setup,
    pub sockets: SocketRegistry,
    pub watcher: FileWatcher,
    pub initial_hash: [u8; 32],
    pub identity: FileIdentity,
    pub claim: Claim,
    pub logs: std::sync::Arc<LogHub>,
}

/// Run until every worker has stopped after SIGINT/SIGTERM.
pub async fn run(launch: Launch) -> std::io::Result<()> {
    let Launch {
        desired,
        shown,
        setup,
        sockets,
        watcher,
        initial_hash,
        identity,
        mut claim,
        logs,
    } = launch;
    let mut children = signal(SignalKind::child())?;
    let mut interrupts = signal(SignalKind::interrupt())?;
    let mut terminates = signal(SignalKind::terminate())?;
    let mut hangups = signal(SignalKind::hangup())?;
    let mut user1 = signal(SignalKind::user_defined1())?;
    let mut user2 = signal(SignalKind::user_defined2())?;
    let (loaded, mut configs) = mpsc::channel(CONFIG_QUEUE);
    let rereader = watcher.spawn(initial_hash, Some(identity), loaded)?;
    // A SIGHUP during the start-up (see effects::signals) asked for this.
    if signals::take_early_hangup() {
        rereader.reread();
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
    let mut system = System::new(setup, sockets, reports);

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
    match NotifySocket::bind(&name) {
        Ok(socket) => {
            system.set_notify_socket(OsString::from(&socket.env_value));
            tokio::spawn(socket.run(notified));
        }
        Err(error) => error!(
            "cannot bind the notify socket @{name}: {error}; `ready: notify` workers will time out"
        ),
    }
    let control_path: PathBuf = claim.socket_path().to_path_buf();
    let (control_sender, mut control_requests) = mpsc::channel(CONTROL_QUEUE);
    match control_socket::bind(&control_path) {
        Ok(listener) => {
            tokio::spawn(control_socket::serve(listener, control_sender, logs));
        }
        Err(error) => error!(
            "cannot create the control socket {}: {error}; status, reload and other commands will not reach this supervisor",
            control_path.display()
        ),
    }

    // SAFETY: geteuid has no preconditions.
    let own_uid = unsafe { libc::geteuid() };
    let mut supervisor = Supervisor::new(&desired, &shown, own_uid, system);
    let (snapshot_sender, mut snapshot_requests) = mpsc::channel(metrics_endpoint::SNAPSHOT_QUEUE);
    let mut metrics = Endpoint::new(snapshot_sender);
    metrics.follow(desired.metrics);
    supervisor.start();
    // Children that exited before the SIGCHLD stream existed.
    supervisor.handle(Event::ChildExited);
    while !supervisor.finished() {
        let wake = supervisor.next_wake();
        tokio::select! {
            _ = children.recv() => supervisor.handle(Event::ChildExited),
            _ = interrupts.recv() => supervisor.handle(Event::Interrupt),
            _ = terminates.recv() => supervisor.handle(Event::Terminate),
            _ = hangups.recv() => rereader.reread(),
            _ = user1.recv() => supervisor.effects().log_files().reopen(),
            _ = user2.recv() => ignored("SIGUSR2"),
            Some(loaded) = configs.recv() => {
                if let Some(identity) = &loaded.identity {
                    claim.follow(identity);
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
                if request.command == Command::Status {
                    // The state now, from the core; each instance's CPU and
                    // memory from its cgroup or a pass over /proc, off this
                    // thread.
                    let mut status = supervisor.status();
                    status.tracking = Some(supervisor.effects().tracking().describe());
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
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {
                supervisor.handle(Event::Timer);
            }
        }
    }
    let mut system = supervisor.into_effects();
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

/// A signal that means nothing to a supervisor: said, and otherwise ignored
/// (its default action would kill us, and the workers with us).
fn ignored(name: &str) {
    info!(
        event = "signal_ignored",
        signal = name,
        "{name} received; it means nothing to supervise (SIGHUP re-reads the file)"
    );
}
