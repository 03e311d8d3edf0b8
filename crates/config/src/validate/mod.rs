//! Semantic validation: from well-formed [`raw`] types to the resolved
//! [`spec`](model::spec) model, reporting every problem on the way.
//!
//! Each check reports at the place the value is *written*: a value inherited
//! from `defaults` is reported at `defaults.…`, once, not once per app. The
//! facts that depend on the machine (CPU count, whether we are root, the
//! `PATH`, users and groups) come in through [`Host`], so tests can pin them
//! and a running supervisor looks them up off its main thread.
//!
//! One concern per file: [`process`] (command, cwd, env, user), [`listen`]
//! (sockets and their clashes), [`ready`] (readiness and probes), [`policy`]
//! (instances, restarts, backoff, signals, rollout limits), [`health`]
//! (health checks, memory limits, the watchdog), [`schedule`] (apps that run
//! at times), [`depends`] (apps that wait for others, judged across apps once
//! every app is resolved), [`autoscale`] (the range an app's count follows
//! its load in), [`log`] (the files output is written to),
//! [`metrics`] (the top-level `metrics` address).

mod autoscale;
mod depends;
mod health;
mod listen;
mod log;
mod metrics;
mod policy;
mod process;
mod ready;
mod schedule;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use model::Signal;

use super::diagnostic::{PathSeg, Reporter};
use super::raw::{self, AppFields, EcosystemFile};
pub use crate::host::Host;
pub use health::size_in_bytes;
pub use listen::parse_host_port;
use model::spec::{AppSpec, Desired, ListenSpec, ProcessDefinition, defaults};
pub use policy::parse_signal;
pub use process::valid_env_name;
pub use ready::parse_http_url;
pub use schedule::cron_problem;

/// Fields the structure check found broken and set aside, as `(scope, field)`
/// where scope is an app's name or `defaults`. Validation of the rest must not
/// report them as missing, nor judge other fields against the defaults that
/// stand in for them.
#[derive(Debug, Default)]
pub(crate) struct BrokenFields(HashSet<(String, String)>);

impl BrokenFields {
    pub(crate) fn insert(&mut self, scope: String, field: String) {
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
    "SUPERVISE_RUN",
    "NODE_APP_INSTANCE",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
    "SUPERVISE_INJECT_FDS",
    "SUPERVISE_INJECT_REPORT",
];

/// Whether supervise sets `name` itself in the environment of a worker of
/// an app with `listen` (PORT), `user` (HOME, USER, LOGNAME) or `watchdog`
/// (WATCHDOG_*): `env` may not set it, and an `env_file` value is overridden.
pub fn reserved_env_name(name: &str, has_listen: bool, has_user: bool, has_watchdog: bool) -> bool {
    RESERVED_ALWAYS.contains(&name)
        || (has_listen && name == "PORT")
        || (has_user && matches!(name, "HOME" | "USER" | "LOGNAME"))
        || (has_watchdog && matches!(name, "WATCHDOG_USEC" | "WATCHDOG_PID"))
}

/// The longest `sun_path` (108 bytes, including the terminating NUL).
const MAX_UNIX_PATH: usize = 107;

/// Validate `file` (whose tree is in `reporter`) and resolve it.
/// Returns `None` when an error was reported.
pub(crate) fn resolve(
    file: &EcosystemFile,
    source: &Path,
    host: &Host,
    broken: &BrokenFields,
    reporter: &mut Reporter,
) -> Option<Desired> {
    // Relative paths are taken from the folder the file is in *now*: through
    // a swapped directory symlink (`current -> releases/2`), the new one.
    let parent = source.parent().unwrap_or(Path::new("/"));
    let folder = parent
        .canonicalize()
        .unwrap_or_else(|_| parent.to_path_buf());
    let empty = AppFields::default();
    let defaults = file.defaults.as_ref().unwrap_or(&empty);
    let mut resolved = Vec::new();
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
        resolved.push((name.as_str(), spec));
    }
    listen::check_listen_clashes(file, &listeners, reporter);
    let metrics = metrics::resolve(file, &listeners, reporter);
    schedule::check_defaults(file, reporter);
    autoscale::check_defaults(file, reporter);
    depends::check(file, &resolved, broken, reporter);
    let source_in_folder = source
        .file_name()
        .map_or_else(|| folder.clone(), |name| folder.join(name));
    log::check_shared_files(file, &source_in_folder, &resolved, reporter);
    let memory_check = match &file.memory_check {
        Some(text) => {
            let path = [key("memory_check")];
            parse_positive_duration(text, &path, reporter).and_then(|d| {
                let bounds = (defaults::MIN_MEMORY_CHECK, Duration::MAX);
                within(d, bounds, "memory_check", &path, reporter)
            })
        }
        None => Some(defaults::MEMORY_CHECK),
    };
    if reporter.has_errors() {
        return None;
    }
    Some(Desired {
        source: source.to_path_buf(),
        apps: resolved.into_iter().filter_map(|(_, spec)| spec).collect(),
        memory_check: memory_check?,
        metrics: metrics?,
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

impl AppContext<'_> {
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
        let autoscale = self.resolve_autoscale(&listen, reporter);
        // An autoscaled app starts from its `min` (the core keeps the count).
        let instances = match &autoscale {
            Some(range) => Some((range.min, false)),
            None if self.fields.autoscale.is_some() => None,
            None => self.resolve_instances(reporter),
        };
        self.check_scheduled_instances(reporter);
        let identity = self.resolve_identity(reporter);
        if identity.is_some()
            && listen.iter().any(|l| l.inject)
            && let Some((_, path)) = self.pick("user", |f| f.user.as_ref())
        {
            reporter
                .error(&path, "`inject` cannot be used with `user` yet")
                .help("the preload library lives in supervise's private runtime directory, which another user cannot read: run the app as supervise's user, or have it take its socket from fd 3");
        }
        let watchdog = self.resolve_watchdog(reporter);
        let env = self.resolve_env(
            !listen.is_empty(),
            identity.is_some(),
            watchdog.is_some(),
            reporter,
        );
        let command =
            self.resolve_command(shell, !listen.is_empty(), cwd.as_deref(), &env, reporter);
        let ready_timeout = self.duration("ready_timeout", |f| f.ready_timeout.as_ref(), reporter);
        // Probes have a target for every slot the app may have.
        let slots = match &autoscale {
            Some(range) => Some(range.max),
            None => instances.map(|(n, _)| n),
        };
        let ready = self.resolve_ready(slots, &listen, ready_timeout, reporter);
        let backoff = self.resolve_backoff(reporter);
        let max_restarts = self.resolve_max_restarts(reporter);
        let stop_signal = self.resolve_signal(
            "stop_signal",
            |f| f.stop_signal.as_ref(),
            Signal::SIGTERM,
            reporter,
        );
        let kill_timeout = self.duration("kill_timeout", |f| f.kill_timeout.as_ref(), reporter);
        let reload = self.resolve_reload(reporter);
        let health = self.resolve_health(slots, &listen, &env, cwd.as_deref(), reporter);
        let max_memory = self.resolve_max_memory(reporter);
        let watchdog_signal = self.resolve_watchdog_signal(reporter);
        let restart = self.resolve_restart(reporter);
        let on_dependency_restart = self.resolve_on_dependency_restart(reporter);
        let schedule = self.resolve_schedule(reporter);
        let log = self.resolve_log(reporter);

        if reporter.error_count() > errors_before {
            return None;
        }
        let (instances, instances_from_max) = instances?;
        let (argv, program) = command?;
        Some(AppSpec {
            name: self.name.to_string(),
            process: ProcessDefinition {
                argv,
                program,
                shell,
                cwd: cwd?,
                env,
                listen,
                identity,
                watchdog,
            },
            instances,
            instances_from_max,
            ready: ready?,
            ready_timeout: ready_timeout.unwrap_or(defaults::READY_TIMEOUT),
            restart: restart?,
            backoff: backoff?,
            max_restarts,
            stop_signal: stop_signal?,
            kill_timeout: kill_timeout.unwrap_or(defaults::KILL_TIMEOUT),
            reload: reload?,
            health,
            max_memory,
            watchdog_signal: watchdog_signal?,
            depends_on: self.resolve_depends_on(),
            on_dependency_restart,
            schedule,
            autoscale,
            log,
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

/// The words of a command as templates; an error at `path` (naming the
/// command as `what`) when one holds a NUL byte or a bad placeholder.
fn command_templates<S: AsRef<str>>(
    words: &[S],
    what: &str,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<Vec<model::spec::Template>> {
    if words.iter().any(|w| w.as_ref().contains('\0')) {
        reporter.error(path, format!("{what} contains a NUL byte"));
        return None;
    }
    let mut argv = Vec::with_capacity(words.len());
    for word in words {
        match model::spec::Template::parse(word.as_ref()) {
            Ok(template) => argv.push(template),
            Err(error) => {
                reporter.error(path, error.0);
                return None;
            }
        }
    }
    Some(argv)
}

/// `duration` if it is within `min..=max`, else an error at `path`.
fn within(
    duration: Duration,
    (min, max): (Duration, Duration),
    field: &str,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<Duration> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    if duration < min {
        reporter
            .error(path, format!("{field} must be at least {}", show(min)))
            .help(format!("write {} or more", show(min)));
        return None;
    }
    if duration > max {
        reporter
            .error(path, format!("{field} must be at most {}", show(max)))
            .help(format!("write {} or less", show(max)));
        return None;
    }
    Some(duration)
}

fn parse_positive_duration(
    text: &raw::DurationText,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<Duration> {
    let duration = parse_non_negative_duration(text, path, reporter)?;
    if duration.is_zero() {
        reporter
            .error(
                path,
                format!("duration `{}` must be greater than zero", text.0),
            )
            .help("use a positive duration such as 100ms or 5s");
        return None;
    }
    Some(duration)
}

/// A duration that may be zero (`0s`, `0ms`), as `grace` may.
fn parse_non_negative_duration(
    text: &raw::DurationText,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<Duration> {
    match humantime::parse_duration(text.0.trim()) {
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
