//! The process an app runs: `command`, `shell`, `cwd`, `env`, `env_file`,
//! `user` and `group` — and the host lookups they need (users, groups, the
//! program along `PATH`), whose answers are stored in the spec.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::{AppContext, RESERVED_ALWAYS, command_templates, join_clean, key};
use crate::config::diagnostic::Reporter;
use crate::config::envfile;
use crate::config::raw;
use crate::host::find_program;
use crate::spec::{Identity, Template};

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

    pub(super) fn resolve_identity(&self, reporter: &mut Reporter) -> Option<Identity> {
        let user = self.pick("user", |f| f.user.as_ref());
        let group = self.pick("group", |f| f.group.as_ref());
        let (user_name, user_path) = match (user, group) {
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
        let account = match self.host.accounts.user(&user_name) {
            Ok(Some(account)) => account,
            Ok(None) => {
                reporter.error(
                    &user_path,
                    format!("no user named `{user_name}` on this machine"),
                );
                return None;
            }
            Err(error) => {
                reporter.error(
                    &user_path,
                    format!("cannot look up user `{user_name}`: {error}"),
                );
                return None;
            }
        };
        let mut gid = account.gid;
        if let Some((group_name, group_path)) = self.pick("group", |f| f.group.as_ref()) {
            match self.host.accounts.group(&group_name) {
                Ok(Some(found)) => gid = found,
                Ok(None) => {
                    reporter.error(
                        &group_path,
                        format!("no group named `{group_name}` on this machine"),
                    );
                    return None;
                }
                Err(error) => {
                    reporter.error(
                        &group_path,
                        format!("cannot look up group `{group_name}`: {error}"),
                    );
                    return None;
                }
            }
        }
        let groups = match self.host.accounts.groups_of(&user_name, gid) {
            Ok(groups) => groups,
            Err(error) => {
                reporter.error(
                    &user_path,
                    format!("cannot list the groups of `{user_name}`: {error}"),
                );
                return None;
            }
        };
        if self.host.uid != 0 && self.host.uid != account.uid {
            reporter
                .warning(&user_path, format!("only root can run workers as `{user_name}`"))
                .help("supervise is not running as root here, so this app's workers would fail to start");
        }
        Some(Identity {
            user: user_name,
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
        let reserved = |name: &str| {
            RESERVED_ALWAYS.contains(&name)
                || (has_listen && name == "PORT")
                || (has_user && matches!(name, "HOME" | "USER" | "LOGNAME"))
                || (has_watchdog && matches!(name, "WATCHDOG_USEC" | "WATCHDOG_PID"))
        };
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

fn valid_env_name(name: &str) -> bool {
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
