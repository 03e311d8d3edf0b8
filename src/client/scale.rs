//! `supervise scale`: edit `instances` in the ecosystem file under its
//! lock, checked before it is written, then wait until the supervisor runs
//! what the file says, showing the instances that are not coming up.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{Failure, POLL_INTERVAL, ask, ask_status, fail, print};
use crate::cli::{ecosystem_path, exit};
use model::protocol::Command;

/// `supervise scale APP N|+N|-N`: edit `instances` in the file, then wait
/// (at most `timeout`) until the running count matches what the file says.
/// Meanwhile, instances that are not coming up are shown with why (backoff,
/// failed, the exit).
///
/// The edit holds the file's [`crate::scale::EditLock`] from its read to
/// its write, so that scales at once each apply to what the one before
/// wrote; the wait does not (the next may edit the file meanwhile), and so
/// it waits for what the file says *now*, read again each time it looks.
pub fn scale(
    file: Option<&Path>,
    socket: &Path,
    app: &str,
    change: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    let path = ecosystem_path(file).map_err(|m| fail(exit::USAGE, m))?;
    let shown = path.display().to_string();
    // The supervisor must be there to follow the edit; asked before the
    // lock, which is held for nothing but the file.
    ask(socket, Command::Status)?;
    let (before, after) = edit_instances(&path, &shown, app, change)?;
    print(&format!(
        "{app}: instances {before} → {after} (edited {shown})\n"
    ))?;
    let deadline = Instant::now() + timeout;
    let mut wanted = after;
    let mut shown_problems = String::new();
    loop {
        // An invalid or unreadable moment (an editor saving) keeps the last.
        if let Some(now) = instances_in(&path, app) {
            wanted = now;
        }
        let status = ask_status(socket)?;
        let Some(found) = status.apps.iter().find(|a| a.name == app) else {
            return Err(fail(
                exit::INVALID,
                format!("the supervisor has no app `{app}`"),
            ));
        };
        // A one-shot that completed came up and did its job.
        let completed = found
            .workers
            .iter()
            .filter(|w| w.completed_s.is_some() && w.slot < wanted)
            .count() as u32;
        if found.instances == wanted && found.running + completed == wanted {
            if wanted != after {
                print(&format!(
                    "{app}: {wanted} instances, as {shown} says now (edited again since)\n"
                ))?;
            }
            return Ok(());
        }
        // Not there yet: say which instances are not coming up, and why.
        let problems: Vec<String> = found
            .workers
            .iter()
            .filter(|w| {
                w.slot < wanted && !matches!(w.state.as_str(), "starting" | "ready" | "stopping")
            })
            .map(|w| {
                let why = w.last_exit.as_deref().unwrap_or("no exit yet");
                format!(
                    "  {app}.{}: {} ({why}; {} restarts)",
                    w.slot, w.state, w.restarts
                )
            })
            .collect();
        let text = problems.join("\n");
        if !text.is_empty() && text != shown_problems {
            print(&format!(
                "{app}: {} of {wanted} running; not coming up:\n{text}\n",
                found.running
            ))?;
            shown_problems = text;
        }
        if Instant::now() > deadline {
            return Err(fail(
                exit::HALTED,
                format!(
                    "{app}: {} of {wanted} instances running after {}; {shown} says {wanted}",
                    found.running,
                    humantime::format_duration(timeout)
                ),
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The read-modify-write of `scale`, under the file's lock: the count before
/// and the one written, both as the file says (read under the lock; the
/// edited text, checked before it is written).
fn edit_instances(
    path: &Path,
    shown: &str,
    app: &str,
    change: &str,
) -> Result<(u32, u32), Failure> {
    let _lock = crate::scale::lock(path, crate::scale::LOCK_WAIT).map_err(|e| match e {
        crate::scale::LockError::Busy => fail(
            exit::HALTED,
            format!(
                "another `scale` of {shown} has held its lock for {}; the file is unchanged",
                humantime::format_duration(crate::scale::LOCK_WAIT)
            ),
        ),
        crate::scale::LockError::Io(e) => fail(exit::USAGE, format!("cannot read {shown}: {e}")),
    })?;
    let checked = config::check_file(path, &config::Host::detect())
        .map_err(|e| fail(exit::USAGE, e.to_string()))?;
    let Some(desired) = checked.desired else {
        return Err(fail(
            exit::INVALID,
            format!("{shown} is invalid; fix it before scaling (supervise check)"),
        ));
    };
    let Some(spec) = desired.app(app) else {
        return Err(fail(exit::INVALID, format!("{shown} has no app `{app}`")));
    };
    if let Some(range) = &spec.autoscale {
        return Err(fail(
            exit::INVALID,
            format!(
                "{app} is autoscaled ({}..{} instances): its count follows its load, and `scale` \
                 cannot set it; the file is unchanged\nhint: to change the range, edit \
                 `autoscale: {{min, max}}` under `{app}` in {shown}",
                range.min, range.max
            ),
        ));
    }
    let before = spec.instances;
    let after = crate::scale::target(before, change).map_err(|e| match e {
        crate::scale::CountError::NotACount(m) => fail(exit::USAGE, m),
        crate::scale::CountError::Refused(m) => fail(exit::INVALID, m),
    })?;
    // The edited file must be valid too (a scheduled app runs one
    // instance, say): the supervisor would refuse it, and it would be left
    // on disk for the next start.
    let edited =
        crate::scale::edit_text(&checked.text, app, after).map_err(|m| fail(exit::INVALID, m))?;
    let after_edit = config::check_text(&edited, path, &config::Host::detect());
    let Some(written) = after_edit.desired.as_ref() else {
        let errors: Vec<_> = after_edit
            .diagnostics
            .into_iter()
            .filter(|d| d.severity == config::diagnostic::Severity::Error)
            .collect();
        return Err(fail(
            exit::INVALID,
            format!(
                "{app}: {after} instances would make {shown} invalid; the file is unchanged\n{}",
                config::diagnostic::render(shown, &edited, &errors).trim_end()
            ),
        ));
    };
    let says = written.app(app).map(|spec| spec.instances);
    if says != Some(after) {
        return Err(fail(
            exit::INVALID,
            format!(
                "{app}: the edit would not make {shown} say {after} instances; the file is unchanged"
            ),
        ));
    }
    // Atomically next to the real file (a symlinked file stays a symlink; a
    // file with hard links or bind-mounted is written in place), keeping
    // its mode and owner: see `crate::replace`.
    crate::replace::replace(path, edited.as_bytes(), "scale")
        .map_err(|e| fail(exit::INVALID, format!("cannot write {shown}: {e}")))?;
    Ok((before, after))
}

/// How many instances of `app` the file at `path` says, if it can be read
/// and is valid.
fn instances_in(path: &Path, app: &str) -> Option<u32> {
    let checked = config::check_file(path, &config::Host::detect()).ok()?;
    Some(checked.desired?.app(app)?.instances)
}
