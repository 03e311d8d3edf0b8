//! Semantic validation: from well-formed [`raw`] types to the resolved
//! [`spec`](crate::spec) model, reporting every problem on the way.
//!
//! Each check reports at the place the value is *written*: a value inherited
//! from `defaults` is reported at `defaults.…`, once, not once per app. The
//! few facts that depend on the machine (CPU count, whether we are root, the
//! `PATH`) come in through [`Host`], so tests can pin them.

use std::collections::HashSet;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use nix::sys::signal::Signal;

use super::diagnostic::{PathSeg, Reporter, did_you_mean};
use super::envfile;
use super::raw::{self, AppFields, EcosystemFile};
use crate::spec::{
    AppSpec, BackoffPolicy, Desired, Identity, ListenAddress, ListenSpec, MaxRestarts,
    ProcessDefinition, Readiness, ReloadLimits, RestartPolicy, Template, defaults,
};

/// The facts about the machine that validation depends on.
#[derive(Debug, Clone)]
pub struct Host {
    /// What `instances: max` means.
    pub cpus: u32,
    /// The supervisor's effective uid (switching `user` needs 0).
    pub uid: u32,
    /// The `PATH` programs are looked up in when an app's `env` sets none.
    pub path: Option<OsString>,
}

impl Host {
    /// The facts of this machine and process. `SUPERVISE_TEST_CPUS` overrides the
    /// CPU count so tests (and their snapshots) do not depend on the machine.
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
        }
    }
}

/// Fields the structure check found broken and set aside, as `(scope, field)`
/// where scope is an app's name or `defaults`. Validation of the rest must not
/// report them as missing, nor judge other fields against the defaults that
/// stand in for them.
#[derive(Debug, Default)]
pub struct BrokenFields(HashSet<(String, String)>);

impl BrokenFields {
    pub fn insert(&mut self, scope: String, field: String) {
        self.0.insert((scope, field));
    }

    fn contains(&self, scope: &str, field: &str) -> bool {
        self.0.contains(&(scope.to_string(), field.to_string()))
    }
}

/// Names the supervisor sets in every worker's environment.
const RESERVED_ALWAYS: &[&str] = &[
    "SUPERVISE_APP",
    "SUPERVISE_INSTANCE",
    "NODE_APP_INSTANCE",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
];

/// The longest `sun_path` (108 bytes, including the terminating NUL).
const MAX_UNIX_PATH: usize = 107;

/// Validate `file` (whose tree is in `reporter`) and resolve it.
/// Returns `None` when an error was reported.
pub fn resolve(
    file: &EcosystemFile,
    source: &Path,
    host: &Host,
    broken: &BrokenFields,
    reporter: &mut Reporter,
) -> Option<Desired> {
    let folder = source.parent().unwrap_or(Path::new("/")).to_path_buf();
    let empty = AppFields::default();
    let defaults = file.defaults.as_ref().unwrap_or(&empty);
    let mut apps = Vec::new();
    let mut listeners = Vec::new();
    for (name, fields) in &file.apps {
        let app = AppContext {
            name,
            fields,
            defaults,
            folder: &folder,
            host,
            broken,
        };
        let (spec, listen) = app.resolve(reporter);
        listeners.push((name.as_str(), listen));
        apps.extend(spec);
    }
    check_listen_clashes(file, &listeners, reporter);
    if reporter.has_errors() {
        return None;
    }
    Some(Desired {
        source: source.to_path_buf(),
        apps,
    })
}

/// One app being resolved, with where its inherited values come from.
struct AppContext<'a> {
    name: &'a str,
    fields: &'a AppFields,
    defaults: &'a AppFields,
    folder: &'a Path,
    host: &'a Host,
    broken: &'a BrokenFields,
}

fn key(k: &str) -> PathSeg {
    PathSeg::Key(k.to_string())
}

impl<'a> AppContext<'a> {
    /// Was this field (of the app or of `defaults`) set aside as broken?
    fn broken(&self, field: &str) -> bool {
        self.broken.contains(self.name, field) || self.broken.contains("defaults", field)
    }

    fn app_path(&self, field: &[&str]) -> Vec<PathSeg> {
        let mut path = vec![key("apps"), key(self.name)];
        path.extend(field.iter().map(|f| key(f)));
        path
    }

    /// The value of a top-level field and the path where it is written.
    fn pick<T: Clone>(
        &self,
        field: &str,
        get: impl Fn(&AppFields) -> Option<&T>,
    ) -> Option<(T, Vec<PathSeg>)> {
        if let Some(value) = get(self.fields) {
            Some((value.clone(), self.app_path(&[field])))
        } else {
            get(self.defaults).map(|v| (v.clone(), vec![key("defaults"), key(field)]))
        }
    }

    /// A field inside a nested block (`backoff.initial`), merged key by key.
    fn pick_nested<B, T: Clone>(
        &self,
        block: &str,
        field: &str,
        get_block: impl Fn(&AppFields) -> Option<&B>,
        get: impl Fn(&B) -> Option<&T>,
    ) -> Option<(T, Vec<PathSeg>)> {
        if let Some(value) = get_block(self.fields).and_then(&get) {
            Some((value.clone(), self.app_path(&[block, field])))
        } else {
            get_block(self.defaults)
                .and_then(&get)
                .map(|v| (v.clone(), vec![key("defaults"), key(block), key(field)]))
        }
    }

    /// The resolved app (`None` after an error) and its listeners, which are
    /// checked against other apps' even when something else in the app is wrong.
    fn resolve(&self, reporter: &mut Reporter) -> (Option<AppSpec>, Vec<ListenSpec>) {
        let listen = self.resolve_listen(reporter);
        let spec = self.resolve_spec(listen.clone(), reporter);
        (spec, listen)
    }

    fn resolve_spec(&self, listen: Vec<ListenSpec>, reporter: &mut Reporter) -> Option<AppSpec> {
        let errors_before = reporter.error_count();
        self.check_name(reporter);

        let cwd = self.resolve_cwd(reporter);
        let shell = self
            .pick("shell", |f| f.shell.as_ref())
            .map(|(v, _)| v)
            .unwrap_or(false);
        let instances = self.resolve_instances(reporter);
        let identity = self.resolve_identity(reporter);
        let env = self.resolve_env(!listen.is_empty(), identity.is_some(), reporter);
        let argv = self.resolve_command(shell, !listen.is_empty(), cwd.as_deref(), &env, reporter);
        let ready_timeout = self.duration("ready_timeout", |f| f.ready_timeout.as_ref(), reporter);
        let ready = self.resolve_ready(instances.map(|(n, _)| n), &listen, ready_timeout, reporter);
        let backoff = self.resolve_backoff(reporter);
        let max_restarts = self.resolve_max_restarts(reporter);
        let stop_signal = self.resolve_signal(reporter);
        let kill_timeout = self.duration("kill_timeout", |f| f.kill_timeout.as_ref(), reporter);
        let reload = self.resolve_reload(reporter);

        if reporter.error_count() > errors_before {
            return None;
        }
        let (instances, instances_from_max) = instances?;
        Some(AppSpec {
            name: self.name.to_string(),
            process: ProcessDefinition {
                argv: argv?,
                shell,
                cwd: cwd?,
                env,
                listen,
                identity,
            },
            instances,
            instances_from_max,
            ready: ready?,
            ready_timeout: ready_timeout.unwrap_or(defaults::READY_TIMEOUT),
            restart: self
                .pick("restart", |f| f.restart.as_ref())
                .map_or(RestartPolicy::Always, |(v, _)| v),
            backoff: backoff?,
            max_restarts,
            stop_signal: stop_signal?,
            kill_timeout: kill_timeout.unwrap_or(defaults::KILL_TIMEOUT),
            reload: reload?,
        })
    }

    fn check_name(&self, reporter: &mut Reporter) {
        let valid = self.name.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && (b == b'_' || b == b'-'))
        });
        if self.name.is_empty() || !valid {
            reporter
                .key_error(&self.app_path(&[]), format!("invalid app name `{}`", self.name))
                .help("app names are lowercase letters, digits, `_` and `-`, starting with a letter or digit");
        } else if self.name == "all" {
            reporter
                .key_error(&self.app_path(&[]), "`all` cannot be an app name")
                .help("`all` means every app in commands such as `supervise reload all`; pick another name");
        }
    }

    fn resolve_cwd(&self, reporter: &mut Reporter) -> Option<PathBuf> {
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

    fn resolve_instances(&self, reporter: &mut Reporter) -> Option<(u32, bool)> {
        let Some((instances, path)) = self.pick("instances", |f| f.instances.as_ref()) else {
            return Some((defaults::INSTANCES, false));
        };
        let (count, from_max) = match instances {
            raw::Instances::Count(n) => (n, false),
            raw::Instances::Keyword(raw::MaxKeyword::Max) => (self.host.cpus, true),
        };
        if count > defaults::MAX_INSTANCES {
            reporter
                .error(
                    &path,
                    format!(
                        "{count} instances is more than the limit of {}",
                        defaults::MAX_INSTANCES
                    ),
                )
                .help("split the work over several apps if you really need this many processes");
            return None;
        }
        Some((count, from_max))
    }

    fn resolve_listen(&self, reporter: &mut Reporter) -> Vec<ListenSpec> {
        let Some((listen, path)) = self.pick("listen", |f| f.listen.as_ref()) else {
            return Vec::new();
        };
        let entries: Vec<(raw::ListenEntry, Vec<PathSeg>)> = match listen {
            raw::Listen::One(entry) => vec![(entry, path.clone())],
            raw::Listen::Many(entries) => entries
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    let mut p = path.clone();
                    p.push(PathSeg::Index(i));
                    (e, p)
                })
                .collect(),
        };
        if entries.len() > crate::effects::spawn::MAX_LISTEN_FDS {
            reporter.error(
                &path,
                format!(
                    "{} listening sockets is more than the limit of {}",
                    entries.len(),
                    crate::effects::spawn::MAX_LISTEN_FDS
                ),
            );
            return Vec::new();
        }
        let mut specs = Vec::new();
        let mut names = HashSet::new();
        for (entry, entry_path) in entries {
            let (name, address, address_path, reuseport) = match entry {
                raw::ListenEntry::Address(address) => {
                    (self.name.to_string(), address, entry_path, false)
                }
                raw::ListenEntry::Socket(socket) => {
                    let mut name_path = entry_path.clone();
                    name_path.push(key("name"));
                    let name = socket.name.unwrap_or_else(|| self.name.to_string());
                    if !valid_fd_name(&name) {
                        reporter
                            .error(&name_path, format!("invalid socket name `{name}`"))
                            .help("names go into LISTEN_FDNAMES: 1 to 255 printable ASCII characters, no `:`");
                    } else if name != self.name && !names.insert(name.clone()) {
                        reporter.error(
                            &name_path,
                            format!("socket name `{name}` is used twice in this app"),
                        );
                    }
                    let mut address_path = entry_path;
                    address_path.push(key("address"));
                    (
                        name,
                        socket.address,
                        address_path,
                        socket.reuseport.unwrap_or(false),
                    )
                }
            };
            match parse_listen_address(&address, self.folder) {
                Ok(ListenAddress::Unix(_)) if reuseport => {
                    reporter
                        .error(&address_path, "`reuseport` works with TCP addresses only")
                        .help("drop `reuseport: true`, or listen on IP:PORT");
                }
                Ok(ListenAddress::Tcp(address)) if reuseport && address.port() == 0 => {
                    reporter
                        .error(&address_path, "`reuseport` needs a fixed port")
                        .help("every instance binds its own socket to the same port, so port 0 (any free port) cannot work");
                }
                Ok(address) => specs.push(ListenSpec {
                    name,
                    address,
                    reuseport,
                }),
                Err((message, help)) => {
                    reporter.error(&address_path, message).help(help);
                }
            }
        }
        specs
    }

    fn resolve_identity(&self, reporter: &mut Reporter) -> Option<Identity> {
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
        let account = match nix::unistd::User::from_name(&user_name) {
            Ok(Some(account)) => account,
            Ok(None) => {
                reporter.error(
                    &user_path,
                    format!("no user named `{user_name}` on this machine"),
                );
                return None;
            }
            Err(errno) => {
                reporter.error(
                    &user_path,
                    format!("cannot look up user `{user_name}`: {errno}"),
                );
                return None;
            }
        };
        let mut gid = account.gid.as_raw();
        if let Some((group_name, group_path)) = self.pick("group", |f| f.group.as_ref()) {
            match nix::unistd::Group::from_name(&group_name) {
                Ok(Some(group)) => gid = group.gid.as_raw(),
                Ok(None) => {
                    reporter.error(
                        &group_path,
                        format!("no group named `{group_name}` on this machine"),
                    );
                    return None;
                }
                Err(errno) => {
                    reporter.error(
                        &group_path,
                        format!("cannot look up group `{group_name}`: {errno}"),
                    );
                    return None;
                }
            }
        }
        if self.host.uid != 0 && self.host.uid != account.uid.as_raw() {
            reporter
                .warning(&user_path, format!("only root can run workers as `{user_name}`"))
                .help("supervise is not running as root here, so this app's workers would fail to start");
        }
        Some(Identity {
            user: user_name,
            uid: account.uid.as_raw(),
            gid,
            home: account.dir,
        })
    }

    fn resolve_env(
        &self,
        has_listen: bool,
        has_user: bool,
        reporter: &mut Reporter,
    ) -> Vec<(String, Template)> {
        let reserved = |name: &str| {
            RESERVED_ALWAYS.contains(&name)
                || (has_listen && name == "PORT")
                || (has_user && matches!(name, "HOME" | "USER" | "LOGNAME"))
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

    fn resolve_command(
        &self,
        shell: bool,
        has_listen: bool,
        cwd: Option<&Path>,
        env: &[(String, Template)],
        reporter: &mut Reporter,
    ) -> Option<Vec<Template>> {
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
        if words.iter().any(|w| w.contains('\0')) {
            reporter.error(&path, "`command` contains a NUL byte");
            return None;
        }
        let mut argv = Vec::with_capacity(words.len());
        for word in &words {
            match Template::parse(word) {
                Ok(template) => argv.push(template),
                Err(error) => {
                    reporter.error(&path, error.0);
                    return None;
                }
            }
        }
        if !shell && !self.broken("shell") && !argv[0].uses_instance() {
            let env_path = env
                .iter()
                .rev()
                .find(|(name, _)| name == "PATH")
                .map(|(_, value)| OsString::from(value.expand(0)));
            let search = env_path.or_else(|| self.host.path.clone());
            if let Some(problem) = find_program(&words[0], cwd, search.as_deref()) {
                let help = if words[0].contains('/') {
                    "a relative program path is taken from the app's cwd"
                } else {
                    "PATH may differ when supervise runs; use an absolute path to be sure"
                };
                reporter.warning(&path, problem).help(help);
            }
        }
        Some(argv)
    }

    fn resolve_ready(
        &self,
        instances: Option<u32>,
        listen: &[ListenSpec],
        ready_timeout: Option<Duration>,
        reporter: &mut Reporter,
    ) -> Option<Readiness> {
        let Some((ready, path)) = self.pick("ready", |f| f.ready.as_ref()) else {
            return Some(Readiness::Delay(defaults::READY_DELAY));
        };
        let timeout = ready_timeout.unwrap_or(defaults::READY_TIMEOUT);
        let probe = |field: &str, text: &str, reporter: &mut Reporter| -> Option<Template> {
            let mut probe_path = path.clone();
            probe_path.push(key(field));
            let template = match Template::parse(text) {
                Ok(template) => template,
                Err(error) => {
                    reporter.error(&probe_path, error.0);
                    return None;
                }
            };
            let targets: Vec<Result<SocketAddr, String>> = (0..instances.unwrap_or(1).max(1))
                .map(|i| {
                    let expanded = template.expand(i);
                    if field == "tcp" {
                        parse_host_port(&expanded)
                    } else {
                        parse_http_url(&expanded).map(|(address, _)| address)
                    }
                })
                .collect();
            if let Some(Err(message)) = targets.first() {
                let help = if field == "tcp" {
                    "write it as IP:PORT, e.g. 127.0.0.1:{instance+8000}"
                } else {
                    "write it as http://IP:PORT/path, e.g. http://127.0.0.1:{instance+8000}/health"
                };
                reporter
                    .error(
                        &probe_path,
                        format!("bad {field} probe `{text}`: {message}"),
                    )
                    .help(help);
                return None;
            }
            if instances.unwrap_or(1) > 1 && !template.uses_instance() {
                reporter
                    .error(&probe_path, format!("with several instances, the {field} probe must contain `{{instance}}`"))
                    .help("otherwise every instance probes the same address and any one answer marks them all ready; use e.g. `{instance+8000}` for the port, or `ready: notify`");
                return None;
            }
            if let Some(covered) = targets
                .iter()
                .flatten()
                .find_map(|t| listen.iter().find(|l| l.address.covers(t)))
            {
                reporter
                    .error(
                        &probe_path,
                        format!("the {field} probe targets `{}`, which this app's `listen` shares between all its instances", covered.address),
                    )
                    .help("a sibling would answer the probe; use `ready: notify` instead");
                return None;
            }
            Some(template)
        };
        match ready {
            raw::Ready::Keyword(raw::ReadyKeyword::None) => Some(Readiness::Immediate),
            raw::Ready::Keyword(raw::ReadyKeyword::Notify) => Some(Readiness::Notify),
            raw::Ready::Tcp(tcp) => probe("tcp", &tcp.tcp, reporter).map(Readiness::Tcp),
            raw::Ready::Http(http) => probe("http", &http.http, reporter).map(Readiness::Http),
            raw::Ready::Delay(delay) => {
                let mut delay_path = path.clone();
                delay_path.push(key("delay"));
                let delay = parse_positive_duration(&delay.delay, &delay_path, reporter)?;
                if delay >= timeout && !self.broken("ready_timeout") {
                    reporter
                        .error(
                            &delay_path,
                            format!(
                                "ready after {} can never happen within ready_timeout {}",
                                humantime::format_duration(delay),
                                humantime::format_duration(timeout)
                            ),
                        )
                        .help("make `delay` shorter than `ready_timeout`");
                    return None;
                }
                Some(Readiness::Delay(delay))
            }
        }
    }

    fn resolve_backoff(&self, reporter: &mut Reporter) -> Option<BackoffPolicy> {
        let field = |name: &str,
                     get: fn(&raw::Backoff) -> Option<&raw::DurationText>,
                     default: Duration,
                     reporter: &mut Reporter| {
            match self.pick_nested("backoff", name, |f| f.backoff.as_ref(), get) {
                Some((text, path)) => {
                    parse_positive_duration(&text, &path, reporter).map(|d| (d, Some(path)))
                }
                None => Some((default, None)),
            }
        };
        let initial = field(
            "initial",
            |b| b.initial.as_ref(),
            defaults::BACKOFF_INITIAL,
            reporter,
        );
        let max = field("max", |b| b.max.as_ref(), defaults::BACKOFF_MAX, reporter);
        let reset_after = field(
            "reset_after",
            |b| b.reset_after.as_ref(),
            defaults::BACKOFF_RESET_AFTER,
            reporter,
        );
        let factor = match self.pick_nested(
            "backoff",
            "factor",
            |f| f.backoff.as_ref(),
            |b| b.factor.as_ref(),
        ) {
            Some((factor, path)) if !factor.is_finite() || factor < 1.0 => {
                reporter
                    .error(
                        &path,
                        format!("backoff factor must be a number >= 1, found {factor}"),
                    )
                    .help("1 keeps the delay constant; 2 doubles it after each restart");
                None
            }
            Some((factor, _)) => Some(factor),
            None => Some(defaults::BACKOFF_FACTOR),
        };
        let ((initial, initial_path), (max, max_path)) = (initial?, max?);
        if initial > max && !self.broken("backoff") {
            let path = initial_path
                .or(max_path)
                .unwrap_or_else(|| self.app_path(&["backoff"]));
            reporter
                .error(
                    &path,
                    format!(
                        "backoff.initial ({}) is longer than backoff.max ({})",
                        humantime::format_duration(initial),
                        humantime::format_duration(max)
                    ),
                )
                .help("make `initial` at most `max`");
            return None;
        }
        Some(BackoffPolicy {
            initial,
            max,
            factor: factor?,
            reset_after: reset_after?.0,
        })
    }

    fn resolve_max_restarts(&self, reporter: &mut Reporter) -> Option<MaxRestarts> {
        let (limit, path) = self.pick("max_restarts", |f| f.max_restarts.as_ref())?;
        let mut count_path = path.clone();
        count_path.push(key("count"));
        let mut within_path = path;
        within_path.push(key("within"));
        let within = parse_positive_duration(&limit.within, &within_path, reporter);
        if limit.count == 0 {
            reporter
                .error(&count_path, "max_restarts.count must be at least 1")
                .help("use `restart: never` to never restart");
            return None;
        }
        Some(MaxRestarts {
            count: limit.count,
            within: within?,
        })
    }

    fn resolve_signal(&self, reporter: &mut Reporter) -> Option<Signal> {
        let Some((name, path)) = self.pick("stop_signal", |f| f.stop_signal.as_ref()) else {
            return Some(Signal::SIGTERM);
        };
        match parse_signal(&name) {
            Some(signal) => Some(signal),
            None => {
                let known: Vec<&str> = Signal::iterator().map(|s| s.as_str()).collect();
                let upper = name.to_ascii_uppercase();
                let guess = if upper.starts_with("SIG") {
                    upper
                } else {
                    format!("SIG{upper}")
                };
                let help = match did_you_mean(&guess, known.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => {
                        "use a signal name such as SIGTERM, SIGINT, SIGQUIT or SIGUSR1".to_string()
                    }
                };
                reporter
                    .error(&path, format!("unknown signal `{name}`"))
                    .help(help);
                None
            }
        }
    }

    fn resolve_reload(&self, reporter: &mut Reporter) -> Option<ReloadLimits> {
        let surge = self.pick_nested(
            "reload",
            "max_surge",
            |f| f.reload.as_ref(),
            |r| r.max_surge.as_ref(),
        );
        let unavailable = self.pick_nested(
            "reload",
            "max_unavailable",
            |f| f.reload.as_ref(),
            |r| r.max_unavailable.as_ref(),
        );
        let limits = ReloadLimits {
            max_surge: surge.as_ref().map_or(defaults::MAX_SURGE, |(v, _)| *v),
            max_unavailable: unavailable
                .as_ref()
                .map_or(defaults::MAX_UNAVAILABLE, |(v, _)| *v),
        };
        if limits.max_surge == 0 && limits.max_unavailable == 0 && !self.broken("reload") {
            let path = surge
                .map(|(_, p)| p)
                .or(unavailable.map(|(_, p)| p))
                .unwrap_or_else(|| self.app_path(&["reload"]));
            reporter
                .error(&path, "max_surge and max_unavailable are both 0, so a rolling replacement could never make progress")
                .help("allow one extra instance (`max_surge: 1`) or one fewer (`max_unavailable: 1`)");
            return None;
        }
        Some(limits)
    }

    fn duration(
        &self,
        field: &str,
        get: impl Fn(&AppFields) -> Option<&raw::DurationText>,
        reporter: &mut Reporter,
    ) -> Option<Duration> {
        let (text, path) = self.pick(field, get)?;
        parse_positive_duration(&text, &path, reporter)
    }
}

/// `folder` joined with a path from the file, without `./` noise (`..` is kept:
/// resolving it would need the file system, and symlinks make it ambiguous).
fn join_clean(folder: &Path, path: &str) -> PathBuf {
    folder.join(path).components().collect()
}

fn reserved_help(name: &str) -> String {
    match name {
        "PORT" => "with `listen`, PORT is the first TCP listener's port".to_string(),
        "HOME" | "USER" | "LOGNAME" => "with `user`, these describe that user".to_string(),
        "NOTIFY_SOCKET" => "use `ready: notify` to get a notify socket".to_string(),
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

fn valid_fd_name(name: &str) -> bool {
    (1..=255).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

fn parse_positive_duration(
    text: &raw::DurationText,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<Duration> {
    match humantime::parse_duration(text.0.trim()) {
        Ok(duration) if duration.is_zero() => {
            reporter
                .error(
                    path,
                    format!("duration `{}` must be greater than zero", text.0),
                )
                .help("use a positive duration such as 100ms or 5s");
            None
        }
        Ok(duration) => Some(duration),
        Err(error) => {
            let message = if text.0.trim_start().starts_with('-') {
                format!("duration `{}` cannot be negative", text.0)
            } else if matches!(error, humantime::DurationError::UnknownUnit { .. }) {
                format!("invalid duration `{}`: {error}", text.0)
            } else {
                format!("`{}` is not a duration", text.0)
            };
            reporter
                .error(path, message)
                .help("write a number with a unit, e.g. 250ms, 5s, 1m30s");
            None
        }
    }
}

/// `SIGTERM`, `TERM`, `sigterm`: the names users write.
pub fn parse_signal(name: &str) -> Option<Signal> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse().ok()
}

/// Parse a `listen` address: `host:port`, `[v6]:port`, `:port`, `unix:/path`.
fn parse_listen_address(text: &str, folder: &Path) -> Result<ListenAddress, (String, String)> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err((
                "`unix:` needs a socket path".into(),
                "write e.g. unix:/run/app.sock".into(),
            ));
        }
        let absolute = join_clean(folder, path);
        if absolute.as_os_str().len() > MAX_UNIX_PATH {
            return Err((
                format!(
                    "unix socket path `{}` is {} bytes; the limit is {MAX_UNIX_PATH}",
                    absolute.display(),
                    absolute.as_os_str().len()
                ),
                "use a shorter path, e.g. under /run".into(),
            ));
        }
        return Ok(ListenAddress::Unix(absolute));
    }
    parse_host_port(text).map(ListenAddress::Tcp).map_err(|message| {
        (
            format!("invalid listen address `{text}`: {message}"),
            "write IP:PORT (`0.0.0.0:5000`, `127.0.0.1:8080`, `[::]:443`), `:PORT` for all IPv4 interfaces, or `unix:/path`".into(),
        )
    })
}

/// `IP:PORT`, `[v6]:PORT`, `:PORT` (all IPv4 interfaces), `localhost:PORT`.
/// Host names other than `localhost` are not resolved: an address is bound once
/// at start and must not depend on DNS.
pub fn parse_host_port(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("missing `:PORT`".into());
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number (0 to 65535)"))?;
    let ip: IpAddr = match host {
        "" => Ipv4Addr::UNSPECIFIED.into(),
        "localhost" => Ipv4Addr::LOCALHOST.into(),
        _ => {
            let bare = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            let ip: IpAddr = bare.parse().map_err(|_| {
                format!("`{host}` is not an IP address (host names are not resolved)")
            })?;
            if ip.is_ipv6() && !host.starts_with('[') {
                return Err("write IPv6 addresses in brackets: [::1]:PORT".into());
            }
            ip
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// `http://HOST:PORT/path` → the address to connect to and the request path.
pub fn parse_http_url(text: &str) -> Result<(SocketAddr, String), String> {
    let rest = text
        .strip_prefix("http://")
        .ok_or_else(|| "only http:// URLs can be probed".to_string())?;
    let (authority, path) = match rest.find('/') {
        Some(index) => (&rest[..index], &rest[index..]),
        None => (rest, "/"),
    };
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_string()
    };
    let address = parse_host_port(&with_port)?;
    if address.port() == 0 {
        return Err("port 0 cannot be probed".into());
    }
    Ok((address, path.to_string()))
}

/// Why `program` could not be run from `cwd` with this `PATH`, if it could not.
fn find_program(
    program: &str,
    cwd: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Option<String> {
    use nix::unistd::{AccessFlags, access};
    let check = |candidate: &Path| -> Result<(), String> {
        if !candidate.is_file() {
            return Err(format!("`{}` does not exist", candidate.display()));
        }
        access(candidate, AccessFlags::X_OK)
            .map_err(|_| format!("`{}` is not executable", candidate.display()))
    };
    if program.contains('/') {
        let candidate: PathBuf = match cwd {
            Some(cwd) => cwd.join(program).components().collect(),
            None => PathBuf::from(program),
        };
        return check(&candidate).err();
    }
    let found = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file());
    match found {
        Some(candidate) => check(&candidate).err(),
        None => Some(format!("program `{program}` was not found on PATH")),
    }
}

/// Report addresses that two listeners (of any apps) would both bind.
fn check_listen_clashes(
    file: &EcosystemFile,
    listeners: &[(&str, Vec<ListenSpec>)],
    reporter: &mut Reporter,
) {
    let mut seen: Vec<(&str, &ListenSpec)> = Vec::new();
    for (app, listens) in listeners {
        for (index, listen) in listens.iter().enumerate() {
            if let Some((other_app, other)) = seen
                .iter()
                .find(|(_, s)| s.address.overlaps(&listen.address))
            {
                let path = listen_entry_path(file, app, index);
                let what = if other.address == listen.address {
                    "is also"
                } else {
                    "overlaps"
                };
                let message = if other_app == app {
                    format!(
                        "`{}` {what} `{}` in this app's listen",
                        listen.address, other.address
                    )
                } else {
                    format!(
                        "`{}` {what} `{}` of app `{other_app}`",
                        listen.address, other.address
                    )
                };
                reporter
                    .error(&path, message)
                    .help("every address can be bound once; let one app own it (all its instances share it)");
            }
            seen.push((app, listen));
        }
    }
}

fn listen_entry_path(file: &EcosystemFile, app: &str, index: usize) -> Vec<PathSeg> {
    let own = file.apps.get(app).and_then(|a| a.listen.as_ref());
    let (base, listen) = match own {
        Some(listen) => (vec![key("apps"), key(app), key("listen")], Some(listen)),
        None => (
            vec![key("defaults"), key("listen")],
            file.defaults.as_ref().and_then(|d| d.listen.as_ref()),
        ),
    };
    let mut path = base;
    if let Some(raw::Listen::Many(_)) = listen {
        path.push(PathSeg::Index(index));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            parse_host_port("0.0.0.0:5000").unwrap(),
            "0.0.0.0:5000".parse().unwrap()
        );
        assert_eq!(
            parse_host_port(":80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(
            parse_host_port("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert_eq!(
            parse_host_port("localhost:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert!(parse_host_port("example.com:80").is_err());
        assert!(parse_host_port("1.2.3.4").is_err());
        assert!(parse_host_port("1.2.3.4:70000").is_err());
        assert!(parse_host_port("::1:80").is_err());
    }

    #[test]
    fn http_urls() {
        let (address, path) = parse_http_url("http://127.0.0.1:8080/health?x=1").unwrap();
        assert_eq!(address, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(path, "/health?x=1");
        assert_eq!(
            parse_http_url("http://[::1]").unwrap().0,
            "[::1]:80".parse().unwrap()
        );
        assert!(parse_http_url("https://127.0.0.1/").is_err());
        assert!(parse_http_url("http://127.0.0.1:0/").is_err());
    }

    #[test]
    fn signal_names() {
        assert_eq!(parse_signal("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("term"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("SIGQUIT"), Some(Signal::SIGQUIT));
        assert_eq!(parse_signal("SIGTREM"), None);
    }

    #[test]
    fn env_and_fd_names() {
        assert!(valid_env_name("A_1"));
        assert!(valid_env_name("_x"));
        assert!(!valid_env_name("1A"));
        assert!(!valid_env_name("A-B"));
        assert!(!valid_env_name(""));
        assert!(valid_fd_name("http"));
        assert!(!valid_fd_name("a:b"));
        assert!(!valid_fd_name(""));
    }
}
