//! `supervise import FILE`: the shell around [`import`]. It reads the
//! file, translates it, writes the result (to `-o FILE`, never over an
//! existing one without `--force`, which replaces a regular file at once
//! and nothing else; or to stdout), says on stderr what did not carry over
//! and what was imported, and checks the result as `check` would.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{err, exit, out};
use config::{self, Host, diagnostic};
use import::pm2::{self, FileKind, Files};
use import::{self, Draft, Format, ImportError, Places, load::Source};

/// How many bytes of a script pm2 looks at to call it binary.
const BINARY_SNIFF_BYTES: u64 = 512;

/// The machine's files, as pm2 sees them.
struct MachineFiles;

impl Files for MachineFiles {
    fn kind(&self, path: &Path) -> FileKind {
        use std::io::Read;
        let Ok(file) = std::fs::File::open(path) else {
            return FileKind::Missing;
        };
        if !path.is_file() {
            return FileKind::Missing;
        }
        let mut head = Vec::new();
        let _ = file.take(BINARY_SNIFF_BYTES).read_to_end(&mut head);
        if head.contains(&0) {
            FileKind::Binary
        } else {
            FileKind::Text
        }
    }

    fn which(&self, name: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        if name.contains('/') {
            return None;
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| {
                candidate
                    .metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }
}

/// What `supervise import` was asked.
pub struct ImportArgs<'a> {
    pub file: &'a Path,
    pub output: Option<&'a Path>,
    pub from: Option<Format>,
    pub env: Option<&'a str>,
    pub force: bool,
}

pub fn run(args: &ImportArgs) -> ExitCode {
    match import(args) {
        Ok(code) => code,
        Err(error) => {
            err(&format!("error: {error}\n"));
            if let Some(help) = error.help() {
                err(&format!("  help: {help}\n"));
            }
            ExitCode::from(match error {
                ImportError::Unreadable { .. } | ImportError::UnknownFormat { .. } => exit::USAGE,
                _ => exit::INVALID,
            })
        }
    }
}

fn absolute_dir(path: &Path) -> PathBuf {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    config::absolute_path(parent)
        .map(|p| import::normalize(&p))
        .unwrap_or_else(|_| parent.to_path_buf())
}

/// The same file, whichever way it is named.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn import(args: &ImportArgs) -> Result<ExitCode, ImportError> {
    let shown = args.file.display().to_string();
    // `-o -` is stdout, as for most tools.
    let output = args.output.filter(|o| o.as_os_str() != "-");
    if let Some(output) = output {
        if same_file(output, args.file) {
            err(&format!(
                "error: {} is the file to import: write the result to another file\n",
                output.display()
            ));
            return Ok(ExitCode::from(exit::USAGE));
        }
        if let Some(refusal) = refused_output(output, args.force) {
            err(&format!("error: {refusal}\n"));
            return Ok(ExitCode::from(exit::USAGE));
        }
    }
    let (format, source) = import::read_source(args.file, args.from)?;
    let places = Places {
        source_dir: absolute_dir(args.file),
        output_dir: match output {
            Some(output) => absolute_dir(output),
            None => absolute_dir(Path::new("./ecosystem.yaml")),
        },
    };
    let invalid = |message: String| ImportError::Invalid {
        path: shown.clone(),
        message,
    };
    let draft = match (format, source) {
        (Format::Pm2, Source::Tree { tree, .. }) => {
            let file = pm2::apps_from_tree(&tree).map_err(invalid)?;
            pm2_draft(&shown, &file, args.env, &places)
        }
        (Format::Pm2, Source::Evaluated { value, text }) => {
            let file = pm2::apps_from_evaluated(&value, &text).map_err(invalid)?;
            pm2_draft(&shown, &file, args.env, &places)
        }
        (Format::Supervisord, Source::Text(text)) => {
            let sections = import::supervisord::parse_ini(&text).map_err(|(line, message)| {
                ImportError::Syntax {
                    path: shown.clone(),
                    line: line as u64,
                    column: 1,
                    message,
                }
            })?;
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default();
            import::supervisord::translate(&sections, &shown, &places, &host, &|name| {
                std::env::var(name).ok()
            })
        }
        (Format::Procfile, Source::Text(text)) => import::procfile::translate(&text, &shown),
        (format, _) => {
            return Err(invalid(format!(
                "cannot read a {} file this way",
                format.name()
            )));
        }
    };
    let mut draft = draft;
    import::without_nul(&mut draft);
    for line in import::diagnostics(&draft) {
        err(&format!("{line}\n"));
    }
    if draft.apps.is_empty() {
        return Err(invalid(
            "nothing to import: no app could be read (see the warnings above)".to_string(),
        ));
    }
    let text = import::render(&draft);
    let target = match output {
        Some(output) => {
            write_output(output, &text, args.force).map_err(|reason| ImportError::Unwritable {
                path: output.display().to_string(),
                reason,
            })?;
            Some(output)
        }
        None => {
            if let Err(unwritten) = out(&text) {
                return Ok(unwritten.report());
            }
            None
        }
    };
    err(&import::summary(&draft));
    Ok(check_result(&draft, &text, target, &places))
}

fn pm2_draft(shown: &str, file: &pm2::Pm2File, env: Option<&str>, places: &Places) -> Draft {
    let (apps, notes) = pm2::translate(file, env, places, &MachineFiles);
    Draft {
        format: Format::Pm2,
        source: shown.to_string(),
        apps,
        notes,
    }
}

/// Why `output` cannot be written, if it cannot: something there that is
/// not a regular file (a FIFO would hang the write, a device or a folder is
/// no ecosystem file), or any file without `force`.
fn refused_output(output: &Path, force: bool) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = output.display();
    let exists = || format!("{shown} exists; import writes a new file (--force replaces it)");
    // A dangling symlink is there too (and writing would follow it).
    let there = output.symlink_metadata().ok()?;
    let Ok(found) = std::fs::metadata(output) else {
        return Some(if force {
            format!(
                "{shown} is a symbolic link to nothing: remove it, or write the result elsewhere"
            )
        } else {
            exists()
        });
    };
    let kind = found.file_type();
    if kind.is_file() {
        return (!force).then(exists);
    }
    let what = if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    let through = if there.is_symlink() {
        " (through a symbolic link)"
    } else {
        ""
    };
    Some(format!(
        "{shown} is {what}{through}, not a regular file: import writes only a regular file (without -o, the result goes to stdout)"
    ))
}

/// Write `text` as a new file at `path`, or with `force` over the file there,
/// at once (see [`crate::replace`]): a supervisor watching it never reads it
/// empty.
fn write_output(path: &Path, text: &str, force: bool) -> Result<(), String> {
    if force {
        return crate::replace::replace(path, text.as_bytes(), "import").map_err(|e| e.to_string());
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| e.to_string())?;
    file.write_all(text.as_bytes()).map_err(|e| e.to_string())
}

/// Check the result as `supervise check` would (as the file `target`, or
/// one in the output folder), and say the result, warnings included.
fn check_result(draft: &Draft, text: &str, target: Option<&Path>, places: &Places) -> ExitCode {
    let absolute = match target {
        Some(target) => config::absolute_path(target).unwrap_or_else(|_| target.to_path_buf()),
        None => places.output_dir.join("ecosystem.yaml"),
    };
    let checked = config::check_text(text, &absolute, &Host::detect());
    let shown = target.map_or_else(
        || "the imported file".to_string(),
        |t| t.display().to_string(),
    );
    err(&diagnostic::render(
        &shown,
        &checked.text,
        &checked.diagnostics,
    ));
    if checked.is_valid() {
        err(&format!("{shown}: `supervise check` passes\n"));
        ExitCode::from(exit::OK)
    } else {
        err(&format!(
            "{shown}: `supervise check` does not pass ({}); the `# import:` lines and the warnings above say what to look at in {}\n",
            diagnostic::summary_line(&checked.diagnostics),
            draft.source
        ));
        ExitCode::from(exit::INVALID)
    }
}
