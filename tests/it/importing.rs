//! `supervise import`: the files of tests/it/fixtures/import imported to the
//! snapshots, each result passing `check`, and the imported files run to
//! start what pm2 7 and supervisord 4 themselves start from the originals:
//! argv, environment and working directory, read from /proc for
//! supervisord's programs, and reported by the programs themselves for pm2's
//! (node runs a pm2 app's script from pm2's own container, so /proc shows the
//! container).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common::{WAIT, binary, eventually};
use serde_json::Value;

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/import")
        .join(kind)
}

/// A fresh copy of a fixture folder, with an empty `reports` folder the
/// fixture programs write into.
fn copy_of(kind: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let status = Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", fixtures(kind).display()))
        .arg(dir.path())
        .status()
        .expect("cp runs");
    assert!(status.success());
    std::fs::create_dir(dir.path().join("reports")).expect("reports folder");
    dir
}

fn supervise(dir: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("supervise runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Import `file` of `dir` to `dir/ecosystem.yaml`; returns the file and stderr.
fn import(dir: &Path, file: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["import", file, "-o", "ecosystem.yaml"];
    args.extend(extra);
    let output = supervise(dir, &args);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "import {file} failed:\n{stderr}");
    assert!(stderr.contains("`supervise check` passes"), "{stderr}");
    let check = supervise(dir, &["check", "-f", "ecosystem.yaml"]);
    assert!(
        check.status.success(),
        "check fails on the import of {file}:\n{}",
        text(&check.stdout)
    );
    let written = std::fs::read_to_string(dir.join("ecosystem.yaml")).expect("written");
    (written, stderr)
}

#[test]
fn pm2_files_in_js_cjs_json_and_yaml_import_to_the_same_apps() {
    let mut first: Option<String> = None;
    for file in [
        "ecosystem.config.js",
        "ecosystem.config.cjs",
        "ecosystem.json",
        "process.yaml",
    ] {
        let dir = copy_of("pm2");
        let (written, stderr) = import(dir.path(), file, &["--env", "production"]);
        insta::assert_snapshot!(
            format!("pm2_{}", file.replace('.', "_")),
            format!("{written}\n--- stderr ---\n{stderr}")
        );
        // The apps are the same whatever the file's language; only the
        // lines the notes cite differ.
        let apps: String = written
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        match &first {
            None => first = Some(apps),
            Some(first) => assert_eq!(first, &apps, "{file} imports other apps"),
        }
    }
}

#[test]
fn a_procfile_imports_to_the_snapshot() {
    let dir = copy_of("procfile");
    let (written, stderr) = import(dir.path(), "Procfile", &[]);
    // Whether `bundle` is on this machine's PATH is not the import's.
    let stderr = drop_path_warnings(&stderr);
    insta::assert_snapshot!(format!("{written}\n--- stderr ---\n{stderr}"));
}

#[test]
fn a_supervisord_file_imports_to_the_snapshot() {
    let dir = copy_of("supervisord");
    let (written, stderr) = import(dir.path(), "supervisord.conf", &[]);
    let here = dir.path().display().to_string();
    insta::assert_snapshot!(
        format!("{written}\n--- stderr ---\n{stderr}").replace(&here, "[HERE]")
    );
}

#[test]
fn import_refuses_to_replace_a_file_and_says_what_it_cannot_read() {
    let dir = copy_of("procfile");
    // Runs `supervise args`, which exits with `code` and says `says`.
    let refused = |args: &[&str], code: i32, says: &str| {
        let output = supervise(dir.path(), args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    };
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");

    write("ecosystem.yaml", "apps: {}\n");
    refused(
        &["import", "Procfile", "-o", "ecosystem.yaml"],
        2,
        "--force",
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ecosystem.yaml")).expect("kept"),
        "apps: {}\n"
    );

    let output = supervise(
        dir.path(),
        &["import", "Procfile", "-o", "ecosystem.yaml", "--force"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));

    write("notes.txt", "hello\n");
    refused(&["import", "notes.txt"], 2, "--from");

    write("broken.config.js", "module.exports = {apps: [\n");
    refused(
        &["import", "broken.config.js"],
        1,
        "node could not evaluate it",
    );

    // A hang that costs no CPU (node waits on a futex nobody wakes): the
    // bound is what is tested, not a core spun for 10 s beside the other
    // tests.
    write(
        "hangs.config.js",
        "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);\n",
    );
    let started = std::time::Instant::now();
    refused(&["import", "hangs.config.js"], 1, "did not finish");
    assert!(started.elapsed() < Duration::from_secs(20));

    write("ours.yaml", "apps:\n  web:\n    command: x\n");
    refused(&["import", "ours.yaml"], 1, "supervise file already");
}

/// `stderr` without check's "not found on PATH" warnings (four lines each),
/// which say what this machine has installed.
fn drop_path_warnings(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].contains("was not found on PATH") {
            i += 4;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

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

/// The variables named in `names` of the environment of `pid`.
fn environment(pid: u32, names: &[&str]) -> Option<BTreeMap<String, String>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        environ
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = text(kv);
                let (k, v) = kv.split_once('=')?;
                names.contains(&k).then(|| (k.to_string(), v.to_string()))
            })
            .collect(),
    )
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

/// What the hostile round found, kept: each import exits as it should and
/// says why.
#[test]
fn hostile_sources_are_read_as_pm2_reads_them_or_refused_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");
    let run = |args: &[&str]| {
        let output = supervise(dir.path(), args);
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };

    // pm2 evaluates a .json as JavaScript: comments and bare keys pass.
    write(
        "commented.json",
        "{\n  // the api\n  apps: [{ name: 'api', script: 'sleep', args: '100', }],\n}\n",
    );
    let (code, stdout, stderr) = run(&["import", "commented.json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("  api:\n    command: [sleep, \"100\"]\n"),
        "{stdout}"
    );

    // A config that prints (dotenv does) is still read.
    write(
        "loud.config.js",
        "console.log('hello from config');\nmodule.exports = {apps: [{name: 'a', script: 'sleep', args: '100'}]};\n",
    );
    let (code, stdout, stderr) = run(&["import", "loud.config.js"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("  a:\n"), "{stdout}");

    // A child the config leaves behind is killed with node's group, and one
    // it detached (a session of its own) by its environment.
    for (file, mark, options) in [
        ("spawns.config.js", "7332", "{stdio: 'ignore'}"),
        (
            "detaches.config.js",
            "7333",
            "{stdio: 'ignore', detached: true}",
        ),
    ] {
        write(
            file,
            &format!(
                "require('child_process').spawn('sleep', ['{mark}'], {options}).unref();\nmodule.exports = {{apps: [{{name: 'a', script: 'sleep', args: '1'}}]}};\n"
            ),
        );
        let (code, _, stderr) = run(&["import", file]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            eventually(Duration::from_secs(5), || crate::common::with_argument(
                mark
            )
            .is_empty()),
            "the child {file} started outlived the import"
        );
    }

    // An export that holds no app is an error, not a placeholder app.
    write("empty.config.js", "");
    let (code, stdout, stderr) = run(&["import", "empty.config.js"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    write(
        "promise.config.js",
        "module.exports = Promise.resolve({apps: []});\n",
    );
    let (code, _, stderr) = run(&["import", "promise.config.js"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("Promise"), "{stderr}");
    write(
        "noscript.json",
        "{\"apps\": [{\"name\": \"a\"}, \"server.js\"]}\n",
    );
    let (code, _, stderr) = run(&["import", "noscript.json"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("no `script`") && stderr.contains("nothing to import"),
        "{stderr}"
    );

    // pm2 runs any other .js as a script: import does not evaluate one.
    write(
        "server.js",
        "require('fs').writeFileSync('SIDE_EFFECT', 'x');\n",
    );
    let (code, _, stderr) = run(&["import", "server.js"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!dir.path().join("SIDE_EFFECT").exists());

    // A name starting with `-` is a file, not a node option.
    write(
        "-e.config.js",
        "module.exports = {apps: [{name: 'dash', script: 'sleep', args: '1'}]};\n",
    );
    let (code, stdout, stderr) = run(&["import", "--", "-e.config.js"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("  dash:\n"), "{stdout}");

    // A FIFO is refused at once; the output is never the input.
    let fifo = dir.path().join("fifo.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let (code, _, stderr) = run(&["import", "fifo.json"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not a regular file"), "{stderr}");
    let (code, _, stderr) = run(&[
        "import",
        "commented.json",
        "-o",
        "commented.json",
        "--force",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        std::fs::read_to_string(dir.path().join("commented.json"))
            .expect("kept")
            .contains("// the api")
    );
    let (code, stdout, _) = run(&["import", "commented.json", "-o", "-"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("  api:\n") && !dir.path().join("-").exists());

    // App names YAML would read as something else are quoted.
    write("Procfile", "true: sleep 1\n1: sleep 2\nnull: sleep 3\n");
    let (code, stdout, stderr) = run(&["import", "Procfile", "-o", "procfile.yaml"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let written = std::fs::read_to_string(dir.path().join("procfile.yaml")).expect("written");
    assert!(
        written.contains("  \"true\":\n") && written.contains("  \"1\":\n"),
        "{written}"
    );
}

/// Valid sources whose values, carried over as they are, `check` would
/// refuse: each is imported to a file `check` passes, and what was adjusted
/// or left out is a warning on stderr at its source line and a `# import:`
/// comment at that line in the file.
#[test]
fn values_check_would_refuse_are_adjusted_or_left_out_with_a_warning_at_their_line() {
    // (file, text, the line of the value, what the warning says, what the
    // output holds)
    let pm2 =
        |key: &str| format!("apps:\n  - name: api\n    script: sleep\n    args: \"100\"\n{key}\n");
    let program = |key: &str| format!("[program:api]\ncommand = sleep 100\n{key}\n");
    let cases: Vec<(&str, String, usize, &str, &str)> = vec![
        (
            "a.conf",
            program("startsecs = 45"),
            3,
            "`ready_timeout: 55s` written too",
            "ready_timeout: 55s",
        ),
        (
            "a.conf",
            program("stopwaitsecs = 0"),
            3,
            "`stopwaitsecs = 0`",
            "kill_timeout: 1s",
        ),
        (
            "a.yaml",
            pm2("    kill_timeout: 0"),
            5,
            "`kill_timeout: 0`",
            "kill_timeout: 1600ms",
        ),
        (
            "a.yaml",
            pm2("    max_memory_restart: \"0\""),
            5,
            "`max_memory_restart: 0`",
            "stop_signal: SIGINT",
        ),
        (
            "a.yaml",
            pm2("    env:\n      my-var: x\n      KEPT: kept"),
            5,
            "`my-var`",
            "KEPT: kept",
        ),
        (
            "a.conf",
            program("environment = my-var=x,KEPT=kept"),
            3,
            "`my-var`",
            "KEPT: kept",
        ),
        (
            "a.yaml",
            pm2("    cron_restart: \"@reboot\""),
            5,
            "`cron_restart: @reboot`",
            "stop_signal: SIGINT",
        ),
        (
            "a.yaml",
            pm2("    cron_restart: \"@midnight\""),
            5,
            "unknown schedule nickname",
            "stop_signal: SIGINT",
        ),
        (
            "a.yaml",
            pm2("    cron_restart: \"0 0 30 2 *\""),
            5,
            "matches no date",
            "stop_signal: SIGINT",
        ),
        (
            "a.yaml",
            pm2("    env:\n      NOTIFY_SOCKET: x"),
            5,
            "`NOTIFY_SOCKET`",
            "stop_signal: SIGINT",
        ),
        (
            "a.conf",
            program("user = nobody\nenvironment = HOME=/home/x,LANG=C"),
            4,
            "`HOME`",
            "user: nobody",
        ),
        (
            "a.yaml",
            pm2("    wait_ready: true\n    listen_timeout: 0"),
            6,
            "`listen_timeout: 0`",
            "ready_timeout: 3s",
        ),
        (
            "a.yaml",
            pm2("    instances: 5000"),
            5,
            "`instances: 5000`",
            "instances: 4096",
        ),
        (
            "a.conf",
            program("numprocs = 5000\nprocess_name = %(program_name)s_%(process_num)d"),
            3,
            "`numprocs = 5000`",
            "instances: 4096",
        ),
        (
            "a.conf",
            program("stdout_logfile = a.log\nstdout_logfile_backups = 5000"),
            4,
            "keeps at most 1000",
            "keep: 1000",
        ),
        (
            "a.conf",
            program("stopsignal = 99"),
            3,
            "`stopsignal = 99`",
            "command: sleep 100",
        ),
        (
            "a.yaml",
            pm2("    env:\n      BRACE: \"{instance-x}\""),
            5,
            "`BRACE`",
            "stop_signal: SIGINT",
        ),
    ];
    for (file, source, line, warning, written) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(file), &source).expect("write");
        let output = supervise(dir.path(), &["import", file, "-o", "out.yaml"]);
        let stderr = text(&output.stderr);
        assert!(
            output.status.success() && stderr.contains("`supervise check` passes"),
            "{source}\n{stderr}"
        );
        let check = supervise(dir.path(), &["check", "-f", "out.yaml"]);
        assert!(check.status.success(), "{source}\n{}", text(&check.stdout));
        let said = stderr
            .lines()
            .find(|l| l.starts_with(&format!("{file}:{line}: warning: ")) && l.contains(warning));
        assert!(
            said.is_some(),
            "no warning at {file}:{line} saying {warning:?}:\n{source}\n{stderr}"
        );
        let out = std::fs::read_to_string(dir.path().join("out.yaml")).expect("written");
        assert!(
            out.lines().any(|l| l
                .trim_start()
                .starts_with(&format!("# import (line {line}): "))
                && l.contains(warning)),
            "no comment at line {line}:\n{out}"
        );
        assert!(out.contains(written), "{written:?} not in:\n{out}");
    }
}

/// A pm2 file in JavaScript without node on the PATH: a clear error, the
/// way out, and exit code 1 (the operation is refused; the manual, Exit codes).
#[test]
fn a_javascript_pm2_file_without_node_is_a_clear_error() {
    let dir = copy_of("pm2");
    let empty = tempfile::tempdir().expect("temp dir");
    let output = Command::new(binary())
        .current_dir(dir.path())
        .args(["import", "ecosystem.config.js"])
        .env("PATH", empty.path())
        .output()
        .expect("supervise runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("evaluated with `node`, and node was not found: no `node` on the PATH")
            && stderr.contains("help: install Node.js"),
        "{stderr}"
    );
    // The JSON and YAML files need no node.
    let output = Command::new(binary())
        .current_dir(dir.path())
        .args(["import", "process.yaml"])
        .env("PATH", empty.path())
        .output()
        .expect("supervise runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

/// Garbage in: each is refused with its reason and exit code, never a
/// panic, never a file written; a config that is slow, loud or huge is
/// bounded.
#[test]
fn garbage_sources_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("empty.json"), "").expect("write");
    std::fs::write(path("blank.conf"), "\n  \n").expect("write");
    std::fs::write(path("Procfile"), "").expect("write");
    std::fs::write(path("binary.yaml"), [0xff, 0xfe, 0x00, 0x9f, 0x80]).expect("write");
    std::fs::write(path("nul.yaml"), [0u8, 1, 2]).expect("write");
    std::fs::create_dir(path("folder.json")).expect("folder");
    std::fs::write(
        path("throws.config.js"),
        "throw new Error('no config here');\n",
    )
    .expect("write");
    std::fs::write(
        path("huge.config.js"),
        "module.exports = {apps: [{name: 'a', script: 'sleep', args: 'x'.repeat(8 << 20)}]};\n",
    )
    .expect("write");
    std::fs::write(path("exits.config.js"), "process.exit(0);\n").expect("write");
    std::fs::write(
        path("circular.config.js"),
        "const a = {name: 'a'}; a.self = a;\nmodule.exports = {apps: [a]};\n",
    )
    .expect("write");
    let cases = [
        ("empty.json", 1, "the file is empty"),
        ("blank.conf", 1, "the file is empty"),
        ("Procfile", 1, "the file is empty"),
        ("binary.yaml", 2, "not UTF-8 text"),
        ("nul.yaml", 1, "nul.yaml:1:1:"),
        ("folder.json", 2, "not a regular file"),
        ("throws.config.js", 1, "Error: no config here"),
        ("huge.config.js", 1, "its export is larger than 4 MiB"),
        ("exits.config.js", 1, "it exited before its export was read"),
        ("circular.config.js", 1, "circular"),
    ];
    for (file, code, reason) in cases {
        let output = supervise(dir.path(), &["import", file, "-o", "out.yaml"]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{file}: {stderr}");
        assert!(
            stderr.contains(reason) && !stderr.contains("panicked"),
            "{file}: {stderr}"
        );
        assert!(!path("out.yaml").exists(), "{file}: a file was written");
    }

    // Megabytes on stdout and stderr are not read, nor do they block node.
    std::fs::write(
        path("loud.config.js"),
        "process.stdout.write('o'.repeat(8 << 20));\nprocess.stderr.write('e'.repeat(8 << 20));\nmodule.exports = {apps: [{name: 'a', script: 'sleep', args: '1'}]};\n",
    )
    .expect("write");
    let started = std::time::Instant::now();
    let output = supervise(dir.path(), &["import", "loud.config.js", "-o", "out.yaml"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(started.elapsed() < import::load::NODE_EVAL_TIMEOUT);

    // A config that never finishes is stopped at the named bound (it
    // blocks on a futex nobody wakes, so it spins no core meanwhile).
    std::fs::write(
        path("forever.config.js"),
        "setInterval(() => {}, 1000);\nAtomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);\n",
    )
    .expect("write");
    let started = std::time::Instant::now();
    let output = supervise(
        dir.path(),
        &["import", "forever.config.js", "-o", "forever.yaml"],
    );
    let elapsed = started.elapsed();
    assert_eq!(output.status.code(), Some(1));
    let bound = format!(
        "did not finish within {}s",
        import::load::NODE_EVAL_TIMEOUT.as_secs()
    );
    assert!(
        text(&output.stderr).contains(&bound),
        "{}",
        text(&output.stderr)
    );
    assert!(
        elapsed >= import::load::NODE_EVAL_TIMEOUT && elapsed < import::load::NODE_EVAL_TIMEOUT * 2,
        "{elapsed:?}"
    );
    assert!(!path("forever.yaml").exists());

    // An existing output is never replaced without --force, whatever it is.
    std::fs::write(
        path("ok.json"),
        r#"{"apps": [{"name": "a", "script": "sleep", "args": "1"}]}"#,
    )
    .expect("write");
    for existing in ["out.yaml", "folder.json"] {
        let before = std::fs::metadata(path(existing))
            .expect("there")
            .modified()
            .ok();
        let output = supervise(dir.path(), &["import", "ok.json", "-o", existing]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{existing}: {}",
            text(&output.stderr)
        );
        assert_eq!(
            std::fs::metadata(path(existing))
                .expect("kept")
                .modified()
                .ok(),
            before
        );
    }
    std::os::unix::fs::symlink(path("elsewhere.yaml"), path("link.yaml")).expect("symlink");
    let output = supervise(dir.path(), &["import", "ok.json", "-o", "link.yaml"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a dangling link is there too"
    );
    assert!(!path("elsewhere.yaml").exists(), "written through the link");
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

/// How many apps the long Procfile has: its import is well over what a pipe
/// and `head`'s first read hold, so the import is still writing when `head`
/// leaves.
const LONG_PROCFILE_APPS: usize = 5000;

/// A stdout that cannot take the result (a full disk, a closed stdout) is an
/// error that says so, and no claim that the import passed; a reader that
/// leaves (`| head -1`) ends the import quietly.
#[test]
fn a_result_stdout_cannot_take_is_an_error_but_a_reader_that_left_is_not() {
    let dir = copy_of("procfile");
    let import = |file: &str| {
        let mut command = Command::new(binary());
        command.current_dir(dir.path()).args(["import", file]);
        command
    };
    for stderr in crate::common::assert_unwritable_stdout_is_an_error(|| import("Procfile")) {
        assert!(!stderr.contains("passes"), "{stderr}");
    }

    let long: String = (0..LONG_PROCFILE_APPS)
        .map(|i| format!("app{i}: sleep {i}\n"))
        .collect();
    std::fs::write(dir.path().join("Long"), long).expect("write");
    let mut command = import("Long");
    command.args(["--from", "procfile"]);
    let (code, stderr, first) = crate::common::into_head(command);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "", "no word once the reader left");
    assert!(first.starts_with("# Imported from Long"), "{first}");
}

/// `--force` replaces only a regular file, at once: something else in the
/// output's place (a FIFO, which would hang the write, a device, a folder)
/// is refused, and a file is replaced by a new one renamed over it (a new
/// inode: a supervisor watching it never reads it empty), with its mode, a
/// symlink to it staying a symlink; a file with hard links is written in
/// place, its names kept one file.
#[test]
fn force_replaces_a_regular_file_at_once_and_nothing_else() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let dir = copy_of("procfile");
    let path = |name: &str| dir.path().join(name);
    let import =
        |output: &str| supervise(dir.path(), &["import", "Procfile", "-o", output, "--force"]);
    assert!(
        Command::new("mkfifo")
            .arg(path("fifo.yaml"))
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::create_dir(path("folder.yaml")).expect("folder");
    std::os::unix::fs::symlink("/dev/null", path("null.yaml")).expect("symlink");
    std::os::unix::fs::symlink("fifo.yaml", path("to-fifo.yaml")).expect("symlink");
    std::os::unix::fs::symlink("nowhere.yaml", path("dangling.yaml")).expect("symlink");
    for (output, says) in [
        ("fifo.yaml", "fifo.yaml is a FIFO, not a regular file"),
        ("folder.yaml", "folder.yaml is a folder, not a regular file"),
        (
            "null.yaml",
            "null.yaml is a device (through a symbolic link), not a regular file",
        ),
        (
            "to-fifo.yaml",
            "to-fifo.yaml is a FIFO (through a symbolic link), not a regular file",
        ),
        (
            "dangling.yaml",
            "dangling.yaml is a symbolic link to nothing",
        ),
    ] {
        let started = std::time::Instant::now();
        let output = import(output);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{output:?}: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(started.elapsed() < WAIT, "{output:?} hung");
    }
    assert!(!path("nowhere.yaml").exists());
    assert!(
        std::fs::metadata(path("fifo.yaml"))
            .expect("kept")
            .file_type()
            .is_fifo()
    );

    std::fs::write(path("ecosystem.yaml"), "apps: {}\n").expect("write");
    std::fs::set_permissions(
        path("ecosystem.yaml"),
        std::fs::Permissions::from_mode(0o640),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("ecosystem.yaml", path("link.yaml")).expect("symlink");
    let before = std::fs::metadata(path("ecosystem.yaml")).expect("there");
    let output = import("link.yaml");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let after = std::fs::metadata(path("ecosystem.yaml")).expect("there");
    let written = std::fs::read_to_string(path("ecosystem.yaml")).expect("read");
    assert!(written.contains("  web:\n"), "{written}");
    assert_ne!(
        after.ino(),
        before.ino(),
        "written in place, not renamed over"
    );
    assert_eq!(after.mode() & 0o7777, 0o640);
    assert!(
        path("link.yaml")
            .symlink_metadata()
            .expect("there")
            .is_symlink()
    );
    // A file with two names (a hard link) is written in place: they stay one
    // file, and a supervisor watching the other name sees the import.
    std::fs::write(path("ecosystem.yaml"), "apps: {}\n").expect("write");
    std::fs::hard_link(path("ecosystem.yaml"), path("hard.yaml")).expect("link");
    let output = import("hard.yaml");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let written = std::fs::read_to_string(path("ecosystem.yaml")).expect("read");
    assert!(written.contains("  web:\n"), "{written}");
    let linked = std::fs::metadata(path("hard.yaml")).expect("there");
    assert_eq!((linked.ino(), linked.nlink()), (after.ino(), 2));
    assert_eq!(linked.mode() & 0o7777, 0o640);
    // A new file too; and no temporary file is left behind.
    let output = import("new.yaml");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Issue 28: a NUL or a control byte in a Procfile or supervisord line was
/// copied into an `# import:` comment (and printed raw to the terminal), and
/// the imported file then failed `check`; a tab-indented Procfile line was
/// taken as an app. Now the comments and the messages carry escapes, a
/// command with a NUL is left out with a warning, and an indented line is
/// no process type: each import passes `check`.
#[test]
fn control_bytes_and_indented_lines_import_to_a_file_that_passes_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("Procfile"),
        b"web: sleep 100\nbad\x00line\n\x1b]0;title\x07cls: x\n\tworker: sleep 1\napi: echo \x07bell\nnul: sleep\x001\n",
    )
    .expect("write");
    let (written, stderr) = import(dir.path(), "Procfile", &[]);
    assert!(
        written.contains("  web:\n") && written.contains("  api:\n"),
        "{written}"
    );
    assert!(
        !written.contains("  worker:") && !written.contains("  nul:"),
        "{written}"
    );
    assert!(written.contains("bad\\0line"), "{written}");
    assert!(written.contains("\\x1b]0;title\\x07cls"), "{written}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "{stderr:?}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("supervisord.conf"),
        b"[program:web]\ncommand=sleep 100\nbogus\x1b]0;title\x07=1\n[program:x\x1by]\ncommand=sleep 2\n[program:n]\ncommand=sleep\x00 3\n[program:e]\ncommand=sleep 4\nenvironment=A=\"x\x00y\",B=\"ok\"\n",
    )
    .expect("write");
    let (written, stderr) = import(dir.path(), "supervisord.conf", &[]);
    assert!(!written.contains("  \"n\":"), "{written}");
    assert!(
        written.contains("B: ok") && !written.contains("A: "),
        "{written}"
    );
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "{stderr:?}"
    );
}
