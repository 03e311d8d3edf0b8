//! Hostile and tricky values: they cannot break out of a unit file, continue
//! or change a line systemd reads verbatim, or turn into other YAML; C1
//! control characters; what `env_file` cannot set.

use super::*;

#[test]
fn hostile_values_cannot_break_out_of_a_unit_file() {
    let dir = tempfile::tempdir().unwrap();
    // Percent signs (systemd's specifiers), dollars (its variables), quotes,
    // a newline that would start a directive, and a shell metacharacter.
    std::fs::write(
        dir.path().join("ecosystem.yaml"),
        "apps:\n  web:\n    command: [/usr/bin/printf, \"100%% of $HOME; \\\"quoted\\\"\\nExecStartPre=/bin/false\"]\n\
         \x20   env:\n      EVIL: \"a\\nExecStart=/bin/false %n $USER\"\n      PORT_OFFSET: \"{instance+7}\"\n",
    )
    .unwrap();
    let run = supervise(dir.path(), &["export", "systemd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let unit = &run.stdout;
    assert_eq!(
        unit.lines().filter(|l| l.starts_with("ExecStart")).count(),
        1,
        "no directive was injected:\n{unit}"
    );
    assert!(!unit.contains("\nExecStartPre"), "{unit}");
    assert!(unit.contains("%%%%"), "percent signs are escaped: {unit}");
    assert!(unit.contains("$$HOME"), "dollars are escaped: {unit}");
    assert!(
        unit.contains("Environment=\"EVIL=a\\nExecStart=/bin/false %%n $USER\""),
        "{unit}"
    );
    assert!(unit.contains("export PORT_OFFSET=$$((7+%i))"), "{unit}");
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0);
    let complaints = systemd_verify(&units);
    assert!(complaints.is_empty(), "{complaints:?}");
}

#[test]
fn values_that_look_like_other_yaml_stay_strings_in_the_objects() {
    let tricky = [
        "yes",
        "no",
        "on",
        "off",
        "true",
        "null",
        "~",
        "0x10",
        "1e3",
        "0755",
        "08",
        ": colon",
        "- dash",
        "#hash",
        "a: b",
        "[list]",
        "{map}",
        "*alias",
        "&anchor",
        "multi\nline",
        " padded ",
        "'single'",
        "\"double\"",
        "%percent",
        "",
    ];
    let mut yaml = String::from("apps:\n  web:\n    command: sleep 77\n    env:\n");
    for (index, value) in tricky.iter().enumerate() {
        yaml.push_str(&format!(
            "      V{index}: {}\n",
            serde_json::to_string(value).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), &yaml).unwrap();
    let run = supervise(dir.path(), &["export", "kubernetes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}\n{}", run.stdout));
    let deployment: serde_json::Value =
        serde_saphyr::from_str(&run.stdout).expect("the output reads back as YAML");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    for (index, value) in tricky.iter().enumerate() {
        let found = env
            .iter()
            .find(|e| e["name"] == format!("V{index}"))
            .unwrap_or_else(|| panic!("V{index} is exported"));
        assert_eq!(found["value"], serde_json::json!(value), "V{index}");
    }
}

#[test]
fn values_systemd_reads_verbatim_cannot_continue_or_change_a_line() {
    const BS: &str = "ends with `\\`";
    const CONTROL: &str = "holds a control character";
    // Each value would end its line with `\` (joining the next directive to
    // it) or hold a character systemd cannot be given in a path.
    for (yaml, line, what) in [
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    listen:\n      - {name: 'fd\\', address: \"127.0.0.1:9001\"}\n",
            5,
            ["the socket name `fd\\`", BS],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    listen:\n      - 'unix:/tmp/s\\'\n",
            5,
            ["the socket path `/tmp/s\\`", BS],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    cwd: 'x\\'\n",
            4,
            ["the working directory", BS],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    cwd: \"tab\\tdir\"\n",
            4,
            ["the working directory", CONTROL],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    cwd: \"c1\\u0085dir\"\n",
            4,
            ["the working directory", CONTROL],
        ),
        (
            "apps:\n  bs:\n    command: /bin/sleep 1000\n    env_file: 'e\\'\n",
            4,
            ["the env_file path", BS],
        ),
    ] {
        let files = [
            ("e\\", "A=1\n"),
            ("x\\/keep", ""),
            ("tab\tdir/keep", ""),
            ("c1\u{85}dir/keep", ""),
        ];
        let run = export_yaml("systemd", yaml, &files, &[]);
        assert_eq!(run.code, 1, "{yaml}\n{}{}", run.stdout, run.stderr);
        assert_eq!(run.stdout, "", "nothing is written");
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with(&format!("ecosystem.yaml:{line}:"))
                    && l.contains(": error: ")
                    && what.iter().all(|w| l.contains(w))),
            "{yaml}\n{}",
            run.stderr
        );
    }
}

#[test]
fn env_file_cannot_set_what_supervise_sets() {
    let yaml = "apps:\n  ef:\n    command: /bin/sleep 1000\n    env_file: app.env\n    listen: 0.0.0.0:8080\n";
    let env = "PORT=1234\nSUPERVISE_INSTANCE=9\nSUPERVISE_APP=evil\nLISTEN_FDS=5\nNOTIFY_SOCKET=/x\nKEEP=1\n";
    let files = [("app.env", env)];
    let (run, complaints, printed) = systemd_units(yaml, &files);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    assert!(
        directives(&printed, "EnvironmentFile").is_empty(),
        "{printed}"
    );
    let env = directives(&printed, "Environment");
    assert!(env.contains(&"\"KEEP=1\""), "{printed}");
    for evil in ["1234", "=9", "evil", "LISTEN_FDS", "NOTIFY_SOCKET"] {
        assert!(!env.iter().any(|e| e.contains(evil)), "{evil}: {printed}");
    }
    assert!(
        run.stderr.lines().any(|l| l.starts_with("ecosystem.yaml:4:")
            && l.contains("warning: env_file is copied into Environment= lines")
            && l.contains("it sets `PORT`, `SUPERVISE_INSTANCE`, `SUPERVISE_APP`, `LISTEN_FDS`, `NOTIFY_SOCKET`, which supervise sets itself")),
        "{}",
        run.stderr
    );

    let run = export_yaml("kubernetes", yaml, &files, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let config_map = run
        .stdout
        .split("---\n")
        .find(|d| d.contains("kind: ConfigMap"))
        .expect("a ConfigMap");
    assert!(
        config_map.contains("data:\n  KEEP: \"1\"\n"),
        "{config_map}"
    );
    for evil in [
        "1234",
        "SUPERVISE_INSTANCE",
        "evil",
        "LISTEN_FDS",
        "NOTIFY_SOCKET",
    ] {
        assert!(!config_map.contains(evil), "{evil}: {config_map}");
    }
    assert!(
        run.stderr.lines().any(|l| l.starts_with("ecosystem.yaml:4:")
            && l.contains("warning: env_file sets `PORT`, `SUPERVISE_INSTANCE`, `SUPERVISE_APP`, `LISTEN_FDS`, `NOTIFY_SOCKET`, which supervise sets itself: left out of the ConfigMap")),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));
}

#[test]
fn c1_control_characters_are_escaped_as_characters_not_bytes() {
    let yaml = "apps:\n  t2:\n    command: /bin/sleep 1000\n    env:\n      NEL: \"x\\u0085y\"\n      CSI: \"x\\u009by\"\n\
                \x20 uni:\n    command: [\"/bin/echo\", \"x\\u0085y\"]\n";
    // `systemd_units` reads the output as UTF-8: a lone `\x85` byte is not.
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    assert!(
        printed.contains("Environment=\"NEL=x\\u0085y\"\n"),
        "{printed}"
    );
    assert!(
        printed.contains("Environment=\"CSI=x\\u009by\"\n"),
        "{printed}"
    );
    assert!(
        printed.contains("ExecStart=/bin/echo \"x\\u0085y\"\n"),
        "{printed}"
    );
    assert!(
        !printed.contains("\\x85") && !printed.contains("\\x9b"),
        "{printed}"
    );
}
