//! The process an app runs: `command`, `shell`, `cwd`, `env`, `env_file`,
//! `user` and `group` — and the host lookups they need (users, groups, the
//! program along `PATH`), whose answers are stored in the spec.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::{AppContext, command_templates, join_clean, key, reserved_env_name};
use crate::diagnostic::{PathSeg, Reporter};
use crate::envfile;
use crate::host::{Account, find_program};
use crate::raw;
use model::spec::{Identity, Template};

impl AppContext<'_> {
    pub(super) fn resolve_cwd(&self, reporter: &mut Reporter) -> Option<PathBuf> {
        let Some((cwd, path)) = self.pick("cwd", |f| f.cwd.as_ref()) else {
            return Some(self.folder.to_path_buf());
        };
        let absolute = join_clean(self.folder, &cwd);
        if !absolute.is_dir() {
            let what = if absolute.exists() {
                "is not a directory"
            } else {
                "does not exist"
            };
            reporter
                .error(&path, format!("cwd `{}` {what}", absolute.display()))
                .help("relative paths are taken from the ecosystem file's folder");
            return None;
        }
        Some(absolute)
    }

    /// `user` and `group` as the uid, gid, groups, name and home a worker
    /// gets, looked up here (never at spawn). A numeric `user` is written as
    /// systemd's `User=` reads one, and is the machine's entry for that uid
    /// when there is one (its name, home and primary group, as for a name).
    /// Unlike systemd, which starts no unit for a uid without an entry, a
    /// bare uid is taken as it is — the group given or the same number,
    /// home `/`, and the number as its name — so a file written for another
    /// machine (a container's uid, an export) checks and runs.
    pub(super) fn resolve_identity(&self, reporter: &mut Reporter) -> Option<Identity> {
        let user = self.pick("user", |f| f.user.as_ref());
        let group = self.pick("group", |f| f.group.as_ref());
        let (user_value, user_path) = match (user, group.clone()) {
            (Some(user), _) => user,
            (None, Some(_)) if self.broken("user") => return None,
            (None, Some((_, group_path))) => {
                reporter
                    .error(&group_path, "`group` needs `user`")
                    .help("set `user` too (the group defaults to the user's primary group)");
                return None;
            }
            (None, None) => return None,
        };
        let user = account_id(&user_value, IdKind::User, &user_path, reporter);
        let group =
            group.map(|(value, path)| (account_id(&value, IdKind::Group, &path, reporter), path));
        let user = user?;
        let group = match group {
            Some((Some(group), path)) => Some((group, path)),
            Some((None, _)) => return None,
            None => None,
        };
        // Whether the machine has an entry for the user, and the account.
        let (account, entry) = match &user {
            Named::Name(name) => match self.host.accounts.user(name) {
                Ok(Some(account)) => (account, true),
                Ok(None) => {
                    reporter
                        .error(&user_path, format!("no user named `{name}` on this machine"))
                        .help("write its uid (`user: 1000`) to run as a user this machine has no entry for");
                    return None;
                }
                Err(error) => {
                    reporter.error(&user_path, format!("cannot look up user `{name}`: {error}"));
                    return None;
                }
            },
            Named::Id(uid) => match self.host.accounts.user_by_id(*uid) {
                Ok(Some(account)) => (account, true),
                // No entry: that number, its own group, `/` for a home.
                Ok(None) => (
                    Account {
                        name: uid.to_string(),
                        uid: *uid,
                        gid: *uid,
                        home: PathBuf::from(HOME_WITHOUT_ENTRY),
                    },
                    false,
                ),
                Err(error) => {
                    reporter.error(&user_path, format!("cannot look up uid {uid}: {error}"));
                    return None;
                }
            },
        };
        let mut gid = account.gid;
        if let Some((group, group_path)) = &group {
            match group {
                Named::Id(number) => gid = *number,
                Named::Name(group_name) => match self.host.accounts.group(group_name) {
                    Ok(Some(found)) => gid = found,
                    Ok(None) => {
                        reporter
                            .error(
                                group_path,
                                format!("no group named `{group_name}` on this machine"),
                            )
                            .help("write its gid (`group: 1000`) to run with a group this machine has no entry for");
                        return None;
                    }
                    Err(error) => {
                        reporter.error(
                            group_path,
                            format!("cannot look up group `{group_name}`: {error}"),
                        );
                        return None;
                    }
                },
            }
        }
        let groups = if entry {
            match self.host.accounts.groups_of(&account.name, gid) {
                Ok(groups) => groups,
                Err(error) => {
                    reporter.error(
                        &user_path,
                        format!("cannot list the groups of `{}`: {error}", account.name),
                    );
                    return None;
                }
            }
        } else {
            // No entry, so no group lists it: the one group it runs with.
            vec![gid]
        };
        if self.host.uid != 0 && self.host.uid != account.uid {
            reporter
                .warning(&user_path, format!("only root can run workers as `{user}`"))
                .help("supervise is not running as root here, so this app's workers would fail to start");
        }
        Some(Identity {
            user: account.name,
            uid: account.uid,
            gid,
            groups,
            home: account.home,
        })
    }

    pub(super) fn resolve_env(
        &self,
        has_listen: bool,
        has_user: bool,
        has_watchdog: bool,
        reporter: &mut Reporter,
    ) -> Vec<(String, Template)> {
        let reserved = |name: &str| reserved_env_name(name, has_listen, has_user, has_watchdog);
        let mut merged: IndexMap<String, Template> = IndexMap::new();

        if let Some((file, path)) = self.pick("env_file", |f| f.env_file.as_ref()) {
            let absolute = join_clean(self.folder, &file);
            match envfile::read(&absolute) {
                Ok(entries) => {
                    for (name, value) in entries {
                        if reserved(&name) {
                            reporter.warning(
                                &path,
                                format!(
                                    "`{name}` in {} is set by supervise and will be overridden",
                                    absolute.display()
                                ),
                            );
                        }
                        merged.insert(name, Template::literal(value));
                    }
                }
                Err(error) => {
                    reporter
                        .error(&path, format!("env_file: {error}"))
                        .help("relative paths are taken from the ecosystem file's folder");
                }
            }
        }

        // `defaults.env` first, then the app's own `env` over it.
        for (origin, env) in [
            (
                vec![key("defaults"), key("env")],
                self.defaults.env.as_ref(),
            ),
            (self.app_path(&["env"]), self.fields.env.as_ref()),
        ] {
            for (name, value) in env.into_iter().flatten() {
                let mut path = origin.clone();
                path.push(key(name));
                if !valid_env_name(name) {
                    reporter
                        .key_error(&path, format!("invalid environment variable name `{name}`"))
                        .help("names are letters, digits and `_`, not starting with a digit");
                    continue;
                }
                if reserved(name) {
                    reporter
                        .key_error(
                            &path,
                            format!("`{name}` is set by supervise and cannot be set in `env`"),
                        )
                        .help(reserved_help(name));
                    continue;
                }
                let text = match value {
                    raw::EnvValue::Text(text) => text.clone(),
                    raw::EnvValue::Integer(i) => i.to_string(),
                    raw::EnvValue::Float(f) => f.to_string(),
                    raw::EnvValue::Bool(b) => b.to_string(),
                };
                if text.contains('\0') {
                    reporter.error(&path, format!("the value of `{name}` contains a NUL byte"));
                    continue;
                }
                match Template::parse(&text) {
                    Ok(template) => {
                        merged.insert(name.clone(), template);
                    }
                    Err(error) => {
                        reporter.error(&path, error.0);
                    }
                }
            }
        }
        merged.into_iter().collect()
    }

    pub(super) fn resolve_command(
        &self,
        shell: bool,
        has_listen: bool,
        cwd: Option<&Path>,
        env: &[(String, Template)],
        reporter: &mut Reporter,
    ) -> Option<(Vec<Template>, Option<PathBuf>)> {
        if self.broken("command") {
            return None;
        }
        let Some((command, path)) = self.pick("command", |f| f.command.as_ref()) else {
            reporter
                .key_error(
                    &self.app_path(&[]),
                    format!("app `{}` has no `command`", self.name),
                )
                .help("add `command: …` with the program to run");
            return None;
        };
        let words: Vec<String> = match (&command, shell) {
            (raw::CommandLine::Line(line), true) => {
                if line.trim().is_empty() {
                    reporter.error(&path, "`command` is empty");
                    return None;
                }
                if has_listen && !line.trim_start().starts_with("exec ") {
                    reporter
                        .warning(&path, "with `shell: true` and `listen`, LISTEN_PID names the shell, not your program")
                        .help("start the command with `exec ` so the program replaces the shell");
                }
                vec!["/bin/sh".into(), "-c".into(), line.clone()]
            }
            (raw::CommandLine::Argv(_), true) => {
                reporter
                    .error(&path, "`shell: true` needs `command` as one string")
                    .help("write the command as a single string, or drop `shell: true`");
                return None;
            }
            (raw::CommandLine::Line(line), false) => match shell_words::split(line) {
                Ok(words) => words,
                Err(error) => {
                    reporter
                        .error(&path, format!("cannot split `command`: {error}"))
                        .help("close the quote, or give `command` as a list of arguments");
                    return None;
                }
            },
            (raw::CommandLine::Argv(argv), false) => argv.clone(),
        };
        if words.is_empty() || words[0].is_empty() {
            reporter.error(&path, "`command` is empty");
            return None;
        }
        let argv = command_templates(&words, "`command`", &path, reporter)?;
        let mut program = None;
        // Without a valid cwd (already reported) a relative lookup means nothing.
        if let (false, false, false, Some(cwd)) =
            (shell, self.broken("shell"), argv[0].uses_instance(), cwd)
        {
            match find_program(&words[0], cwd, self.program_search_path(env).as_deref()) {
                Ok(found) => program = Some(found),
                Err(problem) => {
                    let help = if words[0].contains('/') {
                        "a relative program path is taken from the app's cwd"
                    } else {
                        "PATH may differ when supervise runs; use an absolute path to be sure"
                    };
                    reporter.warning(&path, problem.message).help(help);
                }
            }
        }
        Some((argv, program))
    }

    /// The `PATH` a worker's programs are looked up along: its own `env`'s,
    /// else supervise's.
    pub(super) fn program_search_path(&self, env: &[(String, Template)]) -> Option<OsString> {
        env.iter()
            .rev()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| OsString::from(value.expand(0)))
            .or_else(|| self.host.path.clone())
    }
}

/// `HOME` for a uid the machine has no entry for (as systemd gives it).
const HOME_WITHOUT_ENTRY: &str = "/";

/// Ids no user or group can be given: `(uid_t)-1`, which `setuid` and
/// `setgid` read as "no change", and its 16-bit form, which systemd's
/// `User=`/`Group=` refuse for the same reason.
const RESERVED_IDS: [u32; 2] = [u32::MAX, u16::MAX as u32];

/// `user` or `group` as the file means it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Named {
    Name(String),
    Id(u32),
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Named::Name(name) => f.write_str(name),
            Named::Id(id) => write!(f, "{id}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum IdKind {
    User,
    Group,
}

impl IdKind {
    fn id(self) -> &'static str {
        match self {
            IdKind::User => "uid",
            IdKind::Group => "gid",
        }
    }
}

/// A written `user`/`group`: a name, or a number (a YAML integer or a
/// string of digits, as systemd reads `User=1000`); `None` (with an error
/// at `path`) for a number no user or group can have.
fn account_id(
    value: &raw::AccountId,
    kind: IdKind,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<Named> {
    let id = kind.id();
    let number = match value {
        raw::AccountId::Id(number) => *number,
        raw::AccountId::Name(text) if raw::AccountId::is_number(text) => {
            let digits = text.trim_start_matches('0');
            if digits.len() < text.len() && text.len() > 1 {
                // systemd refuses `User=007`, and some would read it as octal.
                reporter
                    .error(path, format!("{id} `{text}` starts with a zero"))
                    .help(format!(
                        "write it without leading zeros: `{}`",
                        if digits.is_empty() { "0" } else { digits }
                    ));
                return None;
            }
            match text.parse::<u32>() {
                Ok(number) => number,
                Err(_) => {
                    reporter
                        .error(path, format!("{id} `{text}` is out of range"))
                        .help(format!("a {id} is at most {}", u32::MAX - 1));
                    return None;
                }
            }
        }
        raw::AccountId::Name(text) => return Some(Named::Name(text.clone())),
    };
    if RESERVED_IDS.contains(&number) {
        reporter
            .error(
                path,
                format!(
                    "{id} {number} cannot be used: the kernel and systemd read it as \"no {id}\""
                ),
            )
            .help(format!("choose another {id}"));
        return None;
    }
    Some(Named::Id(number))
}

fn reserved_help(name: &str) -> String {
    match name {
        "PORT" => "with `listen`, PORT is the first TCP listener's port".to_string(),
        "HOME" | "USER" | "LOGNAME" => "with `user`, these describe that user".to_string(),
        "NOTIFY_SOCKET" => {
            "`ready: notify` and `watchdog` give workers a notify socket".to_string()
        }
        "WATCHDOG_USEC" | "WATCHDOG_PID" => {
            "with `watchdog`, supervise sets these for each instance".to_string()
        }
        _ if name.starts_with("LISTEN_") => "use `listen` to pass sockets to workers".to_string(),
        _ => "supervise sets it for each instance; read it instead".to_string(),
    }
}

/// Whether `env` may set `name`: letters, digits and `_`, not starting
/// with a digit.
pub fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        assert!(valid_env_name("A_1"));
        assert!(valid_env_name("_x"));
        assert!(!valid_env_name("1A"));
        assert!(!valid_env_name("A-B"));
        assert!(!valid_env_name(""));
    }
}
