//! `supervise scale`: change one app's `instances` *in the file*, keeping
//! every comment, blank line and style around it, so the file stays the one
//! truth and the watcher applies the edit.
//!
//! The parser's spans say where the value is written. Only a value written in
//! the app's own mapping is changed; when it comes from `defaults`, a merge key
//! or an anchor, `instances:` is added under the app instead, so the shared
//! block (and every other app using it) is left alone.
//!
//! Two `scale`s of the same file at once must not both read `instances: 2`
//! and both write 3: the read, the check and the write hold [`EditLock`].

use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use config::diagnostic::Location;
use config::node::{self, Node, NodeKind};
use effects::runtime::try_lock;
use model::spec::defaults::MAX_INSTANCES;

/// How long `scale` waits for another `scale` of the same file to finish
/// its edit. An edit is a read, a check and a write — milliseconds, so ten at
/// once take well under a second; only a stopped or wedged one holds the
/// lock this long.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How often the lock is tried meanwhile.
const LOCK_POLL: Duration = Duration::from_millis(10);

/// Why the lock was not had.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another edit held it for all of the wait.
    Busy,
    Io(io::Error),
}

/// The lock of one edit of an ecosystem file: an exclusive `flock` on the
/// file itself, released when dropped.
///
/// The file itself, rather than a lock file in the runtime directory keyed
/// by what the file is: every name of it — a symlink, a hard link, a bind
/// mount, even in another mount namespace or for another user, whose runtime
/// directories differ — reaches the same inode, and nothing is created that
/// would have to be cleaned up. Only a rename over the file gives its name
/// a new inode — every edit of a file with a single name is one, and so is
/// an editor's save — so once the lock is had, the name is checked to still
/// be the file locked; if it is not, the file it is now is locked instead
/// (the pattern of the supervisor's own lock in the runtime directory).
#[derive(Debug)]
pub(crate) struct EditLock {
    _file: std::fs::File,
}

/// Take the [`EditLock`] of the file `path` names, waiting at most `wait`
/// for an edit that holds it.
pub(crate) fn lock(path: &Path, wait: Duration) -> Result<EditLock, LockError> {
    let deadline = Instant::now() + wait;
    loop {
        // O_NONBLOCK: a FIFO in the file's place does not hang the open (the
        // read that follows refuses it).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .map_err(LockError::Io)?;
        let locked = try_lock(&file).map_err(LockError::Io)?;
        if locked {
            let held = file.metadata().map_err(LockError::Io)?;
            let named = std::fs::metadata(path).map_err(LockError::Io)?;
            if (held.dev(), held.ino()) == (named.dev(), named.ino()) {
                return Ok(EditLock { _file: file });
            }
            // Renamed over while we waited: lock what the name is now.
        }
        if Instant::now() >= deadline {
            return Err(LockError::Busy);
        }
        if !locked {
            std::thread::sleep(LOCK_POLL);
        }
    }
}

/// Why a count was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CountError {
    /// Not N, +N or -N (a usage error).
    NotACount(String),
    /// A count, but not one that can be (below 0, above the limit).
    Refused(String),
}

/// `3`, `+2` or `-1` applied to the current count.
pub(crate) fn target(current: u32, change: &str) -> Result<u32, CountError> {
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
pub(crate) fn edit_text(text: &str, app: &str, count: u32) -> Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Short waits for the tests (the real one is [`LOCK_WAIT`]).
    const SHORT: Duration = Duration::from_millis(200);

    #[test]
    fn an_edit_waits_for_the_lock_then_gives_up_and_any_name_is_the_same_lock() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "apps: {}\n").expect("write");
        std::os::unix::fs::symlink(&file, dir.path().join("link.yaml")).expect("symlink");
        std::fs::hard_link(&file, dir.path().join("hard.yaml")).expect("link");
        let held = lock(&file, SHORT).expect("free");
        for name in ["ecosystem.yaml", "link.yaml", "hard.yaml"] {
            let started = Instant::now();
            let refused = lock(&dir.path().join(name), SHORT);
            assert!(
                matches!(refused, Err(LockError::Busy)),
                "{name}: {refused:?}"
            );
            assert!(
                started.elapsed() >= SHORT,
                "{name}: {:?}",
                started.elapsed()
            );
        }
        drop(held);
        lock(&dir.path().join("hard.yaml"), SHORT).expect("free again");
        assert!(matches!(
            lock(&dir.path().join("gone.yaml"), SHORT),
            Err(LockError::Io(_))
        ));
    }

    #[test]
    fn a_lock_had_on_a_file_renamed_over_meanwhile_is_taken_on_the_new_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ecosystem.yaml");
        std::fs::write(&file, "apps: {}\n").expect("write");
        let held = lock(&file, SHORT).expect("free");
        let waiting = std::thread::spawn({
            let file = file.clone();
            move || lock(&file, LOCK_WAIT)
        });
        // The holder's edit: a new file renamed over, then the lock let go.
        std::thread::sleep(SHORT);
        let new = dir.path().join(".new");
        std::fs::write(&new, "apps: {web: {command: sleep 1}}\n").expect("write");
        std::fs::rename(&new, &file).expect("rename");
        drop(held);
        let taken = waiting.join().expect("joined").expect("taken");
        let inode = |m: std::fs::Metadata| (m.dev(), m.ino());
        assert_eq!(
            inode(taken._file.metadata().expect("fstat")),
            inode(std::fs::metadata(&file).expect("stat"))
        );
        assert!(matches!(lock(&file, SHORT), Err(LockError::Busy)));
    }

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
