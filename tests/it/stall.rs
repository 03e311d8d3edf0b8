//! A stall of the supervisor (SIGSTOP here; a debugger, a paused container
//! or a VM's steal do the same) is its own, not its workers': what they sent
//! meanwhile counts before any deadline that would judge them, and the
//! deadlines move by the stall (issue 28, finding 2).

use std::time::Duration;

use crate::common::{Supervised, has_systemd_notify, timestamp_ms};

/// Longer than every deadline of the apps below, and than the lateness the
/// supervisor takes for a stall of its own (1 s).
const STALL: Duration = Duration::from_secs(3);

/// Stop the supervisor for `STALL`, then let it go on.
fn stall(s: &Supervised) {
    s.signal(libc::SIGSTOP);
    std::thread::sleep(STALL);
    s.signal(libc::SIGCONT);
}

#[test]
fn workers_that_kept_pinging_their_watchdog_through_a_stall_are_not_blamed() {
    if !has_systemd_notify() {
        println!("skipped: systemd-notify is not installed (apt-get install systemd)");
        return;
    }
    let yaml = r#"
apps:
  dog:
    command: while :; do systemd-notify WATCHDOG=1; echo pinged; sleep 0.2; done
    shell: true
    instances: 2
    ready: none
    watchdog: 1s
"#;
    let mut s = Supervised::start(yaml);
    s.wait_count("ready", "dog", 2);
    stall(&s);
    // Two watchdog periods after the stall, a ping read from each instance:
    // by then a deadline judged before the news was in would have fired.
    let resumed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let pinged_later = |s: &Supervised, slot: u64| {
        s.events.iter().any(|e| {
            e["event"] == "output"
                && e["line"] == "pinged"
                && e["slot"] == slot
                && timestamp_ms(e) > resumed + 2000.0
        })
    };
    assert!(
        s.until(crate::common::WAIT, |s| pinged_later(s, 0)
            && pinged_later(s, 1)),
        "{}",
        s.dump()
    );
    assert_eq!(s.count("watchdog_missed", "dog"), 0, "{}", s.dump());
    let stalled = s.wait_for("the stall said", |e| e["event"] == "stalled");
    assert!(
        stalled["stalled_ms"].as_u64().unwrap() >= 1000,
        "moved by the lateness and a grace: {stalled}"
    );
}

#[test]
fn a_ready_sent_while_the_supervisor_was_stopped_counts_before_its_timeout() {
    if !has_systemd_notify() {
        println!("skipped: systemd-notify is not installed (apt-get install systemd)");
        return;
    }
    let yaml = r#"
apps:
  slow:
    command: sleep 0.5; systemd-notify --ready; echo told; exec sleep 1000
    shell: true
    ready: notify
    ready_timeout: 1s
"#;
    let mut s = Supervised::start(yaml);
    s.wait_event("spawned", "slow");
    stall(&s);
    let ready = s.wait_event("ready", "slow");
    assert_eq!(ready["via"], "notify", "{ready}");
    assert!(
        !s.events
            .iter()
            .any(|e| e["event"] == "stopping" && e["app"] == "slow"),
        "stopped as not ready in time:\n{}",
        s.dump()
    );
}
