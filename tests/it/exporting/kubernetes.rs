//! Kubernetes objects: every example's validate against the 1.33 schemas (and
//! the validator is not a rubber stamp); namespace, image and replicas;
//! probes; replicas for `instances: max`.

use super::*;

#[test]
fn every_example_exports_to_objects_that_validate_against_kubernetes_1_33() {
    let settings = snapshot_settings();
    let examples = examples();
    let runs: Vec<Run> = examples
        .iter()
        .map(|example| {
            let file = format!("examples/{example}/ecosystem.yaml");
            let run = supervise(
                root(),
                &[
                    "export",
                    "kubernetes",
                    "-f",
                    &file,
                    "--image",
                    "registry.example/app:1",
                ],
            );
            assert_eq!(run.code, 0, "{file}:\n{}", run.stderr);
            run
        })
        .collect();
    let streams: Vec<&str> = runs.iter().map(|run| run.stdout.as_str()).collect();
    let reports = validate_kubernetes_each(&streams);
    for ((example, run), report) in examples.iter().zip(&runs).zip(reports) {
        let documents = run.stdout.split("\n---\n").count();
        let report = report.unwrap_or_else(|report| {
            panic!(
                "examples/{example} does not validate:\n{report}\n{}",
                run.stdout
            )
        });
        assert_eq!(
            report.matches("passed for resource").count(),
            documents,
            "every object was checked:\n{report}"
        );
        settings.bind(|| {
            insta::assert_snapshot!(format!("kubernetes_{example}"), run.stdout);
        });
    }
}

#[test]
fn the_validator_is_not_a_rubber_stamp() {
    let hello = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/hello/ecosystem.yaml",
        ],
    );
    assert_eq!(hello.code, 0, "{}", hello.stderr);
    let broken = hello
        .stdout
        .replace("replicas: 2", "replicas: two")
        .replace(
            "  type: ClusterIP",
            "  type: ClusterIP\n  sessionStickiness: true",
        );
    let report = validate_kubernetes(&broken).expect_err("a broken object fails");
    assert!(report.contains("'two' is not of type"), "{report}");
    assert!(report.contains("sessionStickiness"), "{report}");
    // Validated together, each stream gets its own verdict and report.
    let [first, second, third] =
        &validate_kubernetes_each(&[&hello.stdout, &broken, &hello.stdout])[..]
    else {
        panic!("three reports for three streams");
    };
    let (first, third) = (
        first.as_ref().expect("hello passes"),
        third.as_ref().expect("hello passes"),
    );
    assert!(
        first.contains("passed for resource") && !first.contains("two"),
        "{first}"
    );
    assert_eq!(first.replace("0000", "0002"), *third);
    let second = second.as_ref().expect_err("the broken one fails");
    assert!(
        second.contains("'two' is not of type") && !second.contains("passed"),
        "{second}"
    );
}

#[test]
fn namespace_image_and_replicas_for_max_are_applied_to_every_object() {
    let run = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/node-cluster/ecosystem.yaml",
            "--namespace",
            "shop",
            "--image",
            "registry.example/api:2",
            "--replicas-for-max",
            "6",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.matches("namespace: shop\n").count(),
        2,
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("image: registry.example/api:2\n"));
    assert!(run.stdout.contains("replicas: 6\n"), "{}", run.stdout);
    assert!(
        run.stderr.contains("a Deployment needs a number: 6")
            && run.stderr.contains("from --replicas-for-max"),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));

    let bad = supervise(
        root(),
        &[
            "export",
            "kubernetes",
            "-f",
            "examples/hello/ecosystem.yaml",
            "--namespace",
            "Bad_NS",
        ],
    );
    assert_eq!(bad.code, 2, "a bad namespace is a usage error");
    assert!(
        bad.stderr.contains("not a Kubernetes namespace name"),
        "{}",
        bad.stderr
    );
    let hello = "examples/hello/ecosystem.yaml";
    let too_long = "n".repeat(64);
    for (flag, value, code) in [
        ("--namespace", too_long.as_str(), 2),
        ("--namespace", "1abc", 0),
        ("--image", "", 2),
        ("--image", " x", 2),
    ] {
        let run = supervise(root(), &["export", "kubernetes", "-f", hello, flag, value]);
        assert_eq!(run.code, code, "{flag} {value:?}: {}", run.stderr);
        if code == 0 {
            assert!(
                run.stdout.contains(&format!("namespace: {value}\n")),
                "{}",
                run.stdout
            );
        } else {
            assert_eq!(run.stdout, "");
        }
    }
}

#[test]
fn probes_of_another_host_keep_their_host_and_loopback_probes_get_a_note() {
    let yaml = "apps:\n  waiter:\n    command: /bin/sleep 1000\n    ready: {tcp: \"192.0.2.10:5432\"}\n    health: {http: \"http://192.0.2.11:9000/up\"}\n\
                \x20 local:\n    command: /bin/sleep 1000\n    listen: 0.0.0.0:8080\n    health: {http: \"http://127.0.0.1:9100/health\"}\n";
    let run = export_yaml("kubernetes", yaml, &[], &["--image", "x"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("host: \"192.0.2.10\"\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("host: \"192.0.2.11\"\n"),
        "{}",
        run.stdout
    );
    assert_eq!(run.stdout.matches("host:").count(), 2, "{}", run.stdout);
    for (line, ip) in [(4, "192.0.2.10"), (5, "192.0.2.11")] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with(&format!("ecosystem.yaml:{line}:"))
                    && l.contains(&format!("warning: the probe is of another host, {ip}"))),
            "{}",
            run.stderr
        );
    }
    assert!(
        run.stderr
            .contains("note: local: the probe of 127.0.0.1:9100 is of a loopback address"),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));
}

#[test]
fn replicas_for_max_counts_for_a_job_and_is_clamped_to_what_kubernetes_takes() {
    let job = "apps:\n  once:\n    command: /bin/true\n    restart: never\n    instances: max\n";
    let run = export_yaml("kubernetes", job, &[], &["--replicas-for-max", "7"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("completions: 7\n") && run.stdout.contains("parallelism: 7\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("ecosystem.yaml:5:16: warning: `instances: max` means one per CPU of the machine; a Job needs a number: 7"),
        "{}",
        run.stderr
    );
    let deployment = "apps:\n  mx:\n    command: /bin/sleep 1000\n    instances: max\n";
    let run = export_yaml(
        "kubernetes",
        deployment,
        &[],
        &["--replicas-for-max", "4294967295"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("replicas: 2147483647\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("a Deployment needs a number: 2147483647")
            && run
                .stderr
                .contains("from --replicas-for-max 4294967295, clamped to 2147483647"),
        "{}",
        run.stderr
    );
}
