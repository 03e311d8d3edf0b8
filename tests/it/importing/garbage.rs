//! Sources that cannot be imported as they are: garbage refused with a
//! reason, a JavaScript pm2 file without node, and control bytes and
//! indented lines that still import to a file that passes `check`.

use super::*;

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
