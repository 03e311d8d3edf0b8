//! `max_memory`: a leaking server recycled within two memory checks without a
//! failed request, and a runaway stopped at its ceiling while its replacement
//! starts without backoff.

use super::*;

/// `examples/hello`'s draining server, leaking `LEAK_MB_PER_S` of memory,
/// and saying (once) when its own RSS passed `LIMIT_BYTES`.
const LEAKING_SERVER: &str = r#"
import os, runpy, sys, threading, time
rate = int(os.environ["LEAK_MB_PER_S"])
limit = int(os.environ["LIMIT_BYTES"])
hoard = []
def leak():
    told = False
    while True:
        hoard.append(b"x" * ((rate << 20) // 20))
        rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        if rss > limit and not told:
            print("over the limit", flush=True)
            told = True
        time.sleep(0.05)
threading.Thread(target=leak, daemon=True).start()
sys.argv = ["server.py"]
runpy.run_path(os.environ["SERVER"], run_name="__main__")
"#;

#[test]
fn a_leaking_server_is_recycled_within_two_memory_checks_without_a_failed_request() {
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello/server.py");
    let yaml = format!(
        r#"
memory_check: 500ms
apps:
  web:
    command: python3 leak.py
    instances: 2
    listen: 127.0.0.1:0
    ready: {{delay: 500ms}}
    backoff: {{initial: 10ms}}
    max_memory: 60MB
    env: {{LEAK_MB_PER_S: "20", LIMIT_BYTES: "60000000", SERVER: "{}"}}
"#,
        server.display()
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("leak.py"), LEAKING_SERVER).unwrap();
    });
    let port = crate::common::listening_port(&mut s);
    s.wait_count("ready", "web", 2);
    // A bounded client loop, one request per connection, while 3 recycles happen.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let client = {
        let (stop, sent, failed) = (stop.clone(), sent.clone(), failed.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                sent.fetch_add(1, Ordering::Relaxed);
                if !get(port) {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    for count in 1..=3 {
        let exceeded = s.wait_for(&format!("memory_exceeded #{count}"), |e| {
            e["event"] == "memory_exceeded"
        });
        assert!(exceeded["rss_bytes"].as_u64().unwrap() > 60_000_000);
        assert_eq!(exceeded["limit_bytes"], 60_000_000);
        // Found within two memory_check periods of passing the limit. The
        // instance says when it passed (its first "over the limit" after its
        // start; an output line has no pid, so: the first of its slot after
        // its `spawned`), which may be logged after `memory_exceeded`: the
        // line goes through the output pipe, and the check can read the
        // memory between the allocation and the instance's own look.
        let (pid, slot) = (exceeded["pid"].clone(), exceeded["slot"].clone());
        let at = timestamp_ms(&exceeded);
        let started = s
            .events
            .iter()
            .position(|e| e["event"] == "spawned" && e["pid"] == pid)
            .expect("the instance's start");
        let said = |s: &Supervised| {
            s.events[started..]
                .iter()
                .find(|e| e["slot"] == slot && e["line"] == "over the limit")
                .cloned()
        };
        assert!(
            s.until(WAIT, |s| said(s).is_some()),
            "no 'over the limit' line of slot {slot} after its start:\n{}",
            s.dump()
        );
        let over = said(&s).expect("the line");
        let late = at - timestamp_ms(&over);
        assert!(
            late <= 1000.0,
            "memory_exceeded came {late} ms after the instance passed its limit"
        );
        s.wait_for(&format!("the recycled one stopped #{count}"), |e| {
            e["event"] == "stopped" && e["pid"] == pid
        });
    }
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(sent > 100, "only {sent} requests were sent");
    assert_eq!(
        failed, 0,
        "{failed} of {sent} requests failed across 3 recycles"
    );
}

/// Its first run (no `leaked` file yet), once ready (after 1 s), grows by
/// 4 MiB every 10 ms, each page touched, up to 1 GiB; every later run only
/// sleeps.
const RUNAWAY: &str = r#"
import os, time
if os.path.exists("leaked"):
    time.sleep(1000)
open("leaked", "w").close()
time.sleep(1.2)
blocks = []
for _ in range(256):
    block = bytearray(4 << 20)
    block[::4096] = b"x" * len(block[::4096])
    blocks.append(block)
    time.sleep(0.01)
time.sleep(1000)
"#;

#[test]
fn an_instance_over_max_memory_stops_at_its_ceiling_and_its_replacement_starts_without_backoff() {
    // The replacement takes 1 s to be ready while the first run grows
    // 400 MiB/s: replace-first alone would let it reach ~400 MiB, and a
    // crash backoff of 5 s would hold the replacement back for ~2 GB.
    let yaml = r#"
memory_check: 100ms
apps:
  runaway:
    command: python3 runaway.py
    ready: {delay: 1s}
    backoff: {initial: 5s}
    max_memory: 40MiB
"#;
    let mut s = Supervised::start_with(yaml, &[], |dir| {
        std::fs::write(dir.join("runaway.py"), RUNAWAY).unwrap();
    });
    let first = s.wait_event("ready", "runaway")["pid"].clone();
    let recycling = s.wait_event("recycling", "runaway");
    assert_eq!(recycling["pid"], first);
    assert_eq!(
        recycling["delay_ms"], 0,
        "a recycle is not a crash: {recycling}"
    );
    let replacement = s.wait_for("the replacement's start", |e| {
        e["event"] == "spawned" && e["pid"] != first
    });
    let waited = timestamp_ms(&replacement) - timestamp_ms(&recycling);
    assert!(
        waited < 1000.0,
        "the replacement started {waited} ms after the recycle"
    );
    // The runaway is gone before its replacement is ready: killed by the
    // kernel at its cgroup's memory.max, or stopped by supervise once
    // measured past the ceiling (without the memory controller).
    let gone = s.wait_for("the runaway's end", |e| {
        (e["event"] == "exited" || e["event"] == "stopping") && e["pid"] == first
    });
    let ready = s.wait_for("the replacement ready", |e| {
        e["event"] == "ready" && e["pid"] == replacement["pid"]
    });
    assert!(
        timestamp_ms(&gone) < timestamp_ms(&ready),
        "the runaway served on until its replacement was ready:\n{}",
        s.dump()
    );
    match gone["event"].as_str() {
        Some("exited") => {
            assert_eq!(gone["signal"], "SIGKILL", "{gone}");
            assert_eq!(gone["decision"], "replaced", "{gone}");
        }
        _ => assert!(
            gone["reason"].as_str().unwrap_or("").contains("ceiling"),
            "{gone}"
        ),
    }
    // One restart, counted once; the runaway's last measured size stayed
    // within reach of the 60 MiB ceiling (a measurement is 100 ms apart,
    // 40 MiB of growth).
    for e in s.events.iter().filter(|e| e["event"] == "memory_exceeded") {
        assert!(e["rss_bytes"].as_u64().unwrap() < 200 << 20, "{e}");
    }
    assert_eq!(s.count("memory_exceeded", "runaway"), 1, "{}", s.dump());
}

/// One `GET /` on a new connection: answered 200?
fn get(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200")
}
