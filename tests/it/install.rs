//! `supervise init` and `supervise install`/`uninstall`: the first file
//! passes `check` as written and runs; the unit passes `systemd-analyze
//! verify`; install and uninstall write, enable, disable and remove it with
//! the systemctl commands they print.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::binary;

fn supervise(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(binary());
    command.current_dir(dir).args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("supervise runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `folder`, made with its parents, holding an ecosystem.yaml of `yaml`
/// (one there is replaced).
fn project(folder: &Path, yaml: &str) -> PathBuf {
    std::fs::create_dir_all(folder).expect("folder");
    std::fs::write(folder.join("ecosystem.yaml"), yaml).expect("write");
    folder.to_path_buf()
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).expect("write");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
}

/// A stand-in for a command at `path` that appends each call's arguments,
/// a line a call, to the log it returns: `path` with `.log` added.
fn recorder(path: &Path) -> PathBuf {
    let log = path.with_extension("log");
    script(path, &format!("echo \"$@\" >> {}\n", log.display()));
    log
}

/// A file of one app, `web`; and one of one app, `a`.
const WEB: &str = "apps:\n  web:\n    command: sleep 1000\n";
const A: &str = "apps:\n  a:\n    command: sleep 100\n";

#[test]
fn init_writes_a_file_check_passes_and_supervise_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = supervise(dir.path(), &["init", "--", "sleep", "1000"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let written = std::fs::read_to_string(dir.path().join("ecosystem.yaml")).expect("written");
    assert!(written.starts_with("# yaml-language-server: $schema=ecosystem.schema.json\n"));
    assert!(
        written.contains("  sleep:\n    command: sleep 1000"),
        "{written}"
    );
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("ecosystem.schema.json")).expect("schema written"),
    )
    .expect("the schema is JSON");
    assert!(schema["properties"]["apps"].is_object());

    let check = supervise(dir.path(), &["check"], &[]);
    assert!(check.status.success(), "{}", text(&check.stdout));

    // It runs as written: the app comes up.
    let mut running = crate::common::Supervised::start_with(&written, &[], |_| {});
    running.wait_event("ready", "sleep");

    // Never over an existing file.
    let again = supervise(dir.path(), &["init", "--", "true"], &[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("exists"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ecosystem.yaml")).expect("kept"),
        written
    );
}

#[test]
fn init_without_a_command_writes_a_placeholder_that_check_passes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = supervise(dir.path(), &["-f", "services.yaml", "init"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let check = supervise(dir.path(), &["check", "-f", "services.yaml"], &[]);
    assert!(check.status.success(), "{}", text(&check.stdout));
}

#[test]
fn the_installed_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("systemd-analyze is missing: .ci/run installs systemd");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  db:\n    command: sleep 1000\n    kill_timeout: 30s\n  web:\n    command: sleep 1000\n    kill_timeout: 15s\n    depends_on: [db]\n  cache:\n    command: sleep 1000\n    kill_timeout: 40s\n",
    )
    .expect("write");
    for user in [false, true] {
        let mut args = vec!["install", "--print"];
        if user {
            args.push("--user");
        }
        let output = supervise(dir.path(), &args, &[]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let unit = text(&output.stdout);
        assert!(unit.contains("Type=notify\n"), "{unit}");
        assert!(unit.contains("KillMode=mixed\n"), "{unit}");
        assert!(
            unit.contains("TimeoutStopSec=65s\n"),
            "above the longest kill_timeout: {unit}"
        );
        let exec = format!(
            "ExecStart={} -f {}/ecosystem.yaml\n",
            binary().display(),
            dir.path().display()
        );
        assert!(unit.contains(&exec), "{unit}");
        assert!(unit.contains(if user {
            "WantedBy=default.target"
        } else {
            "WantedBy=multi-user.target"
        }));

        let path = dir.path().join("supervise-test.service");
        std::fs::write(&path, &unit).expect("write unit");
        let mut verify = Command::new("systemd-analyze");
        verify.arg("verify");
        if user {
            // A user manager needs a runtime folder of its own.
            verify
                .arg("--user")
                .env("XDG_RUNTIME_DIR", crate::common::runtime_dir(dir.path()));
        }
        let verified = verify.arg(&path).output().expect("systemd-analyze runs");
        let said = text(&verified.stderr);
        // Only what names our unit is ours: verify also reads the machine's
        // own units it pulls in (network-online.target and the like).
        let ours: Vec<&str> = said
            .lines()
            .filter(|l| l.contains("supervise-test"))
            .collect();
        assert!(
            verified.status.success() && ours.is_empty(),
            "systemd-analyze verify:\n{said}\n{unit}"
        );
    }
}

#[test]
fn install_and_uninstall_write_enable_and_remove_the_unit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let shop = project(&dir.path().join("shop"), WEB);
    // A systemctl that records what it is asked (systemd does not run as
    // PID 1 in the test machine).
    let systemctl = dir.path().join("systemctl");
    let log = recorder(&systemctl);
    let units = dir.path().join("units");
    let env = [("SUPERVISE_SYSTEMCTL", systemctl.as_path())];

    let units_arg = units.display().to_string();
    let output = supervise(&shop, &["install", "--unit-dir", &units_arg], &env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let unit = units.join("supervise-shop.service");
    assert!(unit.exists());
    let said = text(&output.stderr);
    assert!(
        said.contains(
            "$ systemctl daemon-reload\n$ systemctl enable --now supervise-shop.service\n"
        ),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "daemon-reload\nenable --now supervise-shop.service\n"
    );

    let output = supervise(&shop, &["uninstall", "--unit-dir", &units_arg], &env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!unit.exists());
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "daemon-reload\nenable --now supervise-shop.service\ndisable --now supervise-shop.service\ndaemon-reload\n"
    );
    let output = supervise(&shop, &["uninstall", "--unit-dir", &units_arg], &env);
    assert_eq!(output.status.code(), Some(2), "nothing left to uninstall");

    // A broken file gets no unit; a systemd that is not there is said so,
    // and the unit stays for when it is.
    project(&shop, "apps:\n  web:\n    comand: sleep 1000\n");
    let output = supervise(&shop, &["install", "--unit-dir", &units_arg], &env);
    assert_eq!(output.status.code(), Some(1));
    assert!(!unit.exists(), "{}", text(&output.stderr));
    project(&shop, WEB);
    let failing = dir.path().join("failing");
    script(
        &failing,
        "echo 'System has not been booted with systemd' >&2\nexit 1\n",
    );
    let output = supervise(
        &shop,
        &["install", "--unit-dir", &units_arg],
        &[("SUPERVISE_SYSTEMCTL", failing.as_path())],
    );
    assert_eq!(output.status.code(), Some(1));
    let said = text(&output.stderr);
    assert!(
        said.contains("System has not been booted with systemd") && said.contains("is in place"),
        "{said}"
    );
    assert!(unit.exists());
}

#[test]
fn units_for_paths_that_need_quoting_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().expect("temp dir");
    for folder in ["my app", "100%", "dollar$x", "quo\"te", "ünï"] {
        let place = project(&dir.path().join(folder), A);
        let output = supervise(&place, &["install", "--print", "--name", "test"], &[]);
        assert!(
            output.status.success(),
            "{folder}: {}",
            text(&output.stderr)
        );
        let unit = dir
            .path()
            .join(format!("supervise-{}.service", folder.len()));
        std::fs::write(&unit, &output.stdout).expect("write unit");
        let verified = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .expect("runs");
        let said = text(&verified.stderr);
        let ours: Vec<&str> = said.lines().filter(|l| l.contains("supervise-")).collect();
        assert!(
            verified.status.success() && ours.is_empty(),
            "{folder}: {said}\n{}",
            text(&output.stdout)
        );
    }
    let broken = project(&dir.path().join("line\nbreak"), A);
    let output = supervise(&broken, &["install", "--print"], &[]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a line break cannot be written in a unit"
    );
}

#[test]
fn a_unit_of_the_same_name_for_another_file_is_not_replaced_nor_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let units = dir.path().join("units");
    let units_arg = units.display().to_string();
    let env = [("SUPERVISE_SYSTEMCTL", Path::new("/bin/true"))];
    let mut shops = Vec::new();
    for name in ["p1", "p2"] {
        shops.push(project(&dir.path().join(name).join("shop"), A));
    }
    let first = supervise(&shops[0], &["install", "--unit-dir", &units_arg], &env);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = supervise(&shops[1], &["install", "--unit-dir", &units_arg], &env);
    assert_eq!(second.status.code(), Some(2), "{}", text(&second.stderr));
    assert!(text(&second.stderr).contains("runs another file"));
    let removed = supervise(&shops[1], &["uninstall", "--unit-dir", &units_arg], &env);
    assert_eq!(removed.status.code(), Some(2));
    assert!(
        units.join("supervise-shop.service").exists(),
        "p1's unit is still there"
    );
    let again = supervise(&shops[0], &["install", "--unit-dir", &units_arg], &env);
    assert!(
        again.status.success(),
        "reinstalling the same file replaces its unit: {}",
        text(&again.stderr)
    );
    let forced = supervise(
        &shops[1],
        &["install", "--unit-dir", &units_arg, "--force"],
        &env,
    );
    assert!(forced.status.success(), "{}", text(&forced.stderr));
}

/// `install --user`: the same unit in the user's folder, enabled with
/// `systemctl --user`; and, when the user does not linger, a note that it
/// will not start at boot with the command that makes it (not run).
#[test]
fn install_user_runs_systemctl_user_and_says_when_lingering_is_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let shop = project(&dir.path().join("shop"), WEB);
    let systemctl = dir.path().join("systemctl");
    let log = recorder(&systemctl);
    // A loginctl that says when it is run: the note names it, never runs it.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("folder");
    let loginctl_log = recorder(&bin.join("loginctl"));
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("a PATH");
    // The user's unit folder, found from XDG_CONFIG_HOME as systemd does.
    let config = dir.path().join("config");
    let env = [
        ("SUPERVISE_SYSTEMCTL", systemctl.as_path()),
        ("XDG_CONFIG_HOME", config.as_path()),
        ("PATH", Path::new(&path)),
    ];

    let output = supervise(&shop, &["install", "--user"], &env);
    let said = text(&output.stderr);
    assert!(output.status.success(), "{said}");
    let unit = config.join("systemd/user/supervise-shop.service");
    let written = std::fs::read_to_string(&unit).expect("the unit is written");
    assert!(written.contains("WantedBy=default.target\n"), "{written}");
    assert!(
        said.contains(
            "$ systemctl --user daemon-reload\n$ systemctl --user enable --now supervise-shop.service\n"
        ),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "--user daemon-reload\n--user enable --now supervise-shop.service\n"
    );
    // Whether this machine lets the user linger is read, not changed.
    let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .expect("the test user has a name")
        .name;
    let lingers = Path::new("/var/lib/systemd/linger").join(&user).exists();
    let command = format!("\n    loginctl enable-linger {user}\n");
    assert_eq!(said.contains(&command), !lingers, "{said}");
    assert_eq!(said.contains("not at boot"), !lingers, "{said}");
    assert!(!loginctl_log.exists(), "loginctl was run");

    let output = supervise(&shop, &["uninstall", "--user"], &env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!unit.exists());
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "--user daemon-reload\n--user enable --now supervise-shop.service\n--user disable --now supervise-shop.service\n--user daemon-reload\n"
    );
    // The system unit says nothing of lingering.
    let system = supervise(
        &shop,
        &[
            "install",
            "--unit-dir",
            &dir.path().join("units").display().to_string(),
        ],
        &env,
    );
    assert!(system.status.success(), "{}", text(&system.stderr));
    assert!(
        !text(&system.stderr).contains("linger"),
        "{}",
        text(&system.stderr)
    );
}
