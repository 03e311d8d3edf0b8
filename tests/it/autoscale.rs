//! `autoscale` with real processes: the example's CPU-heavy server (one
//! request at a time) under a load of concurrent clients on 127.0.0.1 gets
//! a second instance within `up_after` + 2 s of the load's start, and is
//! back to one within `down_after` + 2 s of its end — on its CPU, and on
//! the accept queue alone. The load is bounded (a stop flag and a deadline)
//! and its threads are joined before the test ends.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;

/// Concurrent clients: far more than one instance serves at once.
const CLIENTS: usize = 8;
/// The longest a load runs, whatever the test waits for.
const LOAD_LIMIT: Duration = Duration::from_secs(30);
const UP_AFTER: Duration = Duration::from_secs(1);
const DOWN_AFTER: Duration = Duration::from_secs(2);
/// What the issue allows beyond `up_after` and `down_after`.
const SLACK: Duration = Duration::from_secs(2);

fn server() -> String {
    format!(
        "{}/examples/autoscale/server.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn file(port: u16, targets: &str) -> String {
    format!(
        "apps:\n  web:\n    command: [python3, \"{}\"]\n    listen: 127.0.0.1:{port}\n    ready: {{delay: 200ms}}\n    env: {{WORK_MS: \"20\"}}\n    autoscale: {{min: 1, max: 2, {targets}, up_after: {}ms, down_after: {}ms}}\n",
        server(),
        UP_AFTER.as_millis(),
        DOWN_AFTER.as_millis()
    )
}

/// Clients that each send one request after another until told to stop.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + LOAD_LIMIT;
        let threads = (0..CLIENTS)
            .map(|_| {
                let (stop, answered) = (stop.clone(), answered.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        if one_request(port) {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            answered,
            threads,
        }
    }

    /// Wait until the server has answered a first request: the load is on.
    fn running(&self) -> Instant {
        assert!(
            eventually(WAIT, || self.answered.load(Ordering::Relaxed) > 0),
            "the server answers"
        );
        Instant::now()
    }

    fn stop(self) -> Instant {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a client thread");
        }
        Instant::now()
    }
}

/// One GET; whether it was answered.
fn one_request(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).is_ok() && answer.starts_with(b"HTTP/1.1 200")
}

fn scaled(event: &serde_json::Value, to: u64) -> bool {
    event["event"] == "autoscaled" && event["app"] == "web" && event["to"] == to
}

/// The load on, a second instance within `up_after` + 2 s; the load off,
/// back to one within `down_after` + 2 s.
fn follows_the_load(targets: &str, why: &str) {
    let port = free_port();
    let mut s = Supervised::start(&file(port, targets));
    s.wait_event("ready", "web");
    let load = Load::start(port);
    let began = load.running();
    let up = s.wait_for("the step up", |e| scaled(e, 2));
    let took = began.elapsed();
    assert!(up["why"].as_str().is_some_and(|w| w.contains(why)), "{up}");
    assert!(
        took <= UP_AFTER + SLACK,
        "up {took:?} after the load began\n{}",
        s.dump()
    );
    s.wait_count("ready", "web", 2);
    // The instance the load started is one `logs` knows.
    let logs = run_client(&s, &["logs", "web.1", "--lines", "1"]);
    assert!(logs.status.success(), "{logs:?}");
    let ended = load.stop();
    s.wait_for("the step down", |e| scaled(e, 1));
    let took = ended.elapsed();
    assert!(
        took <= DOWN_AFTER + SLACK,
        "down {took:?} after the load ended\n{}",
        s.dump()
    );
    s.wait_count("stopped", "web", 1);
    assert_eq!(s.running_pids("web").len(), 1);
}

#[test]
fn a_busy_server_gets_a_second_instance_and_goes_back_to_one() {
    follows_the_load("cpu: 40%", "cpu");
}

#[test]
fn the_accept_queue_alone_scales_up_and_down() {
    follows_the_load("queue: 2", "queue");
}

#[test]
fn status_scale_and_metrics_show_the_range_and_refuse_a_count() {
    let port = free_port();
    let metrics = free_port();
    let text = format!(
        "metrics: 127.0.0.1:{metrics}\n{}",
        file(port, "queue: 2, cpu: 40%")
    );
    let mut s = Supervised::start(&text);
    s.wait_event("ready", "web");
    // The first samples come within a quarter of a second of the start.
    assert!(
        eventually(WAIT, || {
            let status = status_json(&s);
            app_status(&status, "web")["autoscale"]["queue"].is_number()
        }),
        "status shows the last sample"
    );
    let status = status_json(&s);
    let web = app_status(&status, "web");
    assert_eq!(web["instances"], 1);
    assert_eq!(web["autoscale"]["min"], 1);
    assert_eq!(web["autoscale"]["max"], 2);
    assert_eq!(web["autoscale"]["queue_target"], 2);
    assert_eq!(web["autoscale"]["cpu_target"], 40);
    let table = run_client(&s, &["status"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("web  1 of 1..2 (queue 0/2, cpu "), "{table}");
    let refused = run_client(&s, &["scale", "web", "2"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("web is autoscaled (1..2 instances)")
            && said.contains("autoscale: {min, max}"),
        "{said}"
    );
    let file_now = std::fs::read_to_string(s.dir.path().join("ecosystem.yaml")).expect("read");
    assert_eq!(file_now, text, "the file is unchanged");
    let scraped = scrape(metrics);
    for line in [
        "supervise_app_instances_desired{app=\"web\"} 1",
        "supervise_app_autoscale_min{app=\"web\"} 1",
        "supervise_app_autoscale_max{app=\"web\"} 2",
        "supervise_app_accept_queue{app=\"web\"} 0",
    ] {
        assert!(scraped.contains(line), "{line} in\n{scraped}");
    }
}

/// `GET /metrics` from 127.0.0.1:`port`: the body.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the metrics endpoint");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    text
}
