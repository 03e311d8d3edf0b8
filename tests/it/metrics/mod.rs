//! `/metrics` (the top-level `metrics` key) against a real supervisor, real
//! sockets, `promtool` and a real Prometheus server — and hostile clients.
//!
//! `promtool` and `prometheus` come from Debian's `prometheus` package,
//! which `.ci/run` installs: without them these tests fail, saying so.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;
use supervise::metrics::endpoint::{MAX_CONNECTIONS, MAX_REQUEST_BYTES, REQUEST_TIMEOUT};

mod address;
mod counters;
mod hostile;
mod prometheus;

/// How long one HTTP exchange with the endpoint may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

fn ecosystem(metrics: &str) -> String {
    format!(
        "metrics: {metrics}\napps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: 2\n    ready: none\n"
    )
}

/// The address of the `metrics_listening` event not yet waited for.
fn metrics_address(s: &mut Supervised) -> SocketAddr {
    let event = s.wait_for("metrics_listening", |e| e["event"] == "metrics_listening");
    event["address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("an address in {event}"))
}

/// One HTTP exchange: `request` sent as is, the whole reply read (the
/// server closes the connection).
fn exchange(address: SocketAddr, request: &[u8]) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect_timeout(&address, HTTP_TIMEOUT)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    stream.write_all(request)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    Reply::parse(&bytes)
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn parse(bytes: &[u8]) -> std::io::Result<Reply> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let text = String::from_utf8_lossy(bytes);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| bad("no end of head"))?;
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no status"))?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Ok(Reply {
            status,
            headers,
            body: body.to_string(),
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn get(address: SocketAddr, path: &str, accept: Option<&str>) -> Reply {
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{accept}Connection: close\r\n\r\n");
    exchange(address, request.as_bytes())
        .unwrap_or_else(|e| panic!("GET {path} from {address}: {e}"))
}

fn scrape(address: SocketAddr) -> String {
    let reply = get(address, "/metrics", None);
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.body
}

/// The value of the series `series` (name and labels exactly as rendered).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Scrape until `series` has `expected`, within [`WAIT`].
fn wait_value(address: SocketAddr, series: &str, expected: f64) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = scrape(address);
        if value(&text, series) == Some(expected) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never became {expected}; last scrape:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pid_of(event: &Value) -> i32 {
    event["pid"].as_i64().expect("a pid") as i32
}

fn kill(pid: i32) {
    // SAFETY: SIGKILL to a worker of the supervisor this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
}

/// A tool of Debian's `prometheus` package, or a loud failure.
fn tool(name: &str) -> &str {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{name}` is not installed: `apt-get install prometheus` (.ci/run does)"
    );
    name
}
