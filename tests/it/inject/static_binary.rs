//! A static binary, which the library cannot reach: warned about once per
//! version, it runs on; refused the port, it is said once as it fails.

use super::*;

/// Compile a tiny static C program that binds `port` itself (through glibc
/// linked in, which no preload reaches), says what bind returned, and stays up.
fn static_binary(dir: &Path, port: u16) {
    let source = format!(
        r#"#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons({port});
    int r = bind(s, (struct sockaddr *)&a, sizeof a);
    printf("bind returned %d\n", r);
    fflush(stdout);
    for (;;) pause();
}}
"#
    );
    std::fs::write(dir.join("server.c"), source).expect("write");
    compile_c(
        &dir.join("server.c"),
        &dir.join("server"),
        &["-static", "-O1"],
    );
}

/// The `not_injected` warnings of `app` for `generation`.
fn warnings(s: &Supervised, app: &str, generation: i64) -> usize {
    s.events
        .iter()
        .filter(|e| {
            e["event"] == "not_injected" && e["app"] == app && e["generation"] == generation
        })
        .count()
}

#[test]
fn a_static_binary_is_warned_about_once_per_version_and_runs_on() {
    let port = free_port();
    let yaml = format!(
        "apps:\n  static:\n    command: ./server\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: {{delay: 300ms}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| static_binary(dir, port));
    s.wait_count("ready", "static", 2);
    let warning = s.wait_event("not_injected", "static");
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["generation"], 1);
    let message = warning["message"].as_str().unwrap_or_default();
    for what_to_do in ["static binary", "EADDRINUSE", "LISTEN_FDS", "drop `inject`"] {
        assert!(
            message.contains(what_to_do),
            "the warning says what happened and what to do ({what_to_do}): {message}"
        );
    }
    // It runs on: both instances are up and were not restarted.
    let status = status_json(&s);
    let app = app_status(&status, "static");
    let ready = app["workers"]
        .as_array()
        .map_or(0, |w| w.iter().filter(|w| w["ready"] == true).count());
    assert_eq!(ready, 2, "{app}");
    assert_eq!(s.count("exited", "static"), 0);

    // An instance of the same version started again after the warning is
    // not warned about again; nor was the other instance.
    let restart = run_client(&s, &["restart", "static.0"]);
    assert!(
        restart.status.success(),
        "{}",
        String::from_utf8_lossy(&restart.stderr)
    );
    s.wait_count("spawned", "static", 3);
    assert_eq!(spawned_pids(&s, "static", 1).len(), 3, "{}", s.dump());
    wait_out_the_grace(&mut s, "static");
    assert_eq!(
        warnings(&s, "static", 1),
        1,
        "once per version, not per instance or per process: {}",
        s.dump()
    );

    // A new version is warned about once more, once for its two instances.
    let reload = run_client(&s, &["reload", "static"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    s.wait_count("spawned", "static", 5);
    assert_eq!(spawned_pids(&s, "static", 2).len(), 2, "{}", s.dump());
    s.wait_for("the new version's warning", |e| {
        e["event"] == "not_injected" && e["generation"] == 2
    });
    wait_out_the_grace(&mut s, "static");
    assert_eq!(warnings(&s, "static", 2), 1, "{}", s.dump());
    assert_eq!(warnings(&s, "static", 1), 1, "{}", s.dump());
}

#[test]
fn a_static_binary_refused_the_port_is_said_once_as_it_fails() {
    let port = free_port();
    // Binds supervise's very address and gives up when refused, as most
    // servers do: it never becomes ready.
    let yaml = format!(
        "apps:\n  same:\n    command: ./server\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: {{delay: 2s}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        static_binary(dir, port);
        // The same program, but it exits when its bind fails.
        let source = std::fs::read_to_string(dir.join("server.c")).expect("source");
        let exiting = source.replace(
            "printf(\"bind returned %d\\n\", r);",
            "printf(\"bind returned %d\\n\", r);\n    if (r != 0) return 1;",
        );
        std::fs::write(dir.join("server.c"), exiting).expect("write");
        compile_c(
            &dir.join("server.c"),
            &dir.join("server"),
            &["-static", "-O1"],
        );
    });
    let warning = s.wait_event("not_injected", "same");
    assert_eq!(warning["before_ready"], true, "{warning}");
    assert!(
        warning["message"]
            .as_str()
            .is_some_and(|m| m.contains("EADDRINUSE"))
    );
    s.wait_count("exited", "same", 4);
    assert_eq!(
        s.count("not_injected", "same"),
        1,
        "said once per version of the app"
    );
}
