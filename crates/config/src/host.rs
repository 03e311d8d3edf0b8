//! Facts about the machine that checking a file depends on, and the lookups
//! that find them: users and groups (NSS, which may be slow: LDAP, sssd),
//! programs along a `PATH`, the CPU count, the time zone.
//!
//! They are injected ([`Host`]) so tests can pin them, and they run only
//! where the file is checked: `supervise check`, the start, and the config
//! loader thread of a running supervisor — never on the thread that reaps
//! children. What they find is stored in the resolved spec (a worker's uid,
//! gid and supplementary groups, its program's path), so a spawn looks
//! nothing up.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `PATH` when neither the app nor the supervisor has one (as `execvp`).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A user account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) home: PathBuf,
}

/// User and group lookups.
pub(crate) trait Accounts: fmt::Debug + Send + Sync {
    /// The account named `name`, if there is one.
    fn user(&self, name: &str) -> Result<Option<Account>, String>;
    /// The account of uid `uid`, if the machine has an entry for it.
    fn user_by_id(&self, uid: u32) -> Result<Option<Account>, String>;
    /// The gid of group `name`, if there is one.
    fn group(&self, name: &str) -> Result<Option<u32>, String>;
    /// Every group `user` belongs to, `gid` included (`getgrouplist`).
    fn groups_of(&self, user: &str, gid: u32) -> Result<Vec<u32>, String>;
}

/// The machine's own accounts, through NSS.
#[derive(Debug, Default)]
pub(crate) struct SystemAccounts;

impl Accounts for SystemAccounts {
    fn user(&self, name: &str) -> Result<Option<Account>, String> {
        nix::unistd::User::from_name(name)
            .map(|found| found.map(account))
            .map_err(|errno| errno.to_string())
    }

    fn user_by_id(&self, uid: u32) -> Result<Option<Account>, String> {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .map(|found| found.map(account))
            .map_err(|errno| errno.to_string())
    }

    fn group(&self, name: &str) -> Result<Option<u32>, String> {
        nix::unistd::Group::from_name(name)
            .map(|found| found.map(|group| group.gid.as_raw()))
            .map_err(|errno| errno.to_string())
    }

    fn groups_of(&self, user: &str, gid: u32) -> Result<Vec<u32>, String> {
        let name =
            std::ffi::CString::new(user).map_err(|_| "a NUL byte in the name".to_string())?;
        nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
            .map(|groups| groups.into_iter().map(|g| g.as_raw()).collect())
            .map_err(|errno| errno.to_string())
    }
}

fn account(user: nix::unistd::User) -> Account {
    Account {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        home: user.dir,
    }
}

/// The facts about the machine that checking a file depends on.
#[derive(Debug, Clone)]
pub struct Host {
    /// What `instances: max` means.
    pub(crate) cpus: u32,
    /// The supervisor's effective uid (switching `user` needs 0).
    pub(crate) uid: u32,
    /// The `PATH` programs are looked up in when an app's `env` sets none.
    pub(crate) path: Option<OsString>,
    pub(crate) accounts: Arc<dyn Accounts>,
    /// The time zone a cron `schedule` without `timezone` is read in.
    pub(crate) timezone: chrono_tz::Tz,
}

impl Host {
    /// The facts of this machine and process. `SUPERVISE_TEST_CPUS`
    /// overrides the CPU count and `TZ` the time zone, so tests (and their
    /// snapshots) do not depend on the machine.
    pub fn detect() -> Host {
        let cpus = std::env::var("SUPERVISE_TEST_CPUS")
            .ok()
            .and_then(|v| v.parse().ok())
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .and_then(|n| u32::try_from(n.get()).ok())
            })
            .unwrap_or(1);
        Host {
            cpus,
            uid: nix::unistd::geteuid().as_raw(),
            path: std::env::var_os("PATH"),
            accounts: Arc::new(SystemAccounts),
            timezone: std::env::var("TZ")
                .ok()
                .and_then(|name| name.trim_start_matches(':').parse().ok())
                .unwrap_or_else(machine_timezone),
        }
    }
}

/// The machine's time zone (`/etc/localtime`, `/etc/timezone`), UTC when it
/// cannot be found or is not a zone we know. (`TZ`, when it names a zone,
/// comes first, as for every program.)
fn machine_timezone() -> chrono_tz::Tz {
    iana_time_zone::get_timezone()
        .ok()
        .and_then(|name| name.parse().ok())
        .unwrap_or(chrono_tz::Tz::UTC)
}

impl Host {
    /// Fixed facts (tests), with the machine's own accounts, in UTC.
    pub fn pinned(cpus: u32, uid: u32, path: &str) -> Host {
        Host {
            cpus,
            uid,
            path: Some(path.into()),
            accounts: Arc::new(SystemAccounts),
            timezone: chrono_tz::Tz::UTC,
        }
    }
}

/// Why a program cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramError {
    /// What `execve` would have said: ENOENT or EACCES.
    pub errno: i32,
    pub message: String,
}

/// Find `program` the way `execvp` does, before any fork: relative to `cwd`
/// when it contains a `/`, else along `path` (relative entries against
/// `cwd`, where the program will run). A candidate must be a regular file the
/// caller may execute; a non-executable match is skipped like `execvp` does,
/// and reported only when nothing else is found.
pub fn find_program(
    program: &str,
    cwd: &Path,
    path: Option<&OsStr>,
) -> Result<PathBuf, ProgramError> {
    use nix::unistd::{AccessFlags, access};
    let executable =
        |candidate: &Path| candidate.is_file() && access(candidate, AccessFlags::X_OK).is_ok();
    if program.contains('/') {
        let candidate: PathBuf = cwd.join(program).components().collect();
        if executable(&candidate) {
            return Ok(candidate);
        }
        let (errno, why) = if !candidate.exists() {
            (libc::ENOENT, "does not exist")
        } else if !candidate.is_file() {
            (libc::EACCES, "is not a file")
        } else {
            (libc::EACCES, "is not executable")
        };
        return Err(ProgramError {
            errno,
            message: format!("`{}` {why}", candidate.display()),
        });
    }
    let mut denied = None;
    for dir in std::env::split_paths(path.unwrap_or(OsStr::new(DEFAULT_PATH))) {
        let candidate = cwd.join(dir).join(program);
        if executable(&candidate) {
            return Ok(candidate);
        }
        if candidate.is_file() && denied.is_none() {
            denied = Some(candidate);
        }
    }
    Err(match denied {
        Some(candidate) => ProgramError {
            errno: libc::EACCES,
            message: format!("`{}` is not executable", candidate.display()),
        },
        None => ProgramError {
            errno: libc::ENOENT,
            message: format!("program `{program}` was not found on PATH"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_like_execvp() {
        let root = Path::new("/");
        assert_eq!(
            find_program("sh", root, Some(OsStr::new("/nonexistent:/bin"))).unwrap(),
            PathBuf::from("/bin/sh")
        );
        let missing =
            find_program("no-such-program-x", root, Some(OsStr::new("/bin"))).unwrap_err();
        assert_eq!(missing.errno, libc::ENOENT);
        assert!(missing.message.contains("not found on PATH"));
        let passwd = find_program("./etc/passwd", root, None).unwrap_err();
        assert_eq!(passwd.errno, libc::EACCES);
        assert!(passwd.message.contains("not executable"), "{passwd:?}");
        assert_eq!(
            find_program("./bin/../bin/sh", root, None).unwrap(),
            PathBuf::from("/bin/../bin/sh")
                .components()
                .collect::<PathBuf>()
        );
    }

    #[test]
    fn relative_path_entries_are_taken_from_the_cwd() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tools")).unwrap();
        let tool = dir.path().join("tools/hello");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            find_program("hello", dir.path(), Some(OsStr::new("tools"))).unwrap(),
            tool
        );
    }

    #[test]
    fn a_non_executable_match_is_skipped_for_a_later_one() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["a", "b"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
            std::fs::write(dir.path().join(sub).join("tool"), "#!/bin/sh\n").unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        let good = dir.path().join("b/tool");
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([dir.path().join("a"), dir.path().join("b")]).unwrap();
        assert_eq!(find_program("tool", dir.path(), Some(&path)).unwrap(), good);
    }
}
