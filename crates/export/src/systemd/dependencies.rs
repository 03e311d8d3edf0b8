//! `depends_on` and `on_dependency_restart` as the `[Unit]` dependencies of
//! an instance on the other app's target (`Wants=`/`Requires=` and
//! `After=`), and `PartOf=` its instances or its target.

use super::{AppUnits, UNITS_PER_LINE};
use crate::Notes;
use model::spec::Condition;

/// The most dependency instances one unit is `PartOf=` (and `After=`) one
/// by one, for `on_dependency_restart: restart`; above it, the dependency's
/// target, with a warning (see `dependencies`). Each is an edge for every
/// instance of the unit: an app of 4,096 instances (the most `check`
/// allows) depending on one of 64 has 262,144, which `systemd-analyze
/// verify` (systemd 252, 2 cores) loads in 3.5 s, against 1.8 s for one
/// instance, 5.4 s for 128 and 10 s for 256 (4,096: 8 minutes).
pub const MAX_PART_OF_PER_UNIT: u32 = 64;

impl AppUnits<'_> {
    /// `depends_on` as dependencies on the other app's target, which
    /// wants (a one-shot's: requires) each of its instances and, as every
    /// target does by default, is ordered after each: one `After=` is
    /// "after every instance started", whatever the count. (One per
    /// instance would make N×M edges: two apps of 4,096 instances gave
    /// units that `systemd-analyze verify` took 8 minutes to load.)
    ///
    /// `on_dependency_restart: restart` is `PartOf=`, which (systemd.unit(5))
    /// propagates a stop or a restart of the listed unit to this one, and
    /// nothing else: not a failure that is not restarted, nor a start. A
    /// restart is one by hand (`systemctl restart`) or systemd's own after
    /// a crash (`Restart=`, which queues a restart job). So, per dependency:
    ///
    /// - `PartOf=` and `After=` each instance (`APP@N.service`), while the
    ///   unit lists at most [`MAX_PART_OF_PER_UNIT`] of them: any one
    ///   instance's stop or restart stops or restarts every instance of
    ///   this app — each time, where supervise replaces it once, after every
    ///   instance it saw was replaced and the new ones meet the condition
    ///   (the manual says so). The `After=` orders that restart after the
    ///   instance's: the one through the target does not, as the target
    ///   takes no part in it (on systemd 252 the dependent came back before
    ///   the instance had);
    /// - else `PartOf=APP.target`, with a warning: only a stop or restart
    ///   of the target itself (`systemctl restart APP.target`) reaches this
    ///   app; an instance's does not, as the target only wants it;
    /// - `completed`: `PartOf=APP.target`, which passes on what the form
    ///   above would, as that target requires its instances: a stop or
    ///   restart of one (`systemctl restart APP@N`) is the target's too
    ///   (systemd.unit(5), `Requires=`). The `Requires=APP.target` of this
    ///   unit passes it on as well, whatever `on_dependency_restart` says.
    pub(super) fn dependencies(&self, unit: &mut Vec<String>, notes: &mut Notes) {
        let restart_with =
            self.app.on_dependency_restart == model::spec::OnDependencyRestart::Restart;
        let mut listed: u32 = 0;
        for dependency in &self.app.depends_on {
            let Some(other) = self.source.desired.app(&dependency.app) else {
                continue;
            };
            let kind = match dependency.condition {
                Condition::Completed => "Requires",
                Condition::Healthy => {
                    self.warn(
                        notes,
                        &["depends_on", &dependency.app],
                        format!(
                            "`{}: healthy` becomes `ready`: systemd runs no health checks",
                            dependency.app
                        ),
                    );
                    "Wants"
                }
                Condition::Started | Condition::Ready => "Wants",
            };
            let target = format!("{}.target", other.name);
            unit.push(format!("{kind}={target}"));
            unit.push(format!("After={target}"));
            if !restart_with {
                continue;
            }
            if dependency.condition == Condition::Completed {
                unit.push(format!("PartOf={target}"));
            } else if listed.saturating_add(other.instances) <= MAX_PART_OF_PER_UNIT {
                listed += other.instances;
                let instances: Vec<String> = (0..other.instances)
                    .map(|slot| format!("{}@{slot}.service", other.name))
                    .collect();
                for chunk in instances.chunks(UNITS_PER_LINE) {
                    let list = chunk.join(" ");
                    unit.push(format!("PartOf={list}"));
                    unit.push(format!("After={list}"));
                }
            } else {
                unit.push(format!("PartOf={target}"));
                let dep = &other.name;
                notes.warn_with_help(
                    self.name(),
                    &["on_dependency_restart"],
                    format!(
                        "`{dep}` has {} instances, and a unit is made PartOf= at most {MAX_PART_OF_PER_UNIT} one by one (each is an edge for every instance, which systemd loads slowly): `{}` is PartOf={target} instead, stopped or restarted with that target, but no longer when one instance of `{dep}` stops or restarts (a crash that Restart= restarts, `systemctl restart {dep}@N`)",
                        other.instances,
                        self.name()
                    ),
                    Some(format!(
                        "it is PartOf= each instance of the dependencies it restarts with while they have at most {MAX_PART_OF_PER_UNIT} together{}",
                        if listed > 0 {
                            format!(" (those before `{dep}` have {listed})")
                        } else {
                            String::new()
                        }
                    )),
                );
            }
        }
    }
}
