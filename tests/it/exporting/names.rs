//! App names: renamed or refused where they are not Kubernetes names, too
//! long, or would replace systemd's own units or the API server's service.

use super::*;

#[test]
fn app_names_that_are_not_kubernetes_names_are_renamed_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |yaml: &str| std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    // Valid for us, not for Kubernetes: `_`, a trailing `_`, a leading digit.
    write(
        "apps:\n  my_app:\n    command: sleep 77\n    listen: 127.0.0.1:7101\n\
         \x20 worker_:\n    command: sleep 77\n\
         \x20 1st:\n    command: sleep 77\n    schedule: \"0 3 * * *\"\n",
    );
    let run = supervise(dir.path(), &["export", "kubernetes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for (name, renamed, line) in [
        ("my_app", "my-app", 2),
        ("worker_", "worker", 5),
        ("1st", "app-1st", 7),
    ] {
        assert!(
            run.stderr.contains(&format!(
                "ecosystem.yaml:{line}:3: warning: app name `{name}` is not a Kubernetes name; its objects are named `{renamed}`"
            )),
            "{}",
            run.stderr
        );
        assert!(
            run.stdout.contains(&format!("name: {renamed}\n")),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout.contains(&format!("supervise/app: {name}\n")),
            "{}",
            run.stdout
        );
    }
    validate_kubernetes(&run.stdout).unwrap_or_else(|report| panic!("{report}\n{}", run.stdout));

    // Two names that become one, and a name too long for a DNS label.
    let long = "a".repeat(64);
    write(&format!(
        "apps:\n  a_b:\n    command: sleep 77\n  a-b:\n    command: sleep 77\n  {long}:\n    command: sleep 77\n"
    ));
    let run = supervise(dir.path(), &["export", "kubernetes"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("ecosystem.yaml:4:3: error: the Deployment `a-b` of app `a-b` has the name of another app's"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "ecosystem.yaml:6:3: error: app name `{long}` is 64 characters"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("not exported (2 errors"),
        "{}",
        run.stderr
    );
    // systemd takes every one of them as it is.
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(units.join("a_b@.service").exists());
    let complaints = systemd_verify(&units);
    assert!(complaints.is_empty(), "{complaints:?}");
}

#[test]
fn every_derived_kubernetes_name_is_held_to_63_characters() {
    let long = "a".repeat(62);
    let yaml = format!(
        "apps:\n  {long}:\n    command: /bin/sleep 1000\n    listen: [\"0.0.0.0:9101\", \"0.0.0.0:9102\"]\n    env_file: app.env\n"
    );
    let run = export_yaml("kubernetes", &yaml, &[("app.env", "A=1\n")], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    for derived in [
        format!("Service `{long}-1`"),
        format!("ConfigMap `{long}-env`"),
    ] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with("ecosystem.yaml:2:3: error: the ")
                    && l.contains(&derived)
                    && l.contains("characters: a Kubernetes name has at most 63")),
            "{derived}: {}",
            run.stderr
        );
    }
}

/// Found by the hostile round: an app named `multi-user` was exported as
/// `multi-user.target`, which in /etc/systemd/system replaces the machine's
/// boot target (and `user` every user's manager, `getty` the consoles').
#[test]
fn app_names_that_would_replace_systemds_own_units_are_refused() {
    let yaml = "apps:\n  multi-user:\n    command: sleep 77\n  user:\n    command: sleep 77\n\
                \x20 dbus:\n    command: sleep 77\n    listen: 127.0.0.1:7022\n\
                \x20 systemd-tmpfiles-clean:\n    command: sleep 77\n    schedule: \"@daily\"\n\
                \x20 sshx:\n    command: sleep 77\n    listen: 127.0.0.1:7023\n";
    let run = export_yaml("systemd", yaml, &[], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(": error: "))
        .collect();
    assert_eq!(
        errors,
        [
            "ecosystem.yaml:2:3: error: the unit `multi-user.target` of app `multi-user` is one of systemd's own: installed, it would replace it",
            "ecosystem.yaml:4:3: error: the unit `user@.service` of app `user` is one of systemd's own: installed, it would replace it",
            "ecosystem.yaml:6:3: error: the unit `dbus.socket` of app `dbus` is one of systemd's own: installed, it would replace it",
            "ecosystem.yaml:9:3: error: the unit `systemd-tmpfiles-clean.timer` of app `systemd-tmpfiles-clean` is one of systemd's own: installed, it would replace it",
        ],
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, "", "nothing is written when an app is refused");
}

/// Found by the hostile round: an app named `kubernetes` with a `listen`
/// address got the Service `kubernetes`, which in `default` (kubectl's
/// namespace when none is given) is the API server's own.
#[test]
fn an_app_whose_service_would_be_the_api_servers_is_refused_in_default() {
    let yaml = "apps:\n  kubernetes:\n    command: sleep 77\n    listen: 0.0.0.0:7443\n";
    for namespace in [&[][..], &["--namespace", "default"][..]] {
        let run = export_yaml("kubernetes", yaml, &[], namespace);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            run.stderr.contains(
                "ecosystem.yaml:2:3: error: the Service `kubernetes` of app `kubernetes` would replace the API server's own"
            ),
            "{}",
            run.stderr
        );
    }
    let elsewhere = export_yaml("kubernetes", yaml, &[], &["--namespace", "shop"]);
    assert_eq!(elsewhere.code, 0, "{}", elsewhere.stderr);
    assert!(
        elsewhere.stdout.contains("kind: Service"),
        "{}",
        elsewhere.stdout
    );
}

#[test]
fn app_names_too_long_for_systemd_units_are_refused_at_the_app() {
    // `system-APP.slice` (where systemd puts the instances) is 242 + 13 =
    // 255 characters, the most systemd takes; `APP@11.service` 242 + 11.
    for (length, fits) in [(242, true), (243, false), (250, false)] {
        let name = "l".repeat(length);
        let yaml = format!("apps:\n  {name}:\n    command: /bin/sleep 1000\n    instances: 12\n");
        let (run, complaints, _) = systemd_units(&yaml, &[]);
        if fits {
            assert_eq!(run.code, 0, "{length}: {}", run.stderr);
            assert!(complaints.is_empty(), "{length}: {complaints:?}");
        } else {
            assert_eq!(run.code, 1, "{length}: {}", run.stderr);
            assert!(
                run.stderr.contains(&format!(
                    "ecosystem.yaml:2:3: error: the unit `system-{name}.slice` of app `{name}` would have a name of {} characters: systemd takes at most 255",
                    length + 13
                )),
                "{length}: {}",
                run.stderr
            );
        }
    }
}
