//! The serialized form and the handover: every field of a spec comes back,
//! an unknown signal or timezone is refused by name, and a worker spawning at
//! the handover is an anomaly.

use super::*;

/// Every field of a spec that has one, set: they all come back.
#[test]
fn a_spec_with_everything_set_round_trips() {
    let mut spec = web(2);
    spec.process.program = Some("/usr/bin/server".into());
    spec.process.shell = true;
    spec.process.env = vec![("PORT".into(), Template::parse("{instance+8000}").unwrap())];
    spec.process.listen = vec![
        ListenSpec {
            name: "http".into(),
            address: ListenAddress::Tcp("[::]:8080".parse().unwrap()),
            reuseport: true,
            inject: true,
        },
        ListenSpec {
            name: "admin".into(),
            address: ListenAddress::Unix("/run/web.sock".into()),
            reuseport: false,
            inject: false,
        },
    ];
    spec.process.identity = Some(Identity {
        user: "www".into(),
        uid: 33,
        gid: 33,
        groups: vec![33, 4],
        home: "/var/www".into(),
    });
    spec.instances_from_max = true;
    spec.ready = Readiness::Delay(250 * MS);
    spec.backoff.factor = 1.1;
    spec.stop_signal = model::Signal::SIGQUIT;
    spec.watchdog_signal = model::Signal::SIGUSR2;
    spec.health = Some(HealthSpec {
        check: HealthCheck::Exec(vec![Template::literal("check"), Template::literal("-q")]),
        every: 5 * SEC,
        timeout: SEC,
        failures: 3,
        grace: 10 * SEC,
    });
    spec.log = Some(LogSpec {
        file: "/var/log/web-{instance}.log".into(),
        max_size: 1 << 20,
        keep: 3,
        format: LogFormat::Json,
    });
    let mut h = Harness::new(vec![spec]);
    wait(&mut h, SEC);
    survives(&mut h, crash_and_wait);
    let restored = round_trip(&h.core);
    assert_eq!(restored.desired(), h.core.desired());
    assert_eq!(
        restored.app("web").unwrap().spec,
        h.core.app("web").unwrap().spec
    );
}

#[test]
fn an_unknown_signal_or_timezone_is_refused_with_its_name() {
    let h = Harness::new(vec![scheduled(
        "cron",
        When::Cron {
            cron: croner::Cron::from_str("0 3 * * *").unwrap(),
            timezone: chrono_tz::America::New_York,
        },
    )]);
    let json = serde_json::to_string(&h.core).unwrap();
    assert!(json.contains("\"SIGTERM\"") && json.contains("\"America/New_York\""));
    for (good, bad, word) in [
        ("\"SIGTERM\"", "\"SIGNOPE\"", "SIGNOPE"),
        ("\"America/New_York\"", "\"Mars/Olympus\"", "Mars/Olympus"),
        ("\"0 3 * * *\"", "\"0 3 * *\"", "0 3 * *"),
    ] {
        let broken = json.replacen(good, bad, 1);
        let error = serde_json::from_str::<Core>(&broken)
            .unwrap_err()
            .to_string();
        assert!(error.contains(word), "{error}");
    }
}

#[test]
fn a_worker_spawning_at_the_handover_is_an_anomaly() {
    let h = Harness::new(vec![web(1)]);
    let mut core = round_trip(&h.core);
    let now = h.now;
    // As if the spawn had been ordered and not answered.
    let app = core.apps.get_mut("web").unwrap();
    let worker = app.workers.values_mut().next().unwrap();
    worker.state = State::Spawning;
    core.resumed(now);
    assert_eq!(core.anomalies(), 1);
}
