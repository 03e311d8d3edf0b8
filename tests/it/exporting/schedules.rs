//! Schedules, exported: a paused schedule stays paused, and cron expressions
//! are written as each engine reads them.

use super::*;

#[test]
fn a_paused_schedule_is_exported_paused() {
    let yaml = "apps:\n  cronzero:\n    command: /bin/true\n    schedule: \"*/5 * * * *\"\n    instances: 0\n\
                \x20 everyzero:\n    command: /bin/true\n    schedule: {every: 10m}\n    instances: 0\n\
                \x20 running:\n    command: /bin/true\n    schedule: \"0 3 * * *\"\n";
    let run = export_yaml("kubernetes", yaml, &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.matches("suspend: true").count(),
        2,
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains(
            "note: cronzero: `instances: 0` pauses its schedule: the CronJob is suspended"
        ),
        "{}",
        run.stderr
    );
    validate_kubernetes(&run.stdout).unwrap_or_else(|r| panic!("{r}"));

    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}");
    assert!(
        printed.contains("# cronzero.timer\n"),
        "the timer is written"
    );
    let wants: Vec<&str> = directives(&printed, "Wants");
    assert_eq!(wants, ["running.timer"], "{printed}");
    assert!(
        run.stderr
            .contains("note: everyzero: `instances: 0` pauses its schedule: everyzero.target does not want everyzero.timer"),
        "{}",
        run.stderr
    );
    assert!(printed.contains("Description=cronzero: its schedule is paused"));
}

#[test]
fn cron_expressions_are_written_as_each_engine_reads_them() {
    let yaml = "apps:\n  weekdays:\n    command: /bin/true\n    schedule: \"0 0 * * 0-5\"\n\
                \x20 everyday:\n    command: /bin/true\n    schedule: \"0 0 * * sun-sat\"\n\
                \x20 hourstep:\n    command: /bin/true\n    schedule: \"0 */25 * * *\"\n\
                \x20 sunday7:\n    command: /bin/true\n    schedule: \"0 0 * * 5-7\"\n\
                \x20 lastday:\n    command: /bin/true\n    schedule: \"0 0 L * *\"\n";
    let (run, complaints, printed) = systemd_units(yaml, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(complaints.is_empty(), "{complaints:?}\n{printed}");
    let calendars = directives(&printed, "OnCalendar");
    assert_eq!(
        calendars,
        [
            "Mon..Fri,Sun *-*-* 00:00:00 UTC",
            "Mon..Sun *-*-* 00:00:00 UTC",
            "*-*-* 00:00:00 UTC",
            "Fri..Sun *-*-* 00:00:00 UTC",
        ],
        "{printed}"
    );
    assert!(
        run.stderr.contains(
            "ecosystem.yaml:16:15: warning: `0 0 L * *` cannot be written as a systemd calendar"
        ),
        "{}",
        run.stderr
    );

    let run = export_yaml("kubernetes", yaml, &[], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("schedule: 0 0 * * 5-6,0\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains(
            "ecosystem.yaml:16:15: warning: `0 0 L * *` cannot be a Kubernetes schedule: the day of the month `L`"
        ),
        "{}",
        run.stderr
    );
    let strict = export_yaml("kubernetes", yaml, &[], &["--strict"]);
    assert_eq!(strict.code, 1, "what Kubernetes cannot read fails --strict");
}
