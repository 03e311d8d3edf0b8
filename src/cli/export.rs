//! `supervise export kubernetes|systemd`: the shell around
//! [`export`]. It reads the file (as `check` does), asks for the
//! translation, and prints it: the output on stdout (or into `--dir`),
//! diagnostics and notes on stderr, so `supervise export kubernetes |
//! kubectl apply -f -` works and still shows what was lost.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use super::{ecosystem_path, err, exit, out};
use config::{Host, diagnostic};
use export::{Exported, Refused, Source, kubernetes, systemd};

#[derive(Debug, Subcommand)]
pub enum ExportTarget {
    /// Kubernetes objects as YAML on stdout: a Deployment per app, a Service
    /// per listen address, a ConfigMap per env_file, a CronJob per schedule.
    Kubernetes {
        /// The image every container runs (default: the app's name).
        #[arg(long, value_name = "IMAGE")]
        image: Option<String>,
        /// The namespace of every object.
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
        /// Export this app only.
        #[arg(long, value_name = "APP")]
        app: Option<String>,
        /// The replica count of an app with `instances: max` (default: this
        /// machine's CPU count).
        #[arg(long, value_name = "N")]
        replicas_for_max: Option<u32>,
        /// Exit 1 when anything in the file could not be exported.
        #[arg(long)]
        strict: bool,
    },
    /// systemd units: APP@.service (one instance per slot), a socket unit per
    /// listen address, APP.timer for a schedule, and APP.target wanting
    /// every instance.
    Systemd {
        /// Units for a user's systemd (`systemctl --user`).
        #[arg(long)]
        user: bool,
        /// Write the unit files into this folder (default: print them, each
        /// after a `# NAME` line).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The systemd version of the machine the units are for: 254 and
        /// later have RestartSteps= for the exponential backoff.
        #[arg(long, value_name = "N", default_value_t = systemd::DEFAULT_SYSTEMD_VERSION)]
        systemd_version: u32,
        /// Export this app only.
        #[arg(long, value_name = "APP")]
        app: Option<String>,
        /// Exit 1 when anything in the file could not be exported.
        #[arg(long)]
        strict: bool,
    },
}

/// `supervise export …`.
pub fn export(file: Option<&Path>, target: &ExportTarget) -> ExitCode {
    let path = match ecosystem_path(file) {
        Ok(path) => path,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    if let Some(refused) = refuse_kubernetes_names(target) {
        return refused;
    }
    let source = match Source::load(&path, &Host::detect()) {
        Ok(source) => source,
        Err(Refused::Unreadable(message)) => {
            err(&message);
            return ExitCode::from(exit::USAGE);
        }
        Err(Refused::Invalid(report)) => {
            err(&report);
            return ExitCode::from(exit::INVALID);
        }
    };
    err(&diagnostic::render(
        &source.shown,
        &source.text,
        &source.check_warnings,
    ));
    let (exported, strict) = export_as(target, &source);
    let exported = match exported {
        Ok(exported) => exported,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return ExitCode::from(exit::USAGE);
        }
    };
    err(&diagnostic::render(
        &source.shown,
        &source.text,
        &exported.diagnostics,
    ));
    if exported.has_errors() {
        err(&format!(
            "{}: not exported ({})\n",
            source.shown,
            diagnostic::summary_line(&exported.diagnostics)
        ));
        return ExitCode::from(exit::INVALID);
    }
    for note in &exported.notes {
        err(&format!("note: {note}\n"));
    }
    let written = match write_out(target, &source, &exported) {
        Ok(written) => written,
        Err(unwritten) => return unwritten,
    };
    let (written, stale) = match written {
        Ok(written) => written,
        Err(message) => {
            err(&format!("error: {message}\n"));
            return ExitCode::from(exit::INVALID);
        }
    };
    let warnings = exported.warning_count() + stale;
    err(&format!(
        "{}: exported {written}, {}\n",
        source.shown,
        match warnings {
            0 => "nothing lost".to_string(),
            1 => "1 warning".to_string(),
            n => format!("{n} warnings"),
        }
    ));
    if strict && warnings > 0 {
        return ExitCode::from(exit::INVALID);
    }
    ExitCode::from(exit::OK)
}

/// Write each unit file into `dir` through a temporary file renamed over
/// it: a link in its place (`systemctl link`, or a mask to /dev/null) is
/// replaced, never written through. Then warn about other unit files of the
/// exported apps that this export did not write (left by an earlier one).
/// The summary, and how many such warnings were printed.
fn write_units(dir: &Path, exported: &Exported, apps: &[&str]) -> Result<(String, usize), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (index, (name, text)) in exported.files.iter().enumerate() {
        let path = dir.join(name);
        // Short: a unit's name may already be as long as a file name can be.
        let temporary = dir.join(format!(".supervise-{}-{index}.tmp", std::process::id()));
        let written = write_new(&temporary, text).and_then(|()| std::fs::rename(&temporary, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(format!("cannot write {}: {e}", path.display()));
        }
    }
    let mut stale: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| {
            let unit = [".service", ".socket", ".timer", ".target"]
                .iter()
                .any(|suffix| name.ends_with(suffix));
            // An app name has no `.` or `@`: `APP.` and `APP@` are its own.
            let of_an_app = apps.iter().any(|app| {
                name.strip_prefix(app)
                    .is_some_and(|rest| rest.starts_with(['.', '@']))
            });
            unit && of_an_app && !exported.files.iter().any(|(written, _)| written == name)
        })
        .collect();
    stale.sort();
    for name in &stale {
        err(&format!(
            "warning: {} was not written by this export: a unit of an earlier one? Remove it (stop and disable it first) if so\n",
            dir.join(name).display()
        ));
    }
    Ok((
        format!(
            "{} into {}",
            exported.count_text("unit file"),
            dir.display()
        ),
        stale.len(),
    ))
}

/// Create `path`, which must not exist (so no link there is followed), with `text`.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// A `--namespace` or `--image` Kubernetes would refuse: said, with the
/// exit code.
fn refuse_kubernetes_names(target: &ExportTarget) -> Option<ExitCode> {
    if let ExportTarget::Kubernetes {
        namespace, image, ..
    } = target
    {
        if let Some(namespace) = namespace
            && !kubernetes::is_dns1123_label(namespace)
        {
            err(&format!(
                "error: `{namespace}` is not a Kubernetes namespace name (at most 63 lowercase letters, digits and `-`, starting and ending with a letter or digit)\n"
            ));
            return Some(ExitCode::from(exit::USAGE));
        }
        if let Some(image) = image
            && (image.is_empty() || image.trim() != image)
        {
            err(&format!(
                "error: --image {image:?}: an image name must not be empty or begin or end with whitespace\n"
            ));
            return Some(ExitCode::from(exit::USAGE));
        }
    }
    None
}

/// The file exported as `target` asks, and whether a warning fails it
/// (`--strict`).
fn export_as(target: &ExportTarget, source: &Source) -> (Result<Exported, String>, bool) {
    match target {
        ExportTarget::Kubernetes {
            image,
            namespace,
            app,
            replicas_for_max,
            strict,
        } => (
            kubernetes::export(
                source,
                &kubernetes::Options {
                    image: image.clone(),
                    namespace: namespace.clone(),
                    app: app.clone(),
                    replicas_for_max: *replicas_for_max,
                },
            ),
            *strict,
        ),
        ExportTarget::Systemd {
            user,
            systemd_version,
            app,
            strict,
            ..
        } => (
            systemd::export(
                source,
                &systemd::Options {
                    user: *user,
                    systemd_version: *systemd_version,
                    app: app.clone(),
                },
            ),
            *strict,
        ),
    }
}

/// Print the export, or write its units to `--dir`: what was written, and
/// how many stale units were found (or the exit code of a failed print).
fn write_out(
    target: &ExportTarget,
    source: &Source,
    exported: &Exported,
) -> Result<Result<(String, usize), String>, ExitCode> {
    Ok(match target {
        ExportTarget::Kubernetes { .. } => {
            if let Err(unwritten) = out(&kubernetes::render(exported)) {
                return Err(unwritten.report());
            }
            Ok((exported.count_text("object"), 0))
        }
        ExportTarget::Systemd { dir: None, .. } => {
            if let Err(unwritten) = out(&systemd::render(exported)) {
                return Err(unwritten.report());
            }
            Ok((exported.count_text("unit file"), 0))
        }
        ExportTarget::Systemd {
            dir: Some(dir),
            app,
            ..
        } => {
            // The apps were found by the export, which would have refused an unknown --app.
            let apps: Vec<&str> = source
                .apps(app.as_deref())
                .unwrap_or_default()
                .iter()
                .map(|a| a.name.as_str())
                .collect();
            write_units(dir, exported, &apps)
        }
    })
}
