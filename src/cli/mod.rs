//! The command line: argument parsing, `check`, `schema`, completions and
//! the man page; [`run`] (in `run.rs`) sets up the process (lock, limits,
//! subreaper, undertaker, output) and hands over to the
//! [`Supervisor`](crate::supervisor::Supervisor); [`graph`] draws
//! `check --graph`.

mod export;
pub(crate) mod graph;
pub mod import;
pub mod init;
pub mod install;
pub mod output;
mod run;

pub use export::{ExportTarget, export};
pub use graph::GraphFormat;
pub use run::run;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use config::{self, Host, diagnostic};
use model::spec::{Desired, When};

/// Exit codes shared by every command (DESIGN.md §2).
pub(crate) mod exit {
    pub(crate) const OK: u8 = 0;
    /// Invalid file (YAML syntax included), an operation refused, or an
    /// output that could not be written (stdout included).
    pub(crate) const INVALID: u8 = 1;
    /// Usage error or file unreadable.
    pub(crate) const USAGE: u8 = 2;
    /// No supervisor is running for this file.
    pub(crate) const NOT_RUNNING: u8 = 3;
    /// A rollout halted, or a wait timed out.
    pub(crate) const HALTED: u8 = 4;
}

#[derive(Debug, Parser)]
#[command(
    name = "supervise",
    version,
    about = "A declarative process supervisor: keeps running processes equal to an ecosystem file."
)]
pub struct Cli {
    /// The ecosystem file (default: ./ecosystem.yaml, then ./ecosystem.yml).
    #[arg(short = 'f', long = "file", global = true, value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// Format of the supervisor's output: `human`, or `json` (one event per line).
    #[arg(long, global = true, value_enum, default_value_t = LogStyle::Human)]
    pub(crate) log_format: LogStyle,

    /// More output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    /// Less output: warnings and errors only.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,

    /// The control socket (default: in the runtime directory, named after the file).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Track each instance in a cgroup of its own when a writable cgroup v2
    /// hierarchy is there (`auto`), or by the environment only (`off`).
    #[arg(long, global = true, value_enum, default_value_t = CgroupMode::Auto)]
    pub(crate) cgroups: CgroupMode,

    #[command(subcommand)]
    pub command: Option<Verb>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CgroupMode {
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogStyle {
    Human,
    Json,
}

/// The verb of the command line (`check`, `status`, `reload` …); without
/// one, supervise runs the file. (What a client asks the control socket is
/// `model::protocol::Command`.)
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Run the supervisor in the foreground (the default command).
    Run,
    /// Check an ecosystem file and report every problem in it.
    Check {
        /// Output format of the diagnostics.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Print what changing from the `--against` file to this one would do:
        /// which apps scale, which roll, which restart nothing.
        #[arg(long, visible_alias = "plan", requires = "against")]
        diff: bool,
        /// The old version of the file, for `--diff`.
        #[arg(long, value_name = "OLD.yaml", requires = "diff")]
        against: Option<PathBuf>,
        /// Print the dependency graph of a valid file instead of the summary:
        /// `mermaid` (the default) or Graphviz `dot`. Warnings go to stderr.
        #[arg(
            long,
            value_enum,
            value_name = "FORMAT",
            num_args = 0..=1,
            default_missing_value = "mermaid",
            conflicts_with_all = ["diff", "format"]
        )]
        graph: Option<GraphFormat>,
    },
    /// Print the JSON Schema of the ecosystem file.
    Schema,
    /// Show every app and instance of the running supervisor.
    #[command(visible_alias = "ls")]
    Status {
        /// One line per instance even for apps with many.
        #[arg(long)]
        all: bool,
        /// The status as JSON (stable; see the manual, docs/src/commands.md).
        #[arg(long)]
        json: bool,
    },
    /// Replace an app's instances one by one without downtime (`all`: every app);
    /// waits and shows progress. Exits 4 if the rollout halts.
    Reload {
        /// The app, or `all`.
        app: String,
    },
    /// Stop then start an app or one instance (APP or APP.N), all at once; resets
    /// a failed instance. Use `reload` for zero downtime.
    Restart {
        /// APP or APP.N
        target: String,
    },
    /// Stop an app or one instance and keep it stopped until `start`, a restart
    /// of the supervisor, or a change of that app in the file.
    Stop {
        /// APP or APP.N
        target: String,
    },
    /// Start what `stop` held.
    Start {
        /// APP or APP.N
        target: String,
    },
    /// Replace the running supervisor's binary without touching a worker
    /// (SIGUSR2 does the same with the default binary).
    Upgrade {
        /// The new binary (default: the path the supervisor was started from).
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
    /// Start a run of a scheduled app now (its `overlap` applies while one goes).
    Trigger {
        /// The scheduled app.
        app: String,
    },
    /// Set an app's instance count *in the file* (N, +N or -N) and wait until
    /// the running count matches.
    Scale {
        /// The app.
        app: String,
        /// N, +N or -N.
        #[arg(allow_hyphen_values = true)]
        count: String,
        /// How long to wait for the running count before giving up (exit 4).
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Show the last lines each instance printed (APP or APP.N to narrow).
    Logs {
        /// APP or APP.N
        target: Option<String>,
        /// How many lines per instance.
        #[arg(short = 'n', long, default_value_t = 100)]
        lines: usize,
        /// Keep printing new lines until interrupted (`-f` after `logs`, as
        /// with `tail -f`; give the file as `--file` then).
        #[arg(long)]
        follow: bool,
        /// Only lines printed since then: a duration back (`10m`, `1h30m`)
        /// or an RFC 3339 time (`2026-12-01T09:00:00Z`).
        #[arg(long, value_name = "WHEN", value_parser = parse_since)]
        since: Option<std::time::SystemTime>,
    },
    /// A live dashboard: every instance with its CPU, memory and restarts,
    /// sortable and filterable, the selection's logs, and keys to reload,
    /// restart, stop or start it (each confirmed). Needs a terminal.
    Top,
    /// Translate the file for another engine: Kubernetes objects, or systemd
    /// units. What does not translate is warned about with its file:line.
    Export {
        #[command(subcommand)]
        target: ExportTarget,
    },
    /// Turn a pm2 ecosystem file (`.js`, `.cjs`, `.json`, `.yaml`), a
    /// supervisord INI file or a Procfile into an ecosystem file. What does not
    /// carry over exactly becomes `# import:` comments and warnings.
    Import {
        /// The file to import.
        source: PathBuf,
        /// Write here instead of to stdout (refuses to replace a file).
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The format, when the file's name does not say it.
        #[arg(long, value_enum, value_name = "FORMAT")]
        from: Option<ImportFormat>,
        /// pm2: the environment to use, `env_NAME` over `env` (as `pm2 start --env NAME`).
        #[arg(long, value_name = "NAME")]
        env: Option<String>,
        /// Replace the output file if it exists: a regular file only, at
        /// once (a new file renamed over it, with its mode).
        #[arg(long)]
        force: bool,
    },
    /// Write a first, commented ecosystem.yaml (or -f FILE) for COMMAND, and
    /// the schema beside it; refuses to replace a file.
    Init {
        /// The app's name (default: after the program it runs).
        #[arg(long)]
        name: Option<String>,
        /// The program and its arguments, after `--` (default: a placeholder).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Write and enable a systemd unit that runs `supervise -f FILE` at boot
    /// (`Type=notify`, reload by SIGHUP); prints the systemctl commands it runs.
    Install {
        /// A user unit (`systemctl --user`), in ~/.config/systemd/user.
        #[arg(long)]
        user: bool,
        /// Only print the unit.
        #[arg(long)]
        print: bool,
        /// The unit is `supervise-NAME.service` (default: the file's folder).
        #[arg(long)]
        name: Option<String>,
        /// Write the unit here instead of systemd's folder (for packaging).
        #[arg(long, value_name = "DIR")]
        unit_dir: Option<PathBuf>,
        /// Replace a unit of that name that runs another file.
        #[arg(long)]
        force: bool,
    },
    /// Stop, disable and remove what `install` wrote.
    Uninstall {
        /// The user unit.
        #[arg(long)]
        user: bool,
        /// The unit's NAME, if `install` was given one.
        #[arg(long)]
        name: Option<String>,
        /// Where `install --unit-dir` wrote it.
        #[arg(long, value_name = "DIR")]
        unit_dir: Option<PathBuf>,
    },
    /// Print a shell completion script.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff).
    Man,
}

/// The formats `import` reads (`--from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFormat {
    /// pm2's ecosystem file: `.js`/`.cjs` (evaluated with node), `.json`, `.yaml`.
    Pm2,
    /// supervisord's INI file (`[program:x]` sections).
    Supervisord,
    /// A Procfile (foreman, overmind, Heroku): `name: command` lines.
    Procfile,
}

impl From<ImportFormat> for ::import::Format {
    fn from(format: ImportFormat) -> ::import::Format {
        match format {
            ImportFormat::Pm2 => ::import::Format::Pm2,
            ImportFormat::Supervisord => ::import::Format::Supervisord,
            ImportFormat::Procfile => ::import::Format::Procfile,
        }
    }
}

/// `--since`: a duration back from now, or an RFC 3339 time.
fn parse_since(text: &str) -> Result<std::time::SystemTime, String> {
    if let Ok(back) = humantime::parse_duration(text) {
        return std::time::SystemTime::now()
            .checked_sub(back)
            .ok_or_else(|| format!("`{text}` reaches back before 1970"));
    }
    humantime::parse_rfc3339_weak(text).map_err(|_| {
        format!(
            "`{text}` is neither a duration (`10m`) nor an RFC 3339 time (`2026-12-01T09:00:00Z`)"
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

/// The command line with `logs … -f` read as `--follow`: after `logs`, `-f`
/// means follow (as `tail -f` and the issue tracker's spec have it); everywhere
/// else it names the ecosystem file.
pub fn follow_flag_after_logs(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut after_logs = false;
    args.into_iter()
        .map(|arg| {
            if after_logs && arg == "-f" {
                return "--follow".into();
            }
            if arg == "logs" {
                after_logs = true;
            }
            arg
        })
        .collect()
}

/// The file to use: `-f`, else `./ecosystem.yaml`, else `./ecosystem.yml`.
pub(crate) fn ecosystem_path(file: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(file) = file {
        return Ok(file.to_path_buf());
    }
    for candidate in ["ecosystem.yaml", "ecosystem.yml"] {
        if Path::new(candidate).exists() {
            return Ok(PathBuf::from(candidate));
        }
    }
    let here = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| ".".into());
    Err(format!(
        "no ecosystem.yaml or ecosystem.yml in {here}; pass the file with -f FILE"
    ))
}

/// Write to stdout (see [`output`]).
fn out(text: &str) -> Result<(), output::Unwritten> {
    output::write(text.as_bytes())
}

/// The exit code of a command that wrote its product to stdout.
fn written(result: Result<u8, output::Unwritten>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(unwritten) => unwritten.report(),
    }
}

fn err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `supervise check`, or with `graph` `supervise check --graph`.
pub fn check(file: Option<&Path>, format: Format, graph: Option<GraphFormat>) -> ExitCode {
    written(check_written(file, format, graph))
}

fn check_written(
    file: Option<&Path>,
    format: Format,
    graph: Option<GraphFormat>,
) -> Result<u8, output::Unwritten> {
    let path = match ecosystem_path(file) {
        Ok(path) => path,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return Ok(exit::USAGE);
        }
    };
    let shown = path.display().to_string();
    let checked = match config::check_file(&path, &Host::detect()) {
        Ok(checked) => checked,
        Err(unreadable) => {
            match format {
                Format::Human => err(&format!("error: {unreadable}\n")),
                Format::Json => out(&format!(
                    "{}\n",
                    serde_json::json!({"file": shown, "valid": false, "error": unreadable.to_string(), "diagnostics": []})
                ))?,
            }
            return Ok(exit::USAGE);
        }
    };
    match (format, graph, &checked.desired) {
        (_, Some(graph), Some(desired)) => {
            // stdout holds the graph alone, ready to be piped into a renderer.
            err(&diagnostic::render(
                &shown,
                &checked.text,
                &checked.diagnostics,
            ));
            out(&graph::render(desired, graph))?;
        }
        (Format::Human, _, _) => {
            let verdict = match &checked.desired {
                Some(desired) => summary(&shown, desired, &checked.diagnostics),
                None => format!(
                    "{shown}: invalid ({})\n",
                    diagnostic::summary_line(&checked.diagnostics)
                ),
            };
            out(&format!(
                "{}{verdict}",
                diagnostic::render(&shown, &checked.text, &checked.diagnostics)
            ))?;
        }
        (Format::Json, _, _) => {
            let report = serde_json::json!({
                "file": shown,
                "valid": checked.is_valid(),
                "diagnostics": diagnostic::to_json(&shown, &checked.diagnostics),
            });
            out(&format!("{report:#}\n"))?;
        }
    }
    Ok(if checked.is_valid() {
        exit::OK
    } else {
        exit::INVALID
    })
}

/// `supervise check --diff --against OLD.yaml`: the plan the supervisor would
/// carry out (the same function a live reload logs).
pub fn check_diff(file: Option<&Path>, against: &Path) -> ExitCode {
    written(check_diff_written(file, against))
}

fn check_diff_written(file: Option<&Path>, against: &Path) -> Result<u8, output::Unwritten> {
    let path = match ecosystem_path(file) {
        Ok(path) => path,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return Ok(exit::USAGE);
        }
    };
    let host = Host::detect();
    let mut versions = Vec::new();
    for candidate in [against, path.as_path()] {
        let shown = candidate.display().to_string();
        match config::check_file(candidate, &host) {
            Err(unreadable) => {
                err(&format!("error: {unreadable}\n"));
                return Ok(exit::USAGE);
            }
            Ok(checked) => {
                out(&diagnostic::render(
                    &shown,
                    &checked.text,
                    &checked.diagnostics,
                ))?;
                match checked.desired {
                    Some(desired) => versions.push(desired),
                    None => {
                        out(&format!(
                            "{shown}: invalid ({})\n",
                            diagnostic::summary_line(&checked.diagnostics)
                        ))?;
                        return Ok(exit::INVALID);
                    }
                }
            }
        }
    }
    let mut plan = format!("plan from {} to {}:\n", against.display(), path.display());
    for change in model::plan::diff(&versions[0], &versions[1]) {
        plan.push_str(&format!("  {change}\n"));
    }
    out(&plan)?;
    Ok(exit::OK)
}

/// The success summary: apps, instances each, sockets, what `max` became,
/// and where `/metrics` is served.
pub(crate) fn summary(
    shown: &str,
    desired: &Desired,
    diagnostics: &[diagnostic::Diagnostic],
) -> String {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let instances: u32 = desired.apps.iter().map(|a| a.instances).sum();
    let sockets: usize = desired.apps.iter().map(|a| a.process.listen.len()).sum();
    let mut text = format!(
        "{shown}: ok, {}, {}, {}",
        plural(desired.apps.len(), "app"),
        plural(instances as usize, "instance"),
        plural(sockets, "socket"),
    );
    if !diagnostics.is_empty() {
        text.push_str(&format!(" ({})", diagnostic::summary_line(diagnostics)));
    }
    text.push('\n');
    let width = desired.apps.iter().map(|a| a.name.len()).max().unwrap_or(0);
    for app in &desired.apps {
        let count = match &app.autoscale {
            Some(range) => format!("{}..{} instances (autoscaled)", range.min, range.max),
            None => plural(app.instances as usize, "instance"),
        };
        let mut line = format!("  {:width$}  {count}", app.name);
        if let Some(range) = app.autoscale.as_ref().filter(|r| r.max_from_cpus) {
            line.push_str(&format!(" (max = {} CPUs)", range.max));
        } else if app.instances_from_max {
            line.push_str(&format!(" (max = {} CPUs)", app.instances));
        }
        for listen in &app.process.listen {
            line.push_str(&format!("  listen {}", listen.address));
            if listen.reuseport {
                line.push_str(" (reuseport)");
            }
        }
        if let Some(schedule) = &app.schedule {
            line.push_str(&format!("  schedule {}", when_text(&schedule.when)));
            if let When::Cron { timezone, .. } = &schedule.when {
                line.push_str(&format!(" ({timezone})"));
            }
        }
        if !app.depends_on.is_empty() {
            let after: Vec<String> = app
                .depends_on
                .iter()
                .map(|d| format!("{} ({})", d.app, d.condition.name()))
                .collect();
            line.push_str(&format!("  after {}", after.join(", ")));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    if let Some(address) = desired.metrics {
        text.push_str(&format!("  /metrics on {address}\n"));
    }
    text
}

/// A schedule in words: `every 10m`, or the cron expression.
pub(crate) fn when_text(when: &When) -> String {
    match when {
        When::Every(period) => format!("every {}", humantime::format_duration(*period)),
        When::Cron { cron, .. } => cron.as_str().to_string(),
    }
}

/// `supervise completions SHELL`.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "supervise", &mut script);
    written(output::write(&script).map(|()| exit::OK))
}

/// `supervise man`.
pub fn man() -> ExitCode {
    use clap::CommandFactory;
    let mut page = Vec::new();
    if clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .is_err()
    {
        return ExitCode::from(exit::USAGE);
    }
    written(output::write(&page).map(|()| exit::OK))
}

/// `supervise schema`.
pub fn schema() -> ExitCode {
    let schema = config::json_schema();
    written(
        out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&schema).unwrap_or_default()
        ))
        .map(|()| exit::OK),
    )
}
