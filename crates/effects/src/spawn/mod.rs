//! Starting a worker process: fork + exec, exactly (DESIGN.md §4).
//!
//! Everything the child needs is prepared *before* the fork: argv, envp (with a
//! pre-allocated `LISTEN_PID=` buffer the child fills with its own pid), the
//! program's resolved path, the supplementary groups, every fd. After the fork
//! the child runs only async-signal-safe system calls through `libc`: no
//! allocation, no locks, no Rust runtime. (`std::process::Command` cannot set
//! `LISTEN_PID` to the child's own pid, and `tokio::process` reaps on its own.)
//!
//! Signals are blocked around the fork so no handler runs in the child before
//! it has reset every disposition to the default (Rust leaves SIGPIPE ignored,
//! and exec keeps ignored signals ignored). A failed step's stage and errno
//! come back through an O_CLOEXEC pipe: on success the pipe just closes. The
//! post-fork code is [`child`], on its own.
//!
//! Workers are forked by the spawner, a small process of our own binary
//! ([`Spawner`]: a fork from the supervisor would copy its thousands of fds
//! into every child), with `CLONE_PARENT` so that the supervisor is their
//! parent. `PR_SET_PDEATHSIG` then follows the supervisor's main thread, the
//! one that started the spawner and lives as long as the supervisor.

mod child;
mod fork;
mod spawner;
mod wire;

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use indexmap::IndexMap;

use child::STATUS_BYTES;
use model::limits::MAX_LISTEN_FDS;
use model::process::{StartError, StartStage};
use model::spec::{Identity, ListenAddress, ProcessDefinition, Readiness};
pub(crate) use spawner::SPAWNS_IN_FLIGHT;
pub use spawner::{HELPER_ENV, SPAWNER_ARG, Spawner, serve as serve_spawner, start_helper};

/// What the worker gets besides its definition.
#[derive(Debug)]
pub(crate) struct SpawnRequest<'a> {
    pub(crate) app: &'a str,
    pub(crate) slot: u32,
    pub(crate) process: &'a ProcessDefinition,
    pub(crate) readiness: &'a Readiness,
    /// The bound listening sockets, in the order of `process.listen`.
    pub(crate) listen_fds: &'a [RawFd],
    /// The address each socket is actually bound to (`:0` resolved), same order.
    pub(crate) listen_bound: &'a [ListenAddress],
    /// `NOTIFY_SOCKET` for `ready: notify`.
    pub(crate) notify_socket: Option<&'a OsStr>,
    /// The supervisor's environment, already stripped of `NOTIFY_SOCKET`,
    /// `LISTEN_*` and `WATCHDOG_*`.
    pub(crate) base_env: &'a [(OsString, OsString)],
    /// The RLIMIT_NOFILE soft limit the supervisor started with.
    pub(crate) nofile_soft: libc::rlim_t,
    /// `SUPERVISE_RUN` (without cgroups: how its descendants are found).
    pub(crate) run_token: Option<&'a str>,
    /// The preload library, when a socket of `process.listen` has `inject`.
    pub(crate) inject_library: Option<&'a std::path::Path>,
}

/// A started process and the read ends of its pipes.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) pid: i32,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// Non-blocking. Holds the stage and errno if a step before exec
    /// failed; EOF once exec succeeded ([`read_status`]).
    pub(crate) exec_status: OwnedFd,
}

/// Why no process could be started; the stage and errno are what the log and
/// the worker's state record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{context}: {}", nix::errno::Errno::from_raw(*errno).desc())]
pub(crate) struct SpawnError {
    pub(crate) stage: StartStage,
    pub(crate) errno: i32,
    pub(crate) context: String,
}

impl SpawnError {
    pub(crate) fn start_error(&self) -> StartError {
        StartError {
            stage: self.stage,
            errno: self.errno,
        }
    }
}

pub(crate) fn error(errno: i32, context: impl Into<String>) -> SpawnError {
    SpawnError {
        stage: StartStage::Prepare,
        errno,
        context: context.into(),
    }
}

pub(crate) fn last_errno(context: &str) -> SpawnError {
    error(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
        context,
    )
}

/// The first listening socket's fd in a worker (systemd's SD_LISTEN_FDS_START).
pub(crate) const LISTEN_FDS_START: RawFd = 3;

/// The worker's environment (DESIGN.md §2): the supervisor's own, then the
/// app's `env_file` and `env`, then the reserved variables. `LISTEN_PID` and
/// `WATCHDOG_PID` are left out: the child writes them.
pub(crate) fn worker_env(request: &SpawnRequest) -> IndexMap<OsString, OsString> {
    let mut env: IndexMap<OsString, OsString> = request.base_env.iter().cloned().collect();
    for (name, value) in &request.process.env {
        env.insert(name.into(), value.expand(request.slot).into());
    }
    let slot = request.slot.to_string();
    env.insert("SUPERVISE_APP".into(), request.app.into());
    env.insert("SUPERVISE_INSTANCE".into(), slot.clone().into());
    env.insert("NODE_APP_INSTANCE".into(), slot.into());
    if !request.process.listen.is_empty() {
        env.insert(
            "LISTEN_FDS".into(),
            request.process.listen.len().to_string().into(),
        );
        let names: Vec<&str> = request
            .process
            .listen
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        env.insert("LISTEN_FDNAMES".into(), names.join(":").into());
        let port = request.listen_bound.iter().find_map(|a| match a {
            ListenAddress::Tcp(address) => Some(address.port()),
            ListenAddress::Unix(_) => None,
        });
        if let Some(port) = port {
            env.insert("PORT".into(), port.to_string().into());
        }
        let injected: Vec<String> = request
            .process
            .listen
            .iter()
            .enumerate()
            .filter(|(_, l)| l.inject)
            .map(|(i, _)| (LISTEN_FDS_START + i as RawFd).to_string())
            .collect();
        if let (false, Some(library)) = (injected.is_empty(), request.inject_library) {
            let preload = super::inject::preload(
                env.get(std::ffi::OsStr::new("LD_PRELOAD"))
                    .map(|v| v.as_os_str()),
                library,
            );
            env.insert("LD_PRELOAD".into(), preload);
            env.insert("SUPERVISE_INJECT_FDS".into(), injected.join(",").into());
            if let Some(socket) = request.notify_socket {
                env.insert("SUPERVISE_INJECT_REPORT".into(), socket.into());
            }
        }
    }
    let notifies = *request.readiness == Readiness::Notify || request.process.watchdog.is_some();
    if let (true, Some(socket)) = (notifies, request.notify_socket) {
        env.insert("NOTIFY_SOCKET".into(), socket.into());
    }
    if let Some(watchdog) = request.process.watchdog {
        env.insert(
            "WATCHDOG_USEC".into(),
            watchdog.as_micros().to_string().into(),
        );
    }
    if let Some(token) = request.run_token {
        env.insert("SUPERVISE_RUN".into(), token.into());
    }
    if let Some(identity) = &request.process.identity {
        env.insert("HOME".into(), identity.home.clone().into_os_string());
        env.insert("USER".into(), identity.user.clone().into());
        env.insert("LOGNAME".into(), identity.user.clone().into());
    }
    env
}

/// The variables whose value is the child's own pid, which only it knows.
fn pid_variables(request: &SpawnRequest) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    if !request.process.listen.is_empty() {
        names.push(b"LISTEN_PID".to_vec());
    }
    if request.process.watchdog.is_some() {
        names.push(b"WATCHDOG_PID".to_vec());
    }
    names
}

pub(crate) fn cstring(bytes: &[u8], what: &str) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| error(libc::EINVAL, format!("{what} contains a NUL byte")))
}

/// A pipe whose both ends are close-on-exec and blocking (a child's stdin:
/// it reads its end as it is; ours is made non-blocking by its writer).
fn blocking_pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_errno("cannot create a pipe"));
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe whose both ends are close-on-exec; the read end is non-blocking.
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let (read, write) = blocking_pipe()?;
    // SAFETY: plain fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(read.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok((read, write))
}

/// What a worker is started with, as plain owned data: built by the
/// supervisor from a [`SpawnRequest`], carried to the spawner process, turned
/// into C strings there ([`fork::Prepared`]) before the fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub(crate) program: Vec<u8>,
    pub(crate) cwd: Vec<u8>,
    pub(crate) argv: Vec<Vec<u8>>,
    /// `NAME=VALUE` entries.
    pub(crate) env: Vec<Vec<u8>>,
    /// Variables the child sets to its own pid (`LISTEN_PID`, `WATCHDOG_PID`).
    pub(crate) pid_variables: Vec<Vec<u8>>,
    /// `(uid, gid, supplementary groups)` to switch to.
    pub(crate) identity: Option<(u32, u32, Vec<u32>)>,
    /// The RLIMIT_NOFILE soft limit the worker gets back.
    pub(crate) nofile_soft: u64,
    /// `PR_SET_PDEATHSIG`: die with the supervisor (all but the undertaker).
    pub(crate) die_with_parent: bool,
}

impl Launch {
    /// Resolve a request: the environment, the argv for its slot, the program.
    pub(crate) fn from_request(request: &SpawnRequest) -> Result<Launch, SpawnError> {
        if request.listen_fds.len() > MAX_LISTEN_FDS {
            return Err(error(
                libc::EMFILE,
                format!("more than {MAX_LISTEN_FDS} listening sockets"),
            ));
        }
        let env = worker_env(request);
        let argv: Vec<String> = request
            .process
            .argv
            .iter()
            .map(|a| a.expand(request.slot))
            .collect();
        let program_name = argv
            .first()
            .ok_or_else(|| error(libc::EINVAL, "empty command"))?;
        // Found when the file was checked (off this thread); looked up here
        // only when it was not there then.
        let program = match &request.process.program {
            Some(program) => program.clone(),
            None => config::host::find_program(
                program_name,
                &request.process.cwd,
                env.get(OsStr::new("PATH")).map(OsString::as_os_str),
            )
            .map_err(|e| error(e.errno, e.message))?,
        };
        Ok(Launch {
            program: program.into_os_string().into_vec(),
            cwd: request.process.cwd.as_os_str().as_bytes().to_vec(),
            argv: argv.into_iter().map(String::into_bytes).collect(),
            env: entries(&env),
            pid_variables: pid_variables(request),
            identity: request.process.identity.as_ref().map(
                |Identity {
                     uid, gid, groups, ..
                 }| (*uid, *gid, groups.clone()),
            ),
            nofile_soft: request.nofile_soft,
            die_with_parent: true,
        })
    }

    /// A program run beside the instances, not one of theirs (an upgrade's
    /// probe): `program ARGS` in the supervisor's directory, with its
    /// environment (and `run_token` as `SUPERVISE_RUN`), as its user, dying
    /// with it.
    pub(crate) fn beside(
        program: &Path,
        args: &[&str],
        base_env: &[(OsString, OsString)],
        run_token: Option<&str>,
        nofile_soft: libc::rlim_t,
    ) -> Launch {
        let mut env: IndexMap<OsString, OsString> = base_env.iter().cloned().collect();
        if let Some(token) = run_token {
            env.insert("SUPERVISE_RUN".into(), token.into());
        }
        let program = program.as_os_str().as_bytes().to_vec();
        let mut argv = vec![program.clone()];
        argv.extend(args.iter().map(|a| a.as_bytes().to_vec()));
        Launch {
            program,
            // Where a relative program is found as the supervisor would find
            // it (the spawner runs in `/`).
            cwd: std::env::current_dir()
                .map_or_else(|_| b"/".to_vec(), |dir| dir.into_os_string().into_vec()),
            argv,
            env: entries(&env),
            pid_variables: Vec::new(),
            identity: None,
            nofile_soft,
            die_with_parent: true,
        }
    }
}

/// `NAME=VALUE` entries.
fn entries(env: &IndexMap<OsString, OsString>) -> Vec<Vec<u8>> {
    env.iter()
        .map(|(name, value)| {
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            entry
        })
        .collect()
}

/// A worker's start sent to the spawner, its pid not known yet: our ends
/// of its pipes (the write ends are the spawner's now).
#[derive(Debug)]
pub(crate) struct Sent {
    stdout: OwnedFd,
    stderr: OwnedFd,
    exec_status: OwnedFd,
}

/// Send the start of one worker through `spawner`, in the cgroup whose
/// directory is `cgroup` when there is one, without waiting for its pid:
/// [`received`] takes it, in the order sent. On `Err` nothing was sent.
pub(crate) fn send(
    request: &SpawnRequest,
    spawner: &mut Spawner,
    cgroup: Option<RawFd>,
) -> Result<Sent, SpawnError> {
    let launch = Launch::from_request(request)?;
    let (stdout, stdout_write) = pipe()?;
    let (stderr, stderr_write) = pipe()?;
    let stdio = [
        spawner.devnull(),
        stdout_write.as_raw_fd(),
        stderr_write.as_raw_fd(),
    ];
    let exec_status = send_with(&launch, spawner, cgroup, stdio, request.listen_fds)?;
    Ok(Sent {
        stdout,
        stderr,
        exec_status,
    })
}

/// The oldest start [`send`] sent: on `Ok` its process exists (exec may
/// still fail: see [`Spawned::exec_status`]); on `Err` the
/// spawner may have been killed mid-request (the caller kills what it may
/// have started).
pub(crate) fn received(sent: Sent, spawner: &mut Spawner) -> Result<Spawned, SpawnError> {
    let pid = receive_pid(spawner)?;
    Ok(Spawned {
        pid,
        stdout: sent.stdout,
        stderr: sent.stderr,
        exec_status: sent.exec_status,
    })
}

/// Like [`send`] and [`received`] at once, with stdout and stderr on `/dev/null` (an `exec` health
/// check: only its exit code counts). The pid and its exec-status pipe.
pub(crate) fn spawn_quiet(
    request: &SpawnRequest,
    spawner: &mut Spawner,
    cgroup: Option<RawFd>,
) -> Result<(i32, OwnedFd), SpawnError> {
    let devnull = spawner.devnull();
    start(request, spawner, cgroup, [devnull, devnull])
}

/// A process fed on its stdin and heard on its stdout and stderr: our
/// ends of its pipes.
#[derive(Debug)]
pub(crate) struct Piped {
    pub(crate) pid: i32,
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// As [`Spawned::exec_status`].
    pub(crate) exec_status: OwnedFd,
}

/// Start `launch` (a program run [`Launch::beside`] the instances) through
/// `spawner`, in the cgroup whose directory is `cgroup` when there is one,
/// with a pipe on each of its stdin, stdout and stderr.
pub(crate) fn spawn_piped(
    launch: &Launch,
    spawner: &mut Spawner,
    cgroup: Option<RawFd>,
) -> Result<Piped, SpawnError> {
    let (stdin_read, stdin_write) = blocking_pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let stdio = [
        stdin_read.as_raw_fd(),
        stdout_write.as_raw_fd(),
        stderr_write.as_raw_fd(),
    ];
    let (pid, exec_status) = launch_with(launch, spawner, cgroup, stdio, &[])?;
    Ok(Piped {
        pid,
        stdin: stdin_write,
        stdout: stdout_read,
        stderr: stderr_read,
        exec_status,
    })
}

/// Start the process with `output` as its fds 1 and 2: its pid and the
/// read end of its exec-status pipe.
fn start(
    request: &SpawnRequest,
    spawner: &mut Spawner,
    cgroup: Option<RawFd>,
    output: [RawFd; 2],
) -> Result<(i32, OwnedFd), SpawnError> {
    let launch = Launch::from_request(request)?;
    let stdio = [spawner.devnull(), output[0], output[1]];
    launch_with(&launch, spawner, cgroup, stdio, request.listen_fds)
}

/// Start `launch` with `stdio` as its fds 0, 1 and 2 and `listen_fds` from
/// fd 3: its pid and the read end of its exec-status pipe.
fn launch_with(
    launch: &Launch,
    spawner: &mut Spawner,
    cgroup: Option<RawFd>,
    stdio: [RawFd; 3],
    listen_fds: &[RawFd],
) -> Result<(i32, OwnedFd), SpawnError> {
    let status = send_with(launch, spawner, cgroup, stdio, listen_fds)?;
    Ok((receive_pid(spawner)?, status))
}

/// Send the start of `launch` (as [`launch_with`]): the read end of its
/// exec-status pipe. Our copies of `stdio` may be closed once this returns:
/// the spawner has its own.
fn send_with(
    launch: &Launch,
    spawner: &mut Spawner,
    cgroup: Option<RawFd>,
    stdio: [RawFd; 3],
    listen_fds: &[RawFd],
) -> Result<OwnedFd, SpawnError> {
    let (status_read, status_write) = pipe()?;
    let mut fds = stdio.to_vec();
    fds.push(status_write.as_raw_fd());
    fds.extend(cgroup);
    fds.extend_from_slice(listen_fds);
    spawner.send(launch, &fds, cgroup.is_some())?;
    Ok(status_read)
}

/// The pid of the oldest start sent, leading its own group.
fn receive_pid(spawner: &mut Spawner) -> Result<i32, SpawnError> {
    let pid = spawner.receive()?;
    // The process leads its own group; doing it here as well means a killpg
    // sent right after this returns cannot miss the group. EACCES (it
    // already exec'd) and ESRCH (already gone) are fine.
    // SAFETY: setpgid on our own child (the spawner forks with CLONE_PARENT).
    unsafe {
        libc::setpgid(pid, pid);
    }
    Ok(pid)
}

/// What an exec-status pipe says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecStatus {
    /// Nothing yet: the child is between fork and exec.
    Pending,
    /// EOF: `execve` succeeded (or the child died before writing).
    Succeeded,
    Failed(StartError),
}

/// Read an exec-status pipe without blocking.
pub(crate) fn read_status(status: &OwnedFd) -> ExecStatus {
    let mut bytes = [0u8; STATUS_BYTES];
    // SAFETY: reading into a stack buffer of the stated size from an fd we own.
    let n = unsafe { libc::read(status.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
    match n {
        0 => ExecStatus::Succeeded,
        n if n == STATUS_BYTES as isize => {
            let stage = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            let errno = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
            ExecStatus::Failed(StartError {
                stage: StartStage::from_code(stage),
                errno,
            })
        }
        -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock => {
            ExecStatus::Pending
        }
        // A short or failed read of our own pipe: the child got no further.
        _ => ExecStatus::Failed(StartError {
            stage: StartStage::Exec,
            errno: libc::EIO,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::spec::{AppSpec, ListenSpec, Template};

    #[test]
    fn worker_env_layers_and_reserved_names() {
        let mut spec = AppSpec::with_defaults("web", &["server"], 2);
        spec.process.env = vec![
            ("A".into(), Template::literal("from-file")),
            ("SLOT".into(), Template::parse("{instance+10}").unwrap()),
        ];
        spec.process.listen = vec![ListenSpec {
            name: "http".into(),
            address: ListenAddress::Tcp("127.0.0.1:0".parse().unwrap()),
            reuseport: false,
            inject: false,
        }];
        let base = vec![("A".into(), "base".into()), ("KEEP".into(), "1".into())];
        let bound = [ListenAddress::Tcp("127.0.0.1:4321".parse().unwrap())];
        let request = SpawnRequest {
            app: "web",
            slot: 1,
            process: &spec.process,
            readiness: &Readiness::Notify,
            listen_fds: &[7],
            listen_bound: &bound,
            notify_socket: Some(OsStr::new("@supervise-notify")),
            base_env: &base,
            nofile_soft: 1024,
            run_token: Some("abc.1"),
            inject_library: None,
        };
        let env = worker_env(&request);
        let get = |k: &str| {
            env.get(OsStr::new(k))
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(get("A").as_deref(), Some("from-file"));
        assert_eq!(get("KEEP").as_deref(), Some("1"));
        assert_eq!(get("SLOT").as_deref(), Some("11"));
        assert_eq!(get("SUPERVISE_APP").as_deref(), Some("web"));
        assert_eq!(get("SUPERVISE_INSTANCE").as_deref(), Some("1"));
        assert_eq!(get("NODE_APP_INSTANCE").as_deref(), Some("1"));
        assert_eq!(get("LISTEN_FDS").as_deref(), Some("1"));
        assert_eq!(get("LISTEN_FDNAMES").as_deref(), Some("http"));
        assert_eq!(get("PORT").as_deref(), Some("4321"));
        assert_eq!(get("NOTIFY_SOCKET").as_deref(), Some("@supervise-notify"));
        assert_eq!(get("SUPERVISE_RUN").as_deref(), Some("abc.1"));
        assert_eq!(
            get("LISTEN_PID"),
            None,
            "the child writes LISTEN_PID itself"
        );
    }
}
