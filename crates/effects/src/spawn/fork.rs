//! From a [`Launch`] to a process: every C string and pointer array is built
//! before the fork ([`Prepared`]); then `clone`, and in the child only
//! [`ChildPlan::exec`].

use std::ffi::CString;
use std::os::fd::RawFd;

use super::child::{ChildPlan, MAX_PID_VARIABLE, PID_VARIABLE_BUFFER};
use super::{Launch, SpawnError, cstring};
use model::process::StartStage;

/// Everything the child uses, allocated before the fork.
pub(crate) struct Prepared {
    program: CString,
    cwd: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _env: Vec<CString>,
    /// `LISTEN_PID=`, `WATCHDOG_PID=`: each followed by room for the
    /// digits and the NUL…
    _pid_variables: Vec<[u8; PID_VARIABLE_BUFFER]>,
    /// …which the child writes there.
    pid_values: Vec<*mut u8>,
    envp: Vec<*const libc::c_char>,
    groups: Vec<libc::gid_t>,
    identity: Option<(libc::uid_t, libc::gid_t)>,
    nofile_soft: libc::rlim_t,
    die_with_parent: bool,
}

impl Prepared {
    pub(crate) fn new(launch: &Launch) -> Result<Prepared, SpawnError> {
        let argv: Vec<CString> = launch
            .argv
            .iter()
            .map(|a| cstring(a, "an argument"))
            .collect::<Result<_, _>>()?;
        let env: Vec<CString> = launch
            .env
            .iter()
            .map(|e| cstring(e, "an environment variable"))
            .collect::<Result<_, _>>()?;
        let mut pid_variables = Vec::with_capacity(launch.pid_variables.len());
        for name in &launch.pid_variables {
            if name.len() > MAX_PID_VARIABLE || name.contains(&0) {
                return Err(super::error(libc::EINVAL, "a pid variable's name"));
            }
            let mut buffer = [0u8; PID_VARIABLE_BUFFER];
            buffer[..name.len()].copy_from_slice(name);
            buffer[name.len()] = b'=';
            pid_variables.push(buffer);
        }
        // Pointers into the vector's heap buffer, taken once it is complete
        // (it never grows again, and moving the Vec does not move its heap),
        // all from one mutable pointer per entry: the environment reads the
        // entry, the child writes its pid after the `=`.
        let starts: Vec<*mut u8> = pid_variables.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let pid_values: Vec<*mut u8> = starts
            .iter()
            .zip(&launch.pid_variables)
            // SAFETY: within the buffer: the name is at most MAX_PID_VARIABLE
            // bytes, and the buffer has room for `=`, 20 digits and the NUL.
            .map(|(start, name)| unsafe { start.add(name.len() + 1) })
            .collect();
        let mut envp: Vec<*const libc::c_char> = env.iter().map(|s| s.as_ptr()).collect();
        envp.extend(starts.iter().map(|s| s.cast_const().cast::<libc::c_char>()));
        envp.push(std::ptr::null());
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let (groups, identity) = match &launch.identity {
            Some((uid, gid, groups)) => (groups.clone(), Some((*uid, *gid))),
            None => (Vec::new(), None),
        };
        Ok(Prepared {
            program: cstring(&launch.program, "the program path")?,
            cwd: cstring(&launch.cwd, "cwd")?,
            _argv: argv,
            argv_ptrs,
            _env: env,
            _pid_variables: pid_variables,
            pid_values,
            envp,
            groups,
            identity,
            nofile_soft: launch.nofile_soft,
            die_with_parent: launch.die_with_parent,
        })
    }
}

/// The fds a child starts from: they become 0, 1, 2, the status pipe, and
/// 3, 4, … for the listening sockets.
pub(crate) struct ChildFds<'a> {
    pub(crate) stdin: RawFd,
    pub(crate) stdout: RawFd,
    pub(crate) stderr: RawFd,
    pub(crate) status: RawFd,
    pub(crate) listen: &'a [RawFd],
}

/// Whose child the new process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parent {
    /// Ours (a plain fork).
    Us,
    /// Our parent's (`CLONE_PARENT`): the spawner forks workers this way, so
    /// that the supervisor is their parent — it reaps them, and their
    /// `PR_SET_PDEATHSIG` follows it. With a cgroup directory fd, the child
    /// is born in that cgroup (`CLONE_INTO_CGROUP`).
    Ours { cgroup: Option<RawFd> },
}

/// `struct clone_args` of clone3(2), up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// clone3's flag to start the child in the cgroup `clone_args.cgroup` names.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Fork and exec `prepared`. The child checks that its parent is still
/// `parent` after arming `PR_SET_PDEATHSIG`.
pub(crate) fn fork_exec(
    prepared: &mut Prepared,
    fds: &ChildFds<'_>,
    parent: libc::pid_t,
    relation: Parent,
) -> Result<i32, SpawnError> {
    let child = ChildPlan {
        program: prepared.program.as_ptr(),
        argv: prepared.argv_ptrs.as_ptr(),
        envp: prepared.envp.as_ptr(),
        cwd: prepared.cwd.as_ptr(),
        groups: &prepared.groups,
        identity: prepared.identity,
        stdin: fds.stdin,
        stdout: fds.stdout,
        stderr: fds.stderr,
        status: fds.status,
        listen_fds: fds.listen,
        pid_values: &prepared.pid_values,
        nofile_soft: prepared.nofile_soft,
        parent,
        die_with_parent: prepared.die_with_parent,
    };

    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to sigset_t values on our stack.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    }
    let pid = match relation {
        // SAFETY: the child branch only calls async-signal-safe functions on
        // data prepared above (see `ChildPlan::exec`) and never returns.
        Parent::Us => unsafe { libc::fork() },
        // SAFETY: a raw clone without a new stack is fork: the child goes on
        // on a copy of this stack. Only the spawner, a single-threaded
        // process, calls this; the child does what it does after a fork.
        Parent::Ours { cgroup: None } => unsafe {
            libc::syscall(
                libc::SYS_clone,
                (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            ) as libc::pid_t
        },
        // SAFETY: as above, with clone3 (no stack: the child goes on on a
        // copy of this one); the kernel places the child in the cgroup.
        Parent::Ours { cgroup: Some(fd) } => unsafe {
            // With CLONE_PARENT the exit signal must be 0: the child takes
            // ours (SIGCHLD), as a sibling would.
            let args = CloneArgs {
                flags: libc::CLONE_PARENT as u64 | CLONE_INTO_CGROUP,
                exit_signal: 0,
                cgroup: fd as u64,
                ..CloneArgs::default()
            };
            libc::syscall(
                libc::SYS_clone3,
                &args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            ) as libc::pid_t
        },
    };
    if pid == 0 {
        // SAFETY: we are the freshly forked child; `child` points to memory
        // that the fork copied and nothing else touches.
        unsafe { child.exec() }
    }
    let fork_errno = std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    // SAFETY: restoring the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    }
    if pid < 0 {
        return Err(SpawnError {
            stage: StartStage::Fork,
            errno: fork_errno,
            context: "fork failed".into(),
        });
    }
    Ok(pid)
}
