//! Readiness probes (`ready: {tcp: ADDR}`, `ready: {http: URL}`) and the
//! same two kinds of liveness check (`health: {tcp|http}`).
//!
//! A readiness probe runs every [`PROBE_INTERVAL`] from the spawn until it
//! succeeds; the `ready_timeout` is the reconciler's business. Each attempt
//! is bounded by [`PROBE_ATTEMPT_TIMEOUT`]. A liveness check is one attempt,
//! bounded by its `health.timeout`, that says why it failed. An HTTP probe
//! is a plain `GET` that must be answered `2xx`; it reads at most the
//! status line.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) use model::spec::Probe;

/// How often a probe tries.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// How long one attempt may take.
pub(crate) const PROBE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much of the answer is read to find the status code.
const MAX_STATUS_LINE: usize = 1024;

/// One attempt: does it answer as ready?
pub(crate) async fn attempt(probe: &Probe) -> bool {
    check(probe, PROBE_ATTEMPT_TIMEOUT).await.is_ok()
}

/// One attempt within `timeout`: `Ok`, or why not (`connection refused`,
/// `HTTP 500`, `no answer within 2s`).
pub(crate) async fn check(probe: &Probe, timeout: Duration) -> Result<(), String> {
    let work = async {
        match probe {
            Probe::Tcp(address) => TcpStream::connect(address)
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Probe::Http { address, path } => match http_status(address, path).await {
                Ok(status) if status_is_2xx(&status) => Ok(()),
                Ok(status) => Err(describe_status(&status)),
                Err(error) => Err(error.to_string()),
            },
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            ))
        })
}

/// Try every [`PROBE_INTERVAL`] until an attempt succeeds.
pub(crate) async fn until_ready(probe: &Probe) {
    let mut interval = tokio::time::interval(PROBE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if attempt(probe).await {
            return;
        }
    }
}

/// The request target of a `GET` for `path`: its origin form (RFC 9110
/// §7.1, RFC 9112 §3.2.1), `/path?query`. A `#fragment` is the client's
/// alone and never sent (RFC 9110 §4.2.5); a target that does not start
/// with `/` (`?x=1`, nothing) gets one.
fn request_target(path: &str) -> String {
    let without_fragment = path.split_once('#').map_or(path, |(before, _)| before);
    if without_fragment.starts_with('/') {
        without_fragment.to_string()
    } else {
        format!("/{without_fragment}")
    }
}

/// The request a probe of `path` on `address` sends.
fn http_request(address: &SocketAddr, path: &str) -> String {
    let target = request_target(path);
    format!(
        "GET {target} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: supervise-probe\r\nConnection: close\r\n\r\n"
    )
}

/// The first bytes of the answer to a `GET` (its status line).
async fn http_status(address: &SocketAddr, path: &str) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(address).await?;
    let request = http_request(address, path);
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::with_capacity(64);
    let mut chunk = [0u8; 256];
    while !answer.contains(&b'\n') && answer.len() < MAX_STATUS_LINE {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    Ok(answer)
}

/// `HTTP 500`, or what was answered instead of a status line.
fn describe_status(answer: &[u8]) -> String {
    let line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    // Split as `status_is_2xx` does: one space between the fields.
    let mut words = line.trim_end().split(' ');
    match (words.next(), words.next()) {
        (Some(version), Some(code)) if version.starts_with("HTTP/") && !code.is_empty() => {
            format!("HTTP {}", code.chars().take(12).collect::<String>())
        }
        _ if line.trim().is_empty() => "an empty answer".to_string(),
        _ => format!(
            "not an HTTP answer: {:?}",
            line.chars().take(40).collect::<String>()
        ),
    }
}

/// `HTTP/1.x 2NN …`
fn status_is_2xx(answer: &[u8]) -> bool {
    let line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|b| *b == b' ');
    let version = words.next().unwrap_or_default();
    let code = words.next().unwrap_or_default();
    version.starts_with(b"HTTP/")
        && code.len() == 3
        && code[0] == b'2'
        && code.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_status_lines_count() {
        assert!(status_is_2xx(b"HTTP/1.1 200 OK\r\n"));
        assert!(status_is_2xx(b"HTTP/1.0 204 No Content\r\n"));
        assert!(!status_is_2xx(b"HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(!status_is_2xx(b"HTTP/1.1 2000\r\n"));
        assert!(!status_is_2xx(b"SSH-2.0-OpenSSH\r\n"));
        assert!(!status_is_2xx(b""));
    }

    #[test]
    fn the_request_line_carries_no_fragment() {
        let address: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for (path, target) in [
            ("/health#top", "/health"),
            ("/health?x=1#frag#more", "/health?x=1"),
            ("/#", "/"),
            ("#frag", "/"),
            ("", "/"),
            ("?ready=1", "/?ready=1"),
            ("/a%23b", "/a%23b"),
        ] {
            let request = http_request(&address, path);
            let line = request.lines().next().unwrap_or_default();
            assert_eq!(line, format!("GET {target} HTTP/1.1"), "{path}");
        }
    }

    #[tokio::test]
    async fn a_fragment_never_reaches_the_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 512];
            let n = socket.read(&mut request).await.unwrap_or(0);
            let _ = socket.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
            String::from_utf8_lossy(&request[..n]).into_owned()
        });
        let probe = Probe::Http {
            address,
            path: "/health#section".into(),
        };
        assert!(attempt(&probe).await);
        let request = server.await.unwrap();
        assert!(
            request.starts_with("GET /health HTTP/1.1\r\n"),
            "{request:?}"
        );
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_real_listeners() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(!attempt(&Probe::Tcp(closed)).await);

        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        assert!(attempt(&Probe::Tcp(open.local_addr().unwrap())).await);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for status in ["503 Busy", "200 OK"] {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 512];
                let _ = socket.read(&mut request).await;
                let _ = socket
                    .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let probe = Probe::Http {
            address,
            path: "/health".into(),
        };
        assert!(!attempt(&probe).await, "503 is not ready");
        assert!(attempt(&probe).await, "200 is ready");
    }

    #[tokio::test]
    async fn a_check_says_why_it_failed() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let refused = check(&Probe::Tcp(closed), Duration::from_secs(1)).await;
        assert!(refused.unwrap_err().contains("refused"));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let probe = Probe::Http {
            address,
            path: "/health".into(),
        };
        // Accepted and never answered: the timeout says so.
        let silent = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(socket);
            listener
        });
        let slow = check(&probe, Duration::from_millis(200)).await;
        assert_eq!(slow.unwrap_err(), "no answer within 200ms");
        let listener = silent.await.unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 512];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
                .await;
        });
        assert_eq!(
            check(&probe, Duration::from_secs(1)).await.unwrap_err(),
            "HTTP 500"
        );
    }
}
