//! `supervise [run] -f FILE`: the start-up — signals first, the file, the
//! lock, the runtime directory, limits, the subreaper, the undertaker and
//! the spawner, the tracking mode, the output — then the supervisor loop.

use std::process::ExitCode;

use super::{CgroupMode, Cli, LogStyle, ecosystem_path, err, exit};
use crate::config::{self, Host, diagnostic};
use crate::effects::control::LogHub;
use crate::effects::logfile::LogFiles;
use crate::effects::logging;
use crate::effects::output::{LogFormat, LogSink};
use crate::effects::runtime::{self, Claim, LockError};
use crate::effects::signals;
use crate::effects::sockets::SocketRegistry;
use crate::effects::spawn::Spawner;
use crate::effects::system::Setup;
use crate::effects::systemd::SystemdNotifier;
use crate::effects::tracking::Tracking;
use crate::effects::undertaker::Undertaker;
use crate::effects::watch::{FileWatcher, content_hash};
use crate::supervisor::run::{Launch, run as run_loop};
use crate::supervisor::worker_base_env;

/// `supervise [run] -f FILE`: supervise in the foreground until SIGINT/SIGTERM.
pub fn run(cli: &Cli) -> ExitCode {
    // First of all: an early SIGHUP (or a SIGUSR1/2) must not kill us before
    // the event loop listens for it.
    if let Err(error) = signals::install() {
        err(&format!("error: cannot handle SIGHUP: {error}\n"));
        return ExitCode::from(exit::INVALID);
    }
    // Whatever we inherited beyond stdio must not leak into workers.
    // SAFETY: marks fds close-on-exec; no memory is touched.
    unsafe {
        libc::close_range(
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
        );
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

    let format = match cli.log_format {
        LogStyle::Json => LogFormat::Json,
        LogStyle::Human => {
            use std::io::IsTerminal;
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            LogFormat::Human { colour }
        }
    };
    let sink = LogSink::start(std::io::stdout());
    let verbosity = if cli.quiet {
        -1
    } else {
        cli.verbose.min(2) as i8
    };
    logging::init(sink.clone(), format, verbosity);
    if !rendered.is_empty() {
        sink.send(rendered.into_bytes());
    }
    report_tracking(&tracking);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            err(&format!("error: cannot start the event loop: {error}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let logs = LogHub::new();
    let setup = Setup {
        sink: sink.clone(),
        format,
        logs: logs.clone(),
        files: LogFiles::start(),
        undertaker,
        spawner,
        base_env: worker_base_env(std::env::vars_os()),
        nofile_soft,
        systemd: SystemdNotifier::from_env(std::env::var_os("NOTIFY_SOCKET")),
        tracking: tracking.clone(),
    };
    let result = runtime.block_on(async {
        // Every socket of the first version is bound before anything starts:
        // one that cannot be refuses the start.
        let mut sockets = SocketRegistry::default();
        for spec in &desired.apps {
            for key in spec.socket_keys() {
                sockets
                    .ensure(&key, &spec.name)
                    .map_err(|error| format!("app {}: {error}", spec.name))?;
            }
        }
        let launch = Launch {
            desired,
            shown,
            setup,
            sockets,
            watcher,
            initial_hash,
            identity,
            claim,
            logs,
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

/// Raise the soft RLIMIT_NOFILE to the hard limit (1,000 instances need 2,000+
/// pipe fds); returns the original soft limit, which workers get back.
fn raise_fd_limit() -> libc::rlim_t {
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return libc::RLIM_INFINITY;
        }
        let original = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        original
    }
}
