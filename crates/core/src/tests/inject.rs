//! `listen: {inject: true}`: an instance never handed its socket is said
//! once per version, after the grace or when it fails at its start.

use super::*;

/// An app of `instances` whose one socket has `inject`, ready at once.
fn injecting(instances: u32) -> AppSpec {
    let mut spec = AppSpec::with_defaults("web", &["server"], instances);
    spec.process.listen = vec![model::spec::ListenSpec {
        name: "web".into(),
        address: model::spec::ListenAddress::Tcp("127.0.0.1:8080".parse().expect("an address")),
        reuseport: false,
        inject: true,
    }];
    spec.ready = model::spec::Readiness::Immediate;
    spec
}

/// Start every spawn ordered so far with pids from `first`; returns them.
fn run_spawns(core: &mut Core, first: i32, now: Instant) -> Vec<i32> {
    let mut pids = Vec::new();
    for (i, (app, id)) in spawns(&core.take_actions()).into_iter().enumerate() {
        let pid = first + i as i32;
        core.input(Input::Spawned { app, id, pid }, now);
        core.input(Input::ExecSucceeded { pid }, now);
        pids.push(pid);
    }
    core.converge(now);
    pids
}

fn injected(core: &mut Core, pid: i32, now: Instant) {
    let notice = Input::Notified {
        leader: pid,
        uid: 1000,
        ready: false,
        status: None,
        watchdog: None,
        extend_timeout: None,
        injected: true,
    };
    core.input(notice, now);
}

fn not_injected(actions: &[Action]) -> Vec<i32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Report(Event::NotInjected { pid, addresses, .. }) => {
                assert_eq!(addresses, &["127.0.0.1:8080".to_string()]);
                Some(*pid)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_instance_never_handed_its_socket_is_said_once_per_version_after_the_grace() {
    let t0 = Instant::now();
    let mut core = core_with(vec![injecting(2)], t0);
    core.converge(t0);
    run_spawns(&mut core, 300, t0);
    assert!(
        not_injected(&core.take_actions()).is_empty(),
        "ready, but the grace has not passed"
    );
    assert_eq!(core.next_wake(), t0 + INJECT_GRACE);

    let later = t0 + INJECT_GRACE;
    core.input(Input::Tick, later);
    core.converge(later);
    assert_eq!(
        not_injected(&core.take_actions()).len(),
        1,
        "once for the app's version, not per instance"
    );
    core.input(Input::Tick, later + INJECT_GRACE);
    core.converge(later + INJECT_GRACE);
    assert!(not_injected(&core.take_actions()).is_empty());

    // A new version is looked at anew.
    core.command(Order::Reload { app: "web".into() }, later)
        .expect("reload");
    core.converge(later);
    let mut now = later;
    let mut seen = Vec::new();
    for round in 0..8 {
        let pids = run_spawns(&mut core, 400 + 10 * round, now);
        for pid in core
            .app("web")
            .expect("web")
            .workers
            .values()
            .filter_map(|w| w.state.pid())
            .collect::<Vec<_>>()
        {
            if !pids.contains(&pid) && pid < 400 {
                core.input(
                    Input::Exited {
                        pid,
                        exit: Exit::Signal {
                            signal: 15,
                            core: false,
                        },
                        start_error: None,
                    },
                    now,
                );
                core.input(Input::GroupEmpty { pgid: pid }, now);
            }
        }
        core.converge(now);
        now += INJECT_GRACE;
        core.input(Input::Tick, now);
        core.converge(now);
        seen.extend(not_injected(&core.take_actions()));
    }
    assert_eq!(
        seen.len(),
        1,
        "the reloaded version is said once too: {seen:?}"
    );
}

#[test]
fn an_instance_handed_its_socket_is_not_said() {
    let t0 = Instant::now();
    let mut core = core_with(vec![injecting(1)], t0);
    core.converge(t0);
    let pids = run_spawns(&mut core, 300, t0);
    // The library's report may come before or after ready.
    injected(&mut core, pids[0], t0 + Duration::from_secs(3));
    let later = t0 + 2 * INJECT_GRACE;
    core.input(Input::Tick, later);
    core.converge(later);
    assert!(not_injected(&core.take_actions()).is_empty());

    let mut plain = AppSpec::with_defaults("web", &["server"], 1);
    plain.ready = model::spec::Readiness::Immediate;
    let mut core = core_with(vec![plain], t0);
    core.converge(t0);
    run_spawns(&mut core, 300, t0);
    core.input(Input::Tick, later);
    core.converge(later);
    assert!(
        not_injected(&core.take_actions()).is_empty(),
        "only apps with `inject` are looked at"
    );
}

#[test]
fn an_instance_that_fails_at_start_unreached_is_said_once_before_it_is_ready() {
    let t0 = Instant::now();
    let mut spec = injecting(2);
    spec.ready = model::spec::Readiness::Delay(Duration::from_secs(1));
    let mut core = core_with(vec![spec], t0);
    core.converge(t0);
    let pids = run_spawns(&mut core, 300, t0);
    // A static binary's bind() is refused the port: it exits at once.
    for pid in pids {
        core.input(
            Input::Exited {
                pid,
                exit: Exit::Code(1),
                start_error: None,
            },
            t0,
        );
        core.input(Input::GroupEmpty { pgid: pid }, t0);
    }
    core.converge(t0);
    let said: Vec<bool> = core
        .take_actions()
        .iter()
        .filter_map(|a| match a {
            Action::Report(Event::NotInjected { before_ready, .. }) => Some(*before_ready),
            _ => None,
        })
        .collect();
    assert_eq!(said, [true], "once for the version, though both failed");
}
