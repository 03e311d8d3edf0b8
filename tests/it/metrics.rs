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

#[test]
fn the_metrics_count_a_killed_worker_and_promtool_accepts_them() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    let first = s.wait_for("web.0 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 0
    });
    s.wait_for("every instance ready", |e| e["event"] == "all_ready");

    let reply = get(address, "/metrics", None);
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = reply.body;
    for slot in [0, 1] {
        let labels = format!("{{app=\"web\",slot=\"{slot}\"}}");
        assert_eq!(
            value(&text, &format!("supervise_instance_up{labels}")),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(&text, &format!("supervise_instance_ready{labels}")),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(&text, &format!("supervise_instance_restarts_total{labels}")),
            Some(0.0),
            "{text}"
        );
        assert!(
            value(&text, &format!("supervise_instance_rss_bytes{labels}")).is_some_and(|b| b > 0.0),
            "{text}"
        );
    }
    assert_eq!(
        value(&text, "supervise_app_instances_desired{app=\"web\"}"),
        Some(2.0)
    );
    assert_eq!(value(&text, "supervise_config_file_version"), Some(1.0));
    assert_eq!(value(&text, "supervise_config_applies_total"), Some(1.0));
    assert!(
        value(&text, "supervise_rss_bytes").is_some_and(|b| b > 0.0),
        "{text}"
    );

    kill(pid_of(&first));
    s.wait_for("web.0 exited", |e| e["event"] == "exited" && e["slot"] == 0);
    s.wait_for("web.0 spawned again", |e| {
        e["event"] == "spawned" && e["slot"] == 0
    });
    let labels = "{app=\"web\",slot=\"0\"}";
    let text = wait_value(
        address,
        &format!("supervise_instance_restarts_total{labels}"),
        1.0,
    );
    assert_eq!(
        value(
            &text,
            "supervise_instance_exits_total{app=\"web\",slot=\"0\",reason=\"signal\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "supervise_instance_restarts_total{app=\"web\",slot=\"1\"}"
        ),
        Some(0.0)
    );

    // promtool checks the Prometheus text format (and lints it).
    let mut promtool = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("promtool reads the metrics");
    let checked = promtool.wait_with_output().expect("promtool ends");
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics:\n{}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // What Prometheus asks for: OpenMetrics.
    let reply = get(
        address,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
}

/// A Prometheus server of this test's own, killed (by pid) when dropped.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Start one that scrapes `target` twice a second.
    fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\nscrape_configs:\n  - job_name: supervise\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .expect("the scrape config is written");
        let address = free_port("127.0.0.4");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("a log file");
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            address,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The value of an instant `query`, if it has exactly one series.
    fn query(&self, query: &str) -> Option<f64> {
        let path = format!("/api/v1/query?query={}", percent_encode(query));
        // HTTP/1.0: the reply is not chunked, and the connection closes.
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.address);
        let reply = exchange(self.address, request.as_bytes()).ok()?;
        let answer: Value = serde_json::from_str(&reply.body).ok()?;
        let result = answer["data"]["result"].as_array()?;
        match result.as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// Query until `query` has `expected`, within `limit`.
    fn wait_value(&self, query: &str, expected: f64, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut last = None;
        while Instant::now() < deadline {
            last = self.query(query);
            if last == Some(expected) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "Prometheus never said {query} = {expected} (last: {last:?})\n{}",
            self.log()
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now on `ip` (for a server that binds it
/// itself). Each test that frees a port uses an address of its own in
/// 127.0.0.0/8 (all of it is this host's), so that no neighbour test's bind
/// of port 0 takes the port meanwhile.
fn free_port(ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).expect("a free port");
    listener.local_addr().expect("its address")
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_real_prometheus_sees_the_restart_counter_increase() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    let worker = s.wait_for("web.1 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 1
    });
    let prometheus = Prometheus::start(address);
    let restarts = "supervise_instance_restarts_total{app=\"web\",slot=\"1\"}";
    // Its first scrapes, once it is up (a start takes a few seconds).
    prometheus.wait_value("up{job=\"supervise\"}", 1.0, Duration::from_secs(60));
    prometheus.wait_value(restarts, 0.0, WAIT);

    kill(pid_of(&worker));
    s.wait_for("web.1 spawned again", |e| {
        e["event"] == "spawned" && e["slot"] == 1 && pid_of(e) != pid_of(&worker)
    });
    prometheus.wait_value(restarts, 1.0, WAIT);
    prometheus.wait_value(
        "supervise_instance_exits_total{app=\"web\",slot=\"1\",reason=\"signal\"}",
        1.0,
        WAIT,
    );
}

#[test]
fn an_edit_moves_stops_and_restarts_the_endpoint_and_counters_survive_it() {
    // Addresses of its own (see `free_port`).
    let mut s = Supervised::start(&ecosystem("127.0.0.2:0"));
    let first = metrics_address(&mut s);
    let worker = s.wait_for("web.0 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 0
    });
    kill(pid_of(&worker));
    let restarts = "supervise_instance_restarts_total{app=\"web\",slot=\"0\"}";
    wait_value(first, restarts, 1.0);

    // Moved to another address: the old one is closed at once.
    save(&s, &ecosystem("127.0.0.3:0"));
    s.wait_for("metrics_stopped", |e| e["event"] == "metrics_stopped");
    let moved = metrics_address(&mut s);
    assert_eq!(moved.ip().to_string(), "127.0.0.3");
    assert!(TcpStream::connect(first).is_err(), "{first} still accepts");
    let text = wait_value(moved, "supervise_config_applies_total", 2.0);
    assert_eq!(value(&text, restarts), Some(1.0), "{text}");
    assert_eq!(
        value(&text, "supervise_config_file_version"),
        Some(2.0),
        "{text}"
    );

    // An invalid edit changes nothing but the rejected count.
    save(&s, &ecosystem("0.0.0.0:99999"));
    s.wait_for("config_invalid", |e| e["event"] == "config_invalid");
    wait_value(moved, "supervise_config_rejected_edits_total", 1.0);

    // No `metrics` key: no endpoint.
    save(
        &s,
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: 2\n    ready: none\n",
    );
    s.wait_for("metrics_stopped again", |e| e["event"] == "metrics_stopped");
    assert!(
        TcpStream::connect(moved).is_err(),
        "{moved} still accepts\n{}",
        s.dump()
    );

    // Back, on the same port: a fresh bind works (SO_REUSEADDR), and the
    // counters went on while nobody looked.
    save(&s, &ecosystem(&moved.to_string()));
    assert_eq!(metrics_address(&mut s), moved);
    let text = wait_value(moved, restarts, 1.0);
    assert_eq!(
        value(&text, "supervise_config_applies_total"),
        Some(4.0),
        "{text}"
    );
}

#[test]
fn a_port_in_use_is_an_error_event_and_the_supervisor_runs_on() {
    let taken = TcpListener::bind("127.0.0.5:0").expect("a port to take");
    let address = taken.local_addr().expect("its address");
    let mut s = Supervised::start(&ecosystem(&address.to_string()));
    let failed = s.wait_for("metrics_bind_failed", |e| {
        e["event"] == "metrics_bind_failed"
    });
    assert_eq!(failed["address"], address.to_string());
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("in use")),
        "{failed}"
    );
    s.wait_for("web.1 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 1
    });
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");

    // Freed, and the file saved again (any applied version retries).
    drop(taken);
    save(
        &s,
        &format!("# saved again\n{}", ecosystem(&address.to_string())),
    );
    assert_eq!(metrics_address(&mut s), address);
    scrape(address);
}

#[test]
fn a_bad_address_at_start_is_refused_at_its_place() {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        ecosystem("0.0.0.0:99999"),
    )
    .unwrap();
    let output = Command::new(binary())
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(dir.path()))
        .args(["-f", "ecosystem.yaml"])
        .output()
        .expect("supervise runs");
    assert_eq!(output.status.code(), Some(1));
    let shown = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        shown.contains("ecosystem.yaml:1:10: error: invalid metrics address `0.0.0.0:99999`"),
        "{shown}"
    );
}

#[test]
fn garbage_requests_get_an_error_status_and_break_nothing() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    let too_long = format!(
        "GET /metrics HTTP/1.1\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(MAX_REQUEST_BYTES * 2)
    );
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), 404),
        (b"GET /metrics/../etc/passwd HTTP/1.1\r\n\r\n".to_vec(), 404),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
            405,
        ),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n".to_vec(), 405),
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
            400,
        ),
        (b"GET /metrics HTTP/9.9\r\n\r\n".to_vec(), 400),
        (vec![0u8; 64].into_iter().chain(*b"\r\n\r\n").collect(), 400),
        (too_long.into_bytes(), 431),
    ];
    for (request, expected) in cases {
        let reply = exchange(address, &request)
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&request)));
        assert_eq!(
            reply.status,
            expected,
            "{}: {reply:?}",
            String::from_utf8_lossy(&request)
        );
    }
    // A half request and a hang-up: nothing to answer, nothing broken.
    let mut half = TcpStream::connect(address).expect("connects");
    half.write_all(b"GET /metr").expect("sends");
    drop(half);
    // A request line without end, longer than any head may be.
    let mut endless = TcpStream::connect(address).expect("connects");
    endless.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    let _ = endless.write_all(&vec![b'x'; MAX_REQUEST_BYTES * 4]);
    let mut bytes = Vec::new();
    let _ = endless.read_to_end(&mut bytes);
    let reply = Reply::parse(&bytes).expect("a reply");
    assert_eq!(reply.status, 431);
    scrape(address);
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");
}

#[test]
fn silent_clients_hold_neither_the_endpoint_nor_the_loop() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    // Every connection slot but one taken by a client that never speaks.
    let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS - 1)
        .map(|_| TcpStream::connect(address).expect("connects"))
        .collect();
    let started = Instant::now();
    scrape(address);
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");
    // Before any silent client's time is up: nothing waited for a slot.
    assert!(
        started.elapsed() < REQUEST_TIMEOUT,
        "a scrape and a status took {:?} beside silent clients",
        started.elapsed()
    );
    // Each silent client is told off once its time to speak is up.
    let mut one = silent.into_iter().next().expect("a silent client");
    one.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    let mut bytes = Vec::new();
    one.read_to_end(&mut bytes)
        .expect("the endpoint answers and closes");
    assert_eq!(Reply::parse(&bytes).expect("a reply").status, 408);
}

#[test]
fn two_hundred_scrapes_at_once_all_get_metrics() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    s.wait_for("web.1 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 1
    });
    let started = Instant::now();
    let scrapers: Vec<_> = (0..200)
        .map(|_| std::thread::spawn(move || get(address, "/metrics", None)))
        .collect();
    for scraper in scrapers {
        let reply = scraper.join().expect("a scraper thread");
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(
            reply
                .body
                .contains("supervise_instance_up{app=\"web\",slot=\"1\"} 1")
        );
    }
    let took = started.elapsed();
    eprintln!("200 concurrent scrapes took {took:?}");
    assert!(took < Duration::from_secs(15), "200 scrapes took {took:?}");
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");
}

#[test]
fn a_rolling_replacement_keeps_each_slots_counters() {
    let with_env = |value: &str| {
        ecosystem("127.0.0.1:0").replace(
            "    ready: none\n",
            &format!("    ready: none\n    env: {{VERSION: \"{value}\"}}\n"),
        )
    };
    let mut s = Supervised::start(&with_env("1"));
    let address = metrics_address(&mut s);
    let worker = s.wait_for("web.0 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 0
    });
    kill(pid_of(&worker));
    let restarts = "supervise_instance_restarts_total{app=\"web\",slot=\"0\"}";
    let cpu = "supervise_instance_cpu_seconds_total{app=\"web\",slot=\"0\"}";
    s.wait_for("web.0 spawned again", |e| {
        e["event"] == "spawned" && e["slot"] == 0 && pid_of(e) != pid_of(&worker)
    });
    let before = wait_value(address, restarts, 1.0);

    // A new definition: every slot's process is replaced (generation 2).
    save(&s, &with_env("2"));
    s.wait_count("stopped", "web", 2);
    let stopped = "supervise_instance_exits_total{app=\"web\",slot=\"0\",reason=\"stopped\"}";
    let after = wait_value(address, stopped, 1.0);
    assert_eq!(value(&after, restarts), Some(1.0), "{after}");
    assert!(
        value(&after, cpu) >= value(&before, cpu),
        "CPU time went down:\n{before}\n{after}"
    );
    assert_eq!(
        value(
            &after,
            "supervise_instance_exits_total{app=\"web\",slot=\"1\",reason=\"stopped\"}"
        ),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        value(&after, "supervise_instance_up{app=\"web\",slot=\"0\"}"),
        Some(1.0)
    );
}
