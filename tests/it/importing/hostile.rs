//! Hostile sources are read as pm2 reads them or refused clearly, and values
//! `check` would refuse are adjusted or left out with a warning at their
//! line.

use super::*;

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
