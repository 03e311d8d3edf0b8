//! A real Prometheus server scrapes the endpoint and sees the restart
//! counter increase.

use super::*;

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
