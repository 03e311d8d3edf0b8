//! `supervise [run] -f FILE`: the start-up — signals first, the file, the
//! lock, the runtime directory, limits, the subreaper, the undertaker and
//! the spawner, the tracking mode, the output — then the supervisor loop.

use std::process::ExitCode;

use super::{CgroupMode, Cli, LogStyle, ecosystem_path, err, exit};
use crate::supervisor::launch::{Launch, Origin, run as run_loop};
use crate::supervisor::upgrading::Lineage;
use crate::supervisor::worker_base_env;
use crate::upgrade::Handover;
use config::{self, Host, diagnostic};
use effects::logfile::LogFiles;
use effects::logging;
use effects::output::LogHub;
use effects::output::{LogFormat, LogSink};
use effects::runtime::{self, Claim, LockError};
use effects::signals;
use effects::sockets::SocketRegistry;
use effects::spawn::Spawner;
use effects::system::Setup;
use effects::systemd::SystemdNotifier;
use effects::tracking::Tracking;
use effects::undertaker::Undertaker;
use effects::watch::{FileWatcher, content_hash};

/// How many tasks the event loop's runtime runs before it polls the loop
/// and the kernel's readiness again (tokio's default is 61). Every start
/// makes three tasks (two output pumps and the watch of its exec status)
/// that want their first poll, and a turn of the loop makes up to
/// [`supervise_core::SPAWNS_PER_TURN`] = 64 starts: with the default, the
/// tasks of a start of thousands fell ever further behind its turns (the
/// last `ready` came seconds after the last `spawned`). At 1,024 a turn's
/// tasks all run before the next turn; a task's poll is microseconds, so
/// the loop still comes back within milliseconds.
const TASKS_BETWEEN_TURNS: u32 = 1024;

/// `supervise [run] -f FILE`: supervise in the foreground until SIGINT/SIGTERM.
pub fn run(cli: &Cli) -> ExitCode {
    // First of all: an early SIGHUP (or a SIGUSR1/2) must not kill us before
    // the event loop listens for it.
    if let Err(error) = signals::install() {
        err(&format!("error: cannot handle SIGHUP: {error}\n"));
        return ExitCode::from(exit::INVALID);
    }
    // The state an upgrade handed over, if this image is the new one of an
    // upgrade: taken before anything reads the environment.
    let incoming = effects::upgrade::exec::take_incoming(crate::upgrade::MAX_STATE_BYTES);
    // Whatever we inherited beyond stdio must not leak into workers (after
    // an upgrade, what the previous image kept is ours again, and closed
    // at the next exec like every fd of ours).
    // SAFETY: marks fds close-on-exec; no memory is touched.
    unsafe {
        libc::close_range(
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
        );
    }
    if let Some(incoming) = incoming {
        return resume(cli, incoming);
    }
    let path = match ecosystem_path(cli.file.as_deref()) {
        Ok(path) => path,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    let shown = path.display().to_string();
    // One supervisor per file: refuse a second one before starting anything.
    let dir = runtime::runtime_dir();
    if let Err(error) = runtime::ensure_runtime_dir(&dir) {
        err(&format!("error: {error}\n"));
        return ExitCode::from(exit::INVALID);
    }
    let identity = match runtime::identify(&path) {
        Ok(identity) => identity,
        Err(error) => {
            err(&format!("error: cannot read {shown}: {error}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    let mut claim = match Claim::acquire(&dir, &identity, &shown, cli.socket.as_deref()) {
        Ok(claim) => claim,
        Err(error @ LockError::Held { .. }) => {
            err(&format!("error: {error}\n"));
            return ExitCode::from(exit::INVALID);
        }
        Err(error) => {
            err(&format!("error: {error}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    // While single-threaded: this may move the whole process into a cgroup,
    // and the helpers started next are born there.
    let tracking = match Tracking::choose(
        &identity.keys[identity.keys.len() - 1],
        &dir,
        cli.cgroups == CgroupMode::Auto,
    ) {
        Ok(tracking) => tracking,
        Err(running) => {
            err(&format!("error: {shown} is {running}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let undertaker = match Undertaker::start(tracking.undertaker_orders()) {
        Ok(undertaker) => undertaker,
        Err(error) => {
            err(&format!(
                "error: cannot start the undertaker process: {error}\n"
            ));
            return ExitCode::from(exit::INVALID);
        }
    };
    let spawner = match Spawner::start() {
        Ok(spawner) => spawner,
        Err(error) => {
            err(&format!(
                "error: cannot start the spawner process: {error}\n"
            ));
            return ExitCode::from(exit::INVALID);
        }
    };
    // Watch before the first read, so no edit can fall between the two.
    let watcher = match config::absolute_path(&path) {
        Ok(absolute) => FileWatcher::new(&absolute),
        Err(error) => {
            err(&format!("error: cannot read {shown}: {error}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    let (source, bytes) = match config::read_file(&path) {
        Ok(read) => read,
        Err(unreadable) => {
            err(&format!("error: {unreadable}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    let initial_hash = content_hash(&bytes);
    // What the file is as it was read: it may have been replaced since it was
    // claimed (every later change reaches the watcher, which is watching).
    let identity = runtime::identify(&path).unwrap_or(identity);
    claim.follow(&identity);
    let checked = config::check_bytes(&bytes, &source, &Host::detect());
    let rendered = diagnostic::render(&shown, &checked.text, &checked.diagnostics);
    let Some(desired) = checked.desired else {
        err(&rendered);
        err(&format!(
            "{shown}: invalid ({}); nothing was started\n",
            diagnostic::summary_line(&checked.diagnostics)
        ));
        return ExitCode::from(exit::INVALID);
    };

    let nofile_soft = raise_fd_limit();
    // SAFETY: prctl with plain integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let lineage = Lineage {
        default_binary: started_from(),
        started_at: std::time::SystemTime::now(),
        upgrades: 0,
    };
    let start = Start {
        shown,
        dir,
        claim,
        tracking,
        undertaker,
        spawner,
        watcher,
        nofile_soft,
        logs: LogHub::new(),
        lineage,
    };
    let begin = Begin::Fresh {
        desired,
        initial_hash,
        identity,
    };
    serve(cli, start, begin, rendered)
}

/// What both a fresh start and an upgraded image bring to the loop.
struct Start {
    shown: String,
    dir: std::path::PathBuf,
    claim: Claim,
    tracking: Tracking,
    undertaker: Undertaker,
    spawner: Spawner,
    watcher: FileWatcher,
    nofile_soft: libc::rlim_t,
    logs: std::sync::Arc<LogHub>,
    lineage: Lineage,
}

/// Where the state comes from (see [`Origin`], made inside the runtime).
enum Begin {
    Fresh {
        desired: model::spec::Desired,
        initial_hash: [u8; 32],
        identity: runtime::FileIdentity,
    },
    Upgraded(Box<Handover>),
}

/// The output, the event loop, and the loop's life.
fn serve(cli: &Cli, start: Start, begin: Begin, rendered: String) -> ExitCode {
    let format = match cli.log_format {
        LogStyle::Json => LogFormat::Json,
        LogStyle::Human => {
            use std::io::IsTerminal;
            let terminal = std::io::stdout().is_terminal();
            let colour = terminal && std::env::var_os("NO_COLOR").is_none();
            LogFormat::Human { colour, terminal }
        }
    };
    let sink = LogSink::start_as(std::io::stdout(), format);
    let verbosity = if cli.quiet {
        -1
    } else {
        cli.verbose.min(2) as i8
    };
    logging::init(sink.clone(), format, verbosity);
    if !rendered.is_empty() {
        sink.send(rendered.into_bytes());
    }
    if matches!(begin, Begin::Fresh { .. }) {
        report_tracking(&start.tracking);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .event_interval(TASKS_BETWEEN_TURNS)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            err(&format!("error: cannot start the event loop: {error}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let setup = Setup {
        sink: sink.clone(),
        format,
        logs: start.logs.clone(),
        files: LogFiles::start(),
        undertaker: start.undertaker,
        spawner: start.spawner,
        base_env: worker_base_env(std::env::vars_os()),
        nofile_soft: start.nofile_soft,
        systemd: SystemdNotifier::from_env(std::env::var_os("NOTIFY_SOCKET")),
        tracking: start.tracking,
        runtime_dir: start.dir,
    };
    let result = runtime.block_on(async {
        let origin = match begin {
            Begin::Fresh {
                desired,
                initial_hash,
                identity,
            } => {
                // Every socket of the first version is bound before anything
                // starts: one that cannot be refuses the start.
                let mut sockets = SocketRegistry::default();
                for spec in &desired.apps {
                    for key in spec.socket_keys() {
                        sockets
                            .ensure(&key, &spec.name)
                            .map_err(|error| format!("app {}: {error}", spec.name))?;
                    }
                }
                Origin::Fresh {
                    desired,
                    sockets,
                    initial_hash,
                    identity,
                }
            }
            Begin::Upgraded(handover) => Origin::Upgraded(handover),
        };
        let launch = Launch {
            shown: start.shown,
            setup,
            watcher: start.watcher,
            claim: start.claim,
            logs: start.logs,
            lineage: start.lineage,
            origin,
        };
        run_loop(launch).await.map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(message) => {
            tracing::error!("{message}; nothing is running");
            sink.flush(std::time::Duration::from_secs(1));
            ExitCode::from(exit::INVALID)
        }
    }
}

/// The new image of an upgrade: everything comes from the state the
/// previous one handed over — the claim, the tracking, the undertaker, the
/// sockets, every worker — except what starts afresh (the spawner, the
/// watcher, the output). A state that cannot be read leaves nothing to go
/// on with: the exit lets the undertaker clean up, as after a crash (the
/// probe is there so that this does not happen).
fn resume(cli: &Cli, incoming: std::io::Result<Vec<u8>>) -> ExitCode {
    let restored = incoming
        .map_err(|e| format!("cannot read the state the previous image handed over: {e}"))
        .and_then(|bytes| <Handover>::decode(&bytes).map_err(|e| e.to_string()));
    let mut handover = match restored {
        Ok(handover) => handover,
        Err(message) => {
            err(&format!("error: upgrade: {message}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let path = match ecosystem_path(cli.file.as_deref()) {
        Ok(path) => path,
        Err(message) => {
            err(&format!("error: upgrade: {message}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let parts = (|| -> std::io::Result<(Claim, Undertaker, Spawner)> {
        let claim = Claim::restore(handover.shell.claim.clone())?;
        let undertaker = Undertaker::restore(handover.system.undertaker.clone())?;
        let spawner = Spawner::start()?;
        Ok((claim, undertaker, spawner))
    })();
    let (claim, undertaker, spawner) = match parts {
        Ok(parts) => parts,
        Err(error) => {
            err(&format!("error: upgrade: {error}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let watcher = match config::absolute_path(&path) {
        Ok(absolute) => FileWatcher::new(&absolute),
        Err(_) => FileWatcher::new(&path),
    };
    // The limit is raised already; what workers get back is the first
    // image's.
    raise_fd_limit();
    // SAFETY: prctl with plain integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let start = Start {
        shown: path.display().to_string(),
        dir: runtime::runtime_dir(),
        claim,
        tracking: handover.system.groups.tracking.clone(),
        undertaker,
        spawner,
        watcher,
        nofile_soft: handover.system.nofile_soft,
        // Taken, not copied: they are most of the state.
        logs: LogHub::restore(std::mem::take(&mut handover.rings)),
        lineage: Lineage {
            default_binary: handover.shell.default_binary.clone(),
            started_at: handover.shell.started_at,
            upgrades: handover.shell.upgrades,
        },
    };
    serve(
        cli,
        start,
        Begin::Upgraded(Box::new(handover)),
        String::new(),
    )
}

/// The path this binary was started from, as the caller named it (made
/// absolute, symlinks kept): what `upgrade` runs by default, so that a
/// package manager that replaced the file, or moved a symlink
/// (`bin/supervise -> ../v2/supervise`), is followed. A bare name is looked
/// up along `PATH`, as the shell did; else the running binary's own path.
fn started_from() -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let running = || std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let Some(name) = std::env::args_os().next() else {
        return running();
    };
    if name.as_bytes().contains(&b'/') {
        return std::path::absolute(&name).unwrap_or_else(|_| running());
    }
    let executable = |path: &std::path::Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(&name))
                .find(|candidate| candidate.is_absolute() && executable(candidate))
        })
        .unwrap_or_else(running)
}

/// Say once how instances are tracked, and what a previous run left.
fn report_tracking(tracking: &Tracking) {
    match tracking {
        Tracking::Cgroups(_) => tracing::info!(
            event = "tracking",
            mode = "cgroup",
            "processes tracked by {}",
            tracking.describe()
        ),
        Tracking::Environment { .. } => tracing::warn!(
            event = "tracking",
            mode = "environment",
            "processes tracked by {}: an orphan that leaves its process group and clears its environment is not found",
            tracking.describe()
        ),
    }
    let leftovers = tracking.leftovers();
    if leftovers > 0 {
        tracing::warn!(
            event = "leftovers_killed",
            count = leftovers,
            "killed {leftovers} processes left by a previous run of this file"
        );
    }
}

/// The hard RLIMIT_NOFILE supervise gives itself where it may raise it
/// (root, CAP_SYS_RESOURCE): systemd's default for its services
/// (`DefaultLimitNOFILE=1024:524288`), within the kernel's `fs.nr_open`.
const RAISED_HARD_NOFILE: libc::rlim_t = 524_288;

/// Raise the soft RLIMIT_NOFILE to the hard limit (each running instance
/// holds 2 fds: 9,990 need 20,000), and where it may, the hard limit to
/// [`RAISED_HARD_NOFILE`] first; returns the original soft limit, which
/// workers get back (they keep the hard one, as under systemd).
fn raise_fd_limit() -> libc::rlim_t {
    let kernel_ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|n| n.trim().parse::<libc::rlim_t>().ok())
        .unwrap_or(RAISED_HARD_NOFILE);
    let wanted = RAISED_HARD_NOFILE.min(kernel_ceiling);
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return libc::RLIM_INFINITY;
        }
        let original = limit.rlim_cur;
        if limit.rlim_max != libc::RLIM_INFINITY && limit.rlim_max < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted,
                rlim_max: wanted,
            };
            // Refused (EPERM) without the privilege: the hard limit stays.
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return original;
            }
        }
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        original
    }
}
