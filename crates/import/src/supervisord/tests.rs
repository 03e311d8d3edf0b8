use serde_json::json;

use super::expand::{Expansions, expand};
use super::program::{INSTANCE_MARK, MAX_WINDOW_SECS};
use super::*;
use crate::outcome::Outcome;

fn places() -> Places {
    Places {
        source_dir: "/etc/supervisor".into(),
        output_dir: "/etc/supervisor".into(),
    }
}

fn import(text: &str) -> Draft {
    let sections = parse_ini(text).expect("parses");
    translate(&sections, "supervisord.conf", &places(), "box", &|name| {
        (name == "HOME").then(|| "/root".to_string())
    })
}

#[test]
fn the_ini_reader_follows_python() {
    let sections = parse_ini("; comment\n[program:a]\nCommand = run --x ; a comment\nenvironment: A=1,\n    B=2\n# more\nurl = http://x/#frag\n").expect("parses");
    assert_eq!(sections.len(), 1);
    let a = &sections[0];
    assert_eq!(a.name, "program:a");
    assert_eq!(
        a.get("command").map(|e| (e.value.as_str(), e.line)),
        Some(("run --x", 3))
    );
    assert_eq!(
        a.get("environment").map(|e| e.value.as_str()),
        Some("A=1,\nB=2")
    );
    assert_eq!(
        a.get("url").map(|e| e.value.as_str()),
        Some("http://x/#frag"),
        "# without a space before it is not a comment"
    );
    assert_eq!(
        parse_ini("key = 1\n"),
        Err((1, "a value before the first [section]".to_string()))
    );
    assert!(parse_ini("[a]\njunk\n").is_err());
}

#[test]
fn expansions_become_placeholders_or_values() {
    let expansions = Expansions {
        program_name: "web",
        group_name: "g",
        numprocs: 3,
        here: "/etc/supervisor",
        host_node_name: "box",
        environment: &|name| (name == "HOME").then(|| "/root".to_string()),
    };
    let (text, problems) = expand(
        "%(program_name)s-%(process_num)d %(numprocs)d %(here)s 100%%",
        &expansions,
        "{instance}",
    );
    assert_eq!(text, "web-{instance} 3 /etc/supervisor 100%");
    assert!(problems.is_empty());
    let (text, problems) = expand(
        "%(process_num)02d %(ENV_HOME)s %(ENV_NOPE)s %(group_name)5s",
        &expansions,
        "{instance}",
    );
    assert_eq!(text, "{instance} /root      g");
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[test]
fn environment_pairs_split_as_supervisord_splits_them() {
    assert_eq!(
        key_value_pairs(r#"A="x, y",B=2,C='q',PATH=/usr/bin:/bin"#),
        Ok(vec![
            ("A".into(), "x, y".into()),
            ("B".into(), "2".into()),
            ("C".into(), "q".into()),
            ("PATH".into(), "/usr/bin:/bin".into())
        ])
    );
    assert!(
        key_value_pairs("A=x@y").is_err(),
        "supervisord refuses an unquoted @ too"
    );
    assert!(key_value_pairs("A=\"open").is_err());
}

#[test]
fn a_numbered_program_becomes_an_app_with_instances() {
    let draft = import(
        "[program:queue]\ncommand = worker --slot %(process_num)d\nnumprocs = 3\nnumprocs_start = 1\nprocess_name = %(program_name)s_%(process_num)d\nenvironment = SLOT=\"s%(process_num)d\",MODE=batch\nstopsignal = int\nstopwaitsecs = 5\nstartsecs = 0\nstartretries = 2\n",
    );
    let app = &draft.apps[0];
    assert_eq!(app.name, "queue");
    assert_eq!(app.fields["command"], json!("worker --slot {instance+1}"));
    assert_eq!(app.fields["instances"], json!(3));
    assert_eq!(
        app.fields["env"],
        json!({"SLOT": "s{instance+1}", "MODE": "batch"})
    );
    assert_eq!(app.fields["stop_signal"], json!("SIGINT"));
    assert_eq!(app.fields["kill_timeout"], json!("5s"));
    assert_eq!(app.fields["ready"], json!("none"));
    assert_eq!(
        app.fields["max_restarts"],
        json!({"count": 2, "within": "3s"})
    );
    assert_eq!(
        app.fields["restart"],
        json!("on-failure"),
        "supervisord's default autorestart is `unexpected`"
    );
}

#[test]
fn logs_sizes_are_1024_based_and_unknown_keys_are_warned() {
    let draft = import(
        "[program:a]\ncommand = a\nstdout_logfile = /var/log/a.log\nstdout_logfile_maxbytes = 50MB\nstdout_logfile_backups = 10\numask = 022\nautorestart = true\n",
    );
    let app = &draft.apps[0];
    assert_eq!(
        app.fields["log"],
        json!({"file": "/var/log/a.log", "max_size": "50MiB", "keep": 10})
    );
    assert!(!app.fields.contains_key("restart"));
    assert!(
        app.notes
            .iter()
            .any(|n| n.line == Some(6) && n.text.contains("umask"))
    );
}

#[test]
fn other_sections_are_noted_and_supervisord_environment_is_merged() {
    let draft = import(
        "[supervisord]\nenvironment = A=1\n[include]\nfiles = conf.d/*.conf\n[eventlistener:x]\ncommand = y\n[group:g]\nprograms = a\n[program:a]\ncommand = a %(group_name)s\nenvironment = B=2\n",
    );
    assert_eq!(draft.apps.len(), 1);
    assert_eq!(draft.apps[0].fields["command"], json!("a g"));
    assert_eq!(draft.apps[0].fields["env"], json!({"A": "1", "B": "2"}));
    let lines: Vec<Option<usize>> = draft.notes.iter().map(|n| n.line).collect();
    assert!(
        lines.contains(&Some(3)) && lines.contains(&Some(5)) && lines.contains(&Some(7)),
        "{:?}",
        draft.notes
    );
}

#[test]
fn a_repeated_section_is_merged_later_keys_winning() {
    let draft = import(
        "[program:x]\ncommand = sleep 100\nnumprocs = 2\nprocess_name = %(program_name)s_%(process_num)d\n[program:x]\ncommand = sleep 200\n",
    );
    assert_eq!(draft.apps.len(), 1);
    assert_eq!(draft.apps[0].fields["command"], json!("sleep 200"));
    assert_eq!(draft.apps[0].fields["instances"], json!(2));
    assert!(
        draft
            .notes
            .iter()
            .any(|n| n.line == Some(5) && n.text.contains("merged"))
    );
}

#[test]
fn odd_numbers_are_read_as_supervisord_reads_them() {
    let draft = import(
        "[program:x]\ncommand = sleep 1\nstopsignal = 15\nstartretries = 9999999999\nstartsecs = 9223372036854775807\nnumprocs_start = -3\n",
    );
    let app = &draft.apps[0];
    assert_eq!(app.fields["stop_signal"], json!("SIGTERM"));
    assert_eq!(app.fields["max_restarts"]["count"], json!(u32::MAX));
    assert_eq!(
        app.fields["max_restarts"]["within"],
        json!(format!("{MAX_WINDOW_SECS}s"))
    );
    assert_eq!(app.fields["command"], json!("sleep 1"));
    assert!(
        app.notes
            .iter()
            .any(|n| n.text.contains("numprocs_start = -3"))
    );
}

#[test]
fn a_blank_line_inside_a_continued_value_is_kept() {
    let sections =
        parse_ini("[program:x]\ncommand=sleep\n  100\n\n  200\nother = 1\n").expect("parses");
    assert_eq!(
        sections[0].get("command").map(|e| e.value.as_str()),
        Some("sleep\n100\n\n200")
    );
    assert_eq!(
        sections[0].get("other").map(|e| e.value.as_str()),
        Some("1")
    );
}

#[test]
fn a_program_without_a_command_is_left_out_and_the_marker_never_shows() {
    let draft = import(
        "[program:x]\nnumprocs = 1\n[program:y]\ncommand = a\nenvironment = PORT=80%(process_num)d,BAD\n",
    );
    assert_eq!(draft.apps.len(), 1);
    assert!(
        draft
            .notes
            .iter()
            .any(|n| n.text.contains("[program:x] has no `command`"))
    );
    assert!(
        draft.apps[0]
            .notes
            .iter()
            .all(|n| !n.text.contains(INSTANCE_MARK)),
        "{:?}",
        draft.apps[0].notes
    );
}

/// Every key of a `[program:x]` section in supervisor 4's documentation
/// (`configuration.rst`) but `command`, with a value that is not its
/// default, and what becomes of it.
const PROGRAM_OPTIONS: &[(&str, &str, Outcome)] = &[
    (
        "process_name",
        "%(program_name)s_%(process_num)d",
        Outcome::LeftOut,
    ),
    ("numprocs", "2", Outcome::Written),
    ("numprocs_start", "5", Outcome::Written),
    ("priority", "10", Outcome::LeftOut),
    ("autostart", "false", Outcome::Written),
    ("startsecs", "5", Outcome::Written),
    ("startsecs", "45", Outcome::Written),
    ("startretries", "5", Outcome::Written),
    ("autorestart", "true", Outcome::Written),
    ("exitcodes", "0,2", Outcome::Noted),
    ("stopsignal", "INT", Outcome::Written),
    ("stopsignal", "99", Outcome::LeftOut),
    ("stopwaitsecs", "5", Outcome::Written),
    ("stopwaitsecs", "0", Outcome::Written),
    ("stopasgroup", "true", Outcome::Noted),
    ("killasgroup", "true", Outcome::Noted),
    ("user", "nobody", Outcome::Written),
    // supervise writes both streams together, each line saying which.
    ("redirect_stderr", "true", Outcome::Same),
    ("stdout_logfile", "/var/log/a.log", Outcome::Written),
    ("stdout_logfile", "syslog", Outcome::LeftOut),
    ("stdout_logfile_maxbytes", "1MB", Outcome::LeftOut),
    ("stdout_logfile_backups", "3", Outcome::LeftOut),
    ("stdout_capture_maxbytes", "1MB", Outcome::LeftOut),
    ("stdout_events_enabled", "true", Outcome::LeftOut),
    ("stdout_syslog", "true", Outcome::LeftOut),
    ("stderr_logfile", "/var/log/a.err", Outcome::Written),
    ("stderr_logfile_maxbytes", "1MB", Outcome::LeftOut),
    ("stderr_logfile_backups", "3", Outcome::LeftOut),
    ("stderr_capture_maxbytes", "1MB", Outcome::LeftOut),
    ("stderr_events_enabled", "true", Outcome::LeftOut),
    ("stderr_syslog", "true", Outcome::LeftOut),
    ("environment", "A=1", Outcome::Written),
    ("environment", "my-var=1", Outcome::LeftOut),
    ("directory", "/srv", Outcome::Written),
    ("umask", "022", Outcome::LeftOut),
    ("serverurl", "AUTO", Outcome::LeftOut),
];

#[test]
fn every_documented_program_key_is_mapped_or_left_out_with_a_note_at_its_line() {
    let section = "[program:a]\ncommand = run %(process_num)d\n";
    let base = import(section).apps.remove(0);
    for (key, value, expected) in PROGRAM_OPTIONS {
        // The key is on line 3.
        let draft = import(&format!("{section}{key} = {value}\n"));
        let app = &draft.apps[0];
        let noted = app.notes.iter().any(|n| n.line == Some(3));
        let mapped = app.mapped.iter().any(|k| k == key);
        // An environment variable is left out alone, its key mapped.
        let left_out = app.left_out.iter().any(|k| k == key)
            || (*key == "environment" && !app.fields.contains_key("env"));
        let outcome = Outcome::of(mapped, left_out, app.fields != base.fields, noted)
            .unwrap_or_else(|| {
                panic!(
                    "`{key} = {value}`: mapped {mapped}, left out {left_out}, noted {noted}: {app:#?}"
                )
            });
        assert_eq!(outcome, *expected, "`{key} = {value}`: {app:#?}");
    }
}

#[test]
fn values_check_refuses_are_adjusted_or_left_out_with_a_warning() {
    let draft = import(
        "[program:a]\ncommand = a\nstartsecs = 45\nstopwaitsecs = 0\nnumprocs = 5000\nprocess_name = %(program_name)s_%(process_num)d\nstdout_logfile = /var/log/a.log\nstdout_logfile_backups = 5000\nstdout_logfile_maxbytes = 99999999999999GB\nuser = nobody\nenvironment = HOME=\"/home/x\",my-var=1,A=\"{instance\",B=2\n",
    );
    let app = &draft.apps[0];
    assert_eq!(app.fields["ready"], json!({"delay": "45s"}));
    assert_eq!(app.fields["ready_timeout"], json!("55s"));
    assert_eq!(app.fields["kill_timeout"], json!("1s"));
    assert_eq!(
        app.fields["instances"],
        json!(model::spec::defaults::MAX_INSTANCES)
    );
    assert_eq!(
        app.fields["log"],
        json!({"file": "/var/log/a.log", "keep": model::spec::defaults::MAX_LOG_KEEP})
    );
    assert_eq!(app.fields["env"], json!({"B": "2"}));
    let warned_at = |line: usize| {
        app.notes
            .iter()
            .any(|n| n.line == Some(line) && n.severity == super::super::Severity::Warning)
    };
    for line in [3, 4, 5, 8, 9, 11] {
        assert!(
            warned_at(line),
            "no warning at line {line}: {:#?}",
            app.notes
        );
    }
    let draft = import(
        "[program:a]\ncommand = a\nstdout_logfile = /var/log/a.log\nstdout_logfile_backups = 0\n",
    );
    assert_eq!(
        draft.apps[0].fields["log"]["keep"],
        json!(0),
        "no rotated file, as in supervisord"
    );
}

#[test]
fn sections_of_supervisord_itself_are_noted_and_the_summary_names_the_keys() {
    let draft = import(
        "[supervisord]\nlogfile = /tmp/s.log\n[unix_http_server]\nfile = /tmp/s.sock\n[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = x\n[supervisorctl]\nserverurl = unix:///tmp/s.sock\n[inet_http_server]\nport = 9001\n[include]\nfiles = conf.d/*.conf\n[program:a]\ncommand = a\numask = 022\n",
    );
    for line in [1, 3, 5, 7, 9] {
        assert!(
            draft
                .notes
                .iter()
                .any(|n| n.line == Some(line) && n.text.contains("supervisord itself")),
            "line {line}: {:#?}",
            draft.notes
        );
    }
    assert!(draft.notes.iter().any(|n| n.line == Some(11)
        && n.severity == super::super::Severity::Warning
        && n.text.contains("not followed")));
    let summary = super::super::summary(&draft);
    assert!(
        summary.ends_with("  a: mapped command; left out umask\n"),
        "{summary}"
    );
    assert!(
        summary.starts_with("imported 1 app from supervisord.conf (supervisord), 2 warnings:\n"),
        "{summary}"
    );
}
