//! What an upgrade keeps: every worker and every request under load, every
//! numbered line in `logs`, the metrics' port and counters, a `logs`
//! follower; SIGUSR2 and the default binary (the path it was started from).

use super::*;

#[test]
fn five_upgrades_under_load_keep_every_worker_and_refuse_no_request() {
    let mut s = hello(4);
    let port = listening_port(&mut s);
    s.wait_count("ready", "hello", 4);
    // One restart before the upgrades, so a count reset by them would show.
    let crashed = workers(&status_json(&s), "hello")[1].1;
    // SAFETY: killing a worker this test's supervisor started, by its pid.
    unsafe { libc::kill(crashed as i32, libc::SIGKILL) };
    s.wait_for("hello.1 ready again", |e| {
        e["event"] == "ready" && e["app"] == "hello" && e["slot"] == 1 && e["pid"] != crashed
    });
    let before = status_json(&s);
    let before_at = Instant::now();
    assert_eq!(before["supervisor"]["upgrades"], 0, "{before}");
    assert_eq!(
        before["supervisor"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{before}"
    );
    assert_eq!(workers(&before, "hello")[1].2, 1, "{before}");
    let started_at = before["supervisor"]["started_at"].clone();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..2)
        .map(|_| client_loop(port, stop.clone(), answered.clone()))
        .collect();
    // Each upgrade comes under load: once the clients have had 20 more
    // requests answered (before the first, and after each).
    let more_answers = |answered: &AtomicUsize| {
        let from = answered.load(Ordering::Relaxed);
        assert!(
            eventually(WAIT, || answered.load(Ordering::Relaxed) >= from + 20),
            "the clients are answered"
        );
    };
    more_answers(&answered);
    for n in 1..=5 {
        let said = upgrade(&s, &[]);
        assert!(said.contains(&format!("upgrade {n}")), "{said}");
        s.wait_for("upgraded", |e| {
            e["event"] == "upgraded" && e["upgrades"] == n
        });
        more_answers(&answered);
    }
    stop.store(true, Ordering::Relaxed);
    let tallies: Vec<Tally> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let after = status_json(&s);
    let between = before_at.elapsed().as_secs_f64();
    println!("requests during 5 upgrades: {tallies:?}");
    for tally in &tallies {
        assert!(tally.ok > 50, "{tally:?}");
        assert_eq!(
            (tally.refused, tally.failed),
            (0, 0),
            "{tally:?}\n{}",
            s.dump()
        );
    }
    assert_eq!(after["supervisor"]["upgrades"], 5, "{after}");
    assert_eq!(
        after["supervisor"]["pid"],
        s.pid(),
        "the supervisor's pid is kept"
    );
    assert_eq!(after["supervisor"]["started_at"], started_at);
    let (old, new) = (workers(&before, "hello"), workers(&after, "hello"));
    assert_eq!(old.len(), 4);
    for (a, b) in old.iter().zip(&new) {
        assert_eq!(
            (a.0, a.1, a.2),
            (b.0, b.1, b.2),
            "slot, pid and restarts kept"
        );
        // Uptime goes on from where it was: it grew by the time between the
        // two looks (each taken within a second of its answer, two under
        // load), not less.
        assert!(
            (b.3 - a.3 - between).abs() < 2.0,
            "uptime {a:?} → {b:?} over {between:.1}s"
        );
    }
    for event in s.events.iter().filter(|e| e["event"] == "upgraded") {
        assert_eq!(event["from_version"], env!("CARGO_PKG_VERSION"), "{event}");
        assert_eq!(event["to_version"], env!("CARGO_PKG_VERSION"), "{event}");
        let took = event["took_ms"].as_u64().expect("took_ms");
        assert!(took < 10_000, "{event}");
        println!("upgraded in {took} ms");
    }
    // A worker started by the upgraded image sees exactly stdio and its socket.
    let output = run_client(&s, &["restart", "hello.0"]);
    assert!(output.status.success());
    let restarted = eventually(WAIT, || {
        let pid = workers(&status_json(&s), "hello")[0].1;
        pid != old[0].1 && pid > 0
    });
    assert!(restarted, "{}", s.dump());
    s.wait_for("the new hello.0 ready", |e| {
        e["event"] == "ready" && e["app"] == "hello" && e["slot"] == 0 && e["pid"] != old[0].1
    });
    // Python opens its own files for a moment as it starts, and it may still
    // be starting when the delay of `ready` is over: a leaked fd would stay.
    let pid = workers(&status_json(&s), "hello")[0].1;
    let exactly_stdio_and_socket =
        eventually(WAIT, || open_fds(pid) == BTreeSet::from([0, 1, 2, 3]));
    assert!(
        exactly_stdio_and_socket,
        "{:?}\n{}",
        open_fds(pid),
        s.dump()
    );
}

/// A supervisor of `counter`, which prints 0, 1, 2… 50 lines a second.
fn counter() -> Supervised {
    Supervised::start(
        r#"
apps:
  counter:
    command: [python3, -u, -c, "import time\nfor i in range(100000):\n    print(i)\n    time.sleep(0.02)"]
    ready: none
"#,
    )
}

#[test]
fn numbered_lines_across_five_upgrades_are_all_in_logs_once() {
    let mut s = counter();
    s.wait_line("5");
    for n in 1..=5 {
        upgrade(&s, &[]);
        s.wait_for("upgraded", |e| {
            e["event"] == "upgraded" && e["upgrades"] == n
        });
        // Ten lines printed after the takeover (a fifth of a second), so
        // that each upgrade lands in the middle of the output, and the
        // last lines asked for come after the last upgrade.
        lines_after_upgrade(&mut s, 10);
    }
    let output = run_client(&s, &["logs", "counter", "-n", "1000"]);
    let text = String::from_utf8_lossy(&output.stdout);
    let numbers: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split(" | ").nth(1))
        .map(|n| n.trim().parse().expect("a number"))
        .collect();
    // 50 lines a second: the ring of 1,000 holds 20 s, far more than five
    // upgrades take.
    assert!(numbers.len() > 50, "{text}");
    assert_eq!(numbers[0], 0, "the first line is kept: {text}");
    for pair in numbers.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "a number missing or twice: {pair:?}\n{text}"
        );
    }
}

/// Wait until `counter` has printed `count` lines after the last
/// `upgraded` event; the number of the last of them.
fn lines_after_upgrade(s: &mut Supervised, count: usize) -> u64 {
    let upgraded = s
        .events
        .iter()
        .rposition(|e| e["event"] == "upgraded")
        .expect("an upgrade");
    let after = |s: &Supervised| {
        s.events[upgraded..]
            .iter()
            .filter(|e| e["event"] == "output" && e["app"] == "counter")
            .count()
    };
    assert!(
        s.until(WAIT, |s| after(s) >= count),
        "{count} lines after the upgrade\n{}",
        s.dump()
    );
    s.events[upgraded..]
        .iter()
        .filter(|e| e["event"] == "output" && e["app"] == "counter")
        .nth(count - 1)
        .and_then(|e| e["line"].as_str()?.parse().ok())
        .expect("a numbered line")
}

#[test]
fn sigusr2_upgrades_to_the_binary_it_was_started_from() {
    let (mut s, before) = sleepers(1);
    let pid = before[0].1;
    s.signal(libc::SIGUSR2);
    let upgraded = s.wait_for("upgraded", |e| e["event"] == "upgraded");
    assert_eq!(upgraded["upgrades"], 1);
    assert_eq!(workers(&status_json(&s), "web")[0].1, pid);
    // And it still stops cleanly.
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
    assert!(is_gone(pid as i32));
}

/// `GET /metrics` on `port`: the body.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the metrics port answers");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
}

#[test]
fn metrics_keep_their_port_and_their_counters_across_an_upgrade() {
    let mut s = Supervised::start(
        "metrics: 127.0.0.1:0\napps:\n  crashy:\n    command: [sh, -c, \"sleep 0.2; exit 1\"]\n    ready: none\n    backoff: {initial: 100ms, max: 100ms}\n",
    );
    let listening = s.wait_for("metrics", |e| e["event"] == "metrics_listening");
    let port: u16 = listening["address"]
        .as_str()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("a port");
    s.wait_count("exited", "crashy", 3);
    let series = "supervise_instance_restarts_total{app=\"crashy\",slot=\"0\"}";
    let restarts = |text: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(-1.0)
    };
    let before = restarts(&scrape(port));
    assert!(before >= 2.0, "{before}");
    upgrade(&s, &[]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    // The same port (`:0` is not bound again), and a counter never goes back.
    let after = restarts(&scrape(port));
    assert!(after >= before, "{before} → {after}");
    assert!(
        !s.events
            .iter()
            .any(|e| e["event"] == "metrics_listening" && e["address"] != listening["address"]),
        "{}",
        s.dump()
    );
}

#[test]
fn a_logs_follower_follows_the_new_image_and_ends_with_the_supervisor() {
    use std::io::BufRead;
    let mut s = counter();
    s.wait_line("3");
    let mut follower = Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args([
            "logs",
            "counter",
            "-n",
            "1",
            "-f",
            "--file",
            "ecosystem.yaml",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("a follower");
    let stdout = follower.stdout.take().expect("stdout");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let number = |line: &str| -> u64 {
        line.split(" | ")
            .nth(1)
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let first = number(&received.recv_timeout(WAIT).expect("the tail"));
    upgrade(&s, &[]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
    // Lines keep coming, from the new image, well after the upgrade: the
    // follower gets the 25th line the counter printed after the takeover.
    let well_after = lines_after_upgrade(&mut s, 25);
    let mut last = first;
    while last < well_after {
        last = number(
            &received
                .recv_timeout(WAIT)
                .expect("lines after the upgrade"),
        );
    }
    assert!(last > first + 20, "{first} → {last}");
    assert!(
        follower.try_wait().expect("try_wait").is_none(),
        "the follower left"
    );
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success());
    let ended = eventually(WAIT, || follower.try_wait().ok().flatten().is_some());
    if !ended {
        let _ = follower.kill();
    }
    let status = follower.wait().expect("wait");
    assert!(ended && status.success(), "{status:?}");
}

#[test]
fn the_default_binary_follows_the_path_it_was_started_from() {
    // Started through a symlink, as package layouts do
    // (`bin/supervise -> ../v1/supervise`).
    let mut s = Supervised::start_as(&sleepers_yaml(1), "bin/supervise", |dir| {
        std::fs::create_dir(dir.join("bin")).expect("bin");
        std::os::unix::fs::symlink(binary(), dir.join("bin/supervise")).expect("link");
    });
    s.wait_count("ready", "web", 1);
    // The link moves to a binary that refuses: the upgrade runs that one.
    let refuses = script(
        s.dir.path(),
        "refuses",
        "#!/bin/sh\necho 'v2 refuses' >&2\nexit 1\n",
        0o755,
    );
    let link = s.path("bin/supervise");
    std::fs::remove_file(&link).expect("unlink");
    std::os::unix::fs::symlink(&refuses, &link).expect("relink");
    let said = refused_upgrade(&s, &[]);
    assert!(said.contains("v2 refuses"), "{said}");
    // And back to the real one.
    std::fs::remove_file(&link).expect("unlink");
    std::os::unix::fs::symlink(binary(), &link).expect("relink");
    upgrade(&s, &[]);
    s.wait_for("upgraded", |e| e["event"] == "upgraded");
}
