//! Property: any raw model, serialised to YAML, parses back to the same model
//! through the same path `supervise check` takes (spanned tree → structure
//! check → raw types). A mismatch means the parser, the schema walk and the
//! types disagree about the format.

use config::diagnostic::Reporter;
use config::raw::*;
use config::{json_schema, node, raw_from_tree, structure};
use indexmap::IndexMap;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_-]{0,10}",
        "\\PC{0,16}",
        Just("max".to_string()),
        Just("true".to_string()),
        Just("123".to_string()),
        Just("~".to_string()),
        Just("{instance+1}".to_string()),
        Just("- x: y".to_string()),
    ]
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        Just(1.0),
        Just(2.5)
    ]
}

fn duration() -> impl Strategy<Value = DurationText> {
    prop_oneof!["[0-9]{1,4}(ms|s|m|h)", text()].prop_map(DurationText)
}

/// `user` / `group`: a number, or a name (which may be digits: `"123"`
/// must come back a string, not a number).
fn account() -> impl Strategy<Value = AccountId> {
    prop_oneof![
        any::<u32>().prop_map(AccountId::Id),
        text().prop_map(AccountId::Name),
    ]
}

fn listen_entry() -> impl Strategy<Value = ListenEntry> {
    prop_oneof![
        text().prop_map(ListenEntry::Address),
        (
            text(),
            proptest::option::of(text()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>())
        )
            .prop_map(|(address, name, reuseport, inject)| ListenEntry::Socket(
                SocketEntry {
                    address,
                    name,
                    reuseport,
                    inject,
                }
            )),
    ]
}

/// Boxed: the strategy's nested types are large enough to overflow a test
/// thread's stack in a debug build when kept inline.
fn app() -> BoxedStrategy<AppFields> {
    let command = prop_oneof![
        text().prop_map(CommandLine::Line),
        prop::collection::vec(text(), 0..4).prop_map(CommandLine::Argv),
    ];
    let env_value = prop_oneof![
        text().prop_map(EnvValue::Text),
        any::<i64>().prop_map(EnvValue::Integer),
        finite().prop_map(EnvValue::Float),
        any::<bool>().prop_map(EnvValue::Bool),
    ];
    let env = prop::collection::vec((text(), env_value), 0..4)
        .prop_map(|pairs| pairs.into_iter().collect::<IndexMap<_, _>>());
    let instances = prop_oneof![
        any::<u32>().prop_map(Instances::Count),
        Just(Instances::Keyword(MaxKeyword::Max)),
    ];
    let listen = prop_oneof![
        listen_entry().prop_map(Listen::One),
        prop::collection::vec(listen_entry(), 0..3).prop_map(Listen::Many),
    ];
    let ready = prop_oneof![
        Just(Ready::Keyword(ReadyKeyword::None)),
        Just(Ready::Keyword(ReadyKeyword::Notify)),
        text().prop_map(|tcp| Ready::Tcp(TcpProbe { tcp })),
        text().prop_map(|http| Ready::Http(HttpProbe { http })),
        duration().prop_map(|delay| Ready::Delay(DelayProbe { delay })),
    ];
    let restart = prop_oneof![
        Just(RestartPolicy::Always),
        Just(RestartPolicy::OnFailure),
        Just(RestartPolicy::Never)
    ];
    let backoff = (
        proptest::option::of(duration()),
        proptest::option::of(duration()),
        proptest::option::of(finite()),
        proptest::option::of(duration()),
    )
        .prop_map(|(initial, max, factor, reset_after)| Backoff {
            initial,
            max,
            factor,
            reset_after,
        });
    let max_restarts =
        (any::<u32>(), duration()).prop_map(|(count, within)| MaxRestarts { count, within });
    let reload = (
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(max_surge, max_unavailable)| Reload {
            max_surge,
            max_unavailable,
        });
    let check_command = prop_oneof![
        text().prop_map(CommandLine::Line),
        prop::collection::vec(text(), 0..4).prop_map(CommandLine::Argv),
    ];
    let health = (
        (
            of(text().boxed()),
            of(text().boxed()),
            of(check_command.boxed()),
        ),
        (
            of(duration().boxed()),
            of(duration().boxed()),
            of(any::<u32>().boxed()),
            of(duration().boxed()),
        ),
    )
        .prop_map(
            |((http, tcp, exec), (every, timeout, failures, grace))| Health {
                http,
                tcp,
                exec,
                every,
                timeout,
                failures,
                grace,
            },
        );
    let max_memory = prop_oneof![
        any::<u64>().prop_map(Size::Bytes),
        text().prop_map(Size::Text),
        "[0-9]{1,4} ?(B|K|KiB|MB|G)".prop_map(Size::Text),
    ];
    let condition = prop_oneof![
        Just(DependencyCondition::Started),
        Just(DependencyCondition::Ready),
        Just(DependencyCondition::Healthy),
        Just(DependencyCondition::Completed),
    ];
    let depends_on = prop_oneof![
        prop::collection::vec(text(), 0..4).prop_map(DependsOn::Names),
        prop::collection::vec((text(), condition), 0..4)
            .prop_map(|pairs| DependsOn::Conditions(pairs.into_iter().collect())),
    ];
    let on_dependency_restart = prop_oneof![
        Just(OnDependencyRestart::Ignore),
        Just(OnDependencyRestart::Restart),
    ];
    let schedule = prop_oneof![
        text().prop_map(Schedule::Cron),
        Just(Schedule::Cron("*/5 * * * *".to_string())),
        duration().prop_map(|every| Schedule::Every(Every { every })),
    ];
    let overlap = prop_oneof![
        Just(Overlap::Skip),
        Just(Overlap::Queue),
        Just(Overlap::Replace),
    ];
    let log = (
        of(text().boxed()),
        of(max_memory.clone().boxed()),
        of(any::<u32>().boxed()),
        of(prop_oneof![Just(LogFileFormat::Text), Just(LogFileFormat::Json)].boxed()),
    )
        .prop_map(|(file, max_size, keep, format)| LogFile {
            file,
            max_size,
            keep,
            format,
        });
    let percent = prop_oneof![
        any::<u32>().prop_map(Percent::Number),
        text().prop_map(Percent::Text),
        "[0-9]{1,3}%".prop_map(Percent::Text),
    ];
    let autoscale = (
        any::<u32>(),
        instances.clone(),
        of(any::<u32>().boxed()),
        of(percent.boxed()),
        of(duration().boxed()),
        of(duration().boxed()),
    )
        .prop_map(|(min, max, queue, cpu, up_after, down_after)| Autoscale {
            min,
            max,
            queue,
            cpu,
            up_after,
            down_after,
        });
    (
        (
            of(command.boxed()),
            of(any::<bool>()),
            of(text().boxed()),
            of(env.boxed()),
            of(text().boxed()),
            of(instances.boxed()),
            of(listen.boxed()),
        )
            .boxed(),
        (
            of(ready.boxed()),
            of(duration().boxed()),
            of(restart.boxed()),
            of(backoff.boxed()),
            of(max_restarts.boxed()),
            of(text().boxed()),
        )
            .boxed(),
        (
            of(duration().boxed()),
            of(reload.boxed()),
            of(account().boxed()),
            of(account().boxed()),
        )
            .boxed(),
        (
            of(health.boxed()),
            of(max_memory.boxed()),
            of(duration().boxed()),
            of(text().boxed()),
        )
            .boxed(),
        (
            of(depends_on.boxed()),
            of(on_dependency_restart.boxed()),
            of(schedule.boxed()),
            of(text().boxed()),
            of(overlap.boxed()),
            of(any::<bool>()),
            of(log.boxed()),
            of(autoscale.boxed()),
        )
            .boxed(),
    )
        .prop_map(
            |(
                (command, shell, cwd, env, env_file, instances, listen),
                (ready, ready_timeout, restart, backoff, max_restarts, stop_signal),
                (kill_timeout, reload, user, group),
                (health, max_memory, watchdog, watchdog_signal),
                (
                    depends_on,
                    on_dependency_restart,
                    schedule,
                    timezone,
                    overlap,
                    run_on_start,
                    log,
                    autoscale,
                ),
            )| AppFields {
                command,
                shell,
                cwd,
                env,
                env_file,
                instances,
                listen,
                ready,
                ready_timeout,
                restart,
                backoff,
                max_restarts,
                stop_signal,
                kill_timeout,
                reload,
                user,
                group,
                health,
                max_memory,
                watchdog,
                watchdog_signal,
                depends_on,
                on_dependency_restart,
                schedule,
                timezone,
                overlap,
                run_on_start,
                log,
                autoscale,
            },
        )
        .boxed()
}

fn of<T: std::fmt::Debug + Clone + 'static>(
    strategy: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    proptest::option::of(strategy).boxed()
}

fn ecosystem() -> impl Strategy<Value = EcosystemFile> {
    (
        proptest::option::of(app()),
        prop::collection::vec((text(), app()), 0..4),
        proptest::option::of(duration()),
        proptest::option::of(text()),
    )
        .prop_map(|(defaults, apps, memory_check, metrics)| EcosystemFile {
            defaults,
            apps: apps.into_iter().collect(),
            memory_check,
            metrics,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn serialised_models_parse_back_unchanged(model in ecosystem()) {
        let yaml = serde_saphyr::to_string(&model).expect("serialises");
        let tree = node::parse(&yaml).map_err(|e| TestCaseError::fail(format!("{e:?}\n{yaml}")))?;
        let mut reporter = Reporter::new(&tree);
        structure::check(&tree, &json_schema(), &mut reporter);
        let problems = reporter.finish();
        prop_assert!(problems.is_empty(), "{problems:?}\n{yaml}");
        let parsed = raw_from_tree(&tree).map_err(|e| TestCaseError::fail(format!("{e}\n{yaml}")))?;
        prop_assert_eq!(parsed, model, "{}", yaml);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes at all: a request or an error message, never a panic.
    #[test]
    fn control_decoding_is_total(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = model::protocol::decode(&bytes);
    }

    /// Every request the client can send decodes to itself.
    #[test]
    fn control_requests_round_trip(target in "[a-z][a-z0-9-]{0,8}(\\.[0-9]{1,3})?", lines in 0usize..10_000, follow: bool, since_ms: Option<u64>) {
        use model::protocol::{Command, Request, decode};
        for command in [
            Command::Status,
            Command::Reload { app: target.clone() },
            Command::Restart { target: target.clone() },
            Command::Stop { target: target.clone() },
            Command::Start { target: target.clone() },
            Command::Logs { target: Some(target.clone()), lines, follow, since_ms },
        ] {
            let line = serde_json::to_vec(&Request::new(command.clone())).unwrap();
            prop_assert_eq!(decode(&line).map(|r| r.command), Ok(command));
        }
    }
}
