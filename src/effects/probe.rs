//! Readiness probes: `ready: {tcp: ADDR}` and `ready: {http: URL}`.
//!
//! A probe runs every [`PROBE_INTERVAL`] from the spawn until it succeeds; the
//! `ready_timeout` is the reconciler's business. Each attempt is bounded by
//! [`PROBE_ATTEMPT_TIMEOUT`]. An HTTP probe is a plain `GET` that must be
//! answered `2xx`; it reads at most the status line.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use crate::spec::Probe;

/// How often a probe tries.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// How long one attempt may take.
pub const PROBE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much of the answer is read to find the status code.
const MAX_STATUS_LINE: usize = 1024;

/// One attempt: does it answer as ready?
pub async fn attempt(probe: &Probe) -> bool {
    let work = async {
        match probe {
            Probe::Tcp(address) => TcpStream::connect(address).await.is_ok(),
            Probe::Http { address, path } => http_ok(address, path).await.unwrap_or(false),
        }
    };
    tokio::time::timeout(PROBE_ATTEMPT_TIMEOUT, work)
        .await
        .unwrap_or(false)
}

/// Try every [`PROBE_INTERVAL`] until an attempt succeeds.
pub async fn until_ready(probe: &Probe) {
    let mut interval = tokio::time::interval(PROBE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if attempt(probe).await {
            return;
        }
    }
}

async fn http_ok(address: &SocketAddr, path: &str) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: supervise-probe\r\nConnection: close\r\n\r\n"
    );
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
    Ok(status_is_2xx(&answer))
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
}
