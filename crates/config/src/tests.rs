//! The file as `check` reads it: parsing, accounts and the diagnostics.

use std::time::Duration;

use super::*;
use model::spec::{ListenAddress, Readiness, RestartPolicy, defaults};

fn host() -> Host {
    Host::pinned(3, 1000, "/usr/bin:/bin")
}

fn resolve(folder: &Path, text: &str) -> Desired {
    let checked = check_text(text, &folder.join("ecosystem.yaml"), &host());
    let rendered = diagnostic::render("ecosystem.yaml", text, &checked.diagnostics);
    checked
        .desired
        .unwrap_or_else(|| panic!("invalid:\n{rendered}"))
}

#[test]
fn defaults_fill_in_what_the_file_leaves_out() {
    let dir = tempfile::tempdir().unwrap();
    let desired = resolve(dir.path(), "apps:\n  web:\n    command: sleep 1\n");
    let web = &desired.apps[0];
    assert_eq!(web.instances, defaults::INSTANCES);
    assert_eq!(web.ready, Readiness::Delay(defaults::READY_DELAY));
    assert_eq!(web.ready_timeout, defaults::READY_TIMEOUT);
    assert_eq!(web.restart, RestartPolicy::Always);
    assert_eq!(web.backoff.initial, defaults::BACKOFF_INITIAL);
    assert_eq!(web.backoff.max, defaults::BACKOFF_MAX);
    assert_eq!(web.backoff.factor, defaults::BACKOFF_FACTOR);
    assert_eq!(web.backoff.reset_after, defaults::BACKOFF_RESET_AFTER);
    assert_eq!(web.max_restarts, None);
    assert_eq!(web.stop_signal, model::Signal::SIGTERM);
    assert_eq!(web.kill_timeout, defaults::KILL_TIMEOUT);
    assert_eq!(web.reload.max_surge, 1);
    assert_eq!(web.reload.max_unavailable, 0);
    assert_eq!(web.process.cwd, dir.path());
    assert!(web.process.listen.is_empty());
    assert_eq!(web.process.identity, None);
    let argv: Vec<String> = web.process.argv.iter().map(|a| a.expand(0)).collect();
    assert_eq!(argv, ["sleep", "1"]);
}

#[test]
fn apps_override_defaults_key_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = "defaults:\n  kill_timeout: 2s\n  backoff: {initial: 1s, factor: 3}\n  env: {A: from-defaults, B: b}\n\
                apps:\n  web:\n    command: sleep 1\n    backoff: {max: 9s}\n    env: {A: own}\n  api:\n    command: sleep 1\n    kill_timeout: 1s\n";
    let desired = resolve(dir.path(), text);
    let web = desired.app("web").unwrap();
    assert_eq!(web.kill_timeout, Duration::from_secs(2));
    assert_eq!(web.backoff.initial, Duration::from_secs(1));
    assert_eq!(web.backoff.max, Duration::from_secs(9));
    assert_eq!(web.backoff.factor, 3.0);
    let env: Vec<(String, String)> = web
        .process
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.expand(0)))
        .collect();
    assert_eq!(env, [("A".into(), "own".into()), ("B".into(), "b".into())]);
    assert_eq!(
        desired.app("api").unwrap().kill_timeout,
        Duration::from_secs(1)
    );
}

#[test]
fn env_wins_over_env_file_and_paths_are_absolute() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/.env"), "A=file\nB=file\n").unwrap();
    let text = "apps:\n  web:\n    command: sleep 1\n    cwd: sub\n    env_file: sub/.env\n    env: {B: env, C: \"{instance+5}\"}\n";
    let web = &resolve(dir.path(), text).apps[0];
    assert_eq!(web.process.cwd, dir.path().join("sub"));
    let env: Vec<(String, String)> = web
        .process
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.expand(2)))
        .collect();
    let expected =
        [("A", "file"), ("B", "env"), ("C", "7")].map(|(k, v)| (k.to_string(), v.to_string()));
    assert_eq!(env, expected);
}

#[test]
fn max_resolves_to_the_cpu_count_and_shell_wraps_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apps:\n  web:\n    command: exec sleep 1\n    shell: true\n    instances: max\n    listen: [\":8000\", {name: admin, address: \"unix:s.sock\"}]\n";
    let web = &resolve(dir.path(), text).apps[0];
    assert_eq!(web.instances, 3);
    assert!(web.instances_from_max);
    let argv: Vec<String> = web.process.argv.iter().map(|a| a.expand(0)).collect();
    assert_eq!(argv, ["/bin/sh", "-c", "exec sleep 1"]);
    assert_eq!(web.process.listen[0].name, "web");
    assert_eq!(
        web.process.listen[0].address,
        ListenAddress::Tcp("0.0.0.0:8000".parse().unwrap())
    );
    assert_eq!(web.process.listen[1].name, "admin");
    assert_eq!(
        web.process.listen[1].address,
        ListenAddress::Unix(dir.path().join("s.sock"))
    );
}

#[test]
fn only_process_fields_change_the_process_definition() {
    let dir = tempfile::tempdir().unwrap();
    let base = resolve(dir.path(), "apps:\n  web:\n    command: sleep 1\n");
    let tuned = resolve(
        dir.path(),
        "apps:\n  web:\n    command: sleep 1\n    kill_timeout: 1s\n    restart: never\n    instances: 4\n",
    );
    assert_eq!(base.apps[0].process, tuned.apps[0].process);
    let changed = resolve(
        dir.path(),
        "apps:\n  web:\n    command: sleep 1\n    env: {A: x}\n",
    );
    assert_ne!(base.apps[0].process, changed.apps[0].process);
}

#[test]
fn user_and_group_resolve_to_ids() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apps:\n  web:\n    command: sleep 1\n    user: root\n    group: root\n";
    let checked = check_text(
        text,
        &dir.path().join("ecosystem.yaml"),
        &Host { uid: 0, ..host() },
    );
    let identity = checked.desired.unwrap().apps[0]
        .process
        .identity
        .clone()
        .unwrap();
    assert_eq!(
        (identity.user.as_str(), identity.uid, identity.gid),
        ("root", 0, 0)
    );
    assert!(checked.diagnostics.is_empty());

    let as_user = check_text(text, &dir.path().join("ecosystem.yaml"), &host());
    assert!(as_user.is_valid(), "not being root is a warning only");
    assert!(as_user.diagnostics[0].message.contains("only root"));
}

/// Accounts that answer from a table and count the questions.
#[derive(Debug, Default)]
struct TableAccounts {
    asked: std::sync::atomic::AtomicUsize,
}

impl crate::host::Accounts for TableAccounts {
    fn user(&self, name: &str) -> Result<Option<crate::host::Account>, String> {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((name == "deploy").then(deploy))
    }
    fn user_by_id(&self, uid: u32) -> Result<Option<crate::host::Account>, String> {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((uid == 4242).then(deploy))
    }
    fn group(&self, name: &str) -> Result<Option<u32>, String> {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((name == "www").then_some(33))
    }
    fn groups_of(&self, _user: &str, gid: u32) -> Result<Vec<u32>, String> {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(vec![gid, 27])
    }
}

/// The one user [`TableAccounts`] knows.
fn deploy() -> crate::host::Account {
    crate::host::Account {
        name: "deploy".into(),
        uid: 4242,
        gid: 4242,
        home: "/home/deploy".into(),
    }
}

/// The identity `user:`/`group:` lines resolve to, with [`TableAccounts`].
fn identity_of(lines: &str, uid: u32) -> Result<model::spec::Identity, String> {
    let dir = tempfile::tempdir().unwrap();
    let host = Host {
        accounts: std::sync::Arc::new(TableAccounts::default()),
        ..Host { uid, ..host() }
    };
    let text = format!("apps:\n  web:\n    command: sleep 1\n{lines}");
    let checked = check_text(&text, &dir.path().join("ecosystem.yaml"), &host);
    let rendered = diagnostic::render("ecosystem.yaml", &text, &checked.diagnostics);
    match checked.desired {
        Some(desired) if checked.diagnostics.is_empty() => {
            Ok(desired.apps[0].process.identity.clone().unwrap())
        }
        _ => Err(rendered),
    }
}

#[test]
fn a_numeric_user_the_machine_knows_is_that_user() {
    for written in ["4242", "\"4242\""] {
        let identity = identity_of(&format!("    user: {written}\n"), 0).unwrap();
        assert_eq!(identity.user, "deploy", "{written}");
        assert_eq!((identity.uid, identity.gid), (4242, 4242));
        assert_eq!(identity.groups, [4242, 27], "its groups, as for its name");
        assert_eq!(identity.home, Path::new("/home/deploy"));
    }
    let grouped = identity_of("    user: 4242\n    group: 33\n", 0).unwrap();
    assert_eq!((grouped.gid, grouped.groups), (33, vec![33, 27]));
}

#[test]
fn a_numeric_user_without_an_entry_runs_as_the_bare_number() {
    for written in ["1000", "\"1000\""] {
        let identity = identity_of(&format!("    user: {written}\n"), 0).unwrap();
        assert_eq!(
            identity,
            model::spec::Identity {
                user: "1000".into(),
                uid: 1000,
                gid: 1000,
                groups: vec![1000],
                home: "/".into(),
            },
            "{written}"
        );
    }
    let named_group = identity_of("    user: 1000\n    group: www\n", 0).unwrap();
    assert_eq!((named_group.gid, named_group.groups), (33, vec![33]));
    let numeric_group = identity_of("    user: 1000\n    group: \"77\"\n", 0).unwrap();
    assert_eq!((numeric_group.gid, numeric_group.groups), (77, vec![77]));
}

#[test]
fn check_accepts_a_uid_that_is_not_here_even_when_not_root() {
    let error = identity_of("    user: 1000\n", 4242).unwrap_err();
    assert!(
        error.contains("warning: only root can run workers as `1000`") && !error.contains("error"),
        "{error}"
    );
    // And `check` itself, through the machine's own accounts.
    let dir = tempfile::tempdir().unwrap();
    let checked = check_text(
        "apps:\n  web:\n    command: sleep 1\n    user: 3999999999\n",
        &dir.path().join("ecosystem.yaml"),
        &host(),
    );
    assert!(checked.is_valid(), "{:?}", checked.diagnostics);
}

#[test]
fn ids_no_user_can_have_are_refused_at_the_value() {
    for (lines, expected) in [
        (
            "    user: 4294967295\n",
            "4:11: error: uid 4294967295 cannot be used",
        ),
        (
            "    user: \"65535\"\n",
            "4:11: error: uid 65535 cannot be used",
        ),
        (
            "    user: \"4294967296\"\n",
            "4:11: error: uid `4294967296` is out of range",
        ),
        (
            "    user: 1000\n    group: 4294967295\n",
            "5:12: error: gid 4294967295 cannot be used",
        ),
        (
            "    user: -1\n",
            "4:11: error: apps.web.user: must not be negative",
        ),
        (
            "    user: 1.5\n",
            "4:11: error: apps.web.user: expected a name such as www-data, or a number such as 1000",
        ),
        (
            "    user: \"007\"\n",
            "4:11: error: uid `007` starts with a zero",
        ),
        (
            "    user: 1000\n    group: \"00\"\n",
            "help: write it without leading zeros: `0`",
        ),
        (
            "    user: nobody-here\n",
            "help: write its uid (`user: 1000`)",
        ),
        (
            "    user: deploy\n    group: staff-here\n",
            "help: write its gid (`group: 1000`)",
        ),
    ] {
        let error = identity_of(lines, 0).unwrap_err();
        assert!(error.contains(expected), "{lines}: {error}");
    }
}

#[test]
fn users_and_groups_come_from_the_injected_lookups_and_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let accounts = std::sync::Arc::new(TableAccounts::default());
    let host = Host {
        accounts: accounts.clone(),
        ..Host { uid: 0, ..host() }
    };
    let text = "apps:\n  web:\n    command: sleep 1\n    user: deploy\n    group: www\n";
    let checked = check_text(text, &dir.path().join("ecosystem.yaml"), &host);
    let identity = checked.desired.unwrap().apps[0]
        .process
        .identity
        .clone()
        .unwrap();
    assert_eq!((identity.uid, identity.gid), (4242, 33));
    assert_eq!(
        identity.groups,
        [33, 27],
        "supplementary groups, looked up once, here"
    );
    assert_eq!(accounts.asked.load(std::sync::atomic::Ordering::Relaxed), 3);
    let unknown = check_text(
        "apps:\n  web:\n    command: sleep 1\n    user: nobody-here\n",
        &dir.path().join("ecosystem.yaml"),
        &host,
    );
    assert!(
        unknown.diagnostics[0]
            .message
            .contains("no user named `nobody-here`")
    );
}

#[test]
fn depends_on_as_a_list_or_a_mapping_keeps_file_order() {
    use model::spec::{Condition, Dependency, OnDependencyRestart};
    let dir = tempfile::tempdir().unwrap();
    let text = "defaults:\n  on_dependency_restart: restart\n\
                apps:\n  db:\n    command: sleep 1\n    health: {exec: \"true\"}\n\
                \x20 migrate:\n    command: sleep 1\n    restart: never\n    depends_on: [db]\n\
                \x20 web:\n    command: sleep 1\n    on_dependency_restart: ignore\n\
                \x20   depends_on: {migrate: completed, db: healthy}\n\
                \x20 cache:\n    command: sleep 1\n    depends_on: {db: started}\n";
    let desired = resolve(dir.path(), text);
    let dependency = |app: &str, condition| Dependency {
        app: app.to_string(),
        condition,
    };
    let migrate = desired.app("migrate").unwrap();
    assert_eq!(migrate.depends_on, [dependency("db", Condition::Ready)]);
    assert_eq!(
        migrate.on_dependency_restart,
        OnDependencyRestart::Restart,
        "from defaults"
    );
    let web = desired.app("web").unwrap();
    assert_eq!(
        web.depends_on,
        [
            dependency("migrate", Condition::Completed),
            dependency("db", Condition::Healthy)
        ]
    );
    assert_eq!(web.on_dependency_restart, OnDependencyRestart::Ignore);
    assert_eq!(
        desired.app("cache").unwrap().depends_on,
        [dependency("db", Condition::Started)]
    );
    let db = desired.app("db").unwrap();
    assert!(db.depends_on.is_empty());
    assert_eq!(db.schedule, None);
}

#[test]
fn schedules_resolve_with_their_defaults() {
    use model::spec::{Overlap, When};
    let dir = tempfile::tempdir().unwrap();
    let text = "defaults:\n  overlap: queue\n  timezone: Europe/Paris\n\
                apps:\n  nightly:\n    command: sleep 1\n    schedule: \"0 3 * * *\"\n\
                \x20 sweep:\n    command: sleep 1\n    schedule: {every: 10m}\n    overlap: replace\n    run_on_start: true\n    restart: on-failure\n\
                \x20 local:\n    command: sleep 1\n    schedule: \"@hourly\"\n    timezone: UTC\n    instances: 0\n";
    let desired = resolve(dir.path(), text);
    let nightly = desired.app("nightly").unwrap();
    assert_eq!(
        nightly.restart,
        RestartPolicy::Never,
        "the default with a schedule"
    );
    let schedule = nightly.schedule.as_ref().unwrap();
    assert_eq!(schedule.overlap, Overlap::Queue);
    assert!(!schedule.run_on_start);
    match &schedule.when {
        When::Cron { cron, timezone } => {
            assert_eq!(cron.as_str(), "0 3 * * *");
            assert_eq!(*timezone, chrono_tz::Tz::Europe__Paris);
        }
        other => panic!("{other:?}"),
    }
    let sweep = desired.app("sweep").unwrap();
    assert_eq!(sweep.restart, RestartPolicy::OnFailure);
    let schedule = sweep.schedule.as_ref().unwrap();
    assert_eq!(schedule.when, When::Every(Duration::from_secs(600)));
    assert_eq!(schedule.overlap, Overlap::Replace);
    assert!(schedule.run_on_start);
    let local = desired.app("local").unwrap();
    assert_eq!(local.instances, 0);
    assert!(matches!(
        local.schedule.as_ref().unwrap().when,
        When::Cron {
            timezone: chrono_tz::Tz::UTC,
            ..
        }
    ));
}

#[test]
fn a_cron_schedule_without_timezone_is_read_in_the_machines() {
    use model::spec::When;
    let dir = tempfile::tempdir().unwrap();
    let host = Host {
        timezone: chrono_tz::Tz::Asia__Tokyo,
        ..host()
    };
    let checked = check_text(
        "apps:\n  nightly:\n    command: sleep 1\n    schedule: \"0 3 * * *\"\n",
        &dir.path().join("ecosystem.yaml"),
        &host,
    );
    let desired = checked.desired.unwrap();
    assert!(matches!(
        desired.apps[0].schedule.as_ref().unwrap().when,
        When::Cron {
            timezone: chrono_tz::Tz::Asia__Tokyo,
            ..
        }
    ));
}

#[test]
fn the_program_is_found_when_the_file_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let checked = check_text(
        "apps:\n  web:\n    command: sh -c true\n",
        &dir.path().join("ecosystem.yaml"),
        &host(),
    );
    let program = checked.desired.unwrap().apps[0].process.program.clone();
    assert_eq!(program.as_deref(), Some(Path::new("/usr/bin/sh")));
}
