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
//!
//! This module takes the file as a whole: which section becomes an app,
//! and the notes on the others. [`ini`] reads the file, [`values`] spells
//! supervisord's value types, [`expand`] does the `%(name)s` expansions,
//! [`program`] maps each key of a program and [`logs`] its log keys.

mod expand;
mod ini;
mod logs;
mod program;
mod values;

use crate::{Draft, Format, Note, Places};
use expand::Expansions;
pub use ini::{IniSection, parse_ini};
use program::translate_program;
use values::key_value_pairs;

/// Sections that configure supervisord itself (its daemon, its control
/// socket and client): nothing of a program.
const SUPERVISORD_OWN: &[&str] = &[
    "supervisord",
    "supervisorctl",
    "unix_http_server",
    "inet_http_server",
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

#[cfg(test)]
mod tests;
