//! Hostile edits and hostile paths, against the real binary: a FIFO where the
//! ecosystem file should be, the same file reached through a symlink, a hard
//! link or a bind mount, a swapped release directory, a deleted `cwd`, a file
//! made unreadable, edits landing in the middle of a rollout or a reload, a
//! Kubernetes ConfigMap swap that deletes the old data, `scale` below zero,
//! the file moved away and copied back, and what runs leave in the runtime
//! directory.
//!
//! Each test records every broken promise it sees (not only the first) and
//! fails with all of them, so one run says exactly what is wrong. Every wait
//! is bounded and on an event, a reply or /proc; the only sleeps are the
//! deliberate 0.5 s gaps between edits that the scenarios call for.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

// ---------------------------------------------------------------- helpers

/// Every broken promise a test saw, reported together at the end.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    /// Record `what` unless `ok`; returns `ok`.
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) -> bool {
        if !ok {
            self.0.push(what());
        }
        ok
    }

    /// Fail the test with every finding (and the supervisor's output, if any).
    fn finish(self, s: Option<&Supervised>) {
        if self.0.is_empty() {
            return;
        }
        let mut text = String::new();
        for (i, finding) in self.0.iter().enumerate() {
            text.push_str(&format!("FAILURE {}: {finding}\n", i + 1));
        }
        if let Some(s) = s {
            text.push_str(&format!("--- the supervisor's output\n{}", s.dump()));
        }
        panic!("{}", text);
    }
}

/// How a bounded run of the binary ended.
#[derive(Debug)]
struct Outcome {
    /// `None` when it did not exit within the limit (it was then SIGKILLed).
    status: Option<ExitStatus>,
    took: Duration,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    fn describe(&self) -> String {
        let ended = match self.status {
            None => format!(
                "did NOT exit within its limit (killed after {:?})",
                self.took
            ),
            Some(status) => format!("exited with {status} after {:?}", self.took),
        };
        format!(
            "{ended}\n  stdout: {:?}\n  stderr: {:?}",
            self.stdout, self.stderr
        )
    }
}

/// Run `command` with its output in files (nothing it leaves behind can hold
/// a pipe open), for at most `limit`; SIGKILL it if it is still running then.
fn run_bounded(command: &mut Command, limit: Duration) -> Outcome {
    let mut out = tempfile::tempfile().expect("a temp file");
    let mut err = tempfile::tempfile().expect("a temp file");
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup"))
        .stderr(err.try_clone().expect("dup"))
        .spawn()
        .expect("the binary runs");
    let mut status = None;
    eventually(limit, || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    let took = started.elapsed();
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let read = |file: &mut File| {
        let mut text = String::new();
        file.rewind().expect("rewind");
        let _ = file.read_to_string(&mut text);
        text
    };
    Outcome {
        status,
        took,
        stdout: read(&mut out),
        stderr: read(&mut err),
    }
}

/// `supervise ARGS` as a client of `s` (its directory, its runtime directory).
fn client(s: &Supervised, args: &[&str], limit: Duration) -> Outcome {
    client_in(s.dir.path(), args, limit)
}

/// `supervise ARGS` in `dir`, with the runtime directory of `dir`.
fn client_in(dir: &Path, args: &[&str], limit: Duration) -> Outcome {
    run_bounded(
        Command::new(binary())
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(dir))
            .args(args),
        limit,
    )
}

/// A supervisor this test started and means to let run (in `dir`, with the
/// runtime directory of `dir`); SIGKILLed by pid if the test ends first —
/// its undertaker then kills its workers.
struct Running(std::process::Child);

impl Running {
    fn start(dir: &Path, file: &Path) -> Running {
        let child = Command::new(binary())
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", runtime_dir(dir))
            .env_remove("NOTIFY_SOCKET")
            .arg("--log-format")
            .arg("json")
            .arg("-f")
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary runs");
        Running(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// SIGTERM, then wait up to `limit` for the exit: its status, if it exited.
    fn stop(&mut self, limit: Duration) -> Option<ExitStatus> {
        kill(self.pid(), libc::SIGTERM);
        let mut status = None;
        eventually(limit, || {
            status = self.0.try_wait().expect("try_wait");
            status.is_some()
        });
        status
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A second `supervise -f FILE` next to `s` (same runtime directory), which
/// must be refused; if it is not, it is killed after `limit`.
fn second_supervisor(s: &Supervised, file: &Path, limit: Duration) -> Outcome {
    run_bounded(
        Command::new(binary())
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .env_remove("NOTIFY_SOCKET")
            .arg("--log-format")
            .arg("json")
            .arg("-f")
            .arg(file),
        limit,
    )
}

/// `status --json` with extra arguments; the parsed reply, if it answered.
fn status_json(s: &Supervised, extra: &[&str], limit: Duration) -> (Outcome, Option<Value>) {
    let mut args = vec!["status", "--json"];
    args.extend_from_slice(extra);
    let outcome = client(s, &args, limit);
    let json = if outcome.code() == Some(0) {
        serde_json::from_str(&outcome.stdout).ok()
    } else {
        None
    };
    (outcome, json)
}

fn app_of<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["apps"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
}

/// The first event (seen or still to come, within `limit`) matching `predicate`.
fn find(s: &mut Supervised, limit: Duration, predicate: impl Fn(&Value) -> bool) -> Option<Value> {
    s.until(limit, |s| s.events.iter().any(&predicate));
    s.events.iter().find(|e| predicate(e)).cloned()
}

/// Save like an editor: a temp file renamed over the file (a new inode).
fn save(file: &Path, text: &str) {
    let temp = file.with_file_name(".edit.tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, file).unwrap();
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: signalling a process this test started (or a worker of it), by pid.
    unsafe {
        libc::kill(pid, signal);
    }
}

fn pid_exists(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// SIGTERM the supervisor and wait up to `limit` for it to exit on its own
/// (no second signal); records a finding if it does not, or exits non-zero.
fn terminate(s: &mut Supervised, limit: Duration, findings: &mut Findings) {
    let sent = Instant::now();
    s.signal(libc::SIGTERM);
    let mut status = None;
    eventually(limit, || {
        status = s.child.try_wait().expect("try_wait");
        status.is_some()
    });
    let took = sent.elapsed();
    findings.check(status.is_some(), || {
        format!("SIGTERM: the supervisor did not exit within {limit:?} (no second signal sent)")
    });
    if let Some(status) = status {
        findings.check(status.success(), || {
            format!("SIGTERM: the supervisor exited with {status} after {took:?}")
        });
    }
    // Take in what it printed last, to the end of its output.
    s.read_to_end();
}

/// One app `web` running `sleep 1000`.
fn sleeper(instances: u32, extra: &str) -> String {
    format!(
        "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: {instances}\n    ready: none\n{extra}"
    )
}

const SECOND: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------- 1. a FIFO

#[test]
fn case1ab_a_fifo_for_the_file_is_refused_at_once_by_check_and_run() {
    let mut findings = Findings::default();
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_dir(dir.path());
    mkfifo(&dir.path().join("ecosystem.yaml"));
    let command = |args: &[&str]| {
        let mut command = Command::new(binary());
        command
            .current_dir(dir.path())
            .env("XDG_RUNTIME_DIR", &runtime)
            .args(args);
        command
    };
    // Nothing ever writes to the FIFO: a blocking open would hang for good.
    let check = run_bounded(&mut command(&["check", "-f", "ecosystem.yaml"]), SECOND);
    findings.check(check.code() == Some(2), || {
        format!(
            "(a) check -f FIFO: expected exit 2 within 1 s; {}",
            check.describe()
        )
    });
    findings.check(
        check.stderr.contains("FIFO") && check.stderr.contains("not a regular file"),
        || {
            format!(
                "(a) check -f FIFO: the message does not say FIFO / not a regular file; {}",
                check.describe()
            )
        },
    );
    let run = run_bounded(
        &mut command(&["--log-format", "json", "-f", "ecosystem.yaml"]),
        SECOND,
    );
    findings.check(run.code() == Some(2), || {
        format!(
            "(b) run -f FIFO: expected exit 2 within 1 s; {}",
            run.describe()
        )
    });
    findings.check(run.stderr.contains("FIFO"), || {
        format!(
            "(b) run -f FIFO: the message does not say FIFO; {}",
            run.describe()
        )
    });
    findings.finish(None);
}

#[test]
fn case1c_a_fifo_renamed_over_the_running_file_stalls_nothing() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(1, ""));
    let first = s.wait_event("spawned", "web");
    let pid = first["pid"].as_i64().unwrap() as i32;

    let fifo = s.path("ecosystem.fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, s.path("ecosystem.yaml")).unwrap();
    let refused = find(&mut s, WAIT, |e| e["event"] == "config_invalid");
    findings.check(refused.is_some(), || {
        "no `config_invalid` event within 20 s of the FIFO replacing the file".into()
    });
    if let Some(refused) = &refused {
        findings.check(
            refused["message"]
                .as_str()
                .is_some_and(|m| m.contains("FIFO")),
            || format!("the config_invalid event does not mention the FIFO: {refused}"),
        );
    }

    // Found through the file's path (now the FIFO's), and through --socket.
    let socket = std::fs::read_dir(runtime_dir(s.dir.path()).join("supervise"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the control socket exists")
        .display()
        .to_string();
    for (how, extra) in [
        ("-f ecosystem.yaml", ["-f", "ecosystem.yaml"]),
        ("--socket", ["--socket", socket.as_str()]),
    ] {
        let (outcome, json) = status_json(&s, &extra, SECOND);
        findings.check(json.is_some(), || {
            format!(
                "status --json {how} did not answer within 1 s; {}",
                outcome.describe()
            )
        });
        if let Some(json) = json {
            findings.check(
                json["config_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("FIFO")),
                || {
                    format!(
                        "status --json {how}: config_error does not mention the FIFO: {}",
                        json["config_error"]
                    )
                },
            );
        }
    }

    kill(pid, libc::SIGKILL);
    let again = find(&mut s, WAIT, |e| {
        e["event"] == "spawned" && e["app"] == "web" && e["pid"].as_i64() != Some(pid as i64)
    });
    findings.check(again.is_some(), || {
        format!("worker {pid} SIGKILLed while the file is a FIFO: no new `spawned` within 20 s")
    });

    terminate(&mut s, Duration::from_secs(5), &mut findings);
    findings.finish(Some(&s));
}

// ------------------------------------------------ 2. one supervisor per file

/// A second supervisor on `path` must be refused: exit 1, naming the pid of `s`.
fn refused(s: &Supervised, findings: &mut Findings, what: &str, path: &Path) {
    let first = s.pid();
    let outcome = second_supervisor(s, path, Duration::from_secs(5));
    findings.check(
        outcome.code() == Some(1) && outcome.stderr.contains(&format!("pid {first}")),
        || {
            format!(
                "{what} ({}): expected exit 1 naming pid {first}; {}",
                path.display(),
                outcome.describe()
            )
        },
    );
}

#[test]
fn case2_one_supervisor_per_file_through_any_path() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(1, ""));
    s.wait_event("spawned", "web");
    let file = s.path("ecosystem.yaml");
    let first = s.pid();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("link.yaml");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let hard = elsewhere.path().join("hard.yaml");
    std::fs::hard_link(&file, &hard).unwrap();

    refused(&s, &mut findings, "(a) through a symlink", &link);
    refused(&s, &mut findings, "(b) through a hard link", &hard);

    // (c) a bind mount of the directory at another path. Declared after
    // `elsewhere`, so it is unmounted before that directory is removed.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let mount_point = elsewhere.path().join("mnt");
    std::fs::create_dir(&mount_point).unwrap();
    let mounted = is_root()
        && Command::new("mount")
            .arg("--bind")
            .arg(s.dir.path())
            .arg(&mount_point)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|st| st.success());
    let _unmount = mounted.then(|| Unmount(mount_point.clone()));
    if mounted {
        refused(
            &s,
            &mut findings,
            "(c) through a bind mount",
            &mount_point.join("ecosystem.yaml"),
        );
    } else {
        println!("skipped: (c) the bind mount needs root and a working `mount --bind`");
    }

    // An editor's save (a new inode), then at once a second supervisor.
    save(&file, &sleeper(2, ""));
    refused(&s, &mut findings, "right after an editor-style save", &file);
    let applied = find(&mut s, WAIT, |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    findings.check(applied.is_some(), || {
        "the editor-style save was not applied (no `applied` with file_version 2)".into()
    });
    refused(&s, &mut findings, "after the save was applied", &file);
    refused(
        &s,
        &mut findings,
        "(a) through the symlink after the save",
        &link,
    );

    let (outcome, json) = status_json(&s, &["-f", link.to_str().unwrap()], Duration::from_secs(5));
    findings.check(json.as_ref().is_some_and(|j| j["version"] == 2), || {
        format!(
            "status -f SYMLINK after the save did not find the first supervisor (version 2); {}",
            outcome.describe()
        )
    });
    findings.check(!is_gone(first), || "the first supervisor died".into());
    findings.finish(Some(&s));
}

// --------------------------------------------- 3. a directory symlink swapped

#[test]
fn case3_a_swapped_release_directory_is_applied_and_found() {
    let mut findings = Findings::default();
    let release = |instances: u32| {
        format!(
            "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: {instances}\n    ready: none\n"
        )
    };
    // The harness always passes `-f ecosystem.yaml`: the shell replaces
    // itself with the binary and our own `-f` (its `ecosystem.yaml` is unused).
    let mut s = Supervised::start_wrapped(
        "# unused: this supervisor runs on current/ecosystem.yaml\napps: {}\n",
        &[
            "sh",
            "-c",
            r#"exec "$0" --log-format json -f current/ecosystem.yaml"#,
        ],
        &[],
        |dir| {
            for (n, instances) in [(1, 1), (2, 2)] {
                let release_dir = dir.join(format!("releases/{n}"));
                std::fs::create_dir_all(&release_dir).unwrap();
                std::fs::write(release_dir.join("ecosystem.yaml"), release(instances)).unwrap();
            }
            std::os::unix::fs::symlink("releases/1", dir.join("current")).unwrap();
        },
    );
    s.wait_event("spawned", "web");

    std::os::unix::fs::symlink("releases/2", s.path("current.new")).unwrap();
    std::fs::rename(s.path("current.new"), s.path("current")).unwrap();
    let applied = find(&mut s, WAIT, |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    findings.check(applied.is_some(), || {
        "the swap of `current` was not applied (no `applied` with file_version 2 within 20 s)"
            .into()
    });

    let mut last = None;
    let found = poll(WAIT, Duration::from_millis(100), || {
        let (outcome, json) = status_json(
            &s,
            &["-f", "current/ecosystem.yaml"],
            Duration::from_secs(5),
        );
        let done = json
            .as_ref()
            .and_then(|j| app_of(j, "web"))
            .is_some_and(|a| a["running"] == 2 && a["rollout"]["complete"] == true);
        last = Some((outcome, json));
        done
    });
    findings.check(found, || {
        let (outcome, json) = last.take().unwrap();
        format!(
            "status -f current/ecosystem.yaml never showed 2 running (rollout complete) within 20 s; last: {}\n  json: {json:?}",
            outcome.describe()
        )
    });
    // The workers that status shows are real: two live pids of generation 2.
    if found && let Some((_, Some(json))) = &last {
        let workers = app_of(json, "web").unwrap()["workers"].clone();
        let live: Vec<i64> = workers
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["generation"] == 2)
            .filter_map(|w| w["pid"].as_i64())
            .filter(|p| !is_gone(*p as i32))
            .collect();
        findings.check(live.len() == 2, || {
            format!("status showed 2 running, but not 2 live workers of generation 2: {workers}")
        });
    }
    findings.finish(Some(&s));
}

/// Call `condition` every `step` until it holds (true) or `limit` passes.
fn poll(limit: Duration, step: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}

// --------------------------------------------------------- 4. a deleted cwd

#[test]
fn case4_a_deleted_cwd_fails_at_chdir_and_never_shows_a_dead_ready_pid() {
    let mut findings = Findings::default();
    let mut s = Supervised::start_with(&sleeper(1, "    cwd: ./work\n"), &[], |dir| {
        std::fs::create_dir(dir.join("work")).unwrap();
    });
    let ready = s.wait_event("ready", "web");
    let pid = ready["pid"].as_i64().unwrap();
    // Linux lets a directory that is a process's cwd be removed.
    let removed = std::fs::remove_dir(s.path("work"));
    findings.check(removed.is_ok(), || {
        format!("rmdir of the running worker's cwd failed: {removed:?}")
    });
    kill(pid as i32, libc::SIGKILL);

    let failed = find(&mut s, WAIT, |e| {
        e["event"] == "start_failed" && e["app"] == "web"
    });
    findings.check(failed.is_some(), || {
        "no `start_failed` within 20 s of killing the worker whose cwd is gone".into()
    });
    if let Some(failed) = &failed {
        let message = failed["message"].as_str().unwrap_or("");
        findings.check(
            failed["stage"] == "chdir" && message.contains("chdir") && !message.contains("exec"),
            || format!("the start_failed event should say chdir (not exec): {failed}"),
        );
    }

    // Over ~1 s, status never shows a ready worker with a pid that is gone.
    let mut last_exit = None;
    let deadline = Instant::now() + SECOND;
    let mut looks = 0;
    while Instant::now() < deadline || looks < 5 {
        looks += 1;
        let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
        let Some(json) = json else {
            findings.check(false, || {
                format!("status --json failed; {}", outcome.describe())
            });
            break;
        };
        for worker in app_of(&json, "web")
            .and_then(|a| a["workers"].as_array())
            .into_iter()
            .flatten()
        {
            if worker["ready"] == true {
                let live = worker["pid"].as_i64().is_some_and(pid_exists);
                findings.check(live, || {
                    format!("status shows a ready worker whose pid is not in /proc: {worker}")
                });
            }
            if let Some(exit) = worker["last_exit"].as_str() {
                last_exit = Some(exit.to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    findings.check(
        last_exit
            .as_deref()
            .is_some_and(|e| e.contains("chdir") && !e.contains("exec")),
        || format!("status last_exit should say chdir (not exec): {last_exit:?}"),
    );

    terminate(&mut s, Duration::from_secs(5), &mut findings);
    findings.finish(Some(&s));
}

// ------------------------------------------------ 5. an unreadable file

#[test]
fn case5_an_unreadable_file_is_reported_and_the_fix_applies() {
    let mut findings = Findings::default();
    // As root, mode bits do not stop reads: run the supervisor as nobody.
    let wrapper: &[&str] = if is_root() {
        let has_setpriv = Command::new("setpriv")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_setpriv {
            println!(
                "skipped: running as root and `setpriv` is missing (needed to drop to nobody)"
            );
            return;
        }
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]
    } else {
        &[]
    };
    let as_nobody = !wrapper.is_empty();
    let mut s = Supervised::start_wrapped(&sleeper(1, ""), wrapper, &[], |dir| {
        if as_nobody {
            // The temp dir, the file and the runtime dir must be nobody's.
            let runtime = runtime_dir(dir);
            for path in [dir.to_path_buf(), dir.join("ecosystem.yaml"), runtime] {
                std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            }
        }
    });
    s.wait_event("spawned", "web");
    if as_nobody {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
        assert!(
            uid.contains("65534"),
            "the supervisor runs as nobody: {uid}"
        );
    }
    let file = s.path("ecosystem.yaml");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    let refused = find(&mut s, WAIT, |e| e["event"] == "config_invalid");
    findings.check(refused.is_some(), || {
        "no `config_invalid` event within 20 s of `chmod 000`".into()
    });
    let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| j["config_error"].is_string()),
        || {
            format!(
                "status --json after chmod 000: config_error is not set; {}",
                outcome.describe()
            )
        },
    );

    // The fix: new content, still mode 000 (renamed over, so the supervisor
    // cannot read a half-done version in between), then `chmod 644`.
    let temp = s.path(".fixed.tmp");
    std::fs::write(&temp, sleeper(2, "")).unwrap();
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::rename(&temp, &file).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let applied = find(&mut s, WAIT, |e| {
        e["event"] == "applied" && e["file_version"] == 2
    });
    findings.check(applied.is_some(), || {
        "after chmod 644 with instances 2: no `applied` with file_version 2 within 20 s".into()
    });
    let settled = s.until(WAIT, |s| s.running_pids("web").len() == 2);
    findings.check(settled, || "2 instances never ran after the fix".into());
    let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| {
            j["config_error"].is_null() && app_of(j, "web").is_some_and(|a| a["instances"] == 2)
        }),
        || {
            format!(
                "status --json after the fix: expected config_error null and 2 instances; {}",
                outcome.describe()
            )
        },
    );
    findings.finish(Some(&s));
}

// ------------------------------------------- 6. edits during a rollout

#[test]
fn case6_edits_landing_mid_rollout_and_mid_reload_still_finish() {
    let mut findings = Findings::default();
    let version = |value: &str| {
        format!(
            "apps:\n  web:\n    command: [sleep, \"1000\"]\n    instances: 2\n    ready: {{delay: 1s}}\n    env: {{VERSION: \"{value}\"}}\n"
        )
    };
    // The first instance of `generation` started: a rollout to it is under
    // way (that instance is ready only a second later).
    let rolling_to = |s: &mut Supervised, generation: u64| {
        s.wait_for("a new instance of the rollout", |e| {
            e["event"] == "spawned" && e["app"] == "web" && e["generation"] == generation
        });
    };
    let mut s = Supervised::start(&version("1"));
    s.wait_count("ready", "web", 2);
    let file = s.path("ecosystem.yaml");

    save(&file, &version("2"));
    rolling_to(&mut s, 2);
    save(&file, &version("3"));
    let mut last = None;
    let converged = poll(Duration::from_secs(15), Duration::from_millis(200), || {
        let (outcome, json) = status_json(&s, &[], Duration::from_secs(5));
        let done = json
            .as_ref()
            .and_then(|j| app_of(j, "web"))
            .is_some_and(|a| {
                let workers = a["workers"].as_array().cloned().unwrap_or_default();
                a["generation"] == 3
                    && a["rollout"]["complete"] == true
                    && workers.len() == 2
                    && workers
                        .iter()
                        .all(|w| w["ready"] == true && w["generation"] == 3)
            });
        last = Some((outcome, json));
        done
    });
    findings.check(converged, || {
        let (outcome, json) = last.take().unwrap();
        format!(
            "an edit landing mid-rollout of the one before: not every instance ready at generation 3 (rollout complete) within 15 s; last status: {}\n  app: {}",
            outcome.describe(),
            json.as_ref()
                .and_then(|j| app_of(j, "web"))
                .map_or("-".into(), |a| a.to_string())
        )
    });

    // `supervise reload web`, and an edit lands once its rollout is under way.
    let dir = s.dir.path().to_path_buf();
    let reload = std::thread::spawn(move || {
        run_bounded(
            Command::new(binary())
                .current_dir(&dir)
                .env("XDG_RUNTIME_DIR", runtime_dir(&dir))
                .args(["reload", "web"]),
            Duration::from_secs(20),
        )
    });
    let reload_to = s.wait_for("the reload", |e| {
        e["event"] == "reload" && e["app"] == "web"
    })["generation"]
        .as_u64()
        .expect("the reload's generation");
    rolling_to(&mut s, reload_to);
    save(&file, &version("4"));
    let outcome = reload.join().unwrap();
    findings.check(outcome.code() == Some(0), || {
        format!(
            "`reload web` with an edit landing mid-rollout: expected exit 0 within 20 s; {}",
            outcome.describe()
        )
    });
    // What has come meanwhile, for the report.
    s.take_in();
    findings.finish(Some(&s));
}

// ---------------------------------- 7. a ConfigMap swap, kubelet's full dance

#[test]
fn case7_a_configmap_swap_that_deletes_the_old_data_logs_no_watch_warning() {
    let mut findings = Findings::default();
    // kubelet: write ..<timestamp>/, point ..data_tmp at it, rename it over
    // ..data, then delete the old ..<timestamp>/ directory.
    let mut s = Supervised::start_with("", &[], |dir| {
        std::fs::create_dir(dir.join("..2026_01_01_00_00_00.000000001")).unwrap();
        std::fs::write(
            dir.join("..2026_01_01_00_00_00.000000001/ecosystem.yaml"),
            sleeper(1, ""),
        )
        .unwrap();
        std::os::unix::fs::symlink("..2026_01_01_00_00_00.000000001", dir.join("..data")).unwrap();
        std::fs::remove_file(dir.join("ecosystem.yaml")).unwrap();
        std::os::unix::fs::symlink("..data/ecosystem.yaml", dir.join("ecosystem.yaml")).unwrap();
    });
    s.wait_event("spawned", "web");
    let mut old = "..2026_01_01_00_00_00.000000001".to_string();
    for (version, instances) in [(2u64, 3u32), (3, 2)] {
        let dir = s.dir.path().to_path_buf();
        let new = format!("..2026_01_01_00_00_00.00000000{version}");
        std::fs::create_dir(dir.join(&new)).unwrap();
        std::fs::write(
            dir.join(&new).join("ecosystem.yaml"),
            sleeper(instances, ""),
        )
        .unwrap();
        std::os::unix::fs::symlink(&new, dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        std::fs::remove_dir_all(dir.join(&old)).unwrap();
        old = new;
        let applied = find(&mut s, WAIT, |e| {
            e["event"] == "applied" && e["file_version"] == version
        });
        findings.check(applied.is_some(), || {
            format!("swap {version}: no `applied` with file_version {version} within 20 s")
        });
        let settled = s.until(WAIT, |s| s.running_pids("web").len() == instances as usize);
        findings.check(settled, || {
            format!("swap {version}: {instances} instances never ran")
        });
    }
    // Stop it, so everything it would print is printed.
    terminate(&mut s, Duration::from_secs(5), &mut findings);
    let watch_noise = |text: &str| {
        let lower = text.to_lowercase();
        lower.contains("unable to remove watch descriptor")
            || lower.contains("unable to remove the path from the watches")
    };
    for event in &s.events {
        let message = event["message"].as_str().unwrap_or("");
        let level = event["level"].as_str().unwrap_or("");
        let warning = matches!(level, "WARN" | "ERROR") && message.to_lowercase().contains("watch");
        findings.check(!watch_noise(message) && !warning, || {
            format!("the supervisor logged about its watches: {event}")
        });
    }
    let stderr = s.stderr();
    findings.check(
        !watch_noise(&stderr)
            && !stderr
                .lines()
                .any(|l| l.to_lowercase().contains("warn") && l.contains("watch")),
        || format!("stderr mentions watches: {stderr:?}"),
    );
    findings.finish(Some(&s));
}

// ------------------------------------------------------ 8. scale below zero

#[test]
fn case8_scale_below_zero_is_refused_and_a_non_number_is_a_usage_error() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(2, ""));
    s.wait_count("spawned", "web", 2);
    let before = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    let below = client(&s, &["scale", "web", "-5"], Duration::from_secs(10));
    findings.check(
        below.code() == Some(1) && !below.stderr.trim().is_empty(),
        || {
            format!(
                "`scale web -5` (2 instances): expected exit 1 with a message; {}",
                below.describe()
            )
        },
    );
    let word = client(&s, &["scale", "web", "x"], Duration::from_secs(10));
    findings.check(word.code() == Some(2), || {
        format!(
            "`scale web x`: expected exit 2 (usage); {}",
            word.describe()
        )
    });
    let after = std::fs::read_to_string(s.path("ecosystem.yaml")).unwrap();
    findings.check(before == after, || {
        format!("the file was changed by a refused scale:\n{after}")
    });
    findings.check(s.running_pids("web").len() == 2, || {
        "the running count changed".into()
    });
    findings.finish(Some(&s));
}

// ------------------------------------ 9. the file moved away and copied back

/// Whether the `status` reply came from the supervisor of the file `name`.
fn serves(status: &Value, name: &str) -> bool {
    status["file"]
        .as_str()
        .is_some_and(|file| Path::new(file).file_name() == Some(name.as_ref()))
}

#[test]
fn case9_a_file_moved_away_and_copied_back_no_longer_leads_to_the_supervisor() {
    let mut findings = Findings::default();
    let mut s = Supervised::start(&sleeper(1, ""));
    s.wait_event("spawned", "web");
    let file = s.path("ecosystem.yaml");
    let backup = s.path("backup.yaml");
    // `mv ecosystem.yaml backup.yaml; cp backup.yaml ecosystem.yaml`: the
    // supervisor's file is still ecosystem.yaml (same place, same content);
    // its old inode is backup.yaml now, another file.
    std::fs::rename(&file, &backup).unwrap();
    std::fs::copy(&backup, &file).unwrap();

    // Once the supervisor has seen the swap, backup.yaml leads nowhere.
    let mut last = None;
    let released = poll(WAIT, Duration::from_millis(100), || {
        let (outcome, _) = status_json(&s, &["-f", "backup.yaml"], Duration::from_secs(5));
        let done = outcome.code() == Some(3);
        last = Some(outcome);
        done
    });
    findings.check(released, || {
        format!(
            "`status -f backup.yaml` still reached a supervisor 20 s after the swap (expected exit 3); last: {}",
            last.take().map_or(String::new(), |o| o.describe())
        )
    });
    // ecosystem.yaml still leads to it.
    let (outcome, json) = status_json(&s, &["-f", "ecosystem.yaml"], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| serves(j, "ecosystem.yaml")),
        || {
            format!(
                "`status -f ecosystem.yaml` did not reach the supervisor; {}",
                outcome.describe()
            )
        },
    );
    // `scale` through backup.yaml finds no supervisor before editing anything.
    let before = std::fs::read_to_string(&backup).unwrap();
    let scaled = client(
        &s,
        &["-f", "backup.yaml", "scale", "web", "3"],
        Duration::from_secs(10),
    );
    findings.check(scaled.code() == Some(3), || {
        format!(
            "`scale -f backup.yaml web 3`: expected exit 3 (no supervisor); {}",
            scaled.describe()
        )
    });
    findings.check(std::fs::read_to_string(&backup).unwrap() == before, || {
        "`scale -f backup.yaml` edited backup.yaml".into()
    });

    // backup.yaml may have a supervisor of its own now.
    let mut other = Running::start(s.dir.path(), Path::new("backup.yaml"));
    let mut last = None;
    let answered = poll(WAIT, Duration::from_millis(100), || {
        let (outcome, json) = status_json(&s, &["-f", "backup.yaml"], Duration::from_secs(5));
        let done = json.as_ref().is_some_and(|j| serves(j, "backup.yaml"));
        last = Some(outcome);
        done
    });
    findings.check(answered, || {
        format!(
            "a second supervisor on backup.yaml never answered (refused?); last status: {}",
            last.take().map_or(String::new(), |o| o.describe())
        )
    });
    let (outcome, json) = status_json(&s, &["-f", "ecosystem.yaml"], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| serves(j, "ecosystem.yaml")),
        || {
            format!(
                "with both running, `status -f ecosystem.yaml` did not reach the first; {}",
                outcome.describe()
            )
        },
    );
    let stopped = other.stop(Duration::from_secs(10));
    findings.check(stopped.is_some_and(|st| st.success()), || {
        format!("the supervisor of backup.yaml did not stop cleanly on SIGTERM: {stopped:?}")
    });
    findings.check(!is_gone(s.pid()), || "the first supervisor died".into());
    let (outcome, json) = status_json(&s, &["-f", "ecosystem.yaml"], Duration::from_secs(5));
    findings.check(
        json.as_ref().is_some_and(|j| serves(j, "ecosystem.yaml")),
        || {
            format!(
                "after the second stopped, `status -f ecosystem.yaml` did not reach the first; {}",
                outcome.describe()
            )
        },
    );
    findings.finish(Some(&s));
}

// ------------------------------------ 10. what runs leave in the runtime dir

/// The names in the runtime directory of `dir`.
fn runtime_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(runtime_dir(dir).join("supervise"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn case10_clean_runs_leave_nothing_in_the_runtime_directory() {
    let mut findings = Findings::default();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ecosystem.yaml");
    for run in 1..=3 {
        // A new inode each time (an editor's save), as files are between runs.
        save(&file, &sleeper(1, &format!("# run {run}\n")));
        let mut supervisor = Running::start(dir.path(), Path::new("ecosystem.yaml"));
        let answered = poll(WAIT, Duration::from_millis(50), || {
            client_in(dir.path(), &["status", "--json"], Duration::from_secs(5)).code() == Some(0)
        });
        findings.check(answered, || format!("run {run}: status never answered"));
        if run == 2 {
            // Saved while it runs: it follows the file to its new inode.
            save(&file, &sleeper(2, "# run 2, edited\n"));
            let followed = poll(WAIT, Duration::from_millis(100), || {
                let outcome = client_in(dir.path(), &["status", "--json"], Duration::from_secs(5));
                serde_json::from_str::<Value>(&outcome.stdout).is_ok_and(|j| j["version"] == 2)
            });
            findings.check(followed, || "run 2: the edit was never applied".into());
        }
        let stopped = supervisor.stop(Duration::from_secs(10));
        findings.check(stopped.is_some_and(|st| st.success()), || {
            format!("run {run}: no clean exit on SIGTERM: {stopped:?}")
        });
        let left = runtime_entries(dir.path());
        findings.check(left.is_empty(), || {
            format!("run {run} left {left:?} in the runtime directory")
        });
    }
    findings.finish(None);
}
