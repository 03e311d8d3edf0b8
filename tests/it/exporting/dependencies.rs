//! Dependencies between apps, exported: an app waited for as completed,
//! apps reaching each other on loopback, `PartOf=` bounded for thousands of
//! instances, and restarting with a dependency.

use super::*;

#[test]
fn an_app_waited_for_as_completed_is_a_oneshot_even_when_retried() {
    let yaml = "apps:\n  migrate:\n    command: /bin/sh -c \"sleep 5; exit 0\"\n    restart: on-failure\n\
                \x20 api:\n    command: /bin/sleep 1000\n    depends_on: {migrate: completed}\n";
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    let migrate = unit_text(&printed, "migrate@.service");
    assert!(
        migrate.contains("Type=oneshot\nRemainAfterExit=yes\n"),
        "{migrate}"
    );
    assert!(migrate.contains("Restart=on-failure\n"), "{migrate}");
    // Through its target, which requires each instance (and so fails when
    // one does) and is ordered after each, as targets are by default.
    assert!(
        unit_text(&printed, "api@.service")
            .contains("Requires=migrate.target\nAfter=migrate.target\n"),
        "{printed}"
    );
    assert!(
        unit_text(&printed, "migrate.target").contains("\nRequires=migrate@0.service\n"),
        "{printed}"
    );
}

/// A oneshot's start ends when it exits: what its `ready` asked for
/// (READY=1, or alive for a while) is not exported, and said so at `ready`.
#[test]
fn the_ready_of_an_app_waited_for_as_completed_is_warned_about() {
    for (ready, warning) in [
        (
            "ready: notify",
            "4:12: warning: `ready: notify` is not exported: `migrate` is waited for as `completed`",
        ),
        (
            "ready: {delay: 2s}",
            "4:5: warning: `ready: {delay}` is not exported: `migrate` is waited for as `completed`",
        ),
    ] {
        let yaml = format!(
            "apps:\n  migrate:\n    command: /bin/true\n    {ready}\n    restart: never\n\
             \x20 api:\n    command: /bin/sleep 1000\n    depends_on: {{migrate: completed}}\n"
        );
        let (run, complaints, printed) = systemd_units(&yaml, &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(complaints.is_empty(), "{complaints:?}");
        let migrate = unit_text(&printed, "migrate@.service");
        assert!(migrate.contains("Type=oneshot\n"), "{migrate}");
        assert!(!migrate.contains("ExecStartPost="), "{migrate}");
        assert!(!migrate.contains("NotifyAccess="), "{migrate}");
        assert!(
            run.stderr.contains(&format!("ecosystem.yaml:{warning}")),
            "{ready}:\n{}",
            run.stderr
        );
    }
}

/// Apps that reach each other on 127.0.0.1 are in pods of their own in a
/// cluster: where the file says so precisely (an env value naming another
/// app's address, a probe of another app's port) it is a warning naming
/// the Service to use; a bare port, or an app's own address, is not.
#[test]
fn an_app_reaching_another_on_loopback_is_warned_about_where_the_file_says_so() {
    let yaml = "apps:\n  db:\n    command: sleep 77\n    ready: {tcp: \"127.0.0.1:7400\"}\n\
                \x20 cache:\n    command: sleep 77\n    listen: 0.0.0.0:6379\n\
                \x20 api:\n    command: sleep 77\n    listen: 127.0.0.1:8080\n    env:\n\
                \x20     DB_URL: postgres://u:p@localhost:7400/app\n\
                \x20     CACHE: \"redis://127.0.0.1:6379\"\n\
                \x20     SELF: \"http://127.0.0.1:8080/\"\n\
                \x20     DB_PORT: \"7400\"\n\
                \x20   health: {tcp: \"127.0.0.1:6379\"}\n";
    let run = export_yaml("kubernetes", yaml, &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(": warning: ") || l.trim_start().starts_with("help: "))
        .collect();
    assert_eq!(
        warnings,
        [
            "ecosystem.yaml:12:15: warning: env `DB_URL` reaches 127.0.0.1:7400, where app `db` \
             serves: in Kubernetes they run in pods of their own, and 127.0.0.1 in `api`'s pod is `api`'s",
            "  help: `db` gets no Service for port 7400 (only a TCP `listen` address of a \
             Deployment does): give it one, and reach it by that name",
            "ecosystem.yaml:13:14: warning: env `CACHE` reaches 127.0.0.1:6379, where app `cache` \
             serves: in Kubernetes they run in pods of their own, and 127.0.0.1 in `api`'s pod is `api`'s",
            "  help: reach it through its Service instead: `cache:6379` (in the same namespace)",
            "ecosystem.yaml:16:19: warning: 127.0.0.1:6379 is where app `cache` listens: in \
             Kubernetes the kubelet probes `api`'s own pod, which that port is not in",
            "  help: probe a port `api` serves itself",
        ],
        "{}",
        run.stderr
    );
    // The probe of another app's port gets the warning, not the note
    // telling the worker to bind every interface.
    assert!(
        !run.stderr.contains("note: api: the probe"),
        "{}",
        run.stderr
    );

    // A program that binds a loopback address itself (`inject`) would not
    // answer its Service or its probe in a pod.
    let inject = export_yaml(
        "kubernetes",
        "apps:\n  web:\n    command: sleep 77\n    listen:\n      - {address: \"127.0.0.1:7020\", inject: true}\n",
        &[],
        &[],
    );
    assert!(
        inject.stderr.contains(
            "ecosystem.yaml:5:45: warning: with `inject` the program binds 127.0.0.1:7020 itself"
        ),
        "{}",
        inject.stderr
    );
}

/// How long `systemd-analyze verify` may take on the units of two apps of
/// the most instances `check` allows (2.7 s here; with an edge per pair of
/// instances it took 8 minutes).
const VERIFY_WITHIN: Duration = Duration::from_secs(60);

/// An app that depends on another is ordered through the other's target:
/// a few lines whatever the instance counts, which systemd loads quickly.
/// Restarting with a dependency of more than [`MAX_PART_OF_PER_UNIT`]
/// instances goes through the target too, with a warning.
#[test]
fn dependencies_between_apps_of_thousands_of_instances_stay_a_few_lines() {
    let yaml = "apps:\n  big:\n    command: sleep 77\n    instances: 4096\n\
                \x20   listen: [\"127.0.0.1:7100\", {address: \"127.0.0.1:7101\", reuseport: true}]\n\
                \x20 once:\n    command: /bin/true\n    restart: never\n    instances: 4096\n\
                \x20 dep:\n    command: sleep 77\n    instances: 4096\n\
                \x20   depends_on: {big: ready, once: completed}\n    on_dependency_restart: restart\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ecosystem.yaml"), yaml).unwrap();
    let (run, units) = export_units(dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dep = std::fs::read_to_string(units.join("dep@.service")).unwrap();
    assert!(
        dep.contains(
            "Wants=big.target\nAfter=big.target\nPartOf=big.target\n\
             Requires=once.target\nAfter=once.target\nPartOf=once.target\n"
        ),
        "{dep}"
    );
    // `big` is too many to be PartOf= one by one: said, where it is asked.
    assert!(
        run.stderr.contains(&format!(
            "ecosystem.yaml:14:28: warning: `big` has 4096 instances, and a unit is made PartOf= at most {MAX_PART_OF_PER_UNIT} one by one"
        )),
        "{}",
        run.stderr
    );
    assert!(!dep.contains("big@") && !dep.contains("once@"), "{dep}");
    let once = std::fs::read_to_string(units.join("once.target")).unwrap();
    assert!(
        once.contains("\nRequires=once@4088.service once@4089.service"),
        "{once}"
    );

    let mut files: Vec<PathBuf> = std::fs::read_dir(&units)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // Into a file, so a long report cannot fill a pipe and stall it.
    let report = dir.path().join("verify.txt");
    let out = std::fs::File::create(&report).expect("report file");
    let mut verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&files)
        .stdout(out.try_clone().expect("report file"))
        .stderr(out)
        .spawn()
        .expect("systemd-analyze runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = verify.try_wait().expect("wait for systemd-analyze") {
            break Some(status);
        }
        if started.elapsed() > VERIFY_WITHIN {
            verify.kill().expect("kill the systemd-analyze we started");
            verify.wait().expect("reap it");
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.is_some(),
        "systemd-analyze verify took more than {VERIFY_WITHIN:?}"
    );
    let said = std::fs::read_to_string(&report).expect("the report");
    assert!(said.trim().is_empty(), "{said}");
}

/// `on_dependency_restart: restart` makes a unit `PartOf=` (and `After=`)
/// each instance of a dependency it waits for as started or ready, so that
/// systemd restarting one (its `Restart=` after a crash) restarts the
/// dependent after it; up to a bound of instances per unit, above which
/// it is the dependency's target, with a warning saying what that loses.
/// A one-shot waited for as `completed` is always its target, which
/// requires each instance.
#[test]
fn restarting_with_a_dependency_is_part_of_each_instance_up_to_a_bound() {
    let yaml = format!(
        "apps:\n  db:\n    command: sleep 77\n    instances: 2\n\
         \x20 fits:\n    command: sleep 77\n    instances: {MAX_PART_OF_PER_UNIT}\n\
         \x20 over:\n    command: sleep 77\n    instances: {}\n\
         \x20 migrate:\n    command: /bin/true\n    restart: never\n\
         \x20 web:\n    command: sleep 77\n    depends_on: {{db: ready, migrate: completed}}\n    on_dependency_restart: restart\n\
         \x20 full:\n    command: sleep 77\n    depends_on: [fits]\n    on_dependency_restart: restart\n\
         \x20 beyond:\n    command: sleep 77\n    depends_on: [db, over]\n    on_dependency_restart: restart\n",
        MAX_PART_OF_PER_UNIT - 1
    );
    let (run, complaints, printed) = systemd_units(&yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}\n{printed}");
    let web = unit_text(&printed, "web@.service");
    assert!(
        web.contains(
            "Wants=db.target\nAfter=db.target\n\
             PartOf=db@0.service db@1.service\nAfter=db@0.service db@1.service\n\
             Requires=migrate.target\nAfter=migrate.target\nPartOf=migrate.target\n"
        ),
        "{web}"
    );
    // At the bound: every instance, none left out, no target.
    let full = unit_text(&printed, "full@.service");
    let part_of = directives(full, "PartOf");
    let listed: Vec<&str> = part_of
        .iter()
        .flat_map(|line| line.split(' '))
        .filter(|unit| unit.starts_with("fits@"))
        .collect();
    let all: Vec<String> = (0..MAX_PART_OF_PER_UNIT)
        .map(|slot| format!("fits@{slot}.service"))
        .collect();
    assert_eq!(listed, all, "{full}");
    assert!(!full.contains("PartOf=fits.target"), "{full}");
    // Above it (2 of `db` and 63 of `over`): `db` one by one, `over` its target.
    let beyond = unit_text(&printed, "beyond@.service");
    assert!(
        beyond.contains("PartOf=db@0.service db@1.service\n")
            && beyond.contains("\nPartOf=over.target\n")
            && !beyond.contains("over@"),
        "{beyond}"
    );
    let warned: Vec<&str> = run
        .stderr
        .lines()
        .filter(|line| line.contains("is made PartOf= at most"))
        .collect();
    assert_eq!(
        warned,
        [format!(
            "ecosystem.yaml:25:28: warning: `over` has {} instances, and a unit is made PartOf= at most {MAX_PART_OF_PER_UNIT} one by one (each is an edge for every instance, which systemd loads slowly): `beyond` is PartOf=over.target instead, stopped or restarted with that target, but no longer when one instance of `over` stops or restarts (a crash that Restart= restarts, `systemctl restart over@N`)",
            MAX_PART_OF_PER_UNIT - 1
        )],
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "help: it is PartOf= each instance of the dependencies it restarts with while they have at most {MAX_PART_OF_PER_UNIT} together (those before `over` have 2)"
        )),
        "{}",
        run.stderr
    );
}
