//! The worker state machine, input by input, on a fake clock.

use super::*;
use model::process::{StartError, StartStage};

fn rules(restart: RestartPolicy) -> RestartRules {
    RestartRules {
        restart,
        backoff: BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            factor: 2.0,
            reset_after: Duration::from_secs(60),
        },
        max_restarts: None,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A worker whose process `pid` was started at `now`.
fn run(w: &mut Worker, pid: i32, now: Instant) {
    w.begin_start().unwrap();
    w.spawned(pid, now).unwrap();
}

const CRASH: Exit = Exit::Code(1);

#[test]
fn a_crash_loop_follows_the_backoff_schedule() {
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let mut w = Worker::new(1, 0, 1);
    let mut now = t0;
    let mut delays = Vec::new();
    for pid in 100..106 {
        run(&mut w, pid, now);
        now += ms(10);
        match w.exited(CRASH, None, now, &r).unwrap() {
            Some(Decision::Restart { delay, attempt }) => {
                assert_eq!(attempt as usize, delays.len() + 1);
                assert_eq!(w.state, State::Backoff { until: now + delay });
                delays.push(delay.as_millis());
                now += delay;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(delays, [100, 200, 400, 800, 1600, 3200]);
    assert_eq!(w.restarts, 6);
}

#[test]
fn the_attempt_counter_resets_only_after_being_ready_for_reset_after() {
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let mut w = Worker::new(1, 0, 1);
    run(&mut w, 1, t0);
    w.exited(CRASH, None, t0, &r).unwrap();
    run(&mut w, 2, t0);
    w.exited(CRASH, None, t0, &r).unwrap();
    assert_eq!(w.attempt, 2);

    // Running (not ready) for longer than reset_after does not reset.
    run(&mut w, 3, t0);
    let late = t0 + Duration::from_secs(120);
    assert_eq!(
        w.exited(CRASH, None, late, &r).unwrap(),
        Some(Decision::Restart {
            attempt: 3,
            delay: ms(400)
        })
    );

    // Ready, but for less than reset_after: no reset.
    run(&mut w, 4, late);
    w.ready(late).unwrap();
    let early = late + Duration::from_secs(59);
    assert!(matches!(
        w.exited(CRASH, None, early, &r).unwrap(),
        Some(Decision::Restart { attempt: 4, .. })
    ));

    // Ready for reset_after: the next restart is attempt 1 again.
    run(&mut w, 5, early);
    w.ready(early).unwrap();
    let later = early + Duration::from_secs(60);
    assert_eq!(
        w.exited(CRASH, None, later, &r).unwrap(),
        Some(Decision::Restart {
            attempt: 1,
            delay: ms(100)
        })
    );
}

#[test]
fn restart_policies() {
    let t0 = Instant::now();
    let killed = |signal| Exit::Signal {
        signal,
        core: false,
    };
    let cases = [
        (RestartPolicy::Always, Exit::Code(0), true),
        (RestartPolicy::Always, Exit::Code(3), true),
        (RestartPolicy::Always, killed(9), true),
        (RestartPolicy::OnFailure, Exit::Code(0), false),
        (RestartPolicy::OnFailure, Exit::Code(1), true),
        (RestartPolicy::OnFailure, killed(15), true),
        (RestartPolicy::Never, Exit::Code(1), false),
        (RestartPolicy::Never, killed(9), false),
    ];
    for (policy, exit, restarts) in cases {
        let mut w = Worker::new(1, 0, 1);
        run(&mut w, 1, t0);
        let decision = w.exited(exit, None, t0, &rules(policy)).unwrap().unwrap();
        assert_eq!(
            matches!(decision, Decision::Restart { .. }),
            restarts,
            "{policy:?} {exit:?}"
        );
        if !restarts {
            assert_eq!(decision, Decision::Done);
            let expected = if exit == Exit::Code(0) {
                State::Completed { at: t0 }
            } else {
                State::Exited
            };
            assert_eq!(w.state, expected, "{policy:?} {exit:?}");
        }
        assert_eq!(w.last_outcome, Some(Outcome::Exited(exit)));
    }
}

#[test]
fn start_failures_count_as_failures() {
    let t0 = Instant::now();
    let error = StartError {
        stage: StartStage::Prepare,
        errno: crate::harness::errno::ENOENT,
    };
    let mut w = Worker::new(1, 0, 1);
    w.begin_start().unwrap();
    let decision = w
        .spawn_failed(error, t0, &rules(RestartPolicy::OnFailure))
        .unwrap();
    assert_eq!(
        decision,
        Decision::Restart {
            attempt: 1,
            delay: ms(100)
        }
    );
    assert_eq!(w.last_outcome, Some(Outcome::StartFailed(error)));
    let mut never = Worker::new(2, 0, 1);
    never.begin_start().unwrap();
    assert_eq!(
        never
            .spawn_failed(error, t0, &rules(RestartPolicy::Never))
            .unwrap(),
        Decision::Done
    );
}

#[test]
fn an_exec_failure_is_a_failed_start_even_when_the_worker_counted_as_ready() {
    // A probe can be answered by someone else: readiness then came before the
    // exec failure did. The exit still ends the run as a failed start.
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let exec = StartError {
        stage: StartStage::Exec,
        errno: crate::harness::errno::ENOEXEC,
    };
    let mut w = Worker::new(1, 0, 1);
    run(&mut w, 7, t0);
    w.ready(t0).unwrap();
    let decision = w.exited(Exit::Code(127), Some(exec), t0, &r).unwrap();
    assert!(matches!(
        decision,
        Some(Decision::Restart { attempt: 1, .. })
    ));
    assert_eq!(w.last_outcome, Some(Outcome::StartFailed(exec)));
    assert_eq!(w.state.pid(), None, "no ghost pid is left behind");
}

#[test]
fn exec_success_is_recorded_once_and_only_while_a_process_exists() {
    let t0 = Instant::now();
    let mut w = Worker::new(1, 0, 1);
    assert!(w.exec_succeeded().is_err(), "pending: no process yet");
    run(&mut w, 5, t0);
    assert_eq!(w.exec_succeeded(), Ok(true));
    assert_eq!(w.exec_succeeded(), Ok(false));
    assert!(matches!(
        w.state,
        State::Starting {
            exec_confirmed: true,
            ..
        }
    ));
}

#[test]
fn max_restarts_gives_up_after_exactly_count_restarts_in_the_window() {
    let t0 = Instant::now();
    let mut r = rules(RestartPolicy::Always);
    r.max_restarts = Some(MaxRestarts {
        count: 3,
        within: Duration::from_secs(10),
    });
    let mut w = Worker::new(1, 0, 1);
    let mut now = t0;
    let mut restarts = 0;
    loop {
        run(&mut w, 1, now);
        now += ms(50);
        match w.exited(CRASH, None, now, &r).unwrap().unwrap() {
            Decision::Restart { delay, .. } => {
                restarts += 1;
                now += delay;
            }
            Decision::GiveUp {
                restarts: count, ..
            } => {
                assert_eq!(count, 3);
                break;
            }
            Decision::Done | Decision::Replaced => panic!("always restarts"),
        }
    }
    assert_eq!(restarts, 3);
    assert_eq!(w.state, State::Failed);
    w.revive().unwrap();
    assert_eq!((w.state.clone(), w.attempt), (State::Pending, 0));
}

#[test]
fn restarts_outside_the_window_do_not_count() {
    let t0 = Instant::now();
    let mut r = rules(RestartPolicy::Always);
    r.backoff.factor = 1.0;
    r.max_restarts = Some(MaxRestarts {
        count: 2,
        within: Duration::from_secs(1),
    });
    let mut w = Worker::new(1, 0, 1);
    let mut now = t0;
    for _ in 0..10 {
        run(&mut w, 1, now);
        now += ms(600);
        let decision = w.exited(CRASH, None, now, &r).unwrap().unwrap();
        assert!(matches!(decision, Decision::Restart { .. }), "{decision:?}");
        now += ms(100);
    }
}

#[test]
fn a_stop_completes_only_when_the_group_is_empty() {
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let mut w = Worker::new(1, 0, 1);
    run(&mut w, 7, t0);
    w.ready(t0).unwrap();
    w.stop(t0, Duration::from_secs(10), AfterStop::Remove)
        .unwrap();
    assert!(
        matches!(w.state, State::Stopping { deadline, .. } if deadline == t0 + Duration::from_secs(10))
    );
    assert!(
        w.group_empty(t0, &r).is_err(),
        "not before the leader is reaped"
    );
    // The leader exiting does not end the stop, and does not restart.
    assert_eq!(w.exited(Exit::Code(0), None, t0, &r).unwrap(), None);
    assert!(matches!(
        w.state,
        State::Stopping {
            leader_exit: Some(Exit::Code(0)),
            ..
        }
    ));
    assert!(w.exited(Exit::Code(0), None, t0, &r).is_err(), "one exit");
    w.killed().unwrap();
    assert!(w.killed().is_err(), "one SIGKILL");
    assert_eq!(w.group_empty(t0, &r).unwrap(), StopEnd::Remove);
}

#[test]
fn not_ready_in_time_is_a_failed_start_after_the_stop() {
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let mut w = Worker::new(1, 0, 1);
    run(&mut w, 7, t0);
    w.stop(
        t0,
        Duration::from_secs(1),
        AfterStop::Failed(Outcome::NotReady),
    )
    .unwrap();
    w.exited(
        Exit::Signal {
            signal: 15,
            core: false,
        },
        None,
        t0,
        &r,
    )
    .unwrap();
    let decision = w.group_empty(t0, &r).unwrap();
    assert_eq!(
        decision,
        StopEnd::Decided(Decision::Restart {
            attempt: 1,
            delay: ms(100)
        })
    );
    assert_eq!(w.last_outcome, Some(Outcome::NotReady));
}

#[test]
fn hold_restart_and_hurry() {
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let mut w = Worker::new(1, 0, 1);
    run(&mut w, 7, t0);
    w.stop(t0, Duration::from_secs(10), AfterStop::Hold)
        .unwrap();
    w.hurry(t0 + ms(5)).unwrap();
    assert!(matches!(w.state, State::Stopping { deadline, .. } if deadline == t0 + ms(5)));
    w.exited(Exit::Code(0), None, t0, &r).unwrap();
    assert_eq!(w.group_empty(t0, &r).unwrap(), StopEnd::Held);
    w.hold().unwrap();
    assert_eq!(w.state, State::Held, "holding a held worker is fine");
    w.revive().unwrap();
    run(&mut w, 8, t0);
    w.stop(t0, Duration::from_secs(10), AfterStop::Restart)
        .unwrap();
    w.exited(Exit::Code(0), None, t0, &r).unwrap();
    assert_eq!(w.group_empty(t0, &r).unwrap(), StopEnd::Restart);
    assert_eq!(w.state, State::Pending);
}

/// Workers in every state, stopping ones with each way a stop can end.
fn setups(t0: Instant) -> Vec<Worker> {
    let r = rules(RestartPolicy::Always);
    let started = |ready: bool| {
        let mut w = Worker::new(1, 0, 1);
        run(&mut w, 9, t0);
        if ready {
            w.ready(t0).unwrap();
        }
        w
    };
    let stopping = |then: AfterStop, leader_gone: bool| {
        let mut w = started(true);
        w.stop(t0, ms(10), then).unwrap();
        if leader_gone {
            w.exited(Exit::Code(0), None, t0, &r).unwrap();
        }
        w
    };
    let mut spawning = Worker::new(1, 0, 1);
    spawning.begin_start().unwrap();
    let mut backoff = started(false);
    backoff.exited(CRASH, None, t0, &r).unwrap();
    let mut failed = started(false);
    failed.exited(CRASH, None, t0, &limited(&r)).unwrap();
    let mut held = Worker::new(1, 0, 1);
    held.hold().unwrap();
    let mut exited = started(false);
    exited
        .exited(CRASH, None, t0, &rules(RestartPolicy::Never))
        .unwrap();
    let mut completed = started(true);
    completed
        .exited(Exit::Code(0), None, t0, &rules(RestartPolicy::Never))
        .unwrap();
    let not_ready = AfterStop::Failed(Outcome::NotReady);
    vec![
        Worker::new(1, 0, 1),
        spawning,
        started(false),
        started(true),
        stopping(AfterStop::Remove, false),
        stopping(AfterStop::Remove, true),
        stopping(not_ready, true),
        stopping(AfterStop::Hold, true),
        stopping(AfterStop::Restart, true),
        backoff,
        failed,
        held,
        exited,
        completed,
    ]
}

/// `rules` with `max_restarts` of zero: the first failure gives up.
fn limited(r: &RestartRules) -> RestartRules {
    let mut limited = *r;
    limited.max_restarts = Some(MaxRestarts {
        count: 0,
        within: ms(10),
    });
    limited
}

#[test]
fn every_input_in_every_state_is_applied_or_refused_and_never_breaks_the_table() {
    let t0 = Instant::now();
    let error = StartError {
        stage: StartStage::Exec,
        errno: crate::harness::errno::ENOENT,
    };
    type Input = (
        &'static str,
        fn(&mut Worker, Instant, &RestartRules, StartError) -> bool,
    );
    let inputs: [Input; 15] = [
        ("begin_start", |w, _, _, _| w.begin_start().is_ok()),
        ("spawned", |w, t, _, _| w.spawned(3, t).is_ok()),
        ("spawn_failed", |w, t, r, e| w.spawn_failed(e, t, r).is_ok()),
        ("exec_succeeded", |w, _, _, _| w.exec_succeeded().is_ok()),
        ("ready", |w, t, _, _| w.ready(t).is_ok()),
        ("exited", |w, t, r, _| w.exited(CRASH, None, t, r).is_ok()),
        ("exited_cleanly", |w, t, r, _| {
            w.exited(Exit::Code(0), None, t, r).is_ok()
        }),
        ("exec_failed", |w, t, r, e| {
            w.exited(Exit::Code(127), Some(e), t, r).is_ok()
        }),
        ("stop", |w, t, _, _| {
            w.stop(t, ms(5), AfterStop::Remove).is_ok()
        }),
        ("hurry", |w, t, _, _| w.hurry(t).is_ok()),
        ("retime_stop", |w, _, _, _| w.retime_stop(ms(1)).is_ok()),
        ("killed", |w, _, _, _| w.killed().is_ok()),
        ("group_empty", |w, t, r, _| w.group_empty(t, r).is_ok()),
        ("hold", |w, _, _, _| w.hold().is_ok()),
        ("revive", |w, _, _, _| w.revive().is_ok()),
    ];
    let always = rules(RestartPolicy::Always);
    let every_rules = [always, rules(RestartPolicy::Never), limited(&always)];
    let mut kinds = std::collections::HashSet::new();
    let mut reached = std::collections::HashSet::new();
    for setup in setups(t0) {
        kinds.insert(setup.state.kind());
        for r in &every_rules {
            for (name, input) in inputs {
                let mut w = setup.clone();
                let applied = input(&mut w, t0, r, error);
                let (from, to) = (setup.state.kind(), w.state.kind());
                if !applied {
                    assert_eq!(w, setup, "a refused {name} in {from:?} changed the worker");
                    continue;
                }
                if from != to {
                    assert!(
                        allowed(from, to),
                        "{name}: {from:?} → {to:?} is not in ALLOWED"
                    );
                    reached.insert((from, to));
                }
            }
        }
    }
    assert_eq!(kinds.len(), Kind::ALL.len(), "every state is set up");
    // Every transition the table allows is taken by some input.
    for (to, sources) in ALLOWED {
        for from in *sources {
            assert!(
                reached.contains(&(*from, *to)),
                "{from:?} → {to:?} is allowed but no input takes it"
            );
        }
    }
}

#[test]
fn exits_read_like_sentences() {
    assert_eq!(Exit::Code(3).to_string(), "exited with code 3");
    assert_eq!(
        Exit::Signal {
            signal: 9,
            core: false
        }
        .to_string(),
        "killed by SIGKILL"
    );
    assert_eq!(
        Exit::Signal {
            signal: 11,
            core: true
        }
        .to_string(),
        "killed by SIGSEGV (core dumped)"
    );
    let chdir = Outcome::StartFailed(StartError {
        stage: StartStage::Chdir,
        errno: crate::harness::errno::ENOENT,
    });
    assert_eq!(
        chdir.to_string(),
        "failed to start: chdir: No such file or directory"
    );
}

#[test]
fn a_new_process_is_no_longer_being_recycled() {
    let t0 = Instant::now();
    let r = rules(RestartPolicy::Always);
    let mut w = Worker::new(1, 0, 1);
    run(&mut w, 9, t0);
    w.ready(t0).unwrap();
    assert!(matches!(
        w.condemn(Outcome::Unhealthy, t0, &r),
        Ok(crate::worker::Verdict::Replace { .. })
    ));
    assert!(w.recycle.is_some());
    // Its replacement takes its slot: its own run ends there.
    assert_eq!(
        w.exited(CRASH, None, t0, &r).unwrap(),
        Some(Decision::Replaced)
    );
    assert_eq!(w.state, State::Exited);
    assert_eq!(w.restarts, 1, "counted once, when it was condemned");
    w.revive().unwrap();
    w.begin_start().unwrap();
    w.spawned(10, t0).unwrap();
    assert_eq!(w.recycle, None, "its checks and limits apply again");
}
