//! The writer thread of [`super::LogFiles`]: it takes the queues, renders
//! each line, writes, rotates by size, reports drops, and keeps track of the
//! files that fail until they work again. It alone touches the disk.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::{
    DROP_REPORT_INTERVAL, FileQueue, IDLE_CLOSE, LogFiles, RECOVERED_AFTER, RETRY_INTERVAL, Record,
    count_dropped,
};
use model::spec::{LogFormat, LogSpec};

/// Rendered bytes gathered before one `write`.
const WRITE_CHUNK_BYTES: usize = 256 * 1024;
/// Mode of a new log file (before the umask).
const FILE_MODE: u32 = 0o640;
/// Mode of a folder made for a log file (before the umask), as `mkdir -p`
/// and pm2 make them.
const FOLDER_MODE: u32 = 0o755;

/// What the writer took from one queue in one look.
struct Batch {
    path: PathBuf,
    spec: Arc<LogSpec>,
    records: Vec<Record>,
    /// Drops to report now (the interval has passed, or the end came).
    dropped: Vec<(Arc<str>, u64)>,
}

/// A file the writer has open.
struct OpenFile {
    file: File,
    size: u64,
    last_write: Instant,
    /// A regular file, rotated by size. Anything else (a device such as
    /// /dev/null, a FIFO) is only written to: a rotation would rename it
    /// and put a regular file in its place.
    rotated: bool,
}

/// A file that failed, until it has worked for [`RECOVERED_AFTER`].
struct Failing {
    retry_at: Instant,
    last_failed: Instant,
}

/// The writer thread's own state: open files, and the files that fail.
#[derive(Default)]
pub(super) struct Writer {
    open: HashMap<PathBuf, OpenFile>,
    /// Files that failed: when to try again, and when they last failed.
    failing: HashMap<PathBuf, Failing>,
    /// Rendered lines not yet written, and the apps they came from.
    chunk: Vec<u8>,
    chunk_apps: Vec<Arc<str>>,
}

/// How long the writer sleeps when there is nothing to do (it looks at idle
/// files and drop counts then).
const WRITER_IDLE_WAKE: Duration = Duration::from_secs(1);

impl Writer {
    pub(super) fn run(&mut self, files: &LogFiles) {
        loop {
            let (batches, reopen, stop) = self.take(files);
            if reopen {
                self.open.clear();
                // Failing files are tried again at once (still failing until
                // they have worked for RECOVERED_AFTER).
                let now = Instant::now();
                for failing in self.failing.values_mut() {
                    failing.retry_at = now;
                }
                info!(event = "log_reopened", "log files reopened (SIGUSR1)");
            }
            for batch in batches {
                self.write_batch(files, batch);
            }
            let now = Instant::now();
            self.open
                .retain(|_, open| now.duration_since(open.last_write) < IDLE_CLOSE);
            if stop && files.lock().queues.values().all(FileQueue::is_empty) {
                return;
            }
        }
    }

    /// Wait for work (bounded), then take every queue's lines and the drop
    /// counts due.
    fn take(&self, files: &LogFiles) -> (Vec<Batch>, bool, bool) {
        let mut shared = files.lock();
        if !shared.work && !shared.reopen && !shared.stop {
            shared = files
                .wake
                .wait_timeout(shared, WRITER_IDLE_WAKE)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        shared.work = false;
        let reopen = std::mem::take(&mut shared.reopen);
        let stop = shared.stop;
        let now = Instant::now();
        let mut batches = Vec::new();
        let mut taken = 0;
        for (path, queue) in &mut shared.queues {
            let report_due = stop
                || queue
                    .last_report
                    .is_none_or(|at| now.duration_since(at) >= DROP_REPORT_INTERVAL);
            let dropped = if report_due && !queue.dropped.is_empty() {
                queue.last_report = Some(now);
                std::mem::take(&mut queue.dropped)
            } else {
                Vec::new()
            };
            if queue.records.is_empty() && dropped.is_empty() {
                continue;
            }
            taken += queue.bytes;
            queue.bytes = 0;
            batches.push(Batch {
                path: path.clone(),
                spec: Arc::clone(&queue.spec),
                records: std::mem::take(&mut queue.records),
                dropped,
            });
        }
        shared.queued_bytes -= taken;
        // A queue with nothing waiting and nothing to report goes; the next
        // line makes it again. Drops still waiting for their interval keep
        // it, and are reported when the writer next wakes (within
        // WRITER_IDLE_WAKE of their interval).
        // A report just made keeps the queue for its interval, so that the
        // next drops wait their turn.
        shared.queues.retain(|_, q| {
            !q.records.is_empty()
                || !q.dropped.is_empty()
                || q.last_report
                    .is_some_and(|at| now.duration_since(at) < DROP_REPORT_INTERVAL)
        });
        (batches, reopen, stop)
    }

    /// Write a batch, and report the drops that are due. Lines this batch
    /// loses (the file fails) are not reported here, once per batch — a
    /// failing file loses every batch, hundreds a second — but counted in
    /// the file's queue, with the drops of a full queue, for the next
    /// report that is due (see [`Writer::take`]).
    fn write_batch(&mut self, files: &LogFiles, batch: Batch) {
        let Batch {
            path,
            spec,
            records,
            dropped: due,
        } = batch;
        let mut dropped = Vec::new();
        if !records.is_empty() {
            let mut apps: Vec<Arc<str>> = Vec::new();
            for record in &records {
                if !apps.contains(&record.app) {
                    apps.push(Arc::clone(&record.app));
                }
            }
            match self.ensure_open(files, &path, &apps) {
                Some(()) => {
                    for record in &records {
                        self.append(files, &path, &spec, record, &mut dropped);
                    }
                    self.flush_chunk(files, &path, &mut dropped);
                }
                None => {
                    for record in &records {
                        count_dropped(&mut dropped, &record.app, 1);
                    }
                }
            }
        }
        if !dropped.is_empty() {
            let mut shared = files.lock();
            let queue = shared
                .queues
                .entry(path.clone())
                .or_insert_with(|| FileQueue::new(Arc::clone(&spec)));
            for (app, count) in dropped {
                count_dropped(&mut queue.dropped, &app, count);
            }
        }
        for (app, count) in due {
            warn!(
                event = "log_dropped",
                app = &*app,
                count,
                file = %path.display(),
                "{app}: {count} output lines were not written to {} since the last report (the disk is slower than the output, or the file fails)",
                path.display()
            );
        }
    }

    /// The file open for appending (made if missing), or `None` while it
    /// fails (said once, tried again every [`RETRY_INTERVAL`]).
    fn ensure_open(&mut self, files: &LogFiles, path: &Path, apps: &[Arc<str>]) -> Option<()> {
        if self.open.contains_key(path) {
            return Some(());
        }
        if let Some(failing) = self.failing.get(path)
            && Instant::now() < failing.retry_at
        {
            return None;
        }
        match open_append(path) {
            Ok(open) => {
                self.open.insert(path.to_path_buf(), open);
                Some(())
            }
            Err(error) => {
                self.failed(files, path, apps, format!("cannot open it: {error}"));
                None
            }
        }
    }

    /// Render one line into the chunk, rotating first when it would take
    /// the file past `max_size` (unless the file is empty: a line longer
    /// than `max_size` gets a file to itself).
    fn append(
        &mut self,
        files: &LogFiles,
        path: &Path,
        spec: &LogSpec,
        record: &Record,
        dropped: &mut Vec<(Arc<str>, u64)>,
    ) {
        let Some((size, rotated)) = self.open.get(path).map(|open| (open.size, open.rotated))
        else {
            count_dropped(dropped, &record.app, 1);
            return;
        };
        let pending = self.chunk.len();
        render(&mut self.chunk, spec.format, record);
        let length = self.chunk.len() - pending;
        let before = size + pending as u64;
        if rotated && before > 0 && before + length as u64 > spec.max_size {
            let line = self.chunk.split_off(pending);
            self.flush_chunk(files, path, dropped);
            let apps = [Arc::clone(&record.app)];
            self.rotate(files, path, spec.keep, &apps);
            if self.ensure_open(files, path, &apps).is_none() {
                count_dropped(dropped, &record.app, 1);
                return;
            }
            self.chunk = line;
        }
        self.chunk_apps.push(Arc::clone(&record.app));
        if self.chunk.len() >= WRITE_CHUNK_BYTES {
            self.flush_chunk(files, path, dropped);
        }
    }

    /// Write the gathered lines. On an error the file is cut back to where
    /// it was (no half line stays), the lines count as dropped, and the file
    /// is closed, to be tried again after [`RETRY_INTERVAL`].
    fn flush_chunk(&mut self, files: &LogFiles, path: &Path, dropped: &mut Vec<(Arc<str>, u64)>) {
        let apps = std::mem::take(&mut self.chunk_apps);
        if apps.is_empty() {
            self.chunk.clear();
            return;
        }
        let written = match self.open.get_mut(path) {
            None => Err("it is not open".to_string()),
            Some(open) => match open.file.write_all(&self.chunk) {
                Ok(()) => {
                    open.size += self.chunk.len() as u64;
                    open.last_write = Instant::now();
                    Ok(())
                }
                Err(error) => {
                    let _ = open.file.set_len(open.size);
                    Err(format!("cannot write to it: {error}"))
                }
            },
        };
        self.chunk.clear();
        match written {
            Ok(()) => self.recovered(files, path, &apps),
            Err(message) => {
                for app in &apps {
                    count_dropped(dropped, app, 1);
                }
                self.open.remove(path);
                self.failed(files, path, &apps, message);
            }
        }
    }

    /// `FILE.{keep-1}` → `FILE.{keep}` … `FILE` → `FILE.1`; the oldest goes.
    /// Then a new, empty `FILE` is opened. What is at the path now must be
    /// a regular file: one removed and replaced by a directory (or anything
    /// else) while it was open is not renamed as if it were the file, and
    /// the open that follows fails and says why.
    fn rotate(&mut self, files: &LogFiles, path: &Path, keep: u32, apps: &[Arc<str>]) {
        self.open.remove(path);
        let numbered = |n: u32| {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        let renamed = (|| -> io::Result<()> {
            match std::fs::metadata(path) {
                Ok(now) if !now.is_file() => {
                    return Err(io::Error::other(format!(
                        "it is not a regular file any more but {}",
                        kind_of(&now.file_type())
                    )));
                }
                _ => {}
            }
            // Older files than `keep` allows (it was lowered) go too.
            let mut extra = keep + 1;
            while remove_if_there(&numbered(extra))? {
                extra += 1;
            }
            if keep == 0 {
                remove_if_there(path)?;
                return Ok(());
            }
            for n in (1..keep).rev() {
                rename_if_there(&numbered(n), &numbered(n + 1))?;
            }
            rename_if_there(path, &numbered(1))
        })();
        if let Err(error) = renamed {
            // Writing on to the same file beats losing lines: it is said.
            self.failed(files, path, apps, format!("cannot rotate it: {error}"));
        }
        match open_append(path) {
            Ok(open) => {
                self.open.insert(path.to_path_buf(), open);
            }
            Err(error) => self.failed(files, path, apps, format!("cannot open it: {error}")),
        }
    }

    /// Say once per file that it fails, and keep it for `status`.
    fn failed(&mut self, files: &LogFiles, path: &Path, apps: &[Arc<str>], message: String) {
        let now = Instant::now();
        let first = !self.failing.contains_key(path);
        self.failing.insert(
            path.to_path_buf(),
            Failing {
                retry_at: now + RETRY_INTERVAL,
                last_failed: now,
            },
        );
        let text = format!("{}: {message}", path.display());
        {
            let mut shared = files.lock();
            for app in apps {
                shared.errors.insert(Arc::clone(app), text.clone());
            }
        }
        if first {
            let names = app_names(apps);
            warn!(
                event = "log_file_error",
                app = %names,
                file = %path.display(),
                error = %message,
                "{names}: log file {text}; the output is still kept in memory (supervise logs), and the file is tried again every {}s",
                RETRY_INTERVAL.as_secs()
            );
        }
    }

    /// A file took a write: once it has for [`RECOVERED_AFTER`] since it
    /// last failed, that is said once, and `status` clears.
    fn recovered(&mut self, files: &LogFiles, path: &Path, apps: &[Arc<str>]) {
        let Some(failing) = self.failing.get(path) else {
            return;
        };
        if failing.last_failed.elapsed() < RECOVERED_AFTER {
            return;
        }
        self.failing.remove(path);
        {
            let mut shared = files.lock();
            for app in apps {
                shared.errors.remove(app);
            }
        }
        let names = app_names(apps);
        info!(
            event = "log_file_recovered",
            app = %names,
            file = %path.display(),
            "{names}: log file {} is written again",
            path.display()
        );
    }
}

/// The distinct app names, comma-separated.
fn app_names(apps: &[Arc<str>]) -> String {
    let mut names: Vec<&str> = apps.iter().map(|a| &**a).collect();
    names.sort_unstable();
    names.dedup();
    names.join(",")
}

/// Open `path` for appending, made if missing — and its folders too, as
/// `mkdir -p` would ([`FOLDER_MODE`]), when it is a folder that is missing.
///
/// Opened with O_NONBLOCK, which a regular file ignores, so that the
/// writer thread — every file's — never waits on one that is not: a FIFO
/// nobody reads fails the open (ENXIO) instead of waiting for a reader for
/// ever, and a full one fails the write (EAGAIN) instead of waiting for it
/// to be read. Either is a failing file, tried again later.
///
/// The folders, like the file, are the supervisor's: made by it, owned by
/// its user (root's when it runs as root), whatever `user` the app's workers
/// run as. The workers never write there (the supervisor does, from their
/// pipes), and a folder a worker owned would let it put a symlink in the
/// place of the file for root to append to.
fn open_append(path: &Path) -> io::Result<OpenFile> {
    let open = || {
        // std opens with O_CLOEXEC: no worker inherits a log file.
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    let file = match open() {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let Some(folder) = path.parent() else {
                return Err(error);
            };
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(FOLDER_MODE)
                .create(folder)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot make its folder {}: {e}", folder.display()),
                    )
                })?;
            open()?
        }
        opened => opened?,
    };
    let metadata = file.metadata()?;
    Ok(OpenFile {
        file,
        size: metadata.len(),
        last_write: Instant::now(),
        rotated: metadata.is_file(),
    })
}

/// What a file that is not a regular one is, to say so.
fn kind_of(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Remove `path`; false when it was not there.
fn remove_if_there(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn rename_if_there(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// One line as the file has it: `TIMESTAMP APP.N STREAM | LINE` or a JSON
/// object, with its newline.
fn render(out: &mut Vec<u8>, format: LogFormat, record: &Record) {
    let timestamp = humantime::format_rfc3339_millis(record.at);
    let stream = record.stream.name();
    match format {
        LogFormat::Text => {
            // Writing into a Vec cannot fail.
            let _ = write!(
                out,
                "{timestamp} {}.{} {stream} | ",
                record.app, record.slot
            );
            out.extend_from_slice(&record.line);
        }
        LogFormat::Json => {
            let object = serde_json::json!({
                "timestamp": timestamp.to_string(),
                "app": &*record.app,
                "instance": record.slot,
                "stream": stream,
                "line": String::from_utf8_lossy(&record.line),
            });
            out.extend_from_slice(object.to_string().as_bytes());
        }
    }
    out.push(b'\n');
}
