//! `%(name)s` expansions, as Python's `%` does them: `process_num` becomes
//! `{instance}` (plus `numprocs_start`), `program_name`, `group_name`,
//! `numprocs` and `here` are known at import, `ENV_X` and
//! `host_node_name` are read now (and said so). One place for what a
//! value's text becomes before a key maps it.

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
