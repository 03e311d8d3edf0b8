//! What changing the file will do: the plan that `supervise check --diff`
//! prints and that a live reload logs, computed by one pure function.

use std::fmt;

use crate::spec::{AppSpec, Desired, ListenAddress, When};

/// What happens to one app when the file changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppChange {
    Added { name: String, instances: u32 },
    Removed { name: String, instances: u32 },
    Changed(Changed),
    Unchanged { name: String },
}

/// An app present before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub name: String,
    pub instances: (u32, u32),
    /// Fields a running process cannot pick up: its instances are replaced.
    pub replaced: Vec<&'static str>,
    /// Fields that apply to the running instances as they are.
    pub tuned: Vec<&'static str>,
    /// A listen address changes to one that overlaps the old: the old socket
    /// must close before the new one binds, so there is a gap with nobody listening.
    pub overlapping_rebind: Option<(ListenAddress, ListenAddress)>,
}

impl Changed {
    /// Whether the app's instances must be replaced.
    pub fn replaces(&self) -> bool {
        !self.replaced.is_empty()
    }
}

/// Compare two resolved files, app by app, in the new file's order (removed apps last).
pub fn diff(old: &Desired, new: &Desired) -> Vec<AppChange> {
    let mut changes: Vec<AppChange> = new
        .apps
        .iter()
        .map(|app| match old.app(&app.name) {
            None => AppChange::Added {
                name: app.name.clone(),
                instances: app.instances,
            },
            Some(before) => compare(before, app),
        })
        .collect();
    changes.extend(
        old.apps
            .iter()
            .filter(|app| new.app(&app.name).is_none())
            .map(|app| AppChange::Removed {
                name: app.name.clone(),
                instances: app.instances,
            }),
    );
    changes
}

/// Compare one app's two versions.
pub fn compare(old: &AppSpec, new: &AppSpec) -> AppChange {
    if old == new {
        return AppChange::Unchanged {
            name: new.name.clone(),
        };
    }
    let (a, b) = (&old.process, &new.process);
    let process: [(&'static str, bool); 7] = [
        ("command", a.argv != b.argv),
        ("shell", a.shell != b.shell),
        ("cwd", a.cwd != b.cwd),
        ("env", a.env != b.env),
        ("listen", a.listen != b.listen),
        ("user", a.identity != b.identity),
        ("watchdog", a.watchdog != b.watchdog),
    ];
    let replaced = changed_names(&process);
    let (old_schedule, new_schedule) = (old.schedule.as_ref(), new.schedule.as_ref());
    // `overlap`, `run_on_start` and `timezone` tune a schedule: they are
    // named on their own only when there is one before and after.
    let both = old_schedule.zip(new_schedule);
    let zones = both.and_then(|(a, b)| match (&a.when, &b.when) {
        (When::Cron { timezone: a, .. }, When::Cron { timezone: b, .. }) => Some((a, b)),
        _ => None,
    });
    let when_changed = match both {
        Some((a, b)) => match (&a.when, &b.when) {
            (When::Cron { cron: a, .. }, When::Cron { cron: b, .. }) => a != b,
            (a, b) => a != b,
        },
        None => old_schedule.is_some() != new_schedule.is_some(),
    };
    let policy: [(&'static str, bool); 18] = [
        ("ready", old.ready != new.ready),
        ("ready_timeout", old.ready_timeout != new.ready_timeout),
        ("restart", old.restart != new.restart),
        ("backoff", old.backoff != new.backoff),
        ("max_restarts", old.max_restarts != new.max_restarts),
        ("stop_signal", old.stop_signal != new.stop_signal),
        ("kill_timeout", old.kill_timeout != new.kill_timeout),
        ("reload", old.reload != new.reload),
        ("health", old.health != new.health),
        ("max_memory", old.max_memory != new.max_memory),
        (
            "watchdog_signal",
            old.watchdog_signal != new.watchdog_signal,
        ),
        ("depends_on", old.depends_on != new.depends_on),
        (
            "on_dependency_restart",
            old.on_dependency_restart != new.on_dependency_restart,
        ),
        ("schedule", when_changed),
        ("timezone", zones.is_some_and(|(a, b)| a != b)),
        ("overlap", both.is_some_and(|(a, b)| a.overlap != b.overlap)),
        (
            "run_on_start",
            both.is_some_and(|(a, b)| a.run_on_start != b.run_on_start),
        ),
        ("log", old.log != new.log),
    ];
    let tuned = changed_names(&policy);
    let overlapping_rebind = a.listen.iter().find_map(|before| {
        b.listen
            .iter()
            .find(|after| {
                after.address != before.address && after.address.overlaps(&before.address)
            })
            .filter(|_| !b.listen.iter().any(|l| l.address == before.address))
            .map(|after| (before.address.clone(), after.address.clone()))
    });
    AppChange::Changed(Changed {
        name: new.name.clone(),
        instances: (old.instances, new.instances),
        replaced,
        tuned,
        overlapping_rebind,
    })
}

/// The names of the fields marked changed.
fn changed_names(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields
        .iter()
        .filter(|(_, changed)| *changed)
        .map(|(name, _)| *name)
        .collect()
}

impl fmt::Display for AppChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u32| if n == 1 { "instance" } else { "instances" };
        match self {
            AppChange::Added { name, instances } => {
                write!(
                    f,
                    "{name}: added; starting {instances} {}",
                    plural(*instances)
                )
            }
            AppChange::Removed { name, instances } => {
                write!(
                    f,
                    "{name}: removed; stopping {instances} {}",
                    plural(*instances)
                )
            }
            AppChange::Unchanged { name } => write!(f, "{name}: unchanged"),
            AppChange::Changed(change) => {
                let mut parts = Vec::new();
                let (before, after) = change.instances;
                if before != after {
                    let delta = i64::from(after) - i64::from(before);
                    parts.push(format!("instances {before} → {after} ({delta:+})"));
                }
                if change.replaces() {
                    let what = change.replaced.join(", ");
                    let how = if change.overlapping_rebind.is_some() {
                        "replacing"
                    } else {
                        "rolling replace of"
                    };
                    let count = before.min(after);
                    parts.push(format!("{what} changed; {how} {count} {}", plural(count)));
                }
                if let Some((old, new)) = &change.overlapping_rebind {
                    parts.push(format!(
                        "{old} → {new} overlaps: the old socket closes before the new one binds, so nothing listens in between"
                    ));
                }
                if !change.tuned.is_empty() {
                    let what = change.tuned.join(", ");
                    let restarted = if change.replaces() {
                        ""
                    } else {
                        "; nothing restarted"
                    };
                    parts.push(format!(
                        "{what} changed (applies to running instances{restarted})"
                    ));
                }
                write!(f, "{}: {}", change.name, parts.join("; "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::spec::{ListenSpec, Template};

    fn desired(apps: Vec<AppSpec>) -> Desired {
        Desired {
            source: "/srv/ecosystem.yaml".into(),
            apps,
            memory_check: crate::spec::defaults::MEMORY_CHECK,
            metrics: None,
        }
    }

    fn app(name: &str, instances: u32) -> AppSpec {
        AppSpec::with_defaults(name, &["server"], instances)
    }

    fn lines(old: Vec<AppSpec>, new: Vec<AppSpec>) -> Vec<String> {
        diff(&desired(old), &desired(new))
            .iter()
            .map(|c| c.to_string())
            .collect()
    }

    #[test]
    fn scaling_adding_and_removing() {
        assert_eq!(
            lines(
                vec![app("web", 2), app("old", 3)],
                vec![app("web", 4), app("new", 1)]
            ),
            [
                "web: instances 2 → 4 (+2)",
                "new: added; starting 1 instance",
                "old: removed; stopping 3 instances"
            ]
        );
        assert_eq!(
            lines(vec![app("web", 4)], vec![app("web", 1)]),
            ["web: instances 4 → 1 (-3)"]
        );
        assert_eq!(
            lines(vec![app("web", 4)], vec![app("web", 4)]),
            ["web: unchanged"]
        );
    }

    #[test]
    fn process_fields_replace_and_policy_fields_tune() {
        let mut command = app("api", 3);
        command.process.argv = vec![Template::literal("server2")];
        assert_eq!(
            lines(vec![app("api", 3)], vec![command]),
            ["api: command changed; rolling replace of 3 instances"]
        );

        let mut tuned = app("api", 3);
        tuned.kill_timeout = Duration::from_secs(1);
        tuned.restart = crate::spec::RestartPolicy::Never;
        let change = diff(&desired(vec![app("api", 3)]), &desired(vec![tuned]));
        assert_eq!(
            change[0].to_string(),
            "api: restart, kill_timeout changed (applies to running instances; nothing restarted)"
        );
        assert!(matches!(&change[0], AppChange::Changed(c) if !c.replaces()));
    }

    #[test]
    fn the_watchdog_replaces_and_health_and_memory_tune() {
        use crate::spec::{HealthCheck, HealthSpec, defaults};

        let mut watched = app("api", 2);
        watched.process.watchdog = Some(Duration::from_secs(10));
        assert_eq!(
            lines(vec![app("api", 2)], vec![watched]),
            ["api: watchdog changed; rolling replace of 2 instances"],
            "WATCHDOG_USEC is in the process's environment"
        );

        let mut checked = app("api", 2);
        checked.health = Some(HealthSpec {
            check: HealthCheck::Exec(vec![Template::literal("true")]),
            every: defaults::HEALTH_EVERY,
            timeout: defaults::HEALTH_TIMEOUT,
            failures: defaults::HEALTH_FAILURES,
            grace: defaults::HEALTH_GRACE,
        });
        checked.max_memory = Some(300 << 20);
        checked.watchdog_signal = crate::Signal::SIGQUIT;
        let change = diff(&desired(vec![app("api", 2)]), &desired(vec![checked]));
        assert_eq!(
            change[0].to_string(),
            "api: health, max_memory, watchdog_signal changed (applies to running instances; nothing restarted)"
        );
        assert!(matches!(&change[0], AppChange::Changed(c) if !c.replaces()));
    }

    #[test]
    fn dependencies_and_schedules_tune() {
        use crate::spec::{Condition, Dependency, OnDependencyRestart, Overlap, ScheduleSpec};

        let cron = |text: &str, timezone: chrono_tz::Tz| ScheduleSpec {
            when: When::Cron {
                cron: text.parse().unwrap(),
                timezone,
            },
            overlap: Overlap::Skip,
            run_on_start: false,
        };
        let mut waiting = app("api", 2);
        waiting.depends_on = vec![Dependency {
            app: "db".into(),
            condition: Condition::Ready,
        }];
        waiting.on_dependency_restart = OnDependencyRestart::Restart;
        let change = diff(&desired(vec![app("api", 2)]), &desired(vec![waiting]));
        assert_eq!(
            change[0].to_string(),
            "api: depends_on, on_dependency_restart changed (applies to running instances; nothing restarted)"
        );
        assert!(matches!(&change[0], AppChange::Changed(c) if !c.replaces()));

        let mut nightly = app("report", 1);
        nightly.schedule = Some(cron("0 3 * * *", chrono_tz::Tz::UTC));
        assert_eq!(
            lines(vec![app("report", 1)], vec![nightly.clone()]),
            ["report: schedule changed (applies to running instances; nothing restarted)"],
            "a new schedule is one change, not four"
        );
        let mut moved = nightly.clone();
        moved.schedule = Some(ScheduleSpec {
            overlap: Overlap::Queue,
            run_on_start: true,
            ..cron("0 3 * * *", chrono_tz::Tz::Europe__Paris)
        });
        assert_eq!(
            lines(vec![nightly.clone()], vec![moved]),
            [
                "report: timezone, overlap, run_on_start changed (applies to running instances; nothing restarted)"
            ]
        );
        let mut earlier = nightly.clone();
        earlier.schedule = Some(cron("0 2 * * *", chrono_tz::Tz::UTC));
        assert_eq!(
            lines(vec![nightly], vec![earlier]),
            ["report: schedule changed (applies to running instances; nothing restarted)"]
        );
    }

    #[test]
    fn an_overlapping_rebind_is_called_out() {
        let listen = |address: &str| ListenSpec {
            name: "api".into(),
            address: ListenAddress::Tcp(address.parse().unwrap()),
            reuseport: false,
            inject: false,
        };
        let mut before = app("api", 2);
        before.process.listen = vec![listen("0.0.0.0:5000")];
        let mut after = app("api", 2);
        after.process.listen = vec![listen("127.0.0.1:5000")];
        let text = &lines(vec![before.clone()], vec![after])[0];
        assert!(
            text.starts_with(
                "api: listen changed; replacing 2 instances; 0.0.0.0:5000 → 127.0.0.1:5000 overlaps"
            ),
            "{text}"
        );
        let mut moved = app("api", 2);
        moved.process.listen = vec![listen("127.0.0.1:5001")];
        let text = &lines(vec![before], vec![moved])[0];
        assert_eq!(text, "api: listen changed; rolling replace of 2 instances");
    }
}
