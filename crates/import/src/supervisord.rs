//! supervisord's INI file to ours, following supervisor 4 (its
//! `options.py` and `datatypes.py`):
//!
//! - the file is read as Python's `RawConfigParser` reads it (`=` or `:`,
//!   `;`/`#` comments, inline ones after a space, indented continuation
//!   lines, lowercased keys); [`parse_ini`] keeps each key's line.
//! - `%(name)s` expansions: `process_num` becomes `{instance}` (plus
//!   `numprocs_start`), `program_name`, `group_name`, `numprocs` and `here`
//!   are known at import, `ENV_X` and `host_node_name` are read now (and
//!   said so).
//! - supervisord's defaults that differ from ours are written out:
//!   `autorestart` defaults to `unexpected` (our `on-failure`), log sizes
//!   are 1024-based.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{Draft, DraftApp, EnvVar, Format, Note, Places, app_name, checked_env};
use config::validate::{parse_signal, size_in_bytes};
use model::spec::defaults::{MAX_INSTANCES, MAX_LOG_KEEP, READY_TIMEOUT};

/// One `key = value` of a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IniEntry {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniSection {
    pub(crate) name: String,
    pub(crate) line: usize,
    pub(crate) entries: Vec<IniEntry>,
    /// Where the same section header appears again (its keys merged in,
    /// later ones winning, as supervisord's parser does).
    pub(crate) again_at: Vec<usize>,
}

impl IniSection {
    fn get(&self, key: &str) -> Option<&IniEntry> {
        // A later duplicate wins, as with `strict=False`.
        self.entries.iter().rev().find(|e| e.key == key)
    }
}

/// Parse an INI file; a line that is neither a section, an option, a
/// comment nor a continuation is an error with its line. Blank lines inside
/// a continued value are kept when more of it follows, as Python's
/// `configparser` keeps them.
pub fn parse_ini(text: &str) -> Result<Vec<IniSection>, (usize, String)> {
    let mut sections: Vec<IniSection> = Vec::new();
    // The section being filled (an index: a repeated header refills an
    // earlier one).
    let mut current: Option<usize> = None;
    let mut last_indent: Option<usize> = None;
    let mut blanks = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let stripped = raw.trim();
        if stripped.is_empty() {
            blanks += 1;
            continue;
        }
        if stripped.starts_with('#') || stripped.starts_with(';') {
            continue;
        }
        let indent = raw.len() - raw.trim_start().len();
        let value = strip_inline_comment(stripped);
        if let (Some(option_indent), Some(index)) = (last_indent, current)
            && indent > option_indent
            && let Some(entry) = sections[index].entries.last_mut()
        {
            for _ in 0..blanks {
                entry.value.push('\n');
            }
            entry.value.push('\n');
            entry.value.push_str(value);
            blanks = 0;
            continue;
        }
        blanks = 0;
        if stripped.starts_with('[') {
            let Some(end) = stripped.rfind(']') else {
                return Err((line, format!("a section header without `]`: {stripped}")));
            };
            let name = stripped[1..end].to_string();
            current = match sections.iter().position(|s| s.name == name) {
                Some(index) => {
                    sections[index].again_at.push(line);
                    Some(index)
                }
                None => {
                    sections.push(IniSection {
                        name,
                        line,
                        entries: Vec::new(),
                        again_at: Vec::new(),
                    });
                    Some(sections.len() - 1)
                }
            };
            last_indent = None;
            continue;
        }
        let Some(index) = current else {
            return Err((line, "a value before the first [section]".to_string()));
        };
        let Some(at) = value.find(['=', ':']) else {
            return Err((
                line,
                format!(
                    "neither a [section] nor `key = value`: {}",
                    super::escaped(stripped)
                ),
            ));
        };
        sections[index].entries.push(IniEntry {
            key: value[..at].trim().to_ascii_lowercase(),
            value: value[at + 1..].trim().to_string(),
            line,
        });
        last_indent = Some(indent);
    }
    Ok(sections)
}

/// `;` or `#` after whitespace starts a comment (Python 3's
/// `inline_comment_prefixes` as supervisor sets them).
fn strip_inline_comment(text: &str) -> &str {
    let bytes = text.as_bytes();
    for i in 1..bytes.len() {
        if (bytes[i] == b';' || bytes[i] == b'#') && bytes[i - 1].is_ascii_whitespace() {
            return text[..i].trim_end();
        }
    }
    text
}

/// What `%(…)` names expand to, apart from `process_num`.
pub(crate) struct Expansions<'a> {
    pub(crate) program_name: &'a str,
    pub(crate) group_name: &'a str,
    pub(crate) numprocs: i64,
    pub(crate) here: &'a str,
    pub(crate) host_node_name: &'a str,
    /// The environment `supervise import` runs in (supervisord's `ENV_X`).
    pub(crate) environment: &'a dyn Fn(&str) -> Option<String>,
}

/// Expand `%(name)FORMAT` in `text` as Python's `%` does. `process_num`
/// becomes `instance` (a `{instance…}` placeholder). Returns the text and
/// what could not be carried over.
pub(crate) fn expand(text: &str, expansions: &Expansions, instance: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(after) = tail.strip_prefix('%') {
            out.push('%');
            rest = after;
            continue;
        }
        let Some(inner) = tail.strip_prefix('(') else {
            out.push('%');
            rest = tail;
            continue;
        };
        let Some(close) = inner.find(')') else {
            problems.push(format!("`%(` without `)` in {text:?}"));
            out.push('%');
            rest = tail;
            continue;
        };
        let name = &inner[..close];
        let spec_end = inner[close + 1..]
            .find(|c: char| c.is_ascii_alphabetic())
            .map(|i| close + 1 + i);
        let Some(conv_at) = spec_end else {
            problems.push(format!(
                "`%({name})` without a conversion such as `s` or `d`"
            ));
            rest = &inner[close + 1..];
            continue;
        };
        let flags = &inner[close + 1..conv_at];
        let conversion = &inner[conv_at..conv_at + 1];
        rest = &inner[conv_at + 1..];
        let value = match name {
            "process_num" => {
                if !flags.is_empty() {
                    problems.push(format!("`%(process_num){flags}{conversion}`: the instance number is written without padding here"));
                }
                out.push_str(instance);
                continue;
            }
            "program_name" => expansions.program_name.to_string(),
            "group_name" => expansions.group_name.to_string(),
            "numprocs" => expansions.numprocs.to_string(),
            "here" => expansions.here.to_string(),
            "host_node_name" => {
                problems.push(format!(
                    "`%(host_node_name)s`: written as this machine's name, {}",
                    expansions.host_node_name
                ));
                expansions.host_node_name.to_string()
            }
            env if env.starts_with("ENV_") => match (expansions.environment)(&env[4..]) {
                Some(value) => {
                    problems.push(format!("`%({env})s`: written as its value in this shell; supervise passes its own environment on, so you may drop it"));
                    value
                }
                None => {
                    problems.push(format!(
                        "`%({env})s`: {} is not set in this shell; written empty",
                        &env[4..]
                    ));
                    String::new()
                }
            },
            other => {
                problems.push(format!("`%({other})`: supervisord knows no such name"));
                String::new()
            }
        };
        out.push_str(&pad(&value, flags, conversion));
    }
    out.push_str(rest);
    (out, problems)
}

/// Python's `%05d` and the like, for the values known at import.
fn pad(value: &str, flags: &str, conversion: &str) -> String {
    let zero = flags.starts_with('0');
    let width: usize = flags.trim_start_matches(['0', '-']).parse().unwrap_or(0);
    if value.chars().count() >= width {
        return value.to_string();
    }
    let fill = width - value.chars().count();
    if flags.starts_with('-') {
        format!("{value}{}", " ".repeat(fill))
    } else if zero && conversion != "s" {
        format!("{}{value}", "0".repeat(fill))
    } else {
        format!("{}{value}", " ".repeat(fill))
    }
}

/// A marker of word characters that stands for the instance number while
/// `environment` is split (so the split sees one word, as supervisord sees
/// the number).
const INSTANCE_MARK: &str = "SUPERVISEINSTANCEMARK";

/// supervisord's `KEY=val,KEY2="v, w"` (Python's non-POSIX `shlex` with
/// `/.+-():` as word characters; quotes stripped from the value).
pub(crate) fn key_value_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let is_word = |c: char| c.is_alphanumeric() || "_/.+-():".contains(c);
    let chars: Vec<char> = text.chars().collect();
    let mut tokens: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            // shlex's comment character: the rest of the line.
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' {
            let close = (i + 1..chars.len())
                .find(|&j| chars[j] == c)
                .ok_or_else(|| format!("no closing quotation in {text:?}"))?;
            let mut token: String = chars[i..=close].iter().collect();
            i = close + 1;
            // A word straight after the quotes belongs to the same token.
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '"' || chars[i] == '\'') {
                token.push(chars[i]);
                i += 1;
            }
            tokens.push(token);
        } else if is_word(c) {
            let mut token = String::new();
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '"' || chars[i] == '\'') {
                if chars[i] == '"' || chars[i] == '\'' {
                    let q = chars[i];
                    let close = (i + 1..chars.len())
                        .find(|&j| chars[j] == q)
                        .ok_or_else(|| format!("no closing quotation in {text:?}"))?;
                    token.extend(&chars[i..=close]);
                    i = close + 1;
                } else {
                    token.push(chars[i]);
                    i += 1;
                }
            }
            tokens.push(token);
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if i + 2 >= tokens.len() || tokens[i + 1] != "=" {
            return Err(format!("unexpected end of key/value pairs in {text:?}"));
        }
        let value = tokens[i + 2].trim_matches(['\'', '"']).to_string();
        pairs.push((tokens[i].clone(), value));
        i += 4;
    }
    Ok(pairs)
}

/// supervisord's byte sizes (`byte_size`): `KB`, `MB`, `GB` are 1024-based.
fn byte_size(text: &str) -> Option<Value> {
    let upper = text.trim().to_ascii_uppercase();
    for (suffix, unit) in [("KB", "KiB"), ("MB", "MiB"), ("GB", "GiB")] {
        if let Some(number) = upper.strip_suffix(suffix) {
            let n: u64 = number.trim().parse().ok()?;
            return Some(json!(format!("{n}{unit}")));
        }
    }
    upper.parse::<u64>().ok().map(|n| json!(n))
}

fn truthy(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// The longest `max_restarts` window written: a year.
const MAX_WINDOW_SECS: i64 = 365 * 24 * 3600;

/// The longest `startsecs` carried over as `ready: {delay}`: a year (a
/// start that takes longer is a typo, and a delay must fit the clock).
const MAX_STARTSECS: i64 = MAX_WINDOW_SECS;

/// How far above `startsecs` the `ready_timeout` written for a long one is.
/// `check` wants the timeout after the delay (or the start could never
/// succeed), and supervisord has no other limit on a start: the margin is
/// only the time a loaded machine may take to see the delay pass, kept
/// generous because a timeout that came first would fail a start
/// supervisord counts as good.
const READY_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// supervisord's main loop polls with a 1 s timeout (`timeout = 1` in
/// `supervisord.py`) and sends SIGKILL on the first tick past `stopwaitsecs`
/// (`process.py`, `transition`): with `stopwaitsecs = 0` that is within a
/// second of the stop signal, which is what `kill_timeout` (above 0) gets.
const SUPERVISORD_TICK: Duration = Duration::from_secs(1);

/// Sections that configure supervisord itself (its daemon, its control
/// socket and client): nothing of a program.
const SUPERVISORD_OWN: &[&str] = &[
    "supervisord",
    "supervisorctl",
    "unix_http_server",
    "inet_http_server",
];

/// Keys of a program section that `translate_program` reads itself.
const READ: &[&str] = &[
    "command",
    "numprocs",
    "numprocs_start",
    "process_name",
    "directory",
    "autostart",
    "autorestart",
    "exitcodes",
    "startsecs",
    "startretries",
    "stopsignal",
    "stopwaitsecs",
    "stopasgroup",
    "killasgroup",
    "user",
    "environment",
    "redirect_stderr",
    "stdout_logfile",
    "stdout_logfile_maxbytes",
    "stdout_logfile_backups",
    "stderr_logfile",
    "stderr_logfile_maxbytes",
    "stderr_logfile_backups",
    "priority",
];

/// Translate an INI file. `host`: the machine's name and environment, for
/// the expansions that read them.
pub fn translate(
    sections: &[IniSection],
    source: &str,
    places: &Places,
    host_node_name: &str,
    environment: &dyn Fn(&str) -> Option<String>,
) -> Draft {
    let mut draft = Draft {
        format: Format::Supervisord,
        source: source.to_string(),
        apps: Vec::new(),
        notes: Vec::new(),
    };
    let here = places.source_dir.display().to_string();
    // Programs listed in a [group:x] get x as their group name.
    let mut groups: Vec<(String, String)> = Vec::new();
    // [supervisord]'s environment: each variable with its line.
    let mut base_env: Vec<(String, String, usize)> = Vec::new();
    for section in sections {
        if let Some(group) = section.name.strip_prefix("group:") {
            if let Some(programs) = section.get("programs") {
                for program in programs.value.split(',') {
                    groups.push((program.trim().to_string(), group.to_string()));
                }
                draft.notes.push(Note::info(
                    Some(section.line),
                    format!(
                        "[group:{group}] ({}): supervise has no groups; each program is an app",
                        programs.value
                    ),
                ));
            }
        } else if section.name == "supervisord"
            && let Some(env) = section.get("environment")
        {
            match key_value_pairs(&env.value) {
                Ok(pairs) => {
                    base_env = pairs
                        .into_iter()
                        .map(|(name, value)| (name, value, env.line))
                        .collect();
                    draft.notes.push(Note::info(
                        Some(env.line),
                        "[supervisord] environment: written into each app's `env`",
                    ));
                }
                Err(problem) => draft.notes.push(Note::warning(
                    Some(env.line),
                    format!("[supervisord] environment: {problem}; left out"),
                )),
            }
        }
    }
    for section in sections {
        let name = section.name.as_str();
        for again in &section.again_at {
            draft.notes.push(Note::info(Some(*again), format!("[{name}] again (first at line {}): merged into it, later keys winning, as supervisord reads it", section.line)));
        }
        if name.starts_with("program:")
            && section
                .get("command")
                .is_none_or(|c| c.value.trim().is_empty())
        {
            draft.notes.push(Note::warning(
                Some(section.line),
                format!("[{name}] has no `command` (supervisord refuses it): left out"),
            ));
        } else if let Some(program) = name.strip_prefix("program:") {
            let group = groups
                .iter()
                .find(|(p, _)| p == program)
                .map_or(program, |(_, g)| g.as_str());
            let taken: Vec<String> = draft.apps.iter().map(|a| a.name.clone()).collect();
            let expansions = Expansions {
                program_name: program,
                group_name: group,
                numprocs: 1,
                here: &here,
                host_node_name,
                environment,
            };
            draft.apps.push(translate_program(
                section,
                program,
                &expansions,
                &base_env,
                places,
                &taken,
            ));
        } else if name.starts_with("eventlistener:") || name.starts_with("fcgi-program:") {
            draft.notes.push(Note::warning(
                Some(section.line),
                format!(
                    "[{name}]: supervise has no event listeners nor FastCGI programs; not imported"
                ),
            ));
        } else if name == "include" {
            let files = section
                .get("files")
                .map(|e| e.value.clone())
                .unwrap_or_default();
            draft.notes.push(Note::warning(
                Some(section.line),
                format!("[include] files = {files}: the files it names are not followed (their programs are not in the output); import each of them too"),
            ));
        } else if SUPERVISORD_OWN.contains(&name) || name.starts_with("rpcinterface:") {
            let environment = if name == "supervisord" && section.get("environment").is_some() {
                ", apart from its `environment`"
            } else {
                ""
            };
            draft.notes.push(Note::info(
                Some(section.line),
                format!("[{name}] configures supervisord itself, not a program: not imported{environment}"),
            ));
        } else if !name.starts_with("group:") {
            draft.notes.push(Note::warning(
                Some(section.line),
                format!("[{name}]: not a section supervisord knows; left out"),
            ));
        }
    }
    if !sections.iter().any(|s| s.name.starts_with("program:")) {
        draft.notes.push(Note::warning(
            None,
            "no [program:x] section: nothing to run",
        ));
    }
    draft
}

fn translate_program(
    section: &IniSection,
    program: &str,
    base: &Expansions,
    base_env: &[(String, String, usize)],
    places: &Places,
    taken: &[String],
) -> DraftApp {
    let name = app_name(program, taken);
    let mut app = DraftApp::new(name.clone(), Some(section.line));
    if name != program {
        app.note(Some(section.line), format!("named `{name}` (supervisord: `{program}`): app names are lowercase letters, digits, `_` and `-`"));
    }
    let get = |key: &str| section.get(key);
    let number = |app: &mut DraftApp, key: &str, default: i64| match get(key) {
        None => default,
        Some(e) => e.value.trim().parse::<i64>().unwrap_or_else(|_| {
            app.leave_out(
                key,
                Some(e.line),
                format!(
                    "`{key} = {}` is not a number; supervisord's default {default} is used",
                    e.value
                ),
            );
            default
        }),
    };
    let mut numprocs = number(&mut app, "numprocs", 1).max(0);
    if numprocs > i64::from(MAX_INSTANCES) {
        app.warn(
            get("numprocs").map(|e| e.line),
            format!("`numprocs = {numprocs}`: supervise runs at most {MAX_INSTANCES} instances of an app; written as {MAX_INSTANCES}"),
        );
        numprocs = i64::from(MAX_INSTANCES);
    }
    let start = number(&mut app, "numprocs_start", 0);
    let expansions = Expansions { numprocs, ..*base };
    let instance = match start {
        0 => "{instance}".to_string(),
        start if start > 0 => format!("{{instance+{start}}}"),
        start => {
            app.warn(
                get("numprocs_start").map(|e| e.line),
                format!("`numprocs_start = {start}`: supervise numbers instances from 0 up ({{instance+N}}, N >= 0); written from 0"),
            );
            "{instance}".to_string()
        }
    };
    let mut expand_at = |app: &mut DraftApp, entry: &IniEntry, instance: &str| {
        let (text, problems) = expand(&entry.value, &expansions, instance);
        for problem in problems {
            let problem = problem.replace(INSTANCE_MARK, "{instance}");
            app.warn(Some(entry.line), format!("`{}`: {problem}", entry.key));
        }
        text
    };

    if let Some(entry) = get("command") {
        let command = expand_at(&mut app, entry, &instance);
        app.set("command", json!(command));
    }
    if let Some(entry) = get("directory") {
        let dir = expand_at(&mut app, entry, &instance);
        if let Some(cwd) = places.cwd(&dir) {
            app.set("cwd", json!(cwd));
        }
    }

    // The environment: [supervisord]'s, then the program's.
    let mut env: Vec<EnvVar> = base_env
        .iter()
        .map(|(name, value, line)| EnvVar {
            name: name.clone(),
            value: value.clone(),
            line: Some(*line),
        })
        .collect();
    if let Some(entry) = get("environment") {
        let text = expand_at(&mut app, entry, INSTANCE_MARK);
        match key_value_pairs(&text) {
            Ok(pairs) => {
                for (name, value) in pairs {
                    super::set_env(
                        &mut env,
                        EnvVar {
                            name,
                            value: value.replace(INSTANCE_MARK, &instance),
                            line: Some(entry.line),
                        },
                    );
                }
            }
            Err(problem) => app.leave_out(
                "environment",
                Some(entry.line),
                format!(
                    "`environment`: {} (supervisord refuses it too); left out",
                    problem.replace(INSTANCE_MARK, "{instance}")
                ),
            ),
        }
    }
    let env = checked_env(&mut app, env, get("user").is_some());
    if !env.is_empty() {
        app.set("env", Value::Object(env));
    }

    let autostart = get("autostart").is_none_or(|e| truthy(&e.value) != Some(false));
    if !autostart {
        app.note(
            get("autostart").map(|e| e.line),
            "`autostart = false`: declared with 0 instances; set `instances` to start it",
        );
        app.set("instances", json!(0));
    } else if numprocs != 1 {
        app.set("instances", json!(numprocs));
    }
    if let Some(entry) = get("process_name") {
        app.leave_out_with_note(
            "process_name",
            Some(entry.line),
            format!(
                "`process_name = {}`: supervise names instances {name}.0, {name}.1, …",
                entry.value
            ),
        );
    }

    // Restarts: supervisord's default is `unexpected`, our `on-failure`.
    let autorestart =
        get("autorestart").map_or("unexpected".to_string(), |e| e.value.to_ascii_lowercase());
    match truthy(&autorestart) {
        Some(true) => {}
        Some(false) => app.set("restart", json!("never")),
        None => {
            app.set("restart", json!("on-failure"));
            if autorestart != "unexpected" {
                app.warn(get("autorestart").map(|e| e.line), format!("`autorestart = {autorestart}` is not true, false nor unexpected; written as on-failure"));
            }
        }
    }
    if let Some(entry) = get("exitcodes") {
        let codes: Vec<&str> = entry.value.split(',').map(str::trim).collect();
        if codes != ["0"] {
            app.warn(
                Some(entry.line),
                format!(
                    "`exitcodes = {}`: supervise's `on-failure` takes only exit code 0 as expected",
                    entry.value
                ),
            );
        }
    }
    let startsecs = number(&mut app, "startsecs", 1).max(0);
    let startsecs = if startsecs > MAX_STARTSECS {
        app.warn(
            get("startsecs").map(|e| e.line),
            format!("`startsecs = {startsecs}`: more than a year; written as {MAX_STARTSECS}s"),
        );
        MAX_STARTSECS
    } else {
        startsecs
    };
    if let Some(entry) = get("startsecs") {
        if startsecs == 0 {
            app.set("ready", json!("none"));
        } else {
            app.set("ready", json!({"delay": format!("{startsecs}s")}));
        }
        app.note(
            Some(entry.line),
            format!(
                "`startsecs = {}`: an instance is ready once it has run that long",
                entry.value
            ),
        );
        // `startsecs` is below i64::MAX / 2 here: the sum cannot overflow.
        let delay = Duration::from_secs(startsecs.unsigned_abs());
        if delay >= READY_TIMEOUT {
            let timeout = delay + READY_TIMEOUT_MARGIN;
            app.set("ready_timeout", json!(format!("{}s", timeout.as_secs())));
            app.warn(
                Some(entry.line),
                format!(
                    "`startsecs = {startsecs}`: `ready_timeout: {}s` written too, {}s above the delay: supervise fails a start that is not ready within `ready_timeout` ({}s unless set), and supervisord has no such limit",
                    timeout.as_secs(),
                    READY_TIMEOUT_MARGIN.as_secs(),
                    READY_TIMEOUT.as_secs()
                ),
            );
        }
    }
    if let Some(entry) = get("startretries") {
        let retries = number(&mut app, "startretries", 3).clamp(1, i64::from(u32::MAX));
        // supervisord waits 1 s, 2 s, … between tries: the window in which
        // it would have given up (at most a year).
        let within = startsecs
            .saturating_mul(retries.saturating_add(1))
            .saturating_add(retries.saturating_mul(retries.saturating_add(1)) / 2)
            .clamp(1, MAX_WINDOW_SECS);
        app.set(
            "max_restarts",
            json!({"count": retries, "within": format!("{within}s")}),
        );
        app.note(Some(entry.line), format!("`startretries = {}`: supervisord gives up after that many failed starts in a row; supervise after that many restarts within {within}s", entry.value));
    }

    // Stopping.
    if let Some(entry) = get("stopsignal") {
        let signal = entry.value.trim().to_ascii_uppercase();
        // supervisord takes a number too.
        let signal = match signal
            .parse::<i32>()
            .ok()
            .map(nix::sys::signal::Signal::try_from)
        {
            Some(Ok(number)) => number.as_str().to_string(),
            _ => signal,
        };
        match parse_signal(&signal) {
            Some(signal) => app.set("stop_signal", json!(signal.as_str())),
            None => app.leave_out(
                "stopsignal",
                Some(entry.line),
                format!(
                    "`stopsignal = {}` is not a signal (supervisord refuses it too): left out",
                    entry.value
                ),
            ),
        }
    }
    if let Some(entry) = get("stopwaitsecs") {
        let secs = number(&mut app, "stopwaitsecs", 10).max(0);
        if secs == 0 {
            app.set(
                "kill_timeout",
                json!(format!("{}s", SUPERVISORD_TICK.as_secs())),
            );
            app.warn(
                Some(entry.line),
                format!(
                    "`stopwaitsecs = 0`: supervisord sends SIGKILL at the next tick of its loop, within {}s of the stop signal; written as `kill_timeout: {}s` (it is above 0 in supervise)",
                    SUPERVISORD_TICK.as_secs(),
                    SUPERVISORD_TICK.as_secs()
                ),
            );
        } else {
            app.set("kill_timeout", json!(format!("{secs}s")));
        }
    }
    for key in ["stopasgroup", "killasgroup"] {
        if let Some(entry) = get(key) {
            let what = if truthy(&entry.value) == Some(true) {
                "nothing to write: supervise always signals the whole instance (every process in it)"
            } else {
                "supervise always signals the whole instance (every process in it), not its main process alone"
            };
            app.note(
                Some(entry.line),
                format!("`{key} = {}`: {what}", entry.value),
            );
        }
    }
    if let Some(entry) = get("user") {
        app.set("user", json!(entry.value));
    }
    if let Some(entry) = get("priority") {
        app.leave_out_with_note(
            "priority",
            Some(entry.line),
            format!(
                "`priority = {}`: supervise starts apps together; to order them use `depends_on`",
                entry.value
            ),
        );
    }

    logs(section, &mut app, &mut expand_at, &instance, places);

    for entry in &section.entries {
        if app.left_out.contains(&entry.key) {
            continue;
        }
        if READ.contains(&entry.key.as_str()) {
            app.record_mapped(&entry.key);
        } else {
            app.leave_out(
                &entry.key,
                Some(entry.line),
                format!("`{}` has no counterpart in supervise: left out", entry.key),
            );
        }
    }
    app
}

fn logs(
    section: &IniSection,
    app: &mut DraftApp,
    expand_at: &mut dyn FnMut(&mut DraftApp, &IniEntry, &str) -> String,
    instance: &str,
    places: &Places,
) {
    for key in ["stdout_logfile", "stderr_logfile"] {
        let Some(entry) = section.get(key) else {
            continue;
        };
        match entry.value.to_ascii_lowercase().as_str() {
            "syslog" => app.leave_out(key, Some(entry.line), format!("`{key} = syslog`: supervise does not write to syslog; the output is in `supervise logs` (and journald has it when supervise runs under systemd)")),
            "auto" => app.leave_out_with_note(key, Some(entry.line), format!("`{key} = AUTO` (a file in supervisord's childlogdir): the output is in `supervise logs`; for a file, set `log: {{file: …}}`")),
            _ => {}
        }
    }
    let file_of = |key: &str| {
        section.get(key).filter(|e| {
            !matches!(
                e.value.to_ascii_lowercase().as_str(),
                "auto" | "none" | "off" | "syslog"
            )
        })
    };
    let redirect = section
        .get("redirect_stderr")
        .is_some_and(|e| truthy(&e.value) == Some(true));
    let stdout = file_of("stdout_logfile");
    let stderr = file_of("stderr_logfile");
    let chosen = stdout.or(stderr);
    let stream = if stdout.is_some() { "stdout" } else { "stderr" };
    // The rotation keys of a stream whose file is not written.
    for other in ["stdout", "stderr"] {
        if chosen.is_some() && other == stream {
            continue;
        }
        for suffix in ["maxbytes", "backups"] {
            let key = format!("{other}_logfile_{suffix}");
            if let Some(entry) = section.get(&key) {
                app.leave_out_with_note(
                    &key,
                    Some(entry.line),
                    format!("`{key}`: no {other} log file is written, so it has nothing to rotate"),
                );
            }
        }
    }
    let Some(entry) = chosen else {
        return;
    };
    let file = expand_at(app, entry, instance);
    let mut log = Map::new();
    log.insert(
        "file".to_string(),
        json!(places.file(&places.source_dir, &file)),
    );
    if let Some(max) = section.get(&format!("{stream}_logfile_maxbytes")) {
        let size = byte_size(&max.value);
        let bytes = size.as_ref().map(|size| match size {
            Value::String(text) => size_in_bytes(text),
            other => other.as_u64(),
        });
        match (size, bytes) {
            (Some(_), Some(Some(0))) => app.leave_out(&max.key, Some(max.line), "`maxbytes = 0` (never rotate): supervise always rotates; the default size, 10MB, is used"),
            (Some(size), Some(Some(_))) => {
                log.insert("max_size".to_string(), size);
            }
            (Some(_), _) => app.leave_out(&max.key, Some(max.line), format!("`{} = {}` is more bytes than supervise can count: left out", max.key, max.value)),
            (None, _) => app.leave_out(&max.key, Some(max.line), format!("`{}` is not a size: left out", max.value)),
        }
    }
    if let Some(backups) = section.get(&format!("{stream}_logfile_backups")) {
        // supervisord keeps no rotated file with 0, as `keep: 0` does.
        match backups.value.trim().parse::<u64>() {
            Ok(n) if n <= u64::from(MAX_LOG_KEEP) => {
                log.insert("keep".to_string(), json!(n));
            }
            Ok(n) => {
                app.warn(
                    Some(backups.line),
                    format!("`{} = {n}`: supervise keeps at most {MAX_LOG_KEEP} rotated files; written as {MAX_LOG_KEEP}", backups.key),
                );
                log.insert("keep".to_string(), json!(MAX_LOG_KEEP));
            }
            Err(_) => app.leave_out(
                &backups.key,
                Some(backups.line),
                format!(
                    "`{} = {}` is not a number: left out",
                    backups.key, backups.value
                ),
            ),
        }
    }
    app.set("log", Value::Object(log));
    if let (Some(_), Some(stderr)) = (stdout, stderr) {
        app.leave_out("stderr_logfile", Some(stderr.line), "`stderr_logfile`: supervise writes both streams to one file (each line says which); the stdout file is used");
    } else if !redirect {
        app.note(
            Some(entry.line),
            "supervise writes both streams to this file, each line saying which",
        );
    }
}

#[cfg(test)]
mod tests;
