//! The real loop around a [`Supervisor`]: one task owns it; everything else
//! sends it messages. Its sources are the signals (one SIGCHLD stream,
//! SIGINT, SIGTERM, SIGHUP, SIGUSR1 to reopen the log files, SIGUSR2 to ask
//! for an upgrade: [`super::upgrading`]), the file's loader, what the
//! effects report (exec statuses, probes, notify datagrams, check answers,
//! memory measurements, emptied groups), the control socket, the `/metrics`
//! endpoint, the timer the core asks for, the wall clock being set, and the
//! sampling of every instance's CPU and memory that `status` answers from. How it starts — fresh, or
//! from an upgrade's state — is [`super::launch`].
//!
//! A turn of the loop waits for one source ([`Loop::wait`]), then takes
//! every *fact* already waiting in any queue before anything else
//! ([`Inbox::waiting_facts`]): a deadline is judged only once the news that
//! could meet it is in. After a stall of ours (SIGSTOP, a paused container,
//! a VM's steal) the `WATCHDOG=1` and `READY=1` datagrams sent meanwhile
//! are waiting in the notify socket's queue; they count before the timer
//! that woke us late. News that comes in bursts (5,000 exec reports at
//! start, a storm of exits) is taken in batches of at most [`BATCH`] of a
//! kind, so a burst costs one reconcile per app, not one per message.

use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::Signal;
use tokio::sync::mpsc;
use tracing::info;

use super::{Loaded, News, Supervisor};
use crate::control::server::ControlRequest;
use crate::metrics::endpoint::{Endpoint, Scrape, SnapshotRequest};
use crate::supervisor::upgrading::{self, Lineage, LoopShell, Next, Upgrading};
use effects::notify::Notification;
use effects::output::LogHub;
use effects::runtime::{Claim, FileIdentity};
use effects::system::{ExecReport, System};
use effects::watch::Rereader;
use effects::{CheckAnswer, procfs, usage};
use model::protocol::{Command, error_reply};

/// The most messages of one kind taken before the core converges.
pub(crate) const BATCH: usize = 4096;
/// How long the log files may take to be written at shutdown.
const LOG_FILES_FINISH_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for the undertaker and the spawner to exit at shutdown.
const HELPER_EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long the output queue may take to be written out at shutdown.
const OUTPUT_FLUSH_WAIT: Duration = Duration::from_secs(1);
/// Woken this much later than asked, the loop takes it for a stall of its
/// own (stopped, paused, starved) and moves the deadlines that judge
/// workers by as much. Far above a loaded machine's scheduling delay.
pub(crate) const STALL_BEYOND: Duration = Duration::from_secs(1);

/// The signals the loop takes.
pub(super) struct Signals {
    pub(crate) children: Signal,
    pub(crate) interrupts: Signal,
    pub(crate) terminates: Signal,
    pub(crate) hangups: Signal,
    pub(crate) user1: Signal,
    pub(crate) user2: Signal,
}

/// The queues the loop reads, besides the signals.
pub(super) struct Inbox {
    pub(crate) configs: mpsc::Receiver<Loaded>,
    pub(crate) exec_reports: mpsc::Receiver<ExecReport>,
    pub(crate) probes: mpsc::Receiver<i32>,
    pub(crate) notifications: mpsc::Receiver<Notification>,
    pub(crate) check_answers: mpsc::Receiver<CheckAnswer>,
    pub(crate) memory: mpsc::Receiver<(u64, Vec<(i32, u64)>)>,
    pub(crate) group_changes: mpsc::Receiver<()>,
    pub(crate) control_requests: mpsc::Receiver<ControlRequest>,
    pub(crate) snapshot_requests: mpsc::Receiver<SnapshotRequest>,
}

impl Inbox {
    /// Every fact waiting in a queue (at most [`BATCH`] of each kind),
    /// after `facts`, and the exits: what happened to the workers, taken
    /// before any deadline is judged.
    fn waiting_facts(&mut self, facts: &mut Vec<News>) {
        fn take<T>(queue: &mut mpsc::Receiver<T>, facts: &mut Vec<News>, fact: fn(T) -> News) {
            for _ in 0..BATCH {
                match queue.try_recv() {
                    Ok(message) => facts.push(fact(message)),
                    Err(_) => return,
                }
            }
        }
        take(&mut self.exec_reports, facts, |(pid, status)| {
            News::ExecStatus { pid, status }
        });
        take(&mut self.probes, facts, |pid| News::ProbeSucceeded { pid });
        take(&mut self.notifications, facts, News::Notified);
        take(&mut self.check_answers, facts, News::Checked);
        take(&mut self.memory, facts, |(round, usage)| {
            News::MemoryMeasured { round, usage }
        });
        if self.group_changes.try_recv().is_ok() {
            facts.push(News::GroupsChanged);
        }
        // A child that exited while we did not run is reaped now (a reap
        // with nothing to reap costs one `waitpid`).
        facts.push(News::ChildExited);
    }
}

/// What woke the loop.
enum Wake {
    /// News about the workers (taken with every other fact waiting).
    Fact(News),
    /// Anything else: taken after every fact waiting.
    Order(Order),
}

/// What woke the loop, but news about the workers.
enum Order {
    /// SIGINT or SIGTERM.
    Stop(News),
    /// SIGHUP: read the file again.
    Hangup,
    /// SIGUSR1: reopen the log files.
    ReopenLogs,
    /// SIGUSR2, or `supervise upgrade`.
    UpgradeAsked {
        binary: Option<String>,
        client: Option<ControlRequest>,
    },
    /// The upgrade's probe said something.
    ProbeSpoke,
    Config(Loaded),
    Command(ControlRequest),
    Scrape(Scrape),
    Snapshot(SnapshotRequest),
    /// The time the core (or an upgrade's probe) asked to be woken at.
    Timer,
    /// A sample of the instances' CPU and memory is due.
    SampleUsage,
}

/// The loop's state: the supervisor, its sources, and what the loop keeps
/// for an upgrade (its sockets, its claim, its history).
pub(super) struct Loop {
    pub(crate) supervisor: Supervisor<System>,
    pub(crate) signals: Signals,
    pub(crate) inbox: Inbox,
    pub(crate) rereader: Rereader,
    pub(crate) claim: Claim,
    pub(crate) metrics: Endpoint,
    pub(crate) control_path: PathBuf,
    /// The control listener and the notify socket (their fds, for an
    /// upgrade: the tasks serving them own them).
    pub(crate) control: Option<RawFd>,
    pub(crate) notify: Option<(RawFd, String)>,
    pub(crate) lineage: Lineage,
    /// The content hash and the identity of the last version of the file
    /// read: an upgrade's new image starts from them.
    pub(crate) seen_hash: [u8; 32],
    pub(crate) identity: Option<FileIdentity>,
    pub(crate) logs: Arc<LogHub>,
    /// An upgrade whose probe runs.
    pub(crate) upgrade: Option<Upgrading>,
    /// When the last turn began (its wait returned): from then until the
    /// loop waits again, no task of ours reads news (the runtime has one
    /// thread), and a stall there is as deaf as one in the wait.
    pub(crate) turn_began: Instant,
    /// The time the loop asked to be woken at, in its last wait.
    pub(crate) asked: Instant,
    /// Wakes the loop when the wall clock is set: a turn, in which the core
    /// re-arms cron schedules on the new time.
    pub(crate) clock_set: effects::clock_set::ClockSet,
    /// Every instance's CPU and memory, sampled off this thread: what
    /// `status` answers with.
    pub(crate) usage: usage::Sampling,
}

impl Loop {
    /// Turn until every worker has stopped after SIGINT/SIGTERM.
    pub(crate) async fn serve(&mut self) {
        while !self.supervisor.finished() {
            let wake = self.wait().await;
            self.take(wake);
        }
    }

    /// Wait for the first source with something to say.
    async fn wait(&mut self) -> Wake {
        let wake = self.supervisor.next_wake();
        let wake = self
            .upgrade
            .as_ref()
            .map_or(wake, |u| wake.min(u.deadline()));
        self.asked = wake;
        let signals = &mut self.signals;
        let inbox = &mut self.inbox;
        let upgrade = &mut self.upgrade;
        let clock_set = &mut self.clock_set;
        let sample_at = self.usage.due_at().map(tokio::time::Instant::from_std);
        tokio::select! {
            _ = signals.children.recv() => Wake::Fact(News::ChildExited),
            _ = signals.interrupts.recv() => Wake::Order(Order::Stop(News::Interrupt)),
            _ = signals.terminates.recv() => Wake::Order(Order::Stop(News::Terminate)),
            _ = signals.hangups.recv() => Wake::Order(Order::Hangup),
            _ = signals.user1.recv() => Wake::Order(Order::ReopenLogs),
            _ = signals.user2.recv() => Wake::Order(Order::UpgradeAsked { binary: None, client: None }),
            () = async {
                match upgrade.as_mut() {
                    Some(under_way) => under_way.heard().await,
                    None => std::future::pending().await,
                }
            } => Wake::Order(Order::ProbeSpoke),
            Some(loaded) = inbox.configs.recv() => Wake::Order(Order::Config(loaded)),
            scrape = self.metrics.accept() => Wake::Order(Order::Scrape(scrape)),
            Some(reply) = inbox.snapshot_requests.recv() => Wake::Order(Order::Snapshot(reply)),
            Some((pid, status)) = inbox.exec_reports.recv() => Wake::Fact(News::ExecStatus { pid, status }),
            Some(pid) = inbox.probes.recv() => Wake::Fact(News::ProbeSucceeded { pid }),
            Some(notification) = inbox.notifications.recv() => Wake::Fact(News::Notified(notification)),
            Some(request) = inbox.control_requests.recv() => Wake::Order(Order::Command(request)),
            Some(answer) = inbox.check_answers.recv() => Wake::Fact(News::Checked(answer)),
            Some((round, usage)) = inbox.memory.recv() => Wake::Fact(News::MemoryMeasured { round, usage }),
            Some(()) = inbox.group_changes.recv() => Wake::Fact(News::GroupsChanged),
            () = clock_set.changed() => Wake::Order(Order::Timer),
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => Wake::Order(Order::Timer),
            () = async {
                match sample_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => Wake::Order(Order::SampleUsage),
        }
    }

    /// Take what woke the loop, after every fact waiting.
    fn take(&mut self, wake: Wake) {
        let mut facts = Vec::new();
        // Late past what it asked for, counted from no earlier than the
        // last turn's start: news could not come in since then, whether we
        // were stopped in the wait or in the turn before it.
        let now = Instant::now();
        let late = now.saturating_duration_since(self.asked.max(self.turn_began));
        self.turn_began = now;
        if late > STALL_BEYOND {
            // Beyond the lateness, a grace for what waits in the kernel's queues
            // (a datagram our notify task has not read yet) to come in.
            facts.push(News::Stalled {
                by: late + STALL_BEYOND,
            });
        }
        let order = match wake {
            Wake::Fact(event) => {
                facts.push(event);
                None
            }
            Wake::Order(order) => Some(order),
        };
        self.inbox.waiting_facts(&mut facts);
        let Some(order) = order else {
            self.supervisor.handle_all(facts);
            // The probe's exit is reaped with the others.
            if self.upgrade.is_some() {
                self.upgrade_progress();
            }
            return;
        };
        match order {
            Order::Stop(event) => {
                upgrading::cancel(&mut self.upgrade, &mut self.supervisor);
                facts.push(event);
                self.supervisor.handle_all(facts);
            }
            Order::Timer => {
                facts.push(News::Timer);
                self.supervisor.handle_all(facts);
                if self.upgrade.is_some() {
                    self.upgrade_progress();
                }
            }
            Order::Hangup => {
                self.supervisor.handle_all(facts);
                self.rereader.reread();
            }
            Order::ReopenLogs => {
                self.supervisor.handle_all(facts);
                self.supervisor.effects().log_files().reopen();
            }
            Order::ProbeSpoke => {
                self.supervisor.handle_all(facts);
                self.upgrade_progress();
            }
            Order::Config(loaded) => {
                if let Some(changed) = &loaded.identity {
                    self.claim.follow(changed);
                    self.identity = Some(changed.clone());
                }
                if let Some(hash) = loaded.hash {
                    self.seen_hash = hash;
                }
                facts.push(News::Config(loaded));
                self.supervisor.handle_all(facts);
                self.metrics
                    .follow(self.supervisor.core().desired().metrics);
            }
            Order::Command(request) => {
                self.supervisor.handle_all(facts);
                self.command(request);
            }
            Order::UpgradeAsked { binary, client } => {
                self.supervisor.handle_all(facts);
                let shell = self.shell();
                upgrading::begin(
                    &mut self.upgrade,
                    &mut self.supervisor,
                    &shell,
                    binary,
                    client,
                );
            }
            Order::Scrape(scrape) => {
                self.supervisor.handle_all(facts);
                scrape.serve();
            }
            Order::SampleUsage => {
                self.supervisor.handle_all(facts);
                let effects = self.supervisor.effects();
                let (instances, cgroups) = (effects.groups_tracked(), effects.cgroups());
                self.usage.take(instances, cgroups, Instant::now());
            }
            Order::Snapshot(reply) => {
                self.supervisor.handle_all(facts);
                // The state now, from the core; /proc is read by the
                // endpoint, off this thread.
                let mut snapshot = self.supervisor.metrics_snapshot();
                snapshot.cgroups = self.supervisor.effects().cgroups();
                let _ = reply.send(snapshot);
            }
        }
    }

    /// A command from the control socket.
    fn command(&mut self, request: ControlRequest) {
        match &request.command {
            Command::Upgrade { binary } => {
                let binary = binary.clone();
                let shell = self.shell();
                upgrading::begin(
                    &mut self.upgrade,
                    &mut self.supervisor,
                    &shell,
                    binary,
                    Some(request),
                );
            }
            Command::Status => {
                // The state now, from the core; each instance's CPU and
                // memory from the last sample, and those started since it
                // measured now, off this thread.
                let mut status = self.supervisor.status();
                let effects = self.supervisor.effects();
                status.tracking = Some(effects.tracking().describe());
                status.supervisor = Some(self.lineage.describe());
                status.add_log_errors(effects.log_files().errors());
                let sample = self.usage.latest();
                let sampled =
                    |pid: &i32| sample.as_ref().is_some_and(|s| s.usage.contains_key(pid));
                let unsampled: Vec<(i32, Option<PathBuf>)> = status
                    .apps
                    .iter()
                    .flat_map(|a| a.workers.iter().filter_map(|w| w.pid))
                    .filter(|pid| !sampled(pid))
                    .map(|pid| (pid, effects.cgroup_of(pid)))
                    .collect();
                self.usage.asked(Instant::now());
                tokio::task::spawn_blocking(move || {
                    let fresh = usage::of(&unsampled);
                    status.add_usage(
                        |pid| {
                            fresh.get(&pid).copied().or_else(|| {
                                sample.as_ref().and_then(|s| s.usage.get(&pid).copied())
                            })
                        },
                        procfs::ticks_per_second(),
                    );
                    let line = serde_json::to_string(&status).unwrap_or_else(|e| {
                        error_reply(&format!("cannot encode the status: {e}")).to_string()
                    });
                    let _ = request.reply.try_send(line);
                });
            }
            _ => {
                let reply = self.supervisor.control(request.command);
                // The client may be gone; that is its business.
                let _ = request.reply.try_send(reply.to_string());
            }
        }
    }

    /// What the loop hands over in an upgrade.
    fn shell(&self) -> LoopShell {
        LoopShell {
            control: self.control,
            notify: self.notify.clone(),
            claim: self.claim.export(),
            lineage: self.lineage.clone(),
            seen_hash: self.seen_hash,
            identity: self.identity.clone(),
            logs: Arc::clone(&self.logs),
            metrics: self.metrics.export(),
        }
    }

    /// Look at the upgrade's probe; once it agreed, the exec, at once:
    /// what is queued is handled first, so nothing waiting in a queue is
    /// lost with this image.
    fn upgrade_progress(&mut self) {
        let Next::Exec(approved) = upgrading::progress(&mut self.upgrade, &mut self.supervisor)
        else {
            return;
        };
        let mut facts = Vec::new();
        self.inbox.waiting_facts(&mut facts);
        self.supervisor.handle_all(facts);
        let shell = self.shell();
        // Returns only when the exec failed (a real exec never hands the
        // state back).
        let _ = upgrading::carry_out(*approved, &mut self.supervisor, &shell);
    }

    /// Every instance has stopped: what they printed last goes out, then
    /// the helpers are told to go and waited for.
    pub(crate) async fn finish(self) {
        let Loop {
            supervisor,
            claim,
            control_path,
            ..
        } = self;
        let mut system = supervisor.into_effects();
        // What the instances printed last is still in their pipes, and goes
        // out before we do.
        system.output_finished().await;
        system.kill_adopted();
        info!(event = "exiting", "all processes stopped; exiting");
        let _ = std::fs::remove_file(&control_path);
        drop(claim);
        let files = Arc::clone(system.log_files());
        let (helpers, sink, tracking) = system.finish();
        files.finish(LOG_FILES_FINISH_WAIT);
        let deadline = Instant::now() + HELPER_EXIT_WAIT;
        for helper in helpers {
            reap_helper(helper, deadline);
        }
        tracking.teardown();
        sink.flush(OUTPUT_FLUSH_WAIT);
    }
}

/// Wait for our child `pid` to exit (told to: its pipe or socket closed),
/// until `deadline` at most, and reap it. Woken by its pidfd, not polled.
fn reap_helper(pid: i32, deadline: Instant) {
    use std::os::fd::AsRawFd;
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
