//! The command line: argument parsing and the commands that need no running
//! supervisor (`check`, `schema`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{self, Host, diagnostic};
use crate::spec::Desired;

/// Exit codes shared by every command (DESIGN.md §2).
pub mod exit {
    pub const OK: u8 = 0;
    /// Invalid file (YAML syntax included) or an operation refused.
    pub const INVALID: u8 = 1;
    /// Usage error or file unreadable.
    pub const USAGE: u8 = 2;
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

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the supervisor in the foreground (the default command).
    Run,
    /// Check an ecosystem file and report every problem in it.
    Check {
        /// Output format of the diagnostics.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Print the JSON Schema of the ecosystem file.
    Schema,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

/// The file to use: `-f`, else `./ecosystem.yaml`, else `./ecosystem.yml`.
pub fn ecosystem_path(file: Option<&Path>) -> Result<PathBuf, String> {
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

/// Write to stdout, ignoring a closed pipe (`supervise check | head`).
fn out(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `supervise check`.
pub fn check(file: Option<&Path>, format: Format) -> ExitCode {
    let path = match ecosystem_path(file) {
        Ok(path) => path,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return ExitCode::from(exit::USAGE);
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
                )),
            }
            return ExitCode::from(exit::USAGE);
        }
    };
    match format {
        Format::Human => {
            out(&diagnostic::render(
                &shown,
                &checked.text,
                &checked.diagnostics,
            ));
            match &checked.desired {
                Some(desired) => out(&summary(&shown, desired, &checked.diagnostics)),
                None => out(&format!(
                    "{shown}: invalid ({})\n",
                    diagnostic::summary_line(&checked.diagnostics)
                )),
            }
        }
        Format::Json => {
            let report = serde_json::json!({
                "file": shown,
                "valid": checked.is_valid(),
                "diagnostics": diagnostic::to_json(&shown, &checked.diagnostics),
            });
            out(&format!("{report:#}\n"));
        }
    }
    ExitCode::from(if checked.is_valid() {
        exit::OK
    } else {
        exit::INVALID
    })
}

/// The success summary: apps, instances each, sockets, and what `max` became.
pub fn summary(shown: &str, desired: &Desired, diagnostics: &[diagnostic::Diagnostic]) -> String {
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
        let mut line = format!(
            "  {:width$}  {}",
            app.name,
            plural(app.instances as usize, "instance")
        );
        if app.instances_from_max {
            line.push_str(&format!(" (max = {} CPUs)", app.instances));
        }
        for listen in &app.process.listen {
            line.push_str(&format!("  listen {}", listen.address));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// `supervise schema`.
pub fn schema() -> ExitCode {
    let schema = config::json_schema();
    out(&format!(
        "{}\n",
        serde_json::to_string_pretty(&schema).unwrap_or_default()
    ));
    ExitCode::from(exit::OK)
}
