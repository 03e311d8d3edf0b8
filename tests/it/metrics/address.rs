//! Where the endpoint listens: an edit moves, stops and restarts it (the
//! counters survive), a port in use is an error event and the supervisor
//! runs on, a bad address is refused at start.

use super::*;

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
