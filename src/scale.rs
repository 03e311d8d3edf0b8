//! `supervise scale`: change one app's `instances` *in the file*, keeping
//! every comment, blank line and style around it, so the file stays the one
//! truth and the watcher applies the edit.
//!
//! The parser's spans say where the value is written. Only a value written in
//! the app's own mapping is changed; when it comes from `defaults`, a merge key
//! or an anchor, `instances:` is added under the app instead, so the shared
//! block (and every other app using it) is left alone.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::config::diagnostic::Location;
use crate::config::node::{self, Node, NodeKind};
use crate::spec::defaults::MAX_INSTANCES;

/// Why a count was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountError {
    /// Not N, +N or -N (a usage error).
    NotACount(String),
    /// A count, but not one that can be (below 0, above the limit).
    Refused(String),
}

/// `3`, `+2` or `-1` applied to the current count.
pub fn target(current: u32, change: &str) -> Result<u32, CountError> {
    let parsed = |digits: &str| {
        digits.parse::<u32>().map_err(|_| {
            CountError::NotACount(format!("`{change}` is not a count: write N, +N or -N"))
        })
    };
    let value = if let Some(more) = change.strip_prefix('+') {
        current
            .checked_add(parsed(more)?)
            .ok_or_else(|| CountError::Refused("too many instances".into()))?
    } else if let Some(fewer) = change.strip_prefix('-') {
        current.checked_sub(parsed(fewer)?).ok_or_else(|| {
            CountError::Refused(format!("cannot go below 0 instances (now {current})"))
        })?
    } else {
        parsed(change)?
    };
    if value > MAX_INSTANCES {
        return Err(CountError::Refused(format!(
            "{value} instances is more than the limit of {MAX_INSTANCES}"
        )));
    }
    Ok(value)
}

/// The byte offset of a 1-based line and column (in characters).
fn byte_offset(text: &str, location: &Location) -> Option<usize> {
    let line_start = if location.line == 1 {
        0
    } else {
        text.match_indices('\n')
            .nth(usize::try_from(location.line).ok()? - 2)?
            .0
            + 1
    };
    let column = usize::try_from(location.column).ok()? - 1;
    let line = &text[line_start..];
    let within = line
        .char_indices()
        .nth(column)
        .map_or(line.len(), |(i, _)| i);
    Some(line_start + within)
}

/// The file text with app `app`'s `instances` set to `count`.
pub fn edit_text(text: &str, app: &str, count: u32) -> Result<String, String> {
    let root = node::parse(text).map_err(|e| format!("cannot parse the file: {}", e.message))?;
    let (_, apps) = root.get("apps").ok_or("the file has no `apps`")?;
    let (app_key, app_node) = apps
        .get(app)
        .ok_or_else(|| format!("no app `{app}` in the file"))?;
    let NodeKind::Map(entries) = &app_node.kind else {
        return Err(format!("apps.{app} is not a mapping"));
    };
    let own = |key: &Node| {
        key.location.line > app_key.location.line
            || (key.location.line == app_key.location.line
                && key.location.column > app_key.location.column)
    };
    if let Some((_, value)) = entries
        .iter()
        .find(|(k, _)| k.as_str() == Some("instances") && own(k))
    {
        let start = byte_offset(text, &value.location).ok_or("cannot locate the value")?;
        let end = start
            + text[start..]
                .char_indices()
                .nth(usize::try_from(value.location.len).unwrap_or(0))
                .map_or(text.len() - start, |(i, _)| i);
        return Ok(format!("{}{count}{}", &text[..start], &text[end..]));
    }
    // Not written in the app itself: add it there.
    if app_node.location.line < app_key.location.line {
        return Err(format!(
            "apps.{app} is an alias of a shared block; add `instances:` to it by hand"
        ));
    }
    let value_start = byte_offset(text, &app_node.location).ok_or("cannot locate the app")?;
    let flow =
        text[..value_start].trim_end().ends_with('{') || text[value_start..].starts_with('{');
    if flow {
        let brace = if text[value_start..].starts_with('{') {
            value_start
        } else {
            text[..value_start]
                .rfind('{')
                .ok_or("cannot find the app's `{`")?
        };
        return Ok(format!(
            "{}{{instances: {count}, {}",
            &text[..brace],
            &text[brace + 1..]
        ));
    }
    // A block mapping: a new line before the app's first key, same indentation.
    let first = entries
        .iter()
        .map(|(k, _)| k)
        .filter(|k| own(k))
        .min_by_key(|k| (k.location.line, k.location.column))
        .ok_or_else(|| format!("apps.{app} has no keys of its own to align with"))?;
    let indent = " ".repeat(usize::try_from(first.location.column).unwrap_or(1) - 1);
    let line_start = byte_offset(
        text,
        &Location {
            line: first.location.line,
            column: 1,
            len: 0,
        },
    )
    .ok_or("cannot locate the app's first key")?;
    Ok(format!(
        "{}{indent}instances: {count}\n{}",
        &text[..line_start],
        &text[line_start..]
    ))
}

/// Write the edit atomically next to the real file (a symlinked file stays a
/// symlink), keeping its mode and owner.
pub fn edit_file(path: &Path, text: &str, app: &str, count: u32) -> Result<(), String> {
    let edited = edit_text(text, app, count)?;
    let target = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let metadata = std::fs::metadata(&target).map_err(|e| format!("{}: {e}", target.display()))?;
    let dir = target.parent().ok_or("the file has no folder")?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("ecosystem.yaml");
    let temp = dir.join(format!(".{name}.supervise-scale.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(edited.as_bytes())?;
        file.set_permissions(std::fs::Permissions::from_mode(
            metadata.permissions().mode(),
        ))?;
        // Keep the owner when we may (as root); otherwise the file is ours anyway.
        let _ = std::os::unix::fs::fchown(&file, Some(metadata.uid()), Some(metadata.gid()));
        file.sync_all()?;
        std::fs::rename(&temp, &target)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {e}", target.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_absolute_and_relative() {
        assert_eq!(target(2, "5"), Ok(5));
        assert_eq!(target(2, "+3"), Ok(5));
        assert_eq!(target(2, "-1"), Ok(1));
        assert!(matches!(target(2, "-3"), Err(CountError::Refused(_))));
        assert!(matches!(target(2, "many"), Err(CountError::NotACount(_))));
        assert!(matches!(target(2, "+"), Err(CountError::NotACount(_))));
        assert!(matches!(target(2, "5000"), Err(CountError::Refused(_))));
    }

    #[test]
    fn changes_only_the_value_in_block_and_flow_style() {
        let text = "# my services\napps:\n\n  web:   # the front\n    command: sleep 1\n    instances: 2   # two\n  api: {command: sleep 1, instances: 10}\n";
        assert_eq!(
            edit_text(text, "web", 4).unwrap(),
            text.replace("instances: 2   # two", "instances: 4   # two")
        );
        assert_eq!(
            edit_text(text, "api", 3).unwrap(),
            text.replace("instances: 10}", "instances: 3}")
        );
    }

    #[test]
    fn adds_the_key_when_the_value_is_inherited() {
        let text = "defaults:\n  instances: 2\napps:\n  web:\n    command: sleep 1\n  api: {command: sleep 1}\n";
        assert_eq!(
            edit_text(text, "web", 3).unwrap(),
            "defaults:\n  instances: 2\napps:\n  web:\n    instances: 3\n    command: sleep 1\n  api: {command: sleep 1}\n"
        );
        assert_eq!(
            edit_text(text, "api", 5).unwrap(),
            "defaults:\n  instances: 2\napps:\n  web:\n    command: sleep 1\n  api: {instances: 5, command: sleep 1}\n"
        );
        let merged =
            "x-base: &base\n  instances: 2\napps:\n  web:\n    <<: *base\n    command: sleep 1\n";
        let edited = edit_text(merged, "web", 6).unwrap();
        assert!(
            edited.starts_with("x-base: &base\n  instances: 2\n"),
            "the shared block is untouched"
        );
        assert!(edited.contains("    instances: 6\n"), "{edited}");
    }

    #[test]
    fn refuses_what_it_cannot_edit() {
        assert!(edit_text("apps:\n  web:\n    command: sleep 1\n", "api", 2).is_err());
        let aliased = "x-base: &base\n  command: sleep 1\napps:\n  web: *base\n";
        assert!(edit_text(aliased, "web", 2).unwrap_err().contains("alias"));
    }
}
