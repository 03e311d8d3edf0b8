//! The imported files run beside pm2 7 and supervisord 4 themselves, and
//! start what they start from the originals: argv, environment, working
//! directory and user.

use super::*;

/// Reports the fixture programs wrote, each with the paths made absolute
/// against its cwd (pm2 hands a script its absolute path, supervise the one
/// the file writes), sorted. `name` of each: the report's file name before `-`.
fn reports(dir: &Path) -> Vec<Value> {
    let mut out: Vec<Value> = std::fs::read_dir(dir.join("reports"))
        .expect("reports")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            let mut report: Value = serde_json::from_str(&text).ok()?;
            if !report.is_object() {
                // A bare pid (the supervisord fixture's).
                report = serde_json::json!({ "pid": report });
            }
            let cwd = report["cwd"].as_str().unwrap_or_default().to_string();
            if let Some(argv) = report.get_mut("argv").and_then(Value::as_array_mut)
                && let Some(first) = argv.first_mut()
            {
                let path = Path::new(first.as_str().unwrap_or_default());
                if path.is_relative() {
                    *first = Value::String(
                        import::normalize(&Path::new(&cwd).join(path))
                            .display()
                            .to_string(),
                    );
                }
            }
            let name = e
                .file_name()
                .to_string_lossy()
                .split(['-', '.'])
                .next()
                .unwrap_or_default()
                .to_string();
            report["name"] = Value::String(name);
            Some(report)
        })
        .collect();
    out.sort_by_key(|r| r.to_string());
    out
}

fn wait_for_reports(dir: &Path, count: usize) -> Vec<Value> {
    let reached = eventually(WAIT, || reports(dir).len() >= count);
    let found = reports(dir);
    assert!(
        reached,
        "{} of {count} reports came: {found:#?}",
        found.len()
    );
    found
}

fn clear_reports(dir: &Path) {
    for entry in std::fs::read_dir(dir.join("reports"))
        .expect("reports")
        .flatten()
    {
        std::fs::remove_file(entry.path()).expect("remove report");
    }
}

/// A supervisor of ours, sent SIGTERM and waited for when dropped
/// (supervise and supervisord both stop their programs on it).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// Runs `supervisor` in `dir` until `count` reports have come and returns
/// `read` of them, called while its programs run; the supervisor is stopped
/// before this returns, a failed wait or read included.
fn while_running<T>(
    supervisor: &mut Command,
    dir: &Path,
    count: usize,
    read: impl FnOnce(Vec<Value>) -> T,
) -> T {
    let child = supervisor
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{:?} starts: {e}", supervisor.get_program()));
    let _running = Running(child);
    read(wait_for_reports(dir, count))
}

/// `supervise -f ecosystem.yaml` in `dir`, told it may use `cpus` CPUs.
fn supervise_daemon(dir: &Path, cpus: usize) -> Command {
    let mut command = Command::new(binary());
    command
        .args(["-q", "-f", "ecosystem.yaml"])
        .env("XDG_RUNTIME_DIR", crate::common::runtime_dir(dir))
        .env("SUPERVISE_TEST_CPUS", cpus.to_string());
    command
}

/// supervisor 4, installed for these tests; `None` (the test is skipped,
/// and says so) when PyPI cannot be reached.
fn supervisord() -> Option<PathBuf> {
    let found = tool(
        "venv/bin/supervisord",
        &[
            &["python3", "-m", "venv", "venv"],
            &["venv/bin/pip", "install", "-q", "supervisor>=4,<5"],
        ],
    );
    if found.is_none() {
        eprintln!("SKIPPED: supervisor 4 could not be installed from PyPI");
    }
    found
}

/// `supervisord` in the foreground on `conf`, its own output dropped.
fn supervisord_daemon(supervisord: &Path, conf: &str) -> Command {
    let mut command = Command::new(supervisord);
    command.args(["-n", "-c", conf]).stderr(Stdio::null());
    command
}

/// A tool installed for these tests: `target/tools/…`, put there by .ci/run
/// (or here, when it is missing); `None` when its registry cannot be reached.
fn tool(path: &str, install: &[&[&str]]) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools");
    let tool = root.join(path);
    if tool.exists() {
        return Some(tool);
    }
    std::fs::create_dir_all(&root).ok()?;
    for step in install {
        let status = Command::new(step[0])
            .args(&step[1..])
            .current_dir(&root)
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
    }
    tool.exists().then_some(tool)
}

/// pm2 with a home of its own in `dir`, killed (daemon and apps) when dropped.
struct Pm2 {
    binary: PathBuf,
    home: PathBuf,
}

impl Pm2 {
    fn run(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new(&self.binary)
            .current_dir(dir)
            .args(args)
            .env("PM2_HOME", &self.home)
            .env("PM2_DISABLE_VERSION_CHECK", "1")
            .stdin(Stdio::null())
            .output()
            .expect("pm2 runs")
    }
}

impl Drop for Pm2 {
    fn drop(&mut self) {
        let _ = Command::new(&self.binary)
            .arg("kill")
            .env("PM2_HOME", &self.home)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn by_name(reports: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in reports {
        *counts
            .entry(r["name"].as_str().unwrap_or_default().to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn an_imported_pm2_file_starts_what_pm2_starts() {
    let Some(pm2_binary) = tool(
        "pm2/node_modules/.bin/pm2",
        &[&[
            "npm",
            "install",
            "--prefix",
            "pm2",
            "pm2@7",
            "--no-audit",
            "--no-fund",
            "--silent",
        ]],
    ) else {
        eprintln!("SKIPPED: pm2 7 could not be installed from the npm registry");
        return;
    };
    let dir = copy_of("pm2");
    let pm2 = Pm2 {
        binary: pm2_binary,
        home: dir.path().join(".pm2"),
    };
    let started = pm2.run(
        dir.path(),
        &["start", "ecosystem.config.js", "--env", "production"],
    );
    assert!(
        started.status.success(),
        "pm2 start: {}",
        text(&started.stderr)
    );
    // Every instance reports once. `max` is one per CPU for both, but pm2
    // counts the machine's CPUs and supervise those it may use: supervise is
    // told pm2's count.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let from_pm2 = wait_for_reports(dir.path(), cpus + 2);
    let api_instances = by_name(&from_pm2).get("api").copied().unwrap_or(0);
    drop(pm2);
    clear_reports(dir.path());

    import(dir.path(), "ecosystem.config.js", &["--env", "production"]);
    let from_supervise = while_running(
        &mut supervise_daemon(dir.path(), api_instances.max(1)),
        dir.path(),
        from_pm2.len(),
        |reports| reports,
    );
    assert_eq!(from_supervise, from_pm2);
}

/// `what` /proc says of each process that wrote its pid into `reports`,
/// sorted; one whose /proc cannot be read is left out. Read while they run.
fn of_each_reporter(dir: &Path, what: impl Fn(u32) -> Option<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = std::fs::read_dir(dir.join("reports"))
        .expect("reports")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid: u32 = std::fs::read_to_string(e.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            what(pid)
        })
        .collect();
    out.sort_by_key(|r| r.to_string());
    out
}

/// What /proc says of each process that wrote its pid into `reports`:
/// argv, the variables the file sets, and cwd, sorted.
fn from_proc(dir: &Path) -> Vec<Value> {
    of_each_reporter(dir, |pid| {
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .ok()?
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(text)
            .collect();
        let env = environment(pid, &["QUEUE", "MODE", "GREETING"])?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        Some(serde_json::json!({"argv": argv, "env": env, "cwd": cwd}))
    })
}

#[test]
fn an_imported_supervisord_file_starts_what_supervisord_starts() {
    let Some(supervisord) = supervisord() else {
        return;
    };
    let dir = copy_of("supervisord");
    let from_supervisord = while_running(
        &mut supervisord_daemon(&supervisord, "supervisord.conf"),
        dir.path(),
        4,
        |_| from_proc(dir.path()),
    );
    assert_eq!(
        from_supervisord.len(),
        4,
        "three queue workers and the mailer: {from_supervisord:#?}"
    );
    clear_reports(dir.path());

    import(dir.path(), "supervisord.conf", &[]);
    let from_supervise = while_running(&mut supervise_daemon(dir.path(), 2), dir.path(), 4, |_| {
        from_proc(dir.path())
    });
    assert_eq!(from_supervise, from_supervisord);
}

/// The uid, argv, cwd and the variables a user's program reads, of each
/// process that wrote its pid into `reports`.
fn identities(dir: &Path) -> Vec<Value> {
    of_each_reporter(dir, |pid| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .to_string();
        let env = environment(pid, &["HOME", "USER", "LOGNAME", "GREETING"])?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        Some(serde_json::json!({"uid": uid, "env": env, "cwd": cwd}))
    })
}

/// supervisord's `user` (with HOME, USER and LOGNAME set in `environment`,
/// as its docs advise, since supervisord changes only the uid): the
/// imported file starts the program as that user, with the same variables,
/// supervise setting those three itself from the password database.
#[test]
#[ignore = "needs root"]
fn a_supervisord_program_with_a_user_runs_as_that_user_after_import() {
    crate::common::require_root();
    let Some(supervisord) = supervisord() else {
        return;
    };
    let nobody = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("the test machine has a `nobody` user");
    // A python `nobody` may run (one under root's home is not).
    let python = Path::new("/usr/bin/python3");
    assert!(
        python.exists(),
        "this test runs the system's /usr/bin/python3"
    );
    let dir = copy_of("supervisord");
    // `nobody` reads the program and writes its report.
    use std::os::unix::fs::PermissionsExt;
    for (path, mode) in [
        (dir.path().to_path_buf(), 0o755),
        (dir.path().join("reports"), 0o777),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    std::fs::write(
        dir.path().join("nobody.conf"),
        format!(
            "[supervisord]\nnodaemon = true\nlogfile = %(here)s/supervisord.log\npidfile = %(here)s/supervisord.pid\nchildlogdir = %(here)s\n\n\
             [program:as_nobody]\ncommand = {} %(here)s/report.py --as nobody\nuser = nobody\ndirectory = %(here)s\n\
             environment = HOME=\"{}\",USER=\"nobody\",LOGNAME=\"nobody\",GREETING=\"hi\"\n",
            python.display(),
            nobody.dir.display()
        ),
    )
    .expect("write");
    let from_supervisord = while_running(
        &mut supervisord_daemon(&supervisord, "nobody.conf"),
        dir.path(),
        1,
        |_| identities(dir.path()),
    );
    assert_eq!(from_supervisord.len(), 1, "{from_supervisord:#?}");
    assert_eq!(from_supervisord[0]["uid"], nobody.uid.to_string());
    clear_reports(dir.path());

    let (written, stderr) = import(dir.path(), "nobody.conf", &[]);
    assert!(written.contains("    user: nobody\n"), "{written}");
    for name in ["HOME", "USER", "LOGNAME"] {
        assert!(
            stderr.contains(&format!(
                "nobody.conf:11: warning: as_nobody: environment variable `{name}`"
            )),
            "{stderr}"
        );
    }
    let from_supervise = while_running(&mut supervise_daemon(dir.path(), 1), dir.path(), 1, |_| {
        identities(dir.path())
    });
    assert_eq!(from_supervise, from_supervisord);
}
