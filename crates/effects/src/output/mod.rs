//! Output: the workers' stdout/stderr and the supervisor's own log lines.
//!
//! Everything printed goes through one bounded queue to one writer thread. The
//! supervisor loop and the pumps only ever `try_send`: when the terminal is slow
//! or gone (an SSH hang-up, EPIPE, EIO) lines are dropped and counted, and
//! nothing blocks or panics. A worker's pipes are always read, so a worker whose
//! output nobody reads never blocks, and a flood costs at most the queue.

pub mod rings;
pub mod terminal;

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime};

use super::logfile::LogFiles;
pub use rings::LogHub;

/// Lines waiting for the terminal; beyond this they are dropped (and counted).
pub(crate) const LOG_QUEUE_LINES: usize = 8192;
/// Bytes waiting for the terminal, whatever the line count; beyond, dropped.
pub(crate) const LOG_QUEUE_BYTES: usize = 5 * 1024 * 1024;
/// What workers' output may fill of the queue: the rest is kept for the
/// supervisor's own events, so a flooding worker cannot hide them.
pub(crate) const OUTPUT_SHARE_LINES: usize = LOG_QUEUE_LINES - 1024;
pub(crate) const OUTPUT_SHARE_BYTES: usize = 4 * 1024 * 1024;
/// A longer line is cut here and marked.
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;
/// How much one read from a worker's pipe takes.
const READ_CHUNK_BYTES: usize = 8 * 1024;
/// The line buffer kept between lines (it grows up to MAX_LINE_BYTES for a long one).
const RETAINED_LINE_CAPACITY: usize = 1024;
const TRUNCATION_MARKER: &[u8] = b" [line truncated by supervise]";

enum Message {
    Line(Vec<u8>),
    Flush(SyncSender<()>),
}

/// The sending side of the output queue. Cheap to clone.
#[derive(Clone)]
pub struct LogSink {
    queue: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
    /// Bytes and lines queued and not yet written.
    queued_bytes: Arc<AtomicUsize>,
    queued_lines: Arc<AtomicUsize>,
}

impl LogSink {
    /// Start the writer thread writing to `out`, in human form.
    #[cfg(test)]
    pub(crate) fn start(out: impl Write + Send + 'static) -> LogSink {
        LogSink::start_as(
            out,
            LogFormat::Human {
                colour: false,
                terminal: false,
            },
        )
    }

    /// Start the writer thread writing to `out`; its own note of dropped
    /// lines is written in `format` (a JSON record for `--log-format json`,
    /// whose readers expect nothing else).
    pub fn start_as(out: impl Write + Send + 'static, format: LogFormat) -> LogSink {
        let (queue, lines) = sync_channel(LOG_QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let queued_lines = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&dropped);
        let backlog = (Arc::clone(&queued_bytes), Arc::clone(&queued_lines));
        let spawned = std::thread::Builder::new()
            .name("supervise-log".into())
            .spawn(move || write_lines(lines, out, format, &counter, &backlog.0, &backlog.1));
        if spawned.is_err() {
            // Without a writer every line counts as dropped; nothing else breaks.
            dropped.store(1, Ordering::Relaxed);
        }
        LogSink {
            queue,
            dropped,
            queued_bytes,
            queued_lines,
        }
    }

    /// Queue one of the supervisor's own lines (with its newline). Never blocks.
    pub fn send(&self, line: Vec<u8>) {
        self.enqueue(line, LOG_QUEUE_LINES, LOG_QUEUE_BYTES);
    }

    /// Queue a line a worker printed: only within the workers' share.
    pub(crate) fn send_output(&self, line: Vec<u8>) {
        self.enqueue(line, OUTPUT_SHARE_LINES, OUTPUT_SHARE_BYTES);
    }

    fn enqueue(&self, line: Vec<u8>, max_lines: usize, max_bytes: usize) {
        let len = line.len();
        let bytes = self.queued_bytes.fetch_add(len, Ordering::Relaxed) + len;
        let lines = self.queued_lines.fetch_add(1, Ordering::Relaxed) + 1;
        if bytes > max_bytes
            || lines > max_lines
            || self.queue.try_send(Message::Line(line)).is_err()
        {
            self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            self.queued_lines.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines lost so far (queue full, or the terminal gone).
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Wait (at most `timeout`) until what is queued has been written.
    pub fn flush(&self, timeout: Duration) {
        let (ack, done) = sync_channel(1);
        let deadline = std::time::Instant::now() + timeout;
        let mut message = Message::Flush(ack);
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = done.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
    }
}

/// How often, at most, the writer reports dropped lines.
const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// At exit, how long the output still in the stopped workers' pipes is
/// waited for. Every instance's processes are gone by then, so each pipe
/// ends at once — unless something outside the instances holds one open.
pub(crate) const OUTPUT_DRAIN_WAIT: Duration = Duration::from_secs(1);

fn write_lines(
    lines: Receiver<Message>,
    mut out: impl Write,
    format: LogFormat,
    dropped: &AtomicU64,
    queued_bytes: &AtomicUsize,
    queued_lines: &AtomicUsize,
) {
    let mut reported = 0;
    let mut last_report = std::time::Instant::now();
    loop {
        let message = match lines.recv_timeout(Duration::from_secs(1)) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        match message {
            Message::Line(line) => {
                let written = match format {
                    LogFormat::Json => terminal::json_c1_escaped(&line),
                    LogFormat::Human { .. } => std::borrow::Cow::Borrowed(&line[..]),
                };
                if out.write_all(&written).is_err() {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
                queued_bytes.fetch_sub(line.len(), Ordering::Relaxed);
                queued_lines.fetch_sub(1, Ordering::Relaxed);
            }
            Message::Flush(ack) => {
                let _ = out.flush();
                let _ = ack.try_send(());
            }
        }
        let now_dropped = dropped.load(Ordering::Relaxed);
        if now_dropped > reported && last_report.elapsed() >= DROP_REPORT_INTERVAL {
            let _ = out.write_all(&drop_note(now_dropped - reported, format));
            reported = now_dropped;
            last_report = std::time::Instant::now();
        }
    }
}

/// How lines are rendered.
/// The writer's own line saying `count` lines were dropped.
fn drop_note(count: u64, format: LogFormat) -> Vec<u8> {
    let message = format!("{count} output lines dropped (the terminal is too slow or gone)");
    let mut line = match format {
        LogFormat::Human { .. } => format!("supervise | {message}").into_bytes(),
        LogFormat::Json => serde_json::json!({
            "timestamp": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            "level": "WARN",
            "message": message,
            "event": "output_dropped",
            "count": count,
        })
        .to_string()
        .into_bytes(),
    };
    line.push(b'\n');
    line
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `web.2 | line`; `colour` for the prefix, `terminal` when the output
    /// is one: then what workers print is made [`terminal::printable`].
    Human {
        colour: bool,
        terminal: bool,
    },
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Who printed a line: `web.2`.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) app: Arc<str>,
    pub(crate) slot: u32,
}

/// A stable colour per app name (ANSI 31–36).
fn colour_of(app: &str) -> u8 {
    let hash = app
        .bytes()
        .fold(5381u32, |h, b| h.wrapping_mul(33) ^ u32::from(b));
    31 + (hash % 6) as u8
}

/// Render one line a worker printed: on a terminal, made printable (see
/// [`terminal`]); otherwise as printed.
pub(crate) fn render_line(
    source: &Source,
    stream: Stream,
    line: &[u8],
    format: LogFormat,
) -> Vec<u8> {
    match format {
        LogFormat::Human { colour, terminal } => {
            let mut out = Vec::with_capacity(line.len() + source.app.len() + 16);
            if colour {
                out.extend_from_slice(
                    format!(
                        "\x1b[{}m{}.{} |\x1b[0m ",
                        colour_of(&source.app),
                        source.app,
                        source.slot
                    )
                    .as_bytes(),
                );
            } else {
                out.extend_from_slice(format!("{}.{} | ", source.app, source.slot).as_bytes());
            }
            if terminal {
                out.extend_from_slice(&terminal::printable_bytes(line));
            } else {
                out.extend_from_slice(line);
            }
            out.push(b'\n');
            out
        }
        LogFormat::Json => {
            let record = serde_json::json!({
                "timestamp": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
                "event": "output",
                "app": &*source.app,
                "slot": source.slot,
                "stream": stream.name(),
                "line": String::from_utf8_lossy(line),
            });
            let mut out = record.to_string().into_bytes();
            out.push(b'\n');
            out
        }
    }
}

/// Splits a byte stream into lines of at most [`MAX_LINE_BYTES`].
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct LineSplitter {
    pending: Vec<u8>,
    /// Inside a line that was already cut: drop bytes up to its newline.
    skipping: bool,
}

impl LineSplitter {
    /// Feed bytes; complete lines (without the newline) go to `emit`.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(&[u8])) {
        while !bytes.is_empty() {
            match bytes.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    if self.skipping {
                        self.skipping = false;
                    } else {
                        self.push_bounded(&bytes[..end], emit);
                        if !self.skipping {
                            emit(&self.pending);
                        }
                        self.skipping = false;
                    }
                    self.pending.clear();
                    // A long line once must not pin 64 KiB per stream for ever.
                    if self.pending.capacity() > RETAINED_LINE_CAPACITY {
                        self.pending.shrink_to(RETAINED_LINE_CAPACITY);
                    }
                    bytes = &bytes[end + 1..];
                }
                None => {
                    if !self.skipping {
                        self.push_bounded(bytes, emit);
                    }
                    bytes = &[];
                }
            }
        }
    }

    fn push_bounded(&mut self, bytes: &[u8], emit: &mut impl FnMut(&[u8])) {
        let room = MAX_LINE_BYTES - self.pending.len();
        if bytes.len() <= room {
            self.pending.extend_from_slice(bytes);
            return;
        }
        self.pending.extend_from_slice(&bytes[..room]);
        self.pending.extend_from_slice(TRUNCATION_MARKER);
        emit(&self.pending);
        self.pending.clear();
        self.skipping = true;
    }

    /// The stream ended: emit a last line without a newline, if any.
    pub(crate) fn finish(&mut self, emit: &mut impl FnMut(&[u8])) {
        if !self.pending.is_empty() && !self.skipping {
            emit(&self.pending);
        }
        self.pending.clear();
    }
}

std::thread_local! {
    /// The one read buffer every pump on this thread shares: pumps run on the
    /// loop's single thread and never hold it across an await, so thousands of
    /// idle workers cost no buffer each.
    static CHUNK: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_CHUNK_BYTES]);
}

/// Where each line a worker prints goes.
pub(crate) struct Destinations {
    pub(crate) sink: LogSink,
    pub(crate) logs: Arc<LogHub>,
    pub(crate) files: Arc<LogFiles>,
    pub(crate) format: LogFormat,
}

/// One pump as an upgrade hands it over: its pipe (kept open across the
/// exec) and the part of a line it has read.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PumpState {
    pub(crate) app: String,
    pub(crate) slot: u32,
    pub(crate) stream: Stream,
    pub(crate) fd: std::os::fd::RawFd,
    pub(crate) splitter: LineSplitter,
}

/// What a running pump shares with [`Pumps`]: its fd and its line buffer,
/// so that an upgrade can take them between two of its reads.
struct PumpShared {
    source: Source,
    stream: Stream,
    fd: std::os::fd::RawFd,
    splitter: std::sync::Mutex<LineSplitter>,
}

/// Every pump that runs. The loop and the pumps share one thread (the
/// runtime is single-threaded), so when the loop looks, each pump is
/// between two reads: every byte it read is in a ring or in its splitter.
#[derive(Clone, Default)]
pub(crate) struct Pumps {
    running: Arc<std::sync::Mutex<Running>>,
    /// Told whenever a pump ends.
    ended: Arc<tokio::sync::Notify>,
}

/// The pumps that run, by a number given at their start (the last one given first).
#[derive(Default)]
struct Running(u64, std::collections::HashMap<u64, Arc<PumpShared>>);

impl Pumps {
    fn register(&self, shared: Arc<PumpShared>) -> u64 {
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        running.0 += 1;
        let id = running.0;
        running.1.insert(id, shared);
        id
    }

    fn remove(&self, id: u64) {
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        running.1.remove(&id);
        self.ended.notify_waiters();
    }

    fn is_empty(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1
            .is_empty()
    }

    /// Until every pump has read its pipe to the end (and sent its last
    /// line on), or `within` has passed.
    pub(crate) async fn finished(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Made before the look, so that an end between the two counts.
            let ended = self.ended.notified();
            if self.is_empty() || tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }

    /// Every running pump's fd and partial line, for an upgrade.
    pub(crate) fn export(&self) -> Vec<PumpState> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        running
            .1
            .values()
            .map(|pump| PumpState {
                app: pump.source.app.to_string(),
                slot: pump.source.slot,
                stream: pump.stream,
                fd: pump.fd,
                splitter: pump
                    .splitter
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
            })
            .collect()
    }
}

/// Read one of a worker's pipes until EOF, starting with what `splitter`
/// holds (a line the previous image had begun).
pub(crate) async fn pump(
    fd: OwnedFd,
    source: Source,
    stream: Stream,
    destinations: Destinations,
    splitter: LineSplitter,
    pumps: Pumps,
) {
    use std::os::fd::AsRawFd;
    let shared = Arc::new(PumpShared {
        source: source.clone(),
        stream,
        fd: fd.as_raw_fd(),
        splitter: std::sync::Mutex::new(splitter),
    });
    let id = pumps.register(Arc::clone(&shared));
    let Ok(pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        pumps.remove(id);
        return;
    };
    let Destinations {
        sink,
        logs,
        files,
        format,
    } = destinations;
    let mut at = SystemTime::now();
    let emit = |line: &[u8], at: SystemTime| {
        logs.push(&source.app, source.slot, line, at);
        files.write(&source.app, source.slot, stream, line, at);
        sink.send_output(render_line(&source, stream, line, format));
    };
    let splitter = || {
        shared
            .splitter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    loop {
        if pipe.readable().await.is_err() {
            break;
        }
        let read = CHUNK.with_borrow_mut(|chunk| match pipe.try_read(chunk) {
            Ok(0) => Err(()),
            Ok(n) => {
                at = SystemTime::now();
                splitter().feed(&chunk[..n], &mut |line| emit(line, at));
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(_) => Err(()),
        });
        if read.is_err() {
            break;
        }
    }
    // Gone from the registry before its fd closes (with `pipe`).
    pumps.remove(id);
    splitter().finish(&mut |line| emit(line, at));
}

#[cfg(test)]
mod tests;
