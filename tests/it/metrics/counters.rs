//! What the metrics say: a killed worker counted (and `promtool` accepts
//! the text), OpenMetrics when asked for, and each slot's counters kept
//! across a rolling replacement.

use super::*;

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
