//! Log files: what workers print, also written to the files the ecosystem
//! file names (`log: {file, max_size, keep, format}`), rotated by size by
//! supervise itself — no logrotate, no module to install, no file that grows
//! until the disk is full.
//!
//! The output pumps run on the loop's thread, so they must never wait for a
//! disk: [`LogFiles::write`] puts a line in the bounded queue of its file and
//! returns. One writer thread (`supervise-logfiles`) takes the queues, renders
//! each line (an RFC 3339 timestamp, the instance and the stream, or a JSON
//! object), writes, and rotates. When a queue is full — the disk is slower
//! than the output — the line is dropped and counted for its app, and the
//! writer says how many in a `log_dropped` event at most once a second per
//! file and once more at the end: lines written + lines reported dropped =
//! lines printed, always.
//!
//! Rotation: before a line would take the file past `max_size`, `FILE.{keep-1}`
//! becomes `FILE.{keep}` … `FILE` becomes `FILE.1` (renames; the oldest is
//! deleted), and the line goes whole into a new `FILE`. Nothing is truncated
//! in place, and a line is never split across two files (one longer than
//! `max_size` gets a file to itself). SIGUSR1 reopens every file, for an
//! external logrotate that moved them ([`LogFiles::reopen`]).
//!
//! Errors (a folder missing, permission denied, a full disk) are reported
//! once per file (`log_file_error`) and kept for `status`; the file is tried
//! again at most every [`RETRY_INTERVAL`], the lines meanwhile are dropped and
//! counted, and `log_file_recovered` says when it works again. A worker never
//! notices any of it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use super::output::Stream;
use crate::spec::{Desired, LogFormat, LogSpec};

/// Lines one file's queue holds before lines are dropped.
pub const FILE_QUEUE_LINES: usize = 64 * 1024;
/// Bytes one file's queue holds before lines are dropped.
pub const FILE_QUEUE_BYTES: usize = 8 * 1024 * 1024;
/// Bytes all the queues hold together (1,000 per-instance files must not
/// take 1,000 times one queue).
pub const TOTAL_QUEUE_BYTES: usize = 64 * 1024 * 1024;
/// How often, at most, a file's dropped lines are reported.
pub const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// How long after an error a file is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// A file that failed is said to work again once it has taken every write
/// for this long: a disk that is full takes a short write now and then, and
/// that is not a recovery to report (nor a new error after it).
pub const RECOVERED_AFTER: Duration = Duration::from_secs(3);
/// A file nothing was written to for this long is closed (reopened by the
/// next line): files of apps that left the ecosystem file do not stay open.
pub const IDLE_CLOSE: Duration = Duration::from_secs(60);
/// Rendered bytes gathered before one `write`.
const WRITE_CHUNK_BYTES: usize = 256 * 1024;
/// Mode of a new log file (before the umask).
const FILE_MODE: u32 = 0o640;

/// One line a worker printed, as the pump read it.
struct Record {
    at: SystemTime,
    app: Arc<str>,
    slot: u32,
    stream: Stream,
    line: Vec<u8>,
}

/// Lines waiting for one file.
struct FileQueue {
    /// How the file is rotated and written (the route of the last line).
    spec: Arc<LogSpec>,
    records: Vec<Record>,
    bytes: usize,
    /// Lines dropped since the last report, per app.
    dropped: Vec<(Arc<str>, u64)>,
    last_report: Option<Instant>,
}

impl FileQueue {
    /// Nothing to write and nothing to report.
    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.dropped.is_empty()
    }
}

#[derive(Default)]
struct Shared {
    /// Where each app's output goes. An app that left the file keeps its
    /// route until its last worker is gone ([`LogFiles::forget`]): what it
    /// prints while it stops is kept too.
    routes: HashMap<Arc<str>, Arc<LogSpec>>,
    /// Each instance's file, worked out once per version of the file.
    paths: HashMap<(Arc<str>, u32), PathBuf>,
    queues: HashMap<PathBuf, FileQueue>,
    queued_bytes: usize,
    /// The last error of each app's file, while it lasts (for `status`).
    errors: HashMap<Arc<str>, String>,
    /// Something for the writer: lines, a drop count, a reopen, the end.
    work: bool,
    reopen: bool,
    stop: bool,
    /// The writer thread has ended (or never started).
    writer_done: bool,
}

/// The log files of every app, and the thread that writes them.
pub struct LogFiles {
    shared: Mutex<Shared>,
    /// Wakes the writer (work) and [`LogFiles::finish`] (the writer is done).
    wake: Condvar,
}

impl LogFiles {
    /// Start the writer thread; nothing is written until [`LogFiles::route`].
    pub fn start() -> Arc<LogFiles> {
        let files = Arc::new(LogFiles {
            shared: Mutex::new(Shared::default()),
            wake: Condvar::new(),
        });
        let writer = Arc::clone(&files);
        let spawned = std::thread::Builder::new()
            .name("supervise-logfiles".into())
            .spawn(move || {
                Writer::default().run(&writer);
                writer.lock().writer_done = true;
                writer.wake.notify_all();
            });
        if let Err(error) = spawned {
            warn!("cannot start the log file writer ({error}); log files will not be written");
            files.lock().writer_done = true;
        }
        files
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves plain data behind: go on.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Route each app's output by a new version of the file.
    pub fn route(&self, desired: &Desired) {
        let mut shared = self.lock();
        for app in &desired.apps {
            match &app.log {
                Some(log) => {
                    let unchanged = shared
                        .routes
                        .get(app.name.as_str())
                        .is_some_and(|route| **route == *log);
                    if !unchanged {
                        shared
                            .routes
                            .insert(app.name.as_str().into(), Arc::new(log.clone()));
                    }
                }
                None => {
                    shared.routes.remove(app.name.as_str());
                }
            }
        }
        shared.paths.clear();
    }

    /// An app's last worker is gone (`slot: None`): its output has nowhere
    /// to go any more.
    pub fn forget(&self, app: &str, slot: Option<u32>) {
        let mut shared = self.lock();
        match slot {
            None => {
                shared.routes.remove(app);
                shared.paths.retain(|(a, _), _| &**a != app);
                shared.errors.remove(app);
            }
            Some(slot) => {
                shared.paths.retain(|(a, s), _| &**a != app || *s != slot);
            }
        }
    }

    /// Queue a line for the app's file, if it has one. Never blocks on I/O:
    /// a full queue drops the line and counts it.
    pub fn write(&self, app: &Arc<str>, slot: u32, stream: Stream, line: &[u8], at: SystemTime) {
        let mut shared = self.lock();
        let Some(spec) = shared.routes.get(app).cloned() else {
            return;
        };
        let key = (Arc::clone(app), slot);
        let path = match shared.paths.get(&key) {
            Some(path) => path.clone(),
            None => {
                let path = spec.path_for(slot);
                shared.paths.insert(key, path.clone());
                path
            }
        };
        let total = shared.queued_bytes;
        let queue = shared.queues.entry(path).or_insert_with(|| FileQueue {
            spec: Arc::clone(&spec),
            records: Vec::new(),
            bytes: 0,
            dropped: Vec::new(),
            last_report: None,
        });
        if !Arc::ptr_eq(&queue.spec, &spec) {
            queue.spec = spec;
        }
        let full = queue.records.len() >= FILE_QUEUE_LINES
            || queue.bytes + line.len() > FILE_QUEUE_BYTES
            || total + line.len() > TOTAL_QUEUE_BYTES;
        if full {
            count_dropped(&mut queue.dropped, app, 1);
        } else {
            queue.bytes += line.len();
            queue.records.push(Record {
                at,
                app: Arc::clone(app),
                slot,
                stream,
                line: line.to_vec(),
            });
            shared.queued_bytes += line.len();
        }
        if !shared.work {
            shared.work = true;
            self.wake.notify_all();
        }
    }

    /// Close and reopen every file (SIGUSR1): after an external logrotate
    /// moved them, new lines go to new files at the configured paths.
    pub fn reopen(&self) {
        let mut shared = self.lock();
        shared.reopen = true;
        self.wake.notify_all();
    }

    /// The current error of each app's log file, for `status`.
    pub fn errors(&self) -> HashMap<String, String> {
        self.lock()
            .errors
            .iter()
            .map(|(app, error)| (app.to_string(), error.clone()))
            .collect()
    }

    /// Everything stopped: write what is queued, report the last drops, and
    /// end the writer — waiting at most `timeout` (a stuck disk must not
    /// keep the supervisor from exiting).
    pub fn finish(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut shared = self.lock();
        shared.stop = true;
        self.wake.notify_all();
        while !shared.writer_done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                warn!("the log files were not all written within {timeout:?}; exiting anyway");
                return;
            }
            shared = self
                .wake
                .wait_timeout(shared, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

fn count_dropped(dropped: &mut Vec<(Arc<str>, u64)>, app: &Arc<str>, count: u64) {
    match dropped.iter_mut().find(|(a, _)| a == app) {
        Some((_, n)) => *n += count,
        None => dropped.push((Arc::clone(app), count)),
    }
}

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
}

/// A file that failed, until it has worked for [`RECOVERED_AFTER`].
struct Failing {
    retry_at: Instant,
    last_failed: Instant,
}

/// The writer thread's own state: open files, and the files that fail.
#[derive(Default)]
struct Writer {
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
    fn run(&mut self, files: &LogFiles) {
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

    fn write_batch(&mut self, files: &LogFiles, batch: Batch) {
        let Batch {
            path,
            spec,
            records,
            mut dropped,
        } = batch;
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
        for (app, count) in dropped {
            warn!(
                event = "log_dropped",
                app = &*app,
                count,
                file = %path.display(),
                "{app}: {count} output lines were not written to {} (the disk is slower than the output, or the file fails)",
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
        let Some(size) = self.open.get(path).map(|open| open.size) else {
            count_dropped(dropped, &record.app, 1);
            return;
        };
        let pending = self.chunk.len();
        render(&mut self.chunk, spec.format, record);
        let length = self.chunk.len() - pending;
        let before = size + pending as u64;
        if before > 0 && before + length as u64 > spec.max_size {
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
    /// Then a new, empty `FILE` is opened.
    fn rotate(&mut self, files: &LogFiles, path: &Path, keep: u32, apps: &[Arc<str>]) {
        self.open.remove(path);
        let numbered = |n: u32| {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        let renamed = (|| -> io::Result<()> {
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

fn open_append(path: &Path) -> io::Result<OpenFile> {
    // std opens with O_CLOEXEC: no worker inherits a log file.
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .open(path)?;
    let size = file.metadata()?.len();
    Ok(OpenFile {
        file,
        size,
        last_write: Instant::now(),
    })
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
