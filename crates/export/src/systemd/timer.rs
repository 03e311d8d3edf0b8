//! `schedule` as `APP.timer`, which starts `APP@0.service`: a cron
//! expression as `OnCalendar=` (see `calendar`), `every` as
//! `OnActiveSec=`/`OnUnitActiveSec=`, and the overlaps a timer cannot do.

use std::fmt::Write as _;

use super::AppUnits;
use super::calendar::cron_to_calendar;
use super::syntax::{escape_line, timespan};
use crate::Notes;
use model::spec::{Overlap, When};

impl AppUnits<'_> {
    /// The timer's text, if the app has a schedule systemd can keep.
    pub(super) fn timer(&self, notes: &mut Notes) -> Option<String> {
        let schedule = self.app.schedule.as_ref()?;
        let name = self.name();
        let mut timer = Vec::new();
        match &schedule.when {
            When::Cron { cron, timezone } => {
                let (calendar, both_days) = match cron_to_calendar(cron.as_str()) {
                    Ok(found) => found,
                    Err(why) => {
                        self.warn(
                            notes,
                            &["schedule"],
                            format!(
                                "`{}` cannot be written as a systemd calendar ({why}): no timer is exported",
                                cron.as_str()
                            ),
                        );
                        return None;
                    }
                };
                if both_days {
                    self.warn(
                        notes,
                        &["schedule"],
                        "cron runs when the day of the month *or* the day of the week matches; systemd's calendar needs both",
                    );
                }
                timer.push(format!("OnCalendar={calendar} {}", timezone.name()));
            }
            When::Every(period) => {
                timer.push(format!("OnActiveSec={}", timespan(*period)));
                timer.push(format!("OnUnitActiveSec={}", timespan(*period)));
            }
        }
        if schedule.run_on_start {
            timer.push("OnActiveSec=0".into());
        }
        timer.push("AccuracySec=1s".into());
        timer.push(format!("Unit={name}@0.service"));
        match schedule.overlap {
            Overlap::Skip => {} // a timer does not start a unit that runs
            Overlap::Queue | Overlap::Replace => {
                self.warn(
                    notes,
                    &["overlap"],
                    "systemd skips a time that comes while the run goes on: only `overlap: skip` is exported",
                );
            }
        }
        let mut text = self.header("The schedule");
        let _ = writeln!(text, "[Unit]");
        let _ = writeln!(
            text,
            "Description={}",
            escape_line(&format!("{name}: its schedule (supervise export)"))
        );
        let _ = writeln!(text, "PartOf={name}.target");
        let _ = writeln!(text, "\n[Timer]");
        for line in timer {
            let _ = writeln!(text, "{line}");
        }
        Some(text)
    }
}
