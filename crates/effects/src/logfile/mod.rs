//! Log files: what workers print, also written to the files the ecosystem
//! file names (`log: {file, max_size, keep, format}`), rotated by size by
//! supervise itself — no logrotate, no module to install, no file that grows
//! until the disk is full.
//!
//! The output pumps run on the loop's thread, so they must never wait for a
//! disk: [`LogFiles::write`] puts a line in the bounded queue of its file and
//! returns. One writer thread (`supervise-logfiles`, [`writer`]) takes the queues, renders
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
//! counted — and said as the others are, in one `log_dropped` at most every
//! [`DROP_REPORT_INTERVAL`] per file, however many batches failed — and
//! `log_file_recovered` says when it works again. A worker never notices any
//! of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tracing::warn;

mod writer;

use writer::Writer;

use super::output::Stream;
use model::spec::{Desired, LogSpec};

/// Lines one file's queue holds before lines are dropped.
pub(crate) const FILE_QUEUE_LINES: usize = 64 * 1024;
/// Bytes one file's queue holds before lines are dropped.
pub(crate) const FILE_QUEUE_BYTES: usize = 8 * 1024 * 1024;
/// Bytes all the queues hold together (1,000 per-instance files must not
/// take 1,000 times one queue).
pub(crate) const TOTAL_QUEUE_BYTES: usize = 64 * 1024 * 1024;
/// How often, at most, a file's dropped lines are reported.
pub const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// How long after an error a file is tried again.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// A file that failed is said to work again once it has taken every write
/// for this long: a disk that is full takes a short write now and then, and
/// that is not a recovery to report (nor a new error after it).
pub(crate) const RECOVERED_AFTER: Duration = Duration::from_secs(3);
/// A file nothing was written to for this long is closed (reopened by the
/// next line): files of apps that left the ecosystem file do not stay open.
pub(crate) const IDLE_CLOSE: Duration = Duration::from_secs(60);

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
    /// Lines dropped since the last report, per app: those a full queue
    /// refused, and those of batches the file did not take (it fails).
    dropped: Vec<(Arc<str>, u64)>,
    last_report: Option<Instant>,
}

impl FileQueue {
    fn new(spec: Arc<LogSpec>) -> FileQueue {
        FileQueue {
            spec,
            records: Vec::new(),
            bytes: 0,
            dropped: Vec::new(),
            last_report: None,
        }
    }

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
        files.spawn_writer();
        files
    }

    /// After [`LogFiles::finish`] (for an upgrade whose exec then failed):
    /// write again, with a new writer thread.
    pub(crate) fn restart(self: &Arc<Self>) {
        {
            let mut shared = self.lock();
            shared.stop = false;
            if !shared.writer_done {
                // Still writing (the wait ran out): it goes on.
                return;
            }
            shared.writer_done = false;
        }
        self.spawn_writer();
    }

    fn spawn_writer(self: &Arc<Self>) {
        let files = self;
        let writer = Arc::clone(files);
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
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves plain data behind: go on.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Route each app's output by a new version of the file.
    pub(crate) fn route(&self, desired: &Desired) {
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
    pub(crate) fn forget(&self, app: &str, slot: Option<u32>) {
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
    pub(crate) fn write(
        &self,
        app: &Arc<str>,
        slot: u32,
        stream: Stream,
        line: &[u8],
        at: SystemTime,
    ) {
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
        let queue = shared
            .queues
            .entry(path)
            .or_insert_with(|| FileQueue::new(Arc::clone(&spec)));
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
