//! The steps of an upgrade (see [`crate::upgrade`]): asked for by a client
//! (`supervise upgrade`) or SIGUSR2, probed, then carried out by an exec —
//! or refused, with the running supervisor untouched.
//!
//! Every step goes through the effects ([`Effects`]: the probe, what they
//! hand over, the exec), so the same code runs on the real system (the loop,
//! `supervisor::run`) and in the simulation, which upgrades at random moments
//! of its schedules and makes the new image from the state handed over.
//! What the loop itself hands over (its sockets, its claim, its history) is
//! the [`Shell`]'s.
//!
//! While the probe runs the loop goes on as ever. Once the new binary has
//! agreed, everything else happens in one go on the loop's thread, without
//! an `.await`: the events already queued are handled, the state is taken,
//! and `execve` follows. No task runs in between, so every byte a pump has
//! read is in a ring or in its splitter, and every byte not read yet is
//! still in its pipe — which the new image reads on.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

use super::Supervisor;
use crate::control::server::ControlRequest;
use crate::upgrade::probe;
use crate::upgrade::{self, Handover};
use effects::Effects;
use effects::output::LogHub;
use effects::runtime::{ClaimState, FileIdentity};
use effects::upgrade::KeptOpen;
use effects::upgrade::probe::{ProbeEnd, ProbeOutput};
use model::protocol::error_reply;
use supervise_core::worker::State;

/// How long the output queue and the log files may take to be written out
/// before the exec.
const FLUSH_WAIT: Duration = Duration::from_secs(1);
/// How long the new image may take from the exec to its loop before the
/// undertaker takes it for hung and cleans up as after a crash (far above
/// the restore of 1,000 instances' state)…
pub(crate) const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// …unless this environment variable says otherwise (a duration: `2s`).
pub(crate) const TAKEOVER_TIMEOUT_ENV: &str = "SUPERVISE_TAKEOVER_TIMEOUT";
/// The probe's deadline ([`effects::upgrade::probe::PROBE_TIMEOUT`]) may be set the same way
/// (longer on a loaded machine, say).
pub(crate) const PROBE_TIMEOUT_ENV: &str = "SUPERVISE_PROBE_TIMEOUT";
/// The shortest either may be set to (shorter, a sound new image would be
/// refused or killed).
pub(crate) const MIN_UPGRADE_TIMEOUT: Duration = Duration::from_secs(1);

/// The duration in the environment variable `name`, or `default` when it is
/// unset or not a duration of at least [`MIN_UPGRADE_TIMEOUT`] (said).
fn timeout_from_env(name: &str, default: Duration) -> Duration {
    let Some(text) = std::env::var_os(name) else {
        return default;
    };
    let text = text.to_string_lossy();
    match humantime::parse_duration(&text) {
        Ok(timeout) if timeout >= MIN_UPGRADE_TIMEOUT => timeout,
        _ => {
            warn!(
                "{name}={text} is not a duration of at least {}; taking {}",
                humantime::format_duration(MIN_UPGRADE_TIMEOUT),
                humantime::format_duration(default)
            );
            default
        }
    }
}

/// What the loop hands over beside the supervisor and the effects.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShellState {
    /// The control listener, when there is one.
    pub(crate) control: Option<RawFd>,
    /// The notify socket and its `NOTIFY_SOCKET` value.
    pub(crate) notify: Option<(RawFd, String)>,
    pub(crate) claim: ClaimState,
    /// The connection of the client that asked for the upgrade.
    pub(crate) client: Option<RawFd>,
    /// What `upgrade` runs without `--binary`: the path the first image
    /// was started from.
    pub(crate) default_binary: PathBuf,
    pub(crate) started_at: SystemTime,
    pub(crate) upgrades: u32,
    /// The content hash of the last version of the file read (valid or
    /// not): an edit made since is applied by the new image.
    pub(crate) seen_hash: [u8; 32],
    pub(crate) identity: Option<FileIdentity>,
    pub(crate) metrics: crate::metrics::endpoint::MetricsState,
}

impl KeptOpen for ShellState {
    fn kept_open(&self) -> Vec<RawFd> {
        let mut fds: Vec<RawFd> = self.control.into_iter().collect();
        fds.extend(self.metrics.listener.iter().map(|(_, fd)| *fd));
        fds.extend(self.notify.iter().map(|(fd, _)| *fd));
        fds.push(self.claim.lock);
        fds.extend(&self.claim.retired);
        fds.extend(self.client);
        fds
    }
}

/// The supervisor's own history, for `status` and the next upgrade.
#[derive(Debug, Clone)]
pub(crate) struct Lineage {
    pub(crate) default_binary: PathBuf,
    pub(crate) started_at: SystemTime,
    pub(crate) upgrades: u32,
}

impl Lineage {
    /// For `status`.
    pub(crate) fn describe(&self) -> model::protocol::SupervisorInfo {
        model::protocol::SupervisorInfo {
            pid: std::process::id(),
            version: upgrade::VERSION.to_string(),
            started_at: humantime::format_rfc3339_seconds(self.started_at).to_string(),
            upgrades: self.upgrades,
        }
    }
}

/// What the loop holds that an upgrade hands over besides the supervisor
/// and the effects.
pub trait Shell {
    /// Its part of the state.
    type State: KeptOpen + Serialize + for<'de> Deserialize<'de>;

    /// Its part of the state now, with the connection of the client that
    /// asked (the new image answers it) and one upgrade more.
    fn state(&self, client: Option<RawFd>) -> Self::State;

    /// The last lines of every instance (`supervise logs`).
    fn logs(&self) -> &LogHub;

    /// What `upgrade` runs without `--binary`: the path the first image
    /// was started from.
    fn default_binary(&self) -> &std::path::Path;
}

/// The real loop's part: its sockets, its claim on the runtime directory,
/// its history, the file's last version seen.
pub(crate) struct LoopShell {
    pub(crate) control: Option<RawFd>,
    pub(crate) notify: Option<(RawFd, String)>,
    pub(crate) claim: ClaimState,
    pub(crate) lineage: Lineage,
    pub(crate) seen_hash: [u8; 32],
    pub(crate) identity: Option<FileIdentity>,
    pub(crate) logs: std::sync::Arc<LogHub>,
    pub(crate) metrics: crate::metrics::endpoint::MetricsState,
}

impl Shell for LoopShell {
    type State = ShellState;

    fn state(&self, client: Option<RawFd>) -> ShellState {
        ShellState {
            control: self.control,
            notify: self.notify.clone(),
            claim: self.claim.clone(),
            client,
            default_binary: self.lineage.default_binary.clone(),
            started_at: self.lineage.started_at,
            upgrades: self.lineage.upgrades + 1,
            seen_hash: self.seen_hash,
            identity: self.identity.clone(),
            metrics: self.metrics.clone(),
        }
    }

    fn logs(&self) -> &LogHub {
        &self.logs
    }

    fn default_binary(&self) -> &std::path::Path {
        &self.lineage.default_binary
    }
}

/// What a binary file is: a file put in its place after the probe (a
/// package manager's swap) is not exec'd unprobed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileIs {
    dev: u64,
    ino: u64,
    size: u64,
    modified: Option<SystemTime>,
}

fn file_is(path: &std::path::Path) -> Option<FileIs> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path).ok()?;
    Some(FileIs {
        dev: metadata.dev(),
        ino: metadata.ino(),
        size: metadata.size(),
        modified: metadata.modified().ok(),
    })
}

/// An upgrade whose probe runs.
pub struct Upgrading {
    binary: PathBuf,
    /// What `binary` was when the probe started.
    probed: Option<FileIs>,
    /// The client that asked (none for SIGUSR2).
    client: Option<ControlRequest>,
    requested: Instant,
    /// How long the probe may take, and when that is over.
    timeout: Duration,
    deadline: Instant,
    pid: i32,
    /// How the probe ended, once reaped.
    ended: Option<ProbeEnd>,
    /// What it said so far.
    said: tokio::sync::watch::Receiver<ProbeOutput>,
    /// It will say nothing more (its outputs ended).
    silent: bool,
}

impl Upgrading {
    /// When to look again if nothing happens (the probe's deadline).
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Once the probe said something that may be enough to judge it
    /// (pending once it will say nothing more).
    pub(crate) async fn heard(&mut self) {
        if !self.silent && self.said.changed().await.is_ok() {
            return;
        }
        self.silent = true;
        std::future::pending().await
    }
}

/// Say no to whoever asked.
fn refuse(client: Option<ControlRequest>, binary: &std::path::Path, why: &str) {
    error!(
        event = "upgrade_refused",
        binary = %binary.display(),
        reason = why,
        "upgrade to {} refused: {why}; this supervisor runs on unchanged",
        binary.display()
    );
    if let Some(client) = client {
        let _ = client.reply.try_send(
            error_reply(&format!(
                "upgrade refused: {why}; the running supervisor is unchanged"
            ))
            .to_string(),
        );
    }
}

/// What of the output rings goes into the state.
#[derive(Clone, Copy)]
enum Rings {
    /// All of it (the exec).
    All,
    /// Each ring's last line (the probe: the format, not megabytes of output).
    Sample,
}

/// The state as it would be handed over now, and the fds it names.
fn handover<E: Effects, S: Shell>(
    supervisor: &Supervisor<E>,
    shell: &S,
    client: Option<RawFd>,
    requested: Instant,
    rings: Rings,
) -> Result<(Vec<u8>, Vec<RawFd>), String> {
    let mut rings_state = shell.logs().export();
    if let Rings::Sample = rings {
        for ring in &mut rings_state {
            let last = ring.lines.pop();
            ring.lines = last.into_iter().collect();
        }
    }
    let requested_at = model::monotonic::to_nanos(requested).map_err(|e| e.to_string())?;
    let state = Handover {
        format: upgrade::FORMAT,
        core_format: supervise_core::STATE_VERSION,
        from_version: upgrade::VERSION.to_string(),
        requested_at,
        supervisor: supervisor.handover(),
        system: supervisor.effects().handover(),
        shell: shell.state(client),
        rings: rings_state,
    };
    state.check().map_err(|e| e.to_string())?;
    Ok((state.encode().map_err(|e| e.to_string())?, state.fds()))
}

/// Begin an upgrade to `binary` (or the default one): start its probe.
/// Refused at once when one is under way, when shutting down, or when the
/// binary cannot be run.
pub fn begin<E: Effects>(
    upgrading: &mut Option<Upgrading>,
    supervisor: &mut Supervisor<E>,
    shell: &impl Shell,
    binary: Option<String>,
    client: Option<ControlRequest>,
) {
    let binary = binary.map_or_else(|| shell.default_binary().to_path_buf(), PathBuf::from);
    if upgrading.is_some() {
        refuse(client, &binary, "another upgrade is under way");
        return;
    }
    if supervisor.core().phase() == supervise_core::Phase::ShuttingDown {
        refuse(client, &binary, "the supervisor is shutting down");
        return;
    }
    let requested = supervisor.effects().now();
    let probed = file_is(&binary);
    let state = match handover(supervisor, shell, None, requested, Rings::Sample) {
        Ok((state, _)) => state,
        Err(why) => return refuse(client, &binary, &why),
    };
    let timeout = timeout_from_env(PROBE_TIMEOUT_ENV, effects::upgrade::probe::PROBE_TIMEOUT);
    match supervisor.effects_mut().start_upgrade_probe(&binary, state) {
        Ok(running) => {
            info!(
                event = "upgrade_probing",
                binary = %binary.display(),
                "upgrade: asking {} whether it can take over",
                binary.display()
            );
            *upgrading = Some(Upgrading {
                binary,
                probed,
                client,
                requested,
                timeout,
                // From the probe's start: the state's making is not its time.
                deadline: supervisor.effects().now() + timeout,
                pid: running.pid,
                ended: None,
                said: running.said,
                silent: false,
            });
        }
        Err(why) => refuse(client, &binary, &why),
    }
}

/// What comes after an event while an upgrade is under way.
pub enum Next {
    /// Wait: the probe has not answered (or not exited) yet.
    Wait,
    /// Refused (said to the client): the loop goes on.
    Refused,
    /// The probe agreed: carry out the exec now ([`carry_out`]).
    Exec(Box<Approved>),
}

/// An upgrade the probe approved, ready for [`carry_out`].
pub struct Approved {
    binary: PathBuf,
    probed: Option<FileIs>,
    client: Option<ControlRequest>,
    requested: Instant,
    version: String,
}

/// Look at the probe: its answer, its end, its deadline. It is judged once
/// it ended and said enough ([`ProbeOutput::enough`]: its first line, or why
/// it failed) — or at its deadline, with what it said if it ended.
pub fn progress<E: Effects>(
    upgrading: &mut Option<Upgrading>,
    supervisor: &mut Supervisor<E>,
) -> Next {
    let Some(current) = upgrading.as_mut() else {
        return Next::Wait;
    };
    if current.ended.is_none() {
        current.ended = supervisor.effects_mut().probe_ended();
    }
    let late = supervisor.effects().now() >= current.deadline;
    let verdict = {
        let said = current.said.borrow();
        match current.ended {
            Some(ended) if late || said.enough(ended) => {
                Some(probe::verdict(&current.binary, ended, &said))
            }
            None if late => Some(Err(format!(
                "{} --upgrade-probe did not answer within {}",
                current.binary.display(),
                humantime::format_duration(current.timeout)
            ))),
            _ => None,
        }
    };
    let Some(verdict) = verdict else {
        return Next::Wait;
    };
    let Some(done) = upgrading.take() else {
        return Next::Wait;
    };
    match verdict {
        Ok(answer) => Next::Exec(Box::new(Approved {
            binary: done.binary,
            probed: done.probed,
            client: done.client,
            requested: done.requested,
            version: answer.version,
        })),
        Err(why) => {
            if done.ended.is_none() {
                supervisor.effects_mut().abandon_probe();
                warn!(
                    "upgrade: killed the probe (pid {}), which did not answer in time",
                    done.pid
                );
            }
            refuse(done.client, &done.binary, &why);
            Next::Refused
        }
    }
}

/// The loop shuts down: an upgrade under way is refused.
pub(crate) fn cancel<E: Effects>(
    upgrading: &mut Option<Upgrading>,
    supervisor: &mut Supervisor<E>,
) {
    if let Some(done) = upgrading.take() {
        supervisor.effects_mut().abandon_probe();
        refuse(done.client, &done.binary, "the supervisor is shutting down");
    }
}

/// Exec the approved binary with the state as it is now. Returns the state
/// handed over when a simulated exec took place (the caller makes the new
/// image from it); on the real system it returns only if the exec failed
/// (said to the client and logged), and the loop goes on.
pub fn carry_out<E: Effects>(
    approved: Approved,
    supervisor: &mut Supervisor<E>,
    shell: &impl Shell,
) -> Option<Vec<u8>> {
    let Approved {
        binary,
        probed,
        client,
        requested,
        version,
    } = approved;
    if probed.is_none() || file_is(&binary) != probed {
        refuse(
            client,
            &binary,
            "the binary is not the file that was probed (it was replaced meanwhile); run the upgrade again",
        );
        return None;
    }
    info!(
        event = "upgrading",
        binary = %binary.display(),
        to_version = %version,
        "upgrade: {} ({version}) takes over now",
        binary.display()
    );
    supervisor.effects_mut().abandon_transients();
    let connection = client.as_ref().map(|c| c.connection);
    let (state, fds) = match handover(supervisor, shell, connection, requested, Rings::All) {
        Ok(handover) => handover,
        Err(why) => {
            supervisor.upgrade_abandoned();
            refuse(client, &binary, &why);
            return None;
        }
    };
    supervisor.effects_mut().prepare_exec(
        timeout_from_env(TAKEOVER_TIMEOUT_ENV, TAKEOVER_TIMEOUT),
        FLUSH_WAIT,
    );
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let error = match supervisor.effects_mut().exec(&binary, &args, &state, &fds) {
        Ok(()) => return Some(state),
        Err(error) => error,
    };
    supervisor.effects_mut().exec_failed();
    supervisor.upgrade_abandoned();
    refuse(
        client,
        &binary,
        &format!("cannot exec {}: {error}", binary.display()),
    );
    None
}

/// After an upgrade, in the new image: every worker that waits for a
/// readiness probe gets it again.
pub fn resume_probes<E: Effects>(supervisor: &mut Supervisor<E>) {
    let waiting: Vec<(String, u32, model::spec::Readiness, i32)> = supervisor
        .core()
        .apps()
        .flat_map(|app| {
            app.workers
                .values()
                .filter_map(move |worker| match worker.state {
                    State::Starting { pid, .. } => Some((
                        app.spec.name.clone(),
                        worker.slot,
                        app.spec.ready.clone(),
                        pid,
                    )),
                    _ => None,
                })
        })
        .collect();
    for (app, slot, readiness, pid) in waiting {
        supervisor
            .effects_mut()
            .resume_probe(&app, slot, &readiness, pid);
    }
}

/// After an upgrade, in the new image: say so, and answer the client.
/// `lost`: workers found no longer ours (see `child_lost`).
pub(crate) fn announce(
    client: Option<RawFd>,
    from_version: &str,
    requested_at: u64,
    upgrades: u32,
    lost: usize,
) {
    let took_ms = model::monotonic::to_nanos(Instant::now())
        .map(|now| now.saturating_sub(requested_at) / 1_000_000)
        .unwrap_or(0);
    let kept = match lost {
        0 => "every worker kept".to_string(),
        n => format!("{n} workers ended in the exec window (child_lost)"),
    };
    info!(
        event = "upgraded",
        from_version,
        to_version = upgrade::VERSION,
        took_ms,
        upgrades,
        lost,
        "upgraded from {from_version} to {} in {took_ms} ms; {kept}",
        upgrade::VERSION
    );
    if let Some(fd) = client {
        let line = serde_json::json!({
            "ok": true,
            "from_version": from_version,
            "to_version": upgrade::VERSION,
            "took_ms": took_ms,
            "pid": std::process::id(),
            "upgrades": upgrades,
            "lost": lost,
        });
        if let Err(error) = crate::control::server::answer_kept_client(fd, &line.to_string()) {
            warn!("upgrade: cannot answer the client that asked: {error}");
        }
    }
}
