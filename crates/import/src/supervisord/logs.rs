//! The log keys of a program (`stdout_logfile`, `stderr_logfile`, their
//! rotation, `redirect_stderr`): supervisord writes a file per stream,
//! supervise one file with both, so which file is written and what of the
//! other is left out is decided here, apart from the other keys.

use serde_json::{Map, Value, json};

use super::ini::{IniEntry, IniSection};
use super::values::{byte_size, truthy};
use crate::{DraftApp, Places};
use config::validate::size_in_bytes;
use model::spec::defaults::MAX_LOG_KEEP;

pub(super) fn logs(
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
