//! `supervise install` / `uninstall`: a systemd unit that runs
//! `supervise -f FILE` at boot. The ecosystem file stays the only state:
//! there is nothing to dump or resurrect, the unit just names the file.
//!
//! The unit is the one of `examples/systemd/supervise.service` made real:
//! absolute paths, `Type=notify` (supervise says READY=1 once every
//! instance is ready), `ExecReload=` sending SIGHUP (a re-read of the file),
//! `KillMode=mixed` (systemd stops supervise, which stops its workers
//! gracefully) and a `TimeoutStopSec=` above the file's longest
//! `kill_timeout`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use super::{ecosystem_path, err, exit, out, written};
use config::{self, Host, diagnostic};
use import::app_name;
use model::spec::Desired;

/// Added to the longest `kill_timeout` for `TimeoutStopSec=`: the time
/// supervise takes to stop beyond its workers' own.
const STOP_MARGIN: Duration = Duration::from_secs(20);

/// The program run for systemctl; tests point it at a recorder.
const SYSTEMCTL_VARIABLE: &str = "SUPERVISE_SYSTEMCTL";

/// Where systemd-logind marks the users whose own manager runs from boot
/// (`loginctl enable-linger USER` creates a file named after the user).
/// Without it a `--user` unit starts at the user's first login and stops
/// after their last session, not at boot.
const LINGER_DIR: &str = "/var/lib/systemd/linger";

/// Where the unit goes and what it is called.
pub(crate) struct Target {
    pub(crate) user: bool,
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
}

impl Target {
    pub(crate) fn unit_name(&self) -> String {
        format!("supervise-{}.service", self.name)
    }
}

/// The unit for `file` (absolute) run by `binary` (absolute).
pub(crate) fn unit(
    binary: &Path,
    file: &Path,
    desired: &Desired,
    target: &Target,
    kill: &Path,
) -> String {
    let user = target.user;
    let stop = (longest_stop(desired) + STOP_MARGIN).as_secs().max(30);
    let folder = file.parent().unwrap_or(Path::new("/"));
    let quote = |p: &Path| systemd_quote(&p.display().to_string());
    let (after, wanted_by) = if user {
        ("", "default.target")
    } else {
        (
            "After=network-online.target\nWants=network-online.target\n",
            "multi-user.target",
        )
    };
    format!(
        "# Written by `supervise install`; `supervise uninstall` removes it.\n\
         # The ecosystem file is the only state: edit it, then `systemctl{user_flag} reload {name}`\n\
         # (or let supervise see the edit itself).\n\
         [Unit]\n\
         Description=supervise: the apps of {file_shown}\n\
         {after}\n\
         [Service]\n\
         Type=notify\n\
         NotifyAccess=main\n\
         ExecStart={binary} -f {file}\n\
         ExecReload={kill} -HUP $MAINPID\n\
         WorkingDirectory={folder}\n\
         # systemd stops supervise alone; supervise stops every worker with its\n\
         # stop_signal and kill_timeout. Only past TimeoutStopSec does systemd\n\
         # SIGKILL what is left of the unit's cgroup.\n\
         KillMode=mixed\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec={stop}s\n\
         # The cgroup subtree is supervise's: an instance each, no process escapes.\n\
         Delegate=yes\n\
         Restart=on-failure\n\
         \n\
         [Install]\n\
         WantedBy={wanted_by}\n",
        user_flag = if user { " --user" } else { "" },
        name = target.unit_name(),
        file_shown = file.display().to_string().replace('%', "%%"),
        binary = quote(binary),
        file = quote(file),
        kill = quote(kill),
        // WorkingDirectory= takes the rest of the line as the path, quotes
        // included: only specifiers need escaping.
        folder = folder.display().to_string().replace('%', "%%"),
    )
}

/// The longest supervise can take to stop: apps stop together, but one that
/// others depend on waits for them, so a chain of dependencies takes the sum
/// of its `kill_timeout`s.
pub(crate) fn longest_stop(desired: &Desired) -> Duration {
    fn chain(desired: &Desired, name: &str, depth: usize) -> Duration {
        let Some(app) = desired.app(name) else {
            return Duration::ZERO;
        };
        // The file has no cycles (check refuses them); the depth bound is for
        // a model built some other way.
        if depth > desired.apps.len() {
            return app.kill_timeout;
        }
        let below = app
            .depends_on
            .iter()
            .map(|d| chain(desired, &d.app, depth + 1))
            .max()
            .unwrap_or(Duration::ZERO);
        app.kill_timeout + below
    }
    desired
        .apps
        .iter()
        .map(|a| chain(desired, &a.name, 0))
        .max()
        .unwrap_or(model::spec::defaults::KILL_TIMEOUT)
}

/// A path as one word of an `Exec…=` line: quoted when it has a space or
/// a character systemd would expand.
fn systemd_quote(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        text.to_string()
    } else {
        let escaped = text
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('%', "%%")
            .replace('$', "$$");
        format!("\"{escaped}\"")
    }
}

/// The unit's default name: the file's folder (`/srv/shop/ecosystem.yaml`
/// → `shop`).
pub(crate) fn name_of(file: &Path) -> String {
    let folder = file
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    app_name(&folder, &[])
}

/// The folder units go in: systemd's for the system, or the user's.
fn unit_dir(user: bool) -> Result<PathBuf, String> {
    if !user {
        return Ok(PathBuf::from("/etc/systemd/system"));
    }
    if let Some(config) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(config).join("systemd/user"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".config/systemd/user"))
        .ok_or_else(|| {
            "neither XDG_CONFIG_HOME nor HOME is set: cannot tell where user units go".to_string()
        })
}

/// A program's absolute path, from the `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// What `install` and `uninstall` were asked.
pub struct InstallArgs<'a> {
    pub file: Option<&'a Path>,
    pub user: bool,
    pub name: Option<&'a str>,
    pub unit_dir: Option<&'a Path>,
    pub print: bool,
    /// Replace a unit of the same name that runs another file.
    pub force: bool,
}

/// The line of a unit that says which file it runs: `-f FILE` of its
/// `ExecStart=`.
fn runs_file(unit_text: &str, file: &Path) -> bool {
    let ours = format!("-f {}", systemd_quote(&file.display().to_string()));
    unit_text
        .lines()
        .any(|l| l.starts_with("ExecStart=") && l.ends_with(&ours))
}

/// The `ExecStart=` of a unit, to name in a refusal.
fn exec_start(unit_text: &str) -> &str {
    unit_text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or("(no ExecStart=)")
}

fn target(args: &InstallArgs, file: &Path) -> Result<Target, String> {
    Ok(Target {
        user: args.user,
        name: args
            .name
            .map_or_else(|| name_of(file), |n| app_name(n, &[])),
        dir: match args.unit_dir {
            Some(dir) => dir.to_path_buf(),
            // `--print` writes nothing, so it needs no folder.
            None if args.print => PathBuf::new(),
            None => unit_dir(args.user)?,
        },
    })
}

fn fail(message: String) -> ExitCode {
    err(&format!("error: {message}\n"));
    ExitCode::from(exit::USAGE)
}

/// `supervise install`.
pub fn install(args: &InstallArgs) -> ExitCode {
    let file = match ecosystem_path(args.file)
        .and_then(|f| config::absolute_path(&f).map_err(|e| e.to_string()))
    {
        Ok(file) => import::normalize(&file),
        Err(message) => return fail(message),
    };
    // A unit file is lines: a path with a line break cannot be written in one.
    if file.to_string_lossy().contains(['\n', '\r']) {
        return fail(format!(
            "{file:?} has a line break, which a unit file cannot hold: move the file"
        ));
    }
    // A unit that starts a broken file would fail at boot: check it now.
    let checked = match config::check_file(&file, &Host::detect()) {
        Ok(checked) => checked,
        Err(unreadable) => return fail(unreadable.to_string()),
    };
    let shown = file.display().to_string();
    let Some(desired) = &checked.desired else {
        err(&diagnostic::render(
            &shown,
            &checked.text,
            &checked.diagnostics,
        ));
        err(&format!(
            "error: {shown} is invalid: fix it before installing a unit that runs it\n"
        ));
        return ExitCode::from(exit::INVALID);
    };
    let binary = match std::env::current_exe() {
        Ok(binary) => binary,
        Err(e) => return fail(format!("cannot tell where supervise itself is: {e}")),
    };
    let kill = which("kill").unwrap_or_else(|| PathBuf::from("/bin/kill"));
    let target = match target(args, &file) {
        Ok(target) => target,
        Err(message) => return fail(message),
    };
    let text = unit(&binary, &file, desired, &target, &kill);
    if args.print {
        return written(out(&text).map(|()| exit::OK));
    }
    let path = target.dir.join(target.unit_name());
    if let Ok(existing) = std::fs::read_to_string(&path)
        && !runs_file(&existing, &file)
        && !args.force
    {
        return fail(format!(
            "{} exists and runs another file ({}): give this one another --name, or --force to replace it",
            path.display(),
            exec_start(&existing)
        ));
    }
    if let Err(e) = std::fs::create_dir_all(&target.dir).and_then(|()| std::fs::write(&path, &text))
    {
        return fail(format!("cannot write {}: {e}", path.display()));
    }
    err(&format!("wrote {}\n", path.display()));
    let unit_name = target.unit_name();
    let enabled = systemctl(
        &target,
        &[&["daemon-reload"], &["enable", "--now", &unit_name]],
        &path,
    );
    if target.user {
        let user = current_user();
        if !lingers(Path::new(LINGER_DIR), &user) {
            err(&linger_note(&user));
        }
    }
    enabled
}

/// The name of the user supervise runs as (its uid when it has no name).
fn current_user() -> String {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| uid.to_string()),
    }
}

/// Whether `user`'s manager runs from boot: its mark in `dir` (systemd's
/// [`LINGER_DIR`]).
fn lingers(dir: &Path, user: &str) -> bool {
    // A name with a `/` would be a path, not a mark.
    !user.contains('/') && dir.join(user).exists()
}

/// What a `--user` install says when `user` does not linger: the unit will
/// not start at boot, and the command that makes it (not run: it changes
/// the machine beyond this unit, and needs root or polkit).
fn linger_note(user: &str) -> String {
    format!(
        "note: lingering is off for {user}: a --user unit starts when {user} logs in and stops after their last session ends, not at boot\n  \
         to start it at boot, run this once (it needs root, or polkit's leave):\n    \
         loginctl enable-linger {user}\n"
    )
}

/// `supervise uninstall`.
pub fn uninstall(args: &InstallArgs) -> ExitCode {
    let file = match ecosystem_path(args.file)
        .and_then(|f| config::absolute_path(&f).map_err(|e| e.to_string()))
    {
        Ok(file) => import::normalize(&file),
        Err(message) => return fail(message),
    };
    let target = match target(args, &file) {
        Ok(target) => target,
        Err(message) => return fail(message),
    };
    let path = target.dir.join(target.unit_name());
    let Ok(existing) = std::fs::read_to_string(&path) else {
        return fail(format!(
            "{} is not installed ({} does not exist)",
            target.unit_name(),
            path.display()
        ));
    };
    if !runs_file(&existing, &file) {
        return fail(format!(
            "{} runs another file ({}), not {}: name the file it runs with -f, or its unit with --name",
            path.display(),
            exec_start(&existing),
            file.display()
        ));
    }
    let unit_name = target.unit_name();
    let stopped = systemctl(&target, &[&["disable", "--now", &unit_name]], &path);
    if stopped != ExitCode::from(exit::OK) {
        return stopped;
    }
    if let Err(e) = std::fs::remove_file(&path) {
        return fail(format!("cannot remove {}: {e}", path.display()));
    }
    err(&format!("removed {}\n", path.display()));
    systemctl(&target, &[&["daemon-reload"]], &path)
}

/// Run each systemctl command, printing it first; stop at the first that
/// fails, saying what is left to do.
fn systemctl(target: &Target, commands: &[&[&str]], unit: &Path) -> ExitCode {
    let program = std::env::var_os(SYSTEMCTL_VARIABLE).unwrap_or_else(|| "systemctl".into());
    for args in commands {
        let mut shown = vec!["systemctl".to_string()];
        if target.user {
            shown.push("--user".to_string());
        }
        shown.extend(args.iter().map(|a| a.to_string()));
        err(&format!("$ {}\n", shown.join(" ")));
        let mut command = Command::new(&program);
        if target.user {
            command.arg("--user");
        }
        let result = command.args(*args).output();
        let failure = match result {
            Ok(output) if output.status.success() => continue,
            Ok(output) => match String::from_utf8_lossy(&output.stderr).trim() {
                "" => format!("systemctl {}", output.status),
                said => said.to_string(),
            },
            Err(e) => e.to_string(),
        };
        err(&format!(
            "error: `{}` failed: {failure}\n  help: {} is in place; run the command above once systemd runs here\n",
            shown.join(" "),
            unit.display()
        ));
        return ExitCode::from(exit::INVALID);
    }
    ExitCode::from(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_named_after_the_files_folder() {
        assert_eq!(name_of(Path::new("/srv/shop/ecosystem.yaml")), "shop");
        assert_eq!(
            name_of(Path::new("/home/me/My Site/ecosystem.yaml")),
            "my-site"
        );
        assert_eq!(name_of(Path::new("/ecosystem.yaml")), "app");
    }

    #[test]
    fn lingering_is_read_from_the_users_mark() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(!lingers(dir.path(), "ann"));
        std::fs::write(dir.path().join("ann"), "").expect("mark");
        assert!(lingers(dir.path(), "ann"));
        assert!(!lingers(dir.path(), "../ann"), "a path is not a user");
        let note = linger_note("ann");
        assert!(
            note.contains("\n    loginctl enable-linger ann\n"),
            "{note}"
        );
    }

    #[test]
    fn paths_with_spaces_or_expansions_are_quoted() {
        assert_eq!(systemd_quote("/usr/bin/supervise"), "/usr/bin/supervise");
        assert_eq!(
            systemd_quote("/srv/my app/e.yaml"),
            "\"/srv/my app/e.yaml\""
        );
        assert_eq!(systemd_quote("/srv/100%/$x"), "\"/srv/100%%/$$x\"");
    }
}
