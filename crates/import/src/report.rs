//! What `import` prints besides the file: a diagnostic line per note for
//! stderr, and the summary of which keys of each app were carried over
//! and which were left out.

use crate::{Draft, Severity, escaped};

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
