//! `supervise import`: another supervisor's file turned into an ecosystem
//! file, so moving to supervise costs a command, not an afternoon.
//!
//! Each format has a pure translator from its parsed file to a [`Draft`]:
//! [`pm2`] (an `ecosystem.config.js`, `.json` or `.yaml`), [`supervisord`]
//! (the `[program:x]` sections of an INI file) and [`procfile`]. A draft
//! holds the apps as ecosystem-file keys and, next to each, [`Note`]s for
//! what could not be carried over exactly; [`render`] writes it as a
//! commented YAML file, each note a `# import:` line above its app. The
//! shell around them ([`load`]) reads the file, evaluates a JavaScript one
//! with `node`, and says which format a file is.

pub mod emit;
pub mod load;
#[cfg(test)]
mod outcome;
pub mod pm2;
pub mod procfile;
pub mod supervisord;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub use load::{ImportError, read_source};

/// The formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// pm2's ecosystem file: `.js`/`.cjs` (evaluated with node), `.json`, `.yaml`.
    Pm2,
    /// supervisord's INI file (`[program:x]` sections).
    Supervisord,
    /// A Procfile (foreman, overmind, Heroku): `name: command` lines.
    Procfile,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Pm2 => "pm2",
            Format::Supervisord => "supervisord",
            Format::Procfile => "Procfile",
        }
    }

    /// The format a file's name says, if it says one.
    pub(crate) fn from_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?;
        if name == "Procfile" || name.starts_with("Procfile.") || name.ends_with(".procfile") {
            return Some(Format::Procfile);
        }
        // pm2's own list of config files (its `knonwConfigFileExtensions`):
        // any other .js is a script to it.
        if [".config.js", ".config.cjs", ".config.mjs"]
            .iter()
            .any(|e| name.ends_with(e))
        {
            return Some(Format::Pm2);
        }
        match path.extension()?.to_str()? {
            "json" | "yaml" | "yml" => Some(Format::Pm2),
            "ini" | "conf" => Some(Format::Supervisord),
            _ => None,
        }
    }
}

/// How much a note matters to the one who reads the imported file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// Behaviour that did not carry over, or carried over changed.
    Warning,
    /// Something to know, nothing lost.
    Note,
}

/// One thing the import could not carry over exactly, with the line of the
/// source it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub(crate) severity: Severity,
    pub(crate) line: Option<usize>,
    pub(crate) text: String,
}

impl Note {
    pub(crate) fn warning(line: Option<usize>, text: impl Into<String>) -> Note {
        Note {
            severity: Severity::Warning,
            line,
            text: text.into(),
        }
    }

    pub(crate) fn info(line: Option<usize>, text: impl Into<String>) -> Note {
        Note {
            severity: Severity::Note,
            line,
            text: text.into(),
        }
    }
}

/// One app of the imported file.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftApp {
    pub(crate) name: String,
    /// Where the app is declared in the source.
    pub(crate) line: Option<usize>,
    /// Ecosystem-file keys, in the order they are written.
    pub(crate) fields: Map<String, Value>,
    pub(crate) notes: Vec<Note>,
    /// The source's keys for this app that were carried over (some with a
    /// note on how), in the source's order.
    pub(crate) mapped: Vec<String>,
    /// The source's keys for this app that were not, each with a warning or
    /// a note saying why.
    pub(crate) left_out: Vec<String>,
}

impl DraftApp {
    pub(crate) fn new(name: String, line: Option<usize>) -> DraftApp {
        DraftApp {
            name,
            line,
            fields: Map::new(),
            notes: Vec::new(),
            mapped: Vec::new(),
            left_out: Vec::new(),
        }
    }

    pub(crate) fn set(&mut self, key: &str, value: Value) {
        self.fields.insert(key.to_string(), value);
    }

    pub(crate) fn warn(&mut self, line: Option<usize>, text: impl Into<String>) {
        self.notes.push(Note::warning(line, text));
    }

    pub(crate) fn note(&mut self, line: Option<usize>, text: impl Into<String>) {
        self.notes.push(Note::info(line, text));
    }

    /// `key` of the source is not carried over: a warning says why.
    pub(crate) fn leave_out(&mut self, key: &str, line: Option<usize>, text: impl Into<String>) {
        self.warn(line, text);
        self.mark_left_out(key);
    }

    /// `key` of the source is not carried over, and nothing a process sees
    /// changes for it (pm2's own tooling, say): a note says why.
    pub(crate) fn leave_out_with_note(
        &mut self,
        key: &str,
        line: Option<usize>,
        text: impl Into<String>,
    ) {
        self.note(line, text);
        self.mark_left_out(key);
    }

    /// Record `key` of the source as not carried over (a note about it is
    /// already there).
    pub(crate) fn mark_left_out(&mut self, key: &str) {
        if !self.left_out.iter().any(|k| k == key) {
            self.left_out.push(key.to_string());
        }
    }

    /// Record `key` of the source as carried over, unless it was left out.
    pub(crate) fn record_mapped(&mut self, key: &str) {
        if !self.left_out.iter().any(|k| k == key) && !self.mapped.iter().any(|k| k == key) {
            self.mapped.push(key.to_string());
        }
    }
}

/// One variable of an app's environment as the source sets it, with the
/// line it is set on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvVar {
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) line: Option<usize>,
}

/// Set `var` in `vars`, in the place of one of the same name if there is one.
pub(crate) fn set_env(vars: &mut Vec<EnvVar>, var: EnvVar) {
    match vars.iter_mut().find(|v| v.name == var.name) {
        Some(existing) => *existing = var,
        None => vars.push(var),
    }
}

/// `vars` as the app's `env`, without what `check` refuses in one: a name
/// that is not a variable name supervise can set (`my-var`), a name
/// supervise sets itself (`NOTIFY_SOCKET`; `HOME`, `USER`, `LOGNAME` when
/// the app has a `user`), and a value with a placeholder supervise cannot
/// read (`{instance-x}`). Each is left out with a warning naming it.
pub(crate) fn checked_env(
    app: &mut DraftApp,
    vars: Vec<EnvVar>,
    has_user: bool,
) -> Map<String, Value> {
    use config::validate::{reserved_env_name, valid_env_name};
    let mut env = Map::new();
    for var in vars {
        let name = &var.name;
        let problem = if !valid_env_name(name) {
            Some(
                "supervise sets only names of letters, digits and `_`, not starting with a digit"
                    .to_string(),
            )
        } else if has_user && matches!(name.as_str(), "HOME" | "USER" | "LOGNAME") {
            Some("with `user`, supervise sets HOME, USER and LOGNAME to that user's (from the password database) itself".to_string())
        } else if reserved_env_name(name, false, has_user, false) {
            Some("supervise sets it for each instance itself".to_string())
        } else {
            model::spec::Template::parse(&var.value).err().map(|error| {
                format!(
                    "its value {:?} holds a placeholder supervise cannot read ({}), and supervise has no escape for `{{instance`",
                    var.value, error.0
                )
            })
        };
        match problem {
            Some(why) => app.warn(
                var.line,
                format!("environment variable `{name}`: {why}; left out"),
            ),
            None => {
                env.insert(var.name, Value::String(var.value));
            }
        }
    }
    env
}

/// What an import produced, before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub format: Format,
    /// The source file as the user named it.
    pub source: String,
    pub apps: Vec<DraftApp>,
    /// Notes about the file as a whole (its other sections, say).
    pub notes: Vec<Note>,
}

/// Where the paths of the source are resolved and where the output goes:
/// relative paths in the source are read against `source_dir`, and written
/// relative to `output_dir` (absolute when they lie outside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    pub source_dir: PathBuf,
    pub output_dir: PathBuf,
}

impl Places {
    /// `path` of the source, as the output should write it, or `None` when it
    /// is the output's own folder (the default `cwd`).
    pub(crate) fn cwd(&self, path: &str) -> Option<String> {
        let absolute = normalize(&self.source_dir.join(path));
        self.relative(&absolute)
    }

    fn relative(&self, absolute: &Path) -> Option<String> {
        match absolute.strip_prefix(&self.output_dir) {
            Ok(rest) if rest.as_os_str().is_empty() => None,
            Ok(rest) => Some(format!("./{}", rest.display())),
            Err(_) => Some(absolute.display().to_string()),
        }
    }

    /// A file path of the source as the output should write it.
    pub(crate) fn file(&self, base: &Path, path: &str) -> String {
        let absolute = normalize(&base.join(path));
        self.relative(&absolute).unwrap_or_else(|| ".".to_string())
    }
}

/// `path` without `.` and `..` components (no file system access: the
/// folders need not exist on this machine).
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `name` made into an app name (lowercase letters, digits, `_`, `-`,
/// starting with a letter or digit, not `all`), unique among `taken`.
pub fn app_name(name: &str, taken: &[String]) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out = out.trim_matches(['-', '_']).to_string();
    if out.is_empty() {
        out = "app".to_string();
    }
    if out == "all" {
        out = "all-app".to_string();
    }
    let mut candidate = out.clone();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{out}-{n}");
        n += 1;
    }
    candidate
}

/// Take out of `draft` what no process can be given: a string with a NUL
/// byte (C strings end there, and `check` refuses it). An app whose
/// command holds one is left out; another key that holds one (a `cwd`,
/// a variable of `env`) is, with a warning for each.
pub fn without_nul(draft: &mut Draft) {
    let mut kept = Vec::new();
    for mut app in std::mem::take(&mut draft.apps) {
        if app.fields.get("command").is_some_and(holds_nul) {
            draft.notes.push(Note::warning(
                app.line,
                format!(
                    "{}: its command holds a NUL byte, which no program can be given: left out",
                    app.name
                ),
            ));
            continue;
        }
        let mut warnings = Vec::new();
        app.fields.retain(|key, value| {
            if let Value::Object(entries) = value {
                entries.retain(|name, value| {
                    let bad = name.contains('\0') || holds_nul(value);
                    if bad {
                        warnings.push(format!(
                            "`{key}.{}` holds a NUL byte: left out",
                            escaped(name)
                        ));
                    }
                    !bad
                });
                return true;
            }
            let bad = holds_nul(value);
            if bad {
                warnings.push(format!("`{key}` holds a NUL byte: left out"));
            }
            !bad
        });
        let line = app.line;
        for warning in warnings {
            app.warn(line, warning);
        }
        kept.push(app);
    }
    draft.apps = kept;
}

/// Whether a string in `value` holds a NUL byte.
fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// The draft as a commented ecosystem file.
pub fn render(draft: &Draft) -> String {
    let mut out = String::new();
    // A file name may hold anything, a line break included.
    let source: String = draft
        .source
        .chars()
        .map(|c| if printable(c) { c } else { '?' })
        .collect();
    out.push_str(&format!(
        "# Imported from {source} ({}) by `supervise import`.\n",
        draft.format.name()
    ));
    out.push_str(
        "# `# import:` lines say what did not carry over exactly: read them, then delete them.\n",
    );
    for note in &draft.notes {
        push_note(&mut out, 0, note);
    }
    out.push('\n');
    if draft.apps.is_empty() {
        out.push_str("apps: {}\n");
        return out;
    }
    out.push_str("apps:\n");
    for (i, app) in draft.apps.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for note in &app.notes {
            push_note(&mut out, 2, note);
        }
        out.push_str(&format!("  {}:\n", emit::key(&app.name)));
        for (key, value) in &app.fields {
            emit::entry(&mut out, 4, key, value);
        }
    }
    out
}

fn push_note(out: &mut String, indent: usize, note: &Note) {
    let pad = " ".repeat(indent);
    let line = note
        .line
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default();
    let mut first = true;
    let text: String = note.text.replace('\r', "");
    for text in text.lines() {
        // A note may quote the source's line, which may hold any byte: a
        // comment holds what YAML can read (a NUL or an ESC in it makes
        // the whole file unreadable), so the rest is written as escapes.
        let text = escaped(text);
        if first {
            out.push_str(&format!("{pad}# import{line}: {text}\n"));
            first = false;
        } else {
            out.push_str(&format!("{pad}#   {text}\n"));
        }
    }
}

/// Whether YAML reads `c` in a comment: a printable character (YAML 1.2
/// §5.1, c-printable) but the C0 and C1 controls and DEL (a tab included:
/// shown as `\t`, it reads better), and not U+2028/U+2029, which YAML 1.1
/// reads as line breaks, nor a byte order mark.
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

/// `text` with every character YAML would not read in a comment written as
/// an escape (`\0`, `\t`, `\x1b`, `\u{2028}`): for the `# import:` lines,
/// and for what `import` prints, where an ESC from the source would reach
/// the terminal.
pub(crate) fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if printable(c) => out.push(c),
            '\0' => out.push_str("\\0"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x80 => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push_str(&format!("\\u{{{:04x}}}", u32::from(c))),
        }
    }
    out
}

/// Every note, file-level first, as `FILE:LINE: warning: APP: TEXT` lines
/// for stderr.
pub fn diagnostics(draft: &Draft) -> Vec<String> {
    let at = |line: Option<usize>| match line {
        Some(l) => format!("{}:{l}", draft.source),
        None => draft.source.clone(),
    };
    let label = |s: Severity| match s {
        Severity::Warning => "warning",
        Severity::Note => "note",
    };
    let mut lines: Vec<String> = draft
        .notes
        .iter()
        .map(|n| {
            format!(
                "{}: {}: {}",
                at(n.line),
                label(n.severity),
                escaped(first_line(&n.text))
            )
        })
        .collect();
    for app in &draft.apps {
        for n in &app.notes {
            lines.push(format!(
                "{}: {}: {}: {}",
                at(n.line),
                label(n.severity),
                app.name,
                escaped(first_line(&n.text))
            ));
        }
    }
    lines
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// What was imported: a line for the whole, then one per app naming the
/// source's keys that were carried over and those left out (each of those
/// has a warning or a note above).
pub fn summary(draft: &Draft) -> String {
    let warnings = draft
        .apps
        .iter()
        .flat_map(|a| &a.notes)
        .chain(&draft.notes)
        .filter(|n| n.severity == Severity::Warning)
        .count();
    let mut out = format!(
        "imported {} app{} from {} ({}), {} warning{}{}\n",
        draft.apps.len(),
        if draft.apps.len() == 1 { "" } else { "s" },
        draft.source,
        draft.format.name(),
        warnings,
        if warnings == 1 { "" } else { "s" },
        if draft.apps.is_empty() { "" } else { ":" },
    );
    for app in &draft.apps {
        let mut parts = Vec::new();
        if !app.mapped.is_empty() {
            parts.push(format!("mapped {}", escaped(&app.mapped.join(", "))));
        }
        if !app.left_out.is_empty() {
            parts.push(format!("left out {}", escaped(&app.left_out.join(", "))));
        }
        if parts.is_empty() {
            parts.push("no keys".to_string());
        }
        out.push_str(&format!("  {}: {}\n", app.name, parts.join("; ")));
    }
    out
}

/// The most milliseconds written as `Nms`: humantime reads `ms` in
/// nanoseconds, a `u64`, so beyond this `check` would refuse the number.
const MAX_WRITTEN_AS_MS: u64 = u64::MAX / 1_000_000;

/// A duration in milliseconds as a humantime string (`1600ms`, `3s`, `1m`,
/// and `N s M ms` past [`MAX_WRITTEN_AS_MS`]).
pub(crate) fn millis(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if !ms.is_multiple_of(1000) {
        return if ms > MAX_WRITTEN_AS_MS {
            format!("{}s {}ms", ms / 1000, ms % 1000)
        } else {
            format!("{ms}ms")
        };
    }
    let s = ms / 1000;
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NUL, an ESC, a BEL or a line separator in the source: the
    /// imported file is valid YAML and passes `check`.
    #[test]
    fn control_bytes_of_the_source_are_escaped_and_nul_is_left_out() {
        let mut draft = procfile::translate(
            "web: sleep 100\nbad\0line\n\u{1b}[2Jcls: x\napi: echo \u{7}bell \u{2028}\nnul: sleep\x001\n",
            "Procfile",
        );
        without_nul(&mut draft);
        let names: Vec<&str> = draft.apps.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["web", "api"]);
        let text = render(&draft);
        assert!(
            text.lines()
                .filter(|l| l.trim_start().starts_with('#'))
                .all(|l| l.chars().all(printable)),
            "{text:?}"
        );
        assert!(text.contains("bad\\0line"), "{text}");
        assert!(text.contains("\\x1b[2Jcls"), "{text}");
        let host = config::Host::detect();
        let checked = config::check_text(&text, Path::new("/srv/ecosystem.yaml"), &host);
        assert!(checked.is_valid(), "{text}\n{:?}", checked.diagnostics);
        for line in diagnostics(&draft) {
            assert!(line.chars().all(printable), "{line:?}");
        }
    }

    #[test]
    fn app_names_are_made_valid_and_unique() {
        assert_eq!(app_name("API Server", &[]), "api-server");
        assert_eq!(app_name("web.1", &[]), "web-1");
        assert_eq!(app_name("_worker_", &[]), "worker");
        assert_eq!(app_name("!!!", &[]), "app");
        assert_eq!(app_name("all", &[]), "all-app");
        assert_eq!(app_name("web", &["web".into(), "web-2".into()]), "web-3");
    }

    #[test]
    fn durations_are_written_in_their_largest_whole_unit() {
        assert_eq!(millis(1600), "1600ms");
        assert_eq!(millis(3000), "3s");
        assert_eq!(millis(120_000), "2m");
        assert_eq!(millis(7_200_000), "2h");
        assert_eq!(millis(0), "0s");
        let longest = millis(u64::MAX);
        assert_eq!(
            humantime::parse_duration(&longest).map(|d| d.as_millis()),
            Ok(u128::from(u64::MAX)),
            "{longest}"
        );
    }

    #[test]
    fn paths_are_written_relative_to_the_output_when_inside_it() {
        let places = Places {
            source_dir: "/srv/app/config".into(),
            output_dir: "/srv/app".into(),
        };
        assert_eq!(places.cwd(".."), None);
        assert_eq!(places.cwd("."), Some("./config".to_string()));
        assert_eq!(places.cwd("/opt/x"), Some("/opt/x".to_string()));
        assert_eq!(places.cwd("../../etc"), Some("/srv/etc".to_string()));
    }

    #[test]
    fn the_format_follows_the_file_name() {
        assert_eq!(
            Format::from_path(Path::new("ecosystem.config.js")),
            Some(Format::Pm2)
        );
        assert_eq!(
            Format::from_path(Path::new("x/app.json")),
            Some(Format::Pm2)
        );
        assert_eq!(
            Format::from_path(Path::new("supervisord.conf")),
            Some(Format::Supervisord)
        );
        assert_eq!(
            Format::from_path(Path::new("Procfile")),
            Some(Format::Procfile)
        );
        assert_eq!(
            Format::from_path(Path::new("Procfile.dev")),
            Some(Format::Procfile)
        );
        assert_eq!(Format::from_path(Path::new("README")), None);
        assert_eq!(
            Format::from_path(Path::new("server.js")),
            None,
            "pm2 runs it as a script"
        );
        assert_eq!(
            Format::from_path(Path::new("pm2.config.mjs")),
            Some(Format::Pm2)
        );
    }
}
