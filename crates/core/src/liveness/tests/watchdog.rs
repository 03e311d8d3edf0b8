//! The notify socket's timers: a missed watchdog's signal and restart, a stop
//! command during a watchdog stop, and `EXTEND_TIMEOUT_USEC` moving the ready
//! deadline.

use super::*;

#[test]
fn a_missed_watchdog_sends_its_signal_and_restarts_with_backoff() {
    let mut spec = app(1);
    spec.process.watchdog = Some(Duration::from_secs(1));
    let mut shell = Shell::new(spec);
    let ping = |shell: &mut Shell, message| {
        let notified = Input::Notified {
            leader: 100,
            uid: 1000,
            ready: false,
            status: None,
            watchdog: Some(message),
            extend_timeout: None,
            injected: false,
        };
        shell.core.input(notified, shell.now);
        shell.settle();
    };
    for _ in 0..3 {
        shell.advance(Duration::from_millis(900));
        ping(&mut shell, WatchdogMessage::Ping);
    }
    assert!(shell.signals.is_empty(), "kept alive by its pings");
    shell.advance(Duration::from_millis(999));
    assert!(shell.signals.is_empty());
    shell.advance(Duration::from_millis(1));
    assert_eq!(shell.signals, [(100, Signal::SIGABRT)]);
    assert!(shell.events.iter().any(|e| matches!(
        e,
        Event::WatchdogMissed { pid: 100, triggered: false, silent_for, .. }
            if *silent_for == Duration::from_secs(1)
    )));
    shell.gone(100, 134);
    assert_eq!(shell.workers(), [(None, "backoff")]);
    shell.advance(Duration::from_millis(100));
    assert_eq!(shell.workers(), [(Some(101), "ready")]);
    // WATCHDOG=trigger fails it at once.
    ping(&mut shell, WatchdogMessage::Ping);
    shell.signals.clear();
    let trigger = Input::Notified {
        leader: 101,
        uid: 1000,
        ready: false,
        status: None,
        watchdog: Some(WatchdogMessage::Trigger),
        extend_timeout: None,
        injected: false,
    };
    shell.core.input(trigger, shell.now);
    shell.settle();
    assert_eq!(shell.signals, [(101, Signal::SIGABRT)]);
}

#[test]
fn extend_timeout_moves_the_ready_deadline_while_starting() {
    let mut spec = app(1);
    spec.ready = Readiness::Notify;
    spec.ready_timeout = Duration::from_secs(2);
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_millis(1500));
    let extend = Input::Notified {
        leader: 100,
        uid: 1000,
        ready: false,
        status: None,
        watchdog: None,
        extend_timeout: Some(Duration::from_secs(3)),
        injected: false,
    };
    shell.core.input(extend, shell.now);
    shell.settle();
    shell.advance(Duration::from_millis(2999));
    assert!(
        shell.signals.is_empty(),
        "extended to 4.5 s after the start"
    );
    shell.advance(Duration::from_millis(1));
    assert_eq!(shell.signals, [(100, Signal::SIGTERM)]);
    let app = shell.core.app("web").unwrap();
    assert!(matches!(
        app.workers.values().next().unwrap().state,
        State::Stopping { .. }
    ));
}

#[test]
fn a_stop_command_during_a_watchdog_stop_holds_the_instance() {
    let mut spec = app(1);
    spec.process.watchdog = Some(Duration::from_secs(1));
    let mut shell = Shell::new(spec);
    shell.advance(Duration::from_secs(1));
    assert_eq!(shell.signals, [(100, Signal::SIGABRT)]);
    let hold = crate::commands::Order::Hold {
        target: "web".into(),
    };
    let reply = shell.core.command(hold, shell.now).unwrap();
    assert!(format!("{reply:?}").contains(" 1 instance"), "{reply:?}");
    shell.settle();
    shell.gone(100, 134);
    shell.advance(Duration::from_secs(5));
    assert_eq!(shell.workers(), [(None, "stopped (held)")]);
}
