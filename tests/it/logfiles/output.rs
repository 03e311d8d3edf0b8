//! What is written and shown: JSON lines with one file per instance,
//! `logs --since`, and an edit of the `log` key that restarts nothing.

use super::*;

#[test]
fn json_lines_and_one_file_per_instance() {
    let mut s = Supervised::start_with(
        r#"apps:
  web:
    command: ["sh", "-c", "echo out $SUPERVISE_INSTANCE; echo err $SUPERVISE_INSTANCE >&2; exec sleep 100"]
    instances: 2
    log: {file: "logs/{app}.{instance}.log", format: json}
"#,
        &[],
        make_logs,
    );
    s.wait_count("ready", "web", 2);
    for slot in 0..2u64 {
        let file = s.path(&format!("logs/web.{slot}.log"));
        let records = || -> Vec<Value> {
            std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect()
        };
        assert!(eventually(WAIT, || records().len() == 2), "{file:?}");
        let mut by_stream: BTreeMap<String, String> = BTreeMap::new();
        for record in records() {
            assert_eq!(record["app"], "web");
            assert_eq!(record["instance"], slot);
            humantime::parse_rfc3339(record["timestamp"].as_str().unwrap()).unwrap();
            by_stream.insert(
                record["stream"].as_str().unwrap().to_string(),
                record["line"].as_str().unwrap().to_string(),
            );
        }
        assert_eq!(by_stream["stdout"], format!("out {slot}"));
        assert_eq!(by_stream["stderr"], format!("err {slot}"));
    }
}

#[test]
fn logs_since_shows_only_the_lines_printed_from_then_on() {
    let mut s = Supervised::start(
        r#"apps:
  web:
    command: ["sh", "-c", "echo early; while [ ! -e go ]; do sleep 0.02; done; echo late; exec sleep 100"]
"#,
    );
    s.wait_line("early");
    // A time after `early` was read, in whole milliseconds (the form the
    // client sends), and gone by before `late` can be printed.
    let since = SystemTime::now() + Duration::from_millis(1);
    let since = humantime::format_rfc3339_millis(since).to_string();
    let cut = humantime::parse_rfc3339(&since).unwrap();
    assert!(eventually(WAIT, || SystemTime::now() > cut));
    std::fs::write(s.path("go"), "").unwrap();
    s.wait_line("late");
    let lines = |args: &[&str]| {
        let output = run_client(&s, args);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(lines(&["logs", "web", "--since", &since]), "web.0 | late\n");
    assert_eq!(
        lines(&["logs", "web", "--since", "10m"]),
        "web.0 | early\nweb.0 | late\n"
    );
    let refused = run_client(&s, &["logs", "--since", "yesterday"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("neither a duration"));
}

#[test]
fn an_edit_of_the_log_key_restarts_nothing_and_moves_the_output() {
    let mut s = Supervised::start_with(
        &format!("apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/a.log}}\n"),
        &[],
        make_logs,
    );
    let pid = s.wait_event("spawned", "ticker")["pid"].clone();
    assert!(eventually(WAIT, || s.path("logs/a.log").exists()));
    save(
        &s,
        &format!(
            "apps:\n  ticker:\n    command: {TICKER}\n    log: {{file: logs/b.log, format: json}}\n"
        ),
    );
    s.wait_for("the edit", |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    assert!(eventually(WAIT, || {
        std::fs::read_to_string(s.path("logs/b.log")).is_ok_and(|t| t.contains(r#""line":"tick""#))
    }));
    // Whatever the edit restarted, it did in the turn it was applied in.
    s.barrier();
    assert_eq!(s.count("spawned", "ticker"), 1, "a tuned key\n{}", s.dump());
    assert_eq!(s.running_pids("ticker"), [pid.as_i64().unwrap() as i32]);
}
