//! A `schedule` as a CronJob. Kubernetes' cron is not croner: a day of the
//! week is 0-6 there, and `L`, `W` and `#` are not read, so an expression
//! is rewritten as Kubernetes reads it (or warned about); and a period
//! (`every`), which a CronJob cannot take, becomes the nearest cron
//! expression.

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::PodSpec;

use super::{AppExport, Objects, yaml};
use crate::{Notes, duration_text};
use model::spec::{Overlap, When};

impl AppExport<'_> {
    pub(super) fn cron_job(&self, pod: PodSpec, notes: &mut Notes, objects: &mut Objects) {
        let Some(schedule) = &self.app.schedule else {
            return;
        };
        self.run_warnings(notes);
        let (expression, time_zone) = match &schedule.when {
            When::Cron { cron, timezone } => {
                let expression = match kubernetes_cron(cron.as_str()) {
                    Ok(expression) => expression,
                    Err(why) => {
                        self.warn(
                            notes,
                            &["schedule"],
                            format!(
                                "`{}` cannot be a Kubernetes schedule: {why}; exported as written, the API server will refuse it",
                                cron.as_str()
                            ),
                        );
                        cron.as_str().to_string()
                    }
                };
                (expression, Some(timezone.name().to_string()))
            }
            When::Every(period) => {
                let (expression, exact) = every_as_cron(*period);
                let written = duration_text(*period);
                self.warn(
                    notes,
                    &["schedule"],
                    if exact {
                        format!(
                            "every {written} becomes the cron `{expression}`: runs on the clock, not from when the app started"
                        )
                    } else {
                        format!(
                            "every {written} cannot be a cron expression; exported as `{expression}`"
                        )
                    },
                );
                (expression, None)
            }
        };
        let concurrency = match schedule.overlap {
            Overlap::Skip => "Forbid",
            Overlap::Replace => "Replace",
            Overlap::Queue => {
                self.warn(
                    notes,
                    &["overlap"],
                    "overlap `queue` has no CronJob equivalent: exported as Forbid (the run is skipped)",
                );
                "Forbid"
            }
        };
        if schedule.run_on_start {
            self.warn(
                notes,
                &["run_on_start"],
                "`run_on_start` is not exported: a CronJob runs at its times only (`kubectl create job --from=cronjob/NAME` runs it now)",
            );
        }
        // `instances: 0` pauses a schedule.
        let paused = self.app.instances == 0;
        if paused {
            notes.note(format!(
                "{}: `instances: 0` pauses its schedule: the CronJob is suspended (set spec.suspend to false to resume it)",
                self.app.name
            ));
        }
        let mut metadata = self.metadata(self.name.clone());
        self.depends_annotation(notes, &mut metadata);
        let cron = CronJob {
            metadata,
            spec: CronJobSpec {
                schedule: expression,
                time_zone,
                concurrency_policy: Some(concurrency.into()),
                suspend: paused.then_some(true),
                job_template: JobTemplateSpec {
                    metadata: None,
                    spec: Some(self.job_spec(pod, notes)),
                },
                ..CronJobSpec::default()
            },
            ..CronJob::default()
        };
        let mut text = self.depends_comment();
        text.push_str(&yaml(&cron));
        objects.push(("CronJob", self.name.clone(), text));
    }
}

/// A cron expression as Kubernetes' cron (robfig/cron's standard parser)
/// reads it: a day of the week is 0-6 there, so 7 (Sunday, as croner also
/// reads it) becomes 0; and what it cannot read at all — `L`, `W`, `#` —
/// is named in the `Err`.
fn kubernetes_cron(expression: &str) -> Result<String, String> {
    let expression = expression.trim();
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let [minute, hour, day, month, weekday] = fields.as_slice() else {
        return Ok(expression.to_string()); // a nickname (`@daily`): robfig's too
    };
    if day.contains(['L', 'l', 'W', 'w']) {
        return Err(format!(
            "the day of the month `{day}` (`L`, `W`): Kubernetes' cron has neither"
        ));
    }
    let numbered_l = |item: &str| {
        item.strip_suffix(['L', 'l'])
            .is_some_and(|rest| rest.is_empty() || rest.bytes().all(|b| b.is_ascii_digit()))
    };
    if weekday.contains('#') || weekday.split(',').any(numbered_l) {
        return Err(format!(
            "the day of the week `{weekday}` (`L`, `#`): Kubernetes' cron has neither"
        ));
    }
    fn seven(word: &str) -> &str {
        if word == "7" { "0" } else { word }
    }
    let items: Vec<String> = weekday
        .split(',')
        .map(|item| {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            match range.split_once('-') {
                // A range to 7: to 6, and 0 if the steps reach 7 (`5-7` →
                // `5-6,0`, `1-7/3` → `1-6/3,0`, `0-7` → `0-6`).
                Some((from, "7")) => {
                    let (Ok(from), Ok(step)) =
                        (from.parse::<u32>(), step.map_or(Ok(1), str::parse::<u32>))
                    else {
                        return item.to_string();
                    };
                    let every = match step {
                        1 => String::new(),
                        step => format!("/{step}"),
                    };
                    let reaches_seven = step > 0 && (7 - from.min(7)).is_multiple_of(step);
                    match (from, reaches_seven) {
                        (7, _) => "0".to_string(),
                        (0, true) if step == 1 => "0-6".to_string(),
                        (_, true) => format!("{from}-6{every},0"),
                        (_, false) => format!("{from}-6{every}"),
                    }
                }
                Some((from, to)) => item.replacen(
                    &format!("{from}-{to}"),
                    &format!("{}-{}", seven(from), to),
                    1,
                ),
                None if step.is_none() => seven(range).to_string(),
                None => item.to_string(),
            }
        })
        .collect();
    Ok(format!("{minute} {hour} {day} {month} {}", items.join(",")))
}

/// `{every: D}` as a cron expression: exact when D divides an hour or a day
/// evenly (`10m` → `*/10 * * * *`), else the nearest shorter period that
/// does (runs at least as often), with `false`.
fn every_as_cron(period: std::time::Duration) -> (String, bool) {
    const MINUTES: [u64; 11] = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30];
    const HOURS: [u64; 7] = [1, 2, 3, 4, 6, 8, 12];
    let seconds = period.as_secs();
    let exact = period.subsec_nanos() == 0 && seconds.is_multiple_of(60);
    let minutes = seconds / 60;
    let expression = |minutes: u64| -> String {
        match minutes {
            0 | 1 => "* * * * *".to_string(),
            m if m < 60 => format!("*/{m} * * * *"),
            60 => "0 * * * *".to_string(),
            m if m < 1440 => format!("0 */{} * * *", m / 60),
            1440 => "0 0 * * *".to_string(),
            _ => "0 0 * * 0".to_string(),
        }
    };
    let candidates: Vec<u64> = MINUTES
        .iter()
        .copied()
        .chain(HOURS.iter().map(|h| h * 60))
        .chain([1440, 7 * 1440])
        .collect();
    if exact && candidates.contains(&minutes) {
        return (expression(minutes), true);
    }
    let nearest = candidates
        .iter()
        .copied()
        .filter(|c| *c <= minutes.max(1))
        .max()
        .unwrap_or(1);
    (expression(nearest), false)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn cron_expressions_are_read_as_kubernetes_reads_them() {
        let cron = |e: &str| kubernetes_cron(e).unwrap();
        assert_eq!(cron("0 3 * * *"), "0 3 * * *");
        assert_eq!(cron("@daily"), "@daily");
        assert_eq!(cron("0 0 * * 7"), "0 0 * * 0");
        assert_eq!(cron("0 0 * * 5-7"), "0 0 * * 5-6,0");
        assert_eq!(cron("0 0 * * 0-7"), "0 0 * * 0-6");
        assert_eq!(cron("0 0 * * 1,7"), "0 0 * * 1,0");
        assert_eq!(cron("0 0 * * 1-5/2"), "0 0 * * 1-5/2");
        assert_eq!(cron("0 0 * * 1-7/3"), "0 0 * * 1-6/3,0");
        assert_eq!(cron("0 0 * * 2-7/2"), "0 0 * * 2-6/2");
        assert_eq!(cron("0 0 * * 7-7"), "0 0 * * 0");
        assert_eq!(cron("0 0 * * WED"), "0 0 * * WED");
        assert_eq!(cron("0 0 * JUL *"), "0 0 * JUL *");
        for unreadable in [
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 * * 5L",
            "0 0 * * 1#2",
            "0 0 * * L",
        ] {
            assert!(kubernetes_cron(unreadable).is_err(), "{unreadable}");
        }
    }

    #[test]
    fn periods_become_cron_expressions() {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(every_as_cron(minutes(10)), ("*/10 * * * *".into(), true));
        assert_eq!(every_as_cron(minutes(1)), ("* * * * *".into(), true));
        assert_eq!(every_as_cron(minutes(120)), ("0 */2 * * *".into(), true));
        assert_eq!(every_as_cron(minutes(1440)), ("0 0 * * *".into(), true));
        assert_eq!(every_as_cron(minutes(7)), ("*/6 * * * *".into(), false));
        assert_eq!(
            every_as_cron(Duration::from_secs(30)),
            ("* * * * *".into(), false)
        );
    }
}
