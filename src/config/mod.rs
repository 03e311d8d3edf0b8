//! The ecosystem file: reading, checking and resolving it.
//!
//! One function, [`check_file`], is what `supervise check`, the supervisor's
//! start and every live reload call, so they can never disagree. It goes:
//!
//! 1. bytes → text (size limit, UTF-8), reporting a bad byte by line and column;
//! 2. text → spanned node tree ([`node`]); a YAML syntax error stops here and is
//!    reported alone;
//! 3. tree → structural check against the generated JSON Schema ([`structure`]),
//!    collecting every unknown key and wrong type;
//! 4. clean tree → [`raw`] types → semantic checks and resolution ([`validate`])
//!    into the [`crate::spec`] model.

pub mod diagnostic;
pub mod envfile;
pub mod node;
pub mod raw;
pub mod structure;
pub mod validate;

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

pub use crate::host::Host;
use diagnostic::{Diagnostic, Location, Reporter};

use crate::spec::Desired;

/// The JSON Schema of the ecosystem file, generated from [`raw::EcosystemFile`].
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(raw::EcosystemFile)).unwrap_or_default()
}

static SCHEMA: LazyLock<serde_json::Value> = LazyLock::new(json_schema);

/// The result of checking a file.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The resolved model, when there was no error.
    pub desired: Option<Desired>,
    /// Every error and warning, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The text that was checked (for rendering the diagnostics' source lines).
    pub text: String,
}

impl Checked {
    pub fn is_valid(&self) -> bool {
        self.desired.is_some()
    }
}

/// The file could not be read at all (exit code 2, not 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {path}: {reason}")]
pub struct Unreadable {
    pub path: String,
    pub reason: String,
}

/// The absolute path of the ecosystem file, as the user spelled it (no
/// symlink resolved): watching it follows every symlink on the way, so a
/// swapped directory link (`current -> releases/2`) is seen as an edit.
pub fn absolute_path(path: &Path) -> std::io::Result<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    if joined.file_name().is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ));
    }
    Ok(joined.components().collect())
}

/// Read, check and resolve the ecosystem file at `path`.
pub fn check_file(path: &Path, host: &Host) -> Result<Checked, Unreadable> {
    let (source, bytes) = read_file(path)?;
    Ok(check_bytes(&bytes, &source, host))
}

/// The file's absolute path and contents (at most one byte more than
/// [`node::MAX_FILE_BYTES`], which [`check_bytes`] then refuses).
pub fn read_file(path: &Path) -> Result<(PathBuf, Vec<u8>), Unreadable> {
    use std::io::Read;
    let unreadable = |reason: String| Unreadable {
        path: path.display().to_string(),
        reason,
    };
    use std::os::unix::fs::OpenOptionsExt;
    let source = absolute_path(path).map_err(|e| unreadable(e.to_string()))?;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&source)
        .map_err(|e| unreadable(e.to_string()))?;
    let metadata = file.metadata().map_err(|e| unreadable(e.to_string()))?;
    if !metadata.is_file() {
        let what = match metadata.file_type() {
            t if t.is_dir() => "a directory",
            t if std::os::unix::fs::FileTypeExt::is_fifo(&t) => "a FIFO",
            t if std::os::unix::fs::FileTypeExt::is_socket(&t) => "a socket",
            _ => "a device",
        };
        return Err(unreadable(format!(
            "it is {what}, not a regular file; an ecosystem file must be a regular file (at most {} bytes)",
            node::MAX_FILE_BYTES
        )));
    }
    let mut bytes = Vec::new();
    file.take(node::MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    Ok((source, bytes))
}

fn too_large(len: u64) -> Checked {
    let diagnostic = Diagnostic::error(
        format!(
            "the file is {len} bytes, more than the {} bytes an ecosystem file may have",
            node::MAX_FILE_BYTES
        ),
        None,
    )
    .with_help("an ecosystem file describes apps; move data elsewhere");
    Checked {
        desired: None,
        diagnostics: vec![diagnostic],
        text: String::new(),
    }
}

/// Check file contents; `source` is the file's absolute path (relative paths in
/// the file are resolved against its folder).
pub fn check_bytes(bytes: &[u8], source: &Path, host: &Host) -> Checked {
    if bytes.len() > node::MAX_FILE_BYTES {
        return too_large(bytes.len() as u64);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => check_text(text, source, host),
        Err(error) => {
            let valid = &bytes[..error.valid_up_to()];
            let line = valid.iter().filter(|b| **b == b'\n').count() as u64 + 1;
            let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let column = String::from_utf8_lossy(&valid[line_start..])
                .chars()
                .count() as u64
                + 1;
            let diagnostic = Diagnostic::error(
                "the file is not valid UTF-8",
                Some(Location {
                    line,
                    column,
                    len: 1,
                }),
            )
            .with_help("save the file as UTF-8");
            Checked {
                desired: None,
                diagnostics: vec![diagnostic],
                text: String::from_utf8_lossy(bytes).into_owned(),
            }
        }
    }
}

/// Check YAML text.
pub fn check_text(text: &str, source: &Path, host: &Host) -> Checked {
    let (desired, mut diagnostics) = match node::parse(text) {
        Err(error) => {
            let diagnostic = Diagnostic::error(
                error.message,
                Some(error.location.unwrap_or_else(Location::start)),
            )
            .with_help(error.help);
            (None, vec![diagnostic])
        }
        Ok(root) => check_tree(&root, source, host),
    };
    diagnostic::sort(&mut diagnostics);
    Checked {
        desired,
        diagnostics,
        text: text.to_string(),
    }
}

fn check_tree(root: &node::Node, source: &Path, host: &Host) -> (Option<Desired>, Vec<Diagnostic>) {
    let mut reporter = Reporter::new(root);
    match &root.kind {
        node::NodeKind::Null => {
            reporter.error(&[], "the file is empty").help(
                "an ecosystem file is a mapping with `apps:`; see examples/hello/ecosystem.yaml",
            );
            return (None, reporter.finish());
        }
        node::NodeKind::Map(_) => {}
        _ => {
            reporter
                .error(&[], format!("expected a mapping with `apps:` at the top level, found {}", root.describe()))
                .help("an ecosystem file is a mapping with `apps:`; see examples/hello/ecosystem.yaml");
            return (None, reporter.finish());
        }
    }
    let problems = structure::check(root, &SCHEMA, &mut reporter);
    // Set aside what is structurally broken and check everything else, so one
    // run reports the misspelt key *and* the bad signal two lines below it.
    let Some((json, broken)) = without_broken_parts(root, &problems) else {
        return (None, reporter.finish());
    };
    let raw = match serde_json::from_value::<raw::EcosystemFile>(json) {
        Ok(raw) => raw,
        Err(error) => {
            // The structure check should make this impossible; if the two ever
            // disagree, say so instead of losing the problem.
            reporter.error(&[], format!("internal error: the file passed the structure check but not deserialization: {error}"));
            return (None, reporter.finish());
        }
    };
    if root
        .get("apps")
        .and_then(|(_, apps)| apps.entries())
        .is_some_and(<[_]>::is_empty)
    {
        reporter
            .warning(
                &[diagnostic::PathSeg::Key("apps".into())],
                "no apps are declared",
            )
            .help("add an app under `apps:`");
    }
    let desired = validate::resolve(&raw, source, host, &broken, &mut reporter);
    (desired, reporter.finish())
}

/// The document as JSON without its `x-` blocks and without the parts that
/// have structural problems, plus the list of fields removed (so validation
/// neither reports them as missing nor judges other fields against defaults
/// that stand in for them). `None` when a problem is not confined to one field
/// of one app (or of `defaults`), and nothing more can be checked.
fn without_broken_parts(
    root: &node::Node,
    problems: &[structure::ProblemPlace],
) -> Option<(serde_json::Value, validate::BrokenFields)> {
    use diagnostic::PathSeg::Key;
    let mut json = root.to_json();
    let top = json.as_object_mut()?;
    top.retain(|key, _| !key.starts_with("x-"));
    let mut broken = validate::BrokenFields::default();
    for problem in problems {
        match problem.path.as_slice() {
            [Key(key)] if key != "apps" && key != "defaults" => {
                top.remove(key);
            }
            [Key(apps), Key(app)] if apps == "apps" => {
                top.get_mut("apps")?.as_object_mut()?.remove(app);
            }
            [Key(apps), Key(app), Key(field), ..] if apps == "apps" => {
                let fields = top.get_mut("apps")?.get_mut(app)?.as_object_mut()?;
                fields.remove(field);
                broken.insert(app.clone(), field.clone());
                // `comand` (did you mean `command`?) also stands for the missing `command`.
                if let [_, _, _] = problem.path.as_slice() {
                    broken.insert(app.clone(), problem.meant.clone().unwrap_or_default());
                }
            }
            [Key(defaults), Key(field), ..] if defaults == "defaults" => {
                top.get_mut("defaults")?.as_object_mut()?.remove(field);
                broken.insert("defaults".to_string(), field.clone());
            }
            _ => return None,
        }
    }
    // Without `apps` (e.g. it was misspelt) there is nothing left to check.
    top.get("apps")?;
    Some((json, broken))
}

/// Deserialize a structurally valid tree into the raw types, skipping the
/// top-level `x-` extension blocks.
pub fn raw_from_tree(root: &node::Node) -> Result<raw::EcosystemFile, serde_json::Error> {
    let mut json = root.to_json();
    if let Some(object) = json.as_object_mut() {
        object.retain(|key, _| !key.starts_with("x-"));
    }
    serde_json::from_value(json)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::spec::{ListenAddress, Readiness, RestartPolicy, defaults};

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
        assert_eq!(web.stop_signal, nix::sys::signal::Signal::SIGTERM);
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
            Ok((name == "deploy").then(|| crate::host::Account {
                uid: 4242,
                gid: 4242,
                home: "/home/deploy".into(),
            }))
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
        use crate::spec::{Condition, Dependency, OnDependencyRestart};
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
        use crate::spec::{Overlap, When};
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
        use crate::spec::When;
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
}
