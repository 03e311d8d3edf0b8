//! The `/metrics` endpoint (the top-level `metrics` key): a small HTTP/1.1
//! responder on tokio that answers `GET /metrics` from a snapshot of the
//! supervisor.
//!
//! Why not hyper or axum: there is one route, one method and one reply per
//! connection (`Connection: close`), and what matters is that no client can
//! hurt the supervisor — each bound is a const below (the size of a request
//! head, the time to send it and to take the reply, connections at once,
//! how often the loop is asked). Written out, that is a page of code whose
//! every limit is visible; with hyper it would be a dozen more crates and
//! the same limits to find and set in its builders.
//!
//! What runs where: the listener is accepted **on the loop** (in its
//! `select!`, like any other event source), so that dropping the
//! [`Endpoint`]'s listener closes it at once and an edit that moves the port
//! can bind the new one straight away. Each connection then lives in a task
//! of its own; it asks the loop for a [`Snapshot`] through a bounded queue
//! (the loop answers in one pass over the core, without I/O), and the /proc
//! and cgroup reading and the text encoding run on a blocking thread
//! (`spawn_blocking`). Scrapes that come together share one answer: a reply
//! rendered less than [`FRESH_FOR`] ago in the format asked for is served
//! again, so the loop makes at most two snapshots (one per format) in any
//! [`FRESH_FOR`], however many scrapers come — 200 at once cost it one.
//!
//! Sockets are close-on-exec (std binds with `SOCK_CLOEXEC`, tokio accepts
//! with `accept4(SOCK_CLOEXEC)`): no worker inherits them.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::metrics::{CpuLedger, Format, Snapshot};

/// Snapshot requests waiting for the loop (scrapes are serialised before
/// they ask, so one is all there can be).
pub(crate) const SNAPSHOT_QUEUE: usize = 1;
/// Scrapers served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 32;
/// The most a request head (request line and headers) may take.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read the reply.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one scrape may wait for the loop's snapshot and its measuring.
pub(crate) const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// A rendered reply younger than this is served again to the next scraper.
pub(crate) const FRESH_FOR: Duration = Duration::from_millis(200);
/// The first pause after a failed accept (EMFILE), doubled each time…
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// …up to this.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What a connection asks the loop for: a snapshot, sent back here.
pub(crate) type SnapshotRequest = oneshot::Sender<Snapshot>;

/// The metrics endpoint the file asks for, following its edits.
pub(crate) struct Endpoint {
    serving: Option<Listening>,
    requests: mpsc::Sender<SnapshotRequest>,
    /// Kept across rebinding, so moving the port does not reset a counter.
    ledger: Arc<std::sync::Mutex<CpuLedger>>,
    slots: Arc<Semaphore>,
    /// The pause after the next failed accept, and until when not to try
    /// again after the last one (kept here: `accept` is cancelled and made
    /// anew at every turn of the loop).
    backoff: Duration,
    retry_at: Option<tokio::time::Instant>,
}

/// The endpoint as an upgrade hands it over: its listener (kept open across
/// the exec, so a scrape in the window waits in its backlog and `:0` keeps
/// its port) and the CPU each slot was seen to use (a counter never goes
/// back).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct MetricsState {
    pub(crate) listener: Option<(SocketAddr, std::os::fd::RawFd)>,
    pub(crate) ledger: CpuLedger,
}

/// A bound listener, and the address the file gave for it (`:0` stays
/// `:0` there, while `bound` has the real port), with the scrapes it
/// serves (a new listener shares no reply rendered before it).
struct Listening {
    wanted: SocketAddr,
    bound: SocketAddr,
    listener: TcpListener,
    scraper: Arc<Scraper>,
}

impl Endpoint {
    /// No listener yet; snapshots are asked for through `requests`.
    pub(crate) fn new(requests: mpsc::Sender<SnapshotRequest>) -> Endpoint {
        Endpoint {
            serving: None,
            requests,
            ledger: Arc::new(std::sync::Mutex::new(CpuLedger::default())),
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            backoff: ACCEPT_BACKOFF_MIN,
            retry_at: None,
        }
    }

    /// For an upgrade.
    pub fn export(&self) -> MetricsState {
        use std::os::fd::AsRawFd;
        MetricsState {
            listener: self
                .serving
                .as_ref()
                .map(|serving| (serving.wanted, serving.listener.as_raw_fd())),
            ledger: self
                .ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }

    /// The endpoint the previous image handed over.
    pub(crate) fn restore(
        requests: mpsc::Sender<SnapshotRequest>,
        state: MetricsState,
    ) -> io::Result<Endpoint> {
        let mut endpoint = Endpoint::new(requests);
        endpoint.ledger = Arc::new(std::sync::Mutex::new(state.ledger));
        if let Some((wanted, fd)) = state.listener {
            let fd = effects::upgrade::exec::adopt_fd(fd, "the /metrics listener")?;
            let listener = std::net::TcpListener::from(fd);
            listener.set_nonblocking(true)?;
            let listener = TcpListener::from_std(listener)?;
            let bound = listener.local_addr().unwrap_or(wanted);
            let scraper = Arc::new(Scraper {
                requests: endpoint.requests.clone(),
                last: tokio::sync::Mutex::new(Vec::new()),
                ledger: endpoint.ledger.clone(),
            });
            endpoint.serving = Some(Listening {
                wanted,
                bound,
                listener,
                scraper,
            });
        }
        Ok(endpoint)
    }

    /// Serve on `wanted`, the file's `metrics` address: bind it when it
    /// changed or the last bind failed; close the listener when it is gone.
    /// A bind that fails is logged (`metrics_bind_failed`) and the
    /// supervisor runs on without metrics; the next applied version of the
    /// file tries again.
    pub(crate) fn follow(&mut self, wanted: Option<SocketAddr>) {
        if let (Some(serving), Some(wanted)) = (&self.serving, wanted)
            && serving.wanted == wanted
        {
            return;
        }
        if let Some(old) = self.serving.take() {
            let address = old.bound;
            // Closed before it is said: whoever reads the event finds the
            // port closed.
            drop(old);
            info!(
                event = "metrics_stopped",
                address = %address,
                "stopped serving /metrics on {address}"
            );
        }
        let Some(wanted) = wanted else {
            return;
        };
        match bind(wanted) {
            Ok(listener) => {
                let bound = listener.local_addr().unwrap_or(wanted);
                info!(
                    event = "metrics_listening",
                    address = %bound,
                    "serving /metrics on http://{bound}/metrics"
                );
                let scraper = Arc::new(Scraper {
                    requests: self.requests.clone(),
                    last: tokio::sync::Mutex::new(Vec::new()),
                    ledger: self.ledger.clone(),
                });
                self.serving = Some(Listening {
                    wanted,
                    bound,
                    listener,
                    scraper,
                });
            }
            Err(error) => error!(
                event = "metrics_bind_failed",
                address = %wanted,
                error = %error,
                "cannot serve /metrics on {wanted}: {error}; running on without metrics (free the address or change `metrics`, then save the file)"
            ),
        }
    }

    /// The next scraper, with its connection slot and what serves it;
    /// never, while nothing is served. Cancel-safe: it is one branch of the
    /// loop's `select!`.
    pub(crate) async fn accept(&mut self) -> Scrape {
        loop {
            let Some(serving) = &self.serving else {
                return std::future::pending().await;
            };
            if let Some(retry_at) = self.retry_at {
                tokio::time::sleep_until(retry_at).await;
            }
            let Ok(permit) = self.slots.clone().acquire_owned().await else {
                return std::future::pending().await;
            };
            match serving.listener.accept().await {
                Ok((stream, _)) => {
                    self.backoff = ACCEPT_BACKOFF_MIN;
                    self.retry_at = None;
                    return Scrape {
                        stream,
                        permit,
                        scraper: serving.scraper.clone(),
                    };
                }
                Err(error) => {
                    warn!(
                        event = "metrics_accept_failed",
                        "/metrics: cannot accept a client ({error}); trying again in {}ms",
                        self.backoff.as_millis()
                    );
                    self.retry_at = Some(tokio::time::Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            }
        }
    }
}

/// An accepted scraper.
pub(crate) struct Scrape {
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
    scraper: Arc<Scraper>,
}

impl Scrape {
    /// Answer it in a task of its own.
    pub(crate) fn serve(self) {
        tokio::spawn(async move {
            if let Err(error) = connection(self.stream, &self.scraper).await {
                debug!("/metrics connection: {error}");
            }
            drop(self.permit);
        });
    }
}

/// Bind `address` for accepting on this thread's runtime.
fn bind(address: SocketAddr) -> io::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// What the scrapes of one listener share: the way to the loop, the last
/// reply, and the CPU time each slot's processes were seen to use.
struct Scraper {
    requests: mpsc::Sender<SnapshotRequest>,
    /// One scrape renders at a time; the others wait here and take its
    /// reply: the last one rendered in each format (at most two).
    last: tokio::sync::Mutex<Vec<Rendered>>,
    ledger: Arc<std::sync::Mutex<CpuLedger>>,
}

struct Rendered {
    at: Instant,
    format: Format,
    body: Arc<String>,
}

/// Why a scrape has no metrics to show.
#[derive(Debug, thiserror::Error)]
enum ScrapeError {
    #[error("the supervisor did not answer (it is shutting down or busy)")]
    Unavailable,
    #[error("cannot render the metrics: {0}")]
    Render(String),
}

impl Scraper {
    async fn scrape(&self, format: Format) -> Result<Arc<String>, ScrapeError> {
        let mut last = self.last.lock().await;
        if let Some(rendered) = last
            .iter()
            .find(|r| r.format == format && r.at.elapsed() < FRESH_FOR)
        {
            return Ok(rendered.body.clone());
        }
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(reply)
            .await
            .map_err(|_| ScrapeError::Unavailable)?;
        let snapshot = answer.await.map_err(|_| ScrapeError::Unavailable)?;
        let ledger = self.ledger.clone();
        let body = tokio::task::spawn_blocking(move || {
            let mut ledger = ledger
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            crate::metrics::render(crate::metrics::measure(snapshot, &mut ledger), format)
        })
        .await
        .map_err(|e| ScrapeError::Render(e.to_string()))?
        .map_err(|e| ScrapeError::Render(e.to_string()))?;
        let body = Arc::new(body);
        last.retain(|r| r.format != format);
        last.push(Rendered {
            at: Instant::now(),
            format,
            body: body.clone(),
        });
        Ok(body)
    }
}

/// A request the endpoint answers with metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// `HEAD`: the headers only.
    pub(crate) head_only: bool,
    pub(crate) format: Format,
}

/// An HTTP status with its reason phrase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    HeadersTooLarge,
    Internal,
    Unavailable,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::RequestTimeout => "408 Request Timeout",
            Status::HeadersTooLarge => "431 Request Header Fields Too Large",
            Status::Internal => "500 Internal Server Error",
            Status::Unavailable => "503 Service Unavailable",
        }
    }
}

/// Read one request head, answer it, close.
async fn connection(mut stream: TcpStream, scraper: &Scraper) -> io::Result<()> {
    let head = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => parse_request(&head),
        Ok(Ok(None)) => Err(Status::HeadersTooLarge),
        // The client closed or broke the connection: nobody to answer.
        Ok(Err(error)) => return Err(error),
        Err(_) => Err(Status::RequestTimeout),
    };
    let reply = match head {
        Ok(request) => {
            match tokio::time::timeout(SCRAPE_TIMEOUT, scraper.scrape(request.format)).await {
                Ok(Ok(body)) => response(
                    Status::Ok,
                    request.format.content_type(),
                    &body,
                    request.head_only,
                ),
                Ok(Err(error @ ScrapeError::Render(_))) => {
                    error!("/metrics: {error}");
                    plain(Status::Internal, &error.to_string())
                }
                Ok(Err(error)) => plain(Status::Unavailable, &error.to_string()),
                Err(_) => plain(Status::Unavailable, "the supervisor did not answer in time"),
            }
        }
        Err(Status::NotFound) => plain(Status::NotFound, "only /metrics is served here"),
        Err(Status::MethodNotAllowed) => plain(Status::MethodNotAllowed, "use GET /metrics"),
        Err(status) => plain(status, "send GET /metrics HTTP/1.1"),
    };
    tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "client too slow to read"))?
}

/// The request head (up to its blank line), or `None` when it is longer
/// than [`MAX_REQUEST_BYTES`]. An end of stream before the blank line is
/// an error.
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the end of the request head",
            ));
        }
        let searched_from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = head_end(&head[searched_from..]) {
            head.truncate(searched_from + end);
            return Ok(Some(head));
        }
        if head.len() >= MAX_REQUEST_BYTES {
            return Ok(None);
        }
    }
}

/// Where the blank line that ends a head ends (`\r\n\r\n`, or a bare
/// `\n\n` from a hand-typed request).
fn head_end(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find_map(|i| {
        let rest = &bytes[i..];
        if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// What the request head asks for: metrics (in the format its `Accept`
/// header prefers), or the error status to answer with.
pub(crate) fn parse_request(head: &[u8]) -> Result<Request, Status> {
    let text = std::str::from_utf8(head).map_err(|_| Status::BadRequest)?;
    let mut lines = text.lines();
    let request_line = lines.next().ok_or(Status::BadRequest)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Status::BadRequest);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(Status::BadRequest);
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return Err(Status::NotFound);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Err(Status::MethodNotAllowed),
    };
    let accept = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("accept"))
        .map(|(_, value)| value.trim());
    Ok(Request {
        head_only,
        format: Format::from_accept(accept),
    })
}

/// A whole reply: status line, headers, and the body unless `head_only`.
fn response(status: Status, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.line(),
        body.len()
    );
    if status == Status::MethodNotAllowed {
        reply.push_str("Allow: GET, HEAD\r\n");
    }
    reply.push_str("\r\n");
    let mut reply = reply.into_bytes();
    if !head_only {
        reply.extend_from_slice(body.as_bytes());
    }
    reply
}

/// An error reply with a one-line text body.
fn plain(status: Status, message: &str) -> Vec<u8> {
    response(
        status,
        "text/plain; charset=utf-8",
        &format!("{message}\n"),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_metrics_is_served_in_the_format_accept_asks_for() {
        let plain = parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            plain,
            Ok(Request {
                head_only: false,
                format: Format::Prometheus
            })
        );
        let prometheus = b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\naccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n";
        assert_eq!(
            parse_request(prometheus).map(|r| r.format),
            Ok(Format::OpenMetrics)
        );
        assert_eq!(
            parse_request(b"HEAD /metrics HTTP/1.0\n\n").map(|r| r.head_only),
            Ok(true)
        );
    }

    #[test]
    fn anything_else_gets_an_error_status() {
        for (head, status) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], Status::NotFound),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", Status::NotFound),
            (b"POST /metrics HTTP/1.1\r\n\r\n", Status::MethodNotAllowed),
            (b"GET /metrics\r\n\r\n", Status::BadRequest),
            (b"GET /metrics HTTP/2\r\n\r\n", Status::BadRequest),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", Status::BadRequest),
            (b"GET metrics HTTP/1.1\r\n\r\n", Status::BadRequest),
            (b"\xff\xfe\r\n\r\n", Status::BadRequest),
            (b"\r\n\r\n", Status::BadRequest),
            (b"", Status::BadRequest),
        ] {
            assert_eq!(
                parse_request(head),
                Err(status),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn a_reply_says_its_length_and_closes() {
        let reply = response(Status::Ok, "text/plain", "abc", false);
        assert_eq!(
            String::from_utf8(reply).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
        );
        let head = response(Status::Ok, "text/plain", "abc", true);
        assert!(
            String::from_utf8(head)
                .unwrap()
                .ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n")
        );
    }
}
