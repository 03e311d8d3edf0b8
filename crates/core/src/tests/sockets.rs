//! Listening sockets: a new one is bound before its version applies, an app
//! that cannot bind keeps its last good version, and a bind nobody waited
//! for is an anomaly.

use super::*;

/// `web` listening on `port` (one shared socket).
fn listening(port: u16, instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.process.listen = vec![model::spec::ListenSpec {
        name: "http".into(),
        address: model::spec::ListenAddress::Tcp(([127, 0, 0, 1], port).into()),
        reuseport: false,
        inject: false,
    }];
    spec
}

fn desired_of(apps: Vec<AppSpec>) -> Desired {
    Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    }
}

fn binds(actions: &[Action]) -> Vec<(String, SocketKey)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Bind { app, key } => Some((app.clone(), key.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_socket_is_bound_before_its_version_applies() {
    let t0 = Instant::now();
    let mut core = core_with(vec![listening(8000, 1)], t0);
    core.converge(t0);
    core.take_actions();
    let trigger = "the file changed".to_string();
    core.input(
        Input::Apply {
            desired: desired_of(vec![listening(9000, 1)]),
            trigger,
        },
        t0,
    );
    let asked = binds(&core.take_actions());
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(core.file_version(), 1, "nothing applies before the bind");
    let (app, key) = asked.into_iter().next().unwrap();
    core.input(
        Input::Bound {
            app,
            key,
            error: None,
        },
        t0,
    );
    core.converge(t0);
    let actions = core.take_actions();
    assert_eq!(core.file_version(), 2);
    assert!(actions.iter().any(|a| matches!(a, Action::RouteOutput)));
    assert!(
        core.desired().apps[0].process.listen[0]
            .address
            .to_string()
            .ends_with(":9000"),
        "{:?}",
        core.desired()
    );
}

#[test]
fn an_app_that_cannot_bind_keeps_its_last_good_version_and_others_apply() {
    let t0 = Instant::now();
    let mut api = AppSpec::with_defaults("api", &["api"], 1);
    let mut core = core_with(vec![listening(8000, 1), api.clone()], t0);
    core.converge(t0);
    core.take_actions();
    api.instances = 3;
    core.input(
        Input::Apply {
            desired: desired_of(vec![listening(9000, 2), api]),
            trigger: "the file changed".into(),
        },
        t0,
    );
    for (app, key) in binds(&core.take_actions()) {
        let error = Some("Address already in use".to_string());
        core.input(Input::Bound { app, key, error }, t0);
    }
    core.converge(t0);
    let actions = core.take_actions();
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Report(Event::BindFailed { app, .. }) if app == "web"
        )),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| matches!(a, Action::SweepSockets)));
    let web = core.desired().app("web").unwrap();
    assert_eq!(web.instances, 1, "web keeps what runs");
    assert_eq!(core.desired().app("api").unwrap().instances, 3);
}

#[test]
fn a_bind_nobody_waited_for_is_an_anomaly_not_a_panic() {
    let t0 = Instant::now();
    let mut core = core_with(vec![listening(8000, 1)], t0);
    let key = SocketKey {
        address: model::spec::ListenAddress::Tcp(([127, 0, 0, 1], 1).into()),
        slot: None,
    };
    core.input(
        Input::Bound {
            app: "web".into(),
            key,
            error: None,
        },
        t0,
    );
    assert_eq!(core.anomalies(), 1);
}
