//! `schedule`, `timezone`, `overlap` and `run_on_start`: apps that run at
//! times instead of for ever.
//!
//! A cron expression has the 5 fields of crontab(5) — minute, hour, day of
//! month, month, day of week — or is one of croner's nicknames (`@daily` …).
//! croner also reads seconds and years; we refuse them, so that an
//! expression means here what it means in every crontab. croner's own
//! messages do not say which field is wrong: each field is tried alone to
//! find it. An expression that matches no date (`0 0 30 2 *`) is refused
//! too: it would be a job that silently never runs (and croner spends a
//! fraction of a second each time it looks for the next run of one).
//!
//! A scheduled app runs one instance, and its `restart` defaults to `never`
//! (see [`super::policy`]); the keys that only tune a schedule warn where
//! they are written for an app without one.

use std::time::Duration;

use chrono::TimeZone;
use croner::Cron;
use croner::errors::CronError;

use super::{AppContext, key, parse_positive_duration, within};
use crate::diagnostic::{Reporter, did_you_mean};
use crate::raw::{self, EcosystemFile};
use model::spec::{Overlap, ScheduleSpec, When, cron_parser as parser};

/// The shortest `{every}`: a run per tick forks a process, and a period
/// shorter than a second is a service's loop, not a schedule.
pub(crate) const MIN_SCHEDULE_EVERY: Duration = Duration::from_secs(1);
/// The longest `{every}` (a year): the supervisor adds it to the clock, and
/// a longer period is better written as a cron expression.
pub(crate) const MAX_SCHEDULE_EVERY: Duration = Duration::from_secs(31_557_600);

/// The nicknames croner reads, and the fields each stands for.
const NICKNAMES: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Each field's name and what it may hold, for the help line.
const FIELDS: [(&str, &str); 5] = [
    (
        "minute",
        "minutes are 0-59: `*`, a number, a range `10-20`, a list `0,30` or a step `*/15`",
    ),
    (
        "hour",
        "hours are 0-23: `*`, a number, a range `9-17`, a list `9,18` or a step `*/6`",
    ),
    (
        "day-of-month",
        "days of the month are 1-31, `L` (the last day) or `15W` (the weekday nearest the 15th), as numbers, ranges, lists or steps",
    ),
    (
        "month",
        "months are 1-12 or JAN-DEC, as numbers, ranges, lists or steps",
    ),
    (
        "day-of-week",
        "days of the week are 0-7 (0 and 7 are Sunday) or SUN-SAT, `5L` (the last Friday of the month) or `1#2` (its second Monday)",
    ),
];

/// The pattern each field is tried in, alone: every other field `*`.
const ANY: [&str; 5] = ["0", "0", "*", "*", "*"];

/// Why a cron expression was refused, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CronProblem {
    pub(crate) message: String,
    pub(crate) help: String,
}

/// Read a 5-field cron expression (or a nickname such as `@daily`).
pub(super) fn parse_cron(text: &str) -> Result<Cron, CronProblem> {
    const EXAMPLE: &str = "e.g. \"0 3 * * *\" (03:00 every day) or \"*/15 * * * *\" (every 15 minutes); fields: minute hour day-of-month month day-of-week";
    let problem = |message: String, help: &str| CronProblem {
        message,
        help: help.to_string(),
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(problem("the schedule is empty".to_string(), EXAMPLE));
    }
    if trimmed.starts_with('@') {
        let word = trimmed.to_ascii_lowercase();
        if word == "@reboot" {
            return Err(problem(
                "`@reboot` is not a schedule here".to_string(),
                "to run once when the app starts, write `run_on_start: true` next to a schedule",
            ));
        }
        let Some((_, fields)) = NICKNAMES.iter().find(|(name, _)| *name == word) else {
            let names = NICKNAMES.iter().map(|(name, _)| *name);
            let help = match did_you_mean(&word, names.clone()) {
                Some(meant) => format!("did you mean `{meant}`?"),
                None => format!(
                    "the nicknames are {}; or write 5 fields, {EXAMPLE}",
                    names.collect::<Vec<_>>().join(", ")
                ),
            };
            return Err(CronProblem {
                message: format!("unknown schedule nickname `{trimmed}`"),
                help,
            });
        };
        return parse_fields(text, fields);
    }
    parse_fields(text, trimmed)
}

/// Why `check` would refuse `text` as a `schedule` (its message and help
/// line), or `None` when it would take it: for `import`, which must not
/// write a schedule `check` refuses.
pub fn cron_problem(text: &str) -> Option<String> {
    parse_cron(text)
        .err()
        .map(|problem| format!("{} ({})", problem.message, problem.help))
}

/// Read the fields of `expression` (as `written`, for messages).
fn parse_fields(written: &str, expression: &str) -> Result<Cron, CronProblem> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let written = written.trim();
    let count_problem = |help: &str| CronProblem {
        message: format!(
            "`{written}` has {} fields; a cron schedule has 5: minute hour day-of-month month day-of-week",
            fields.len()
        ),
        help: help.to_string(),
    };
    let fields: [&str; 5] = match fields.as_slice() {
        [minute, hour, day, month, weekday] => [minute, hour, day, month, weekday],
        [_, _, _, _, _, _] => {
            return Err(count_problem(
                "seconds are not supported: drop the first field; for less than a minute, use `schedule: {every: 30s}`",
            ));
        }
        [_, _, _, _, _, _, _] => {
            return Err(count_problem(
                "seconds and years are not supported: drop the first and the last field",
            ));
        }
        _ => {
            return Err(count_problem(
                "e.g. \"0 3 * * *\" (03:00 every day) or \"*/15 * * * *\" (every 15 minutes)",
            ));
        }
    };
    let cron = match parser().parse(expression) {
        Ok(cron) => cron,
        Err(error) => return Err(field_problem(written, &fields, &error)),
    };
    if let Some(problem) = never_matches(written, &fields) {
        return Err(problem);
    }
    Ok(cron)
}

/// Which field croner refused, and why.
fn field_problem(written: &str, fields: &[&str; 5], whole: &CronError) -> CronProblem {
    for (position, (field, (name, help))) in fields.iter().zip(FIELDS).enumerate() {
        let mut alone = ANY;
        if let Some(slot) = alone.get_mut(position) {
            *slot = field;
        }
        if let Err(error) = parser().parse(&alone.join(" ")) {
            return CronProblem {
                message: format!(
                    "invalid cron schedule `{written}`: {name} `{field}`: {}",
                    reason(&error)
                ),
                help: help.to_string(),
            };
        }
    }
    CronProblem {
        message: format!("invalid cron schedule `{written}`: {}", reason(whole)),
        help: "fields: minute hour day-of-month month day-of-week".to_string(),
    }
}

/// croner's message, worded like ours: lowercase, no trailing period, no
/// type names.
fn reason(error: &CronError) -> String {
    let text = match error {
        CronError::ComponentError(text) | CronError::InvalidPattern(text) => text.clone(),
        CronError::IllegalCharacters(_) => "a character this field cannot hold".to_string(),
        other => other.to_string(),
    };
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "not a cron expression".to_string(),
    }
}

/// Check that the expression matches a time of day and some date. The two
/// are independent, so each is tried alone: every minute of one day, then
/// every day of 28 years (from 2028, a leap year, the calendar's weekdays
/// repeat every 28 years until 2100), which a real schedule meets at once.
fn never_matches(written: &str, fields: &[&str; 5]) -> Option<CronProblem> {
    let [minute, hour, day, month, weekday] = *fields;
    let start = chrono::NaiveDate::from_ymd_opt(2028, 1, 1)?;
    let minutes = (0..24 * 60).filter_map(|m| start.and_hms_opt(m / 60, m % 60, 0));
    if !matches_any(&format!("{minute} {hour} * * *"), minutes) {
        return Some(CronProblem {
            message: format!("`{written}` matches no time of day: it would never run"),
            help: "check the minute and hour fields (a list needs a value between its commas)"
                .to_string(),
        });
    }
    let days = (0..28 * 366)
        .filter_map(|d| start.checked_add_days(chrono::Days::new(d)))
        .filter_map(|date| date.and_hms_opt(0, 0, 0));
    if !matches_any(&format!("0 0 {day} {month} {weekday}"), days) {
        return Some(CronProblem {
            message: format!("`{written}` matches no date: it would never run"),
            help: "check the day-of-month and month fields against each other (April, June, September and November have 30 days, February 28 or 29), and the day-of-week field".to_string(),
        });
    }
    None
}

/// Does `pattern` match one of `instants` (UTC)? A pattern that does not
/// parse is not judged here: `true`.
fn matches_any(pattern: &str, mut instants: impl Iterator<Item = chrono::NaiveDateTime>) -> bool {
    let Ok(cron) = parser().parse(pattern) else {
        return true;
    };
    instants.any(|instant| {
        cron.is_time_matching(&chrono::Utc.from_utc_datetime(&instant))
            .unwrap_or(false)
    })
}

impl AppContext<'_> {
    /// `schedule` with `timezone`, `overlap` and `run_on_start` (`None`
    /// without a schedule, or after an error: the error count tells).
    pub(super) fn resolve_schedule(&self, reporter: &mut Reporter) -> Option<ScheduleSpec> {
        let timezone = self.resolve_timezone(reporter);
        let overlap = match self.pick("overlap", |f| f.overlap.as_ref()) {
            Some((raw::Overlap::Skip, _)) | None => Overlap::Skip,
            Some((raw::Overlap::Queue, _)) => Overlap::Queue,
            Some((raw::Overlap::Replace, _)) => Overlap::Replace,
        };
        let run_on_start = self
            .pick("run_on_start", |f| f.run_on_start.as_ref())
            .is_some_and(|(run, _)| run);
        let Some(schedule) = &self.fields.schedule else {
            if !self.broken.contains(self.name, "schedule") {
                self.warn_without_schedule(reporter);
            }
            return None;
        };
        let path = self.app_path(&["schedule"]);
        let when = match schedule {
            raw::Schedule::Cron(text) => match parse_cron(text) {
                Ok(cron) => When::Cron {
                    cron,
                    timezone: timezone?,
                },
                Err(problem) => {
                    reporter.error(&path, problem.message).help(problem.help);
                    return None;
                }
            },
            raw::Schedule::Every(every) => {
                if self.fields.timezone.is_some() {
                    reporter
                        .warning(
                            &self.app_path(&["timezone"]),
                            "`timezone` does nothing with `schedule: {every: …}`",
                        )
                        .help("a period is counted from when the app started, in no time zone; drop `timezone`, or write the schedule as a cron expression");
                }
                let mut every_path = path;
                every_path.push(key("every"));
                let period = parse_positive_duration(&every.every, &every_path, reporter)?;
                let bounds = (MIN_SCHEDULE_EVERY, MAX_SCHEDULE_EVERY);
                When::Every(within(
                    period,
                    bounds,
                    "schedule.every",
                    &every_path,
                    reporter,
                )?)
            }
        };
        Some(ScheduleSpec {
            when,
            overlap,
            run_on_start,
        })
    }

    /// `timezone` as an IANA name, else the machine's.
    fn resolve_timezone(&self, reporter: &mut Reporter) -> Option<chrono_tz::Tz> {
        let Some((name, path)) = self.pick("timezone", |f| f.timezone.as_ref()) else {
            return Some(self.host.timezone);
        };
        match parse_timezone(&name) {
            Ok(timezone) => Some(timezone),
            Err(help) => {
                reporter
                    .error(&path, format!("unknown time zone `{name}`"))
                    .help(help);
                None
            }
        }
    }

    /// The keys that tune a schedule, written for an app without one.
    fn warn_without_schedule(&self, reporter: &mut Reporter) {
        let written = [
            ("timezone", self.fields.timezone.is_some()),
            ("overlap", self.fields.overlap.is_some()),
            ("run_on_start", self.fields.run_on_start.is_some()),
        ];
        for (field, _) in written.iter().filter(|(_, set)| *set) {
            reporter
                .warning(
                    &self.app_path(&[field]),
                    format!("`{field}` does nothing without `schedule`"),
                )
                .help(format!(
                    "give `{}` a `schedule` (e.g. `schedule: \"0 3 * * *\"`), or drop `{field}`",
                    self.name
                ));
        }
    }

    /// A scheduled app runs one instance at a time: `instances` is 1 (or 0,
    /// to pause the schedule).
    pub(super) fn check_scheduled_instances(&self, reporter: &mut Reporter) {
        if self.fields.schedule.is_none() {
            return;
        }
        let Some((instances, path)) = self.pick("instances", |f| f.instances.as_ref()) else {
            return;
        };
        let written = match instances {
            raw::Instances::Count(0 | 1) => return,
            raw::Instances::Count(count) => count.to_string(),
            raw::Instances::Keyword(raw::MaxKeyword::Max) => "max".to_string(),
        };
        let (message, help) = if path.first() == Some(&key("defaults")) {
            (
                format!(
                    "`instances: {written}` from `defaults` applies to scheduled apps too, and schedules run one instance"
                ),
                "set `instances: 1` (or 0 to pause the schedule) under each app with a `schedule`"
                    .to_string(),
            )
        } else {
            (
                format!("schedules run one instance: `instances` is 0 or 1 here, not {written}"),
                "write `instances: 1`, or 0 to pause the schedule".to_string(),
            )
        };
        reporter.error(&path, message).help(help);
    }
}

/// A time zone by its IANA name; else the help line, with the name meant
/// when it is close to one.
fn parse_timezone(name: &str) -> Result<chrono_tz::Tz, String> {
    if let Ok(timezone) = name.trim().parse() {
        return Ok(timezone);
    }
    let names = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
    let meant = names
        .clone()
        .find(|known| known.eq_ignore_ascii_case(name.trim()))
        .or_else(|| did_you_mean(name.trim(), names));
    Err(match meant {
        Some(meant) => format!("did you mean `{meant}`?"),
        None => "use an IANA name such as `Europe/Paris`, `America/New_York` or `UTC` (`timedatectl list-timezones` lists them)".to_string(),
    })
}

/// `depends_on` and `schedule` belong to one app; `timezone`, `overlap` and
/// `run_on_start` in `defaults` are worth a word when no app can use them.
pub(super) fn check_defaults(file: &EcosystemFile, reporter: &mut Reporter) {
    let Some(defaults) = &file.defaults else {
        return;
    };
    if defaults.schedule.is_some() {
        reporter
            .key_error(
                &[key("defaults"), key("schedule")],
                "`schedule` cannot be in `defaults`",
            )
            .help("a schedule belongs to the app it runs: move it under that app");
    }
    let scheduled = |cron_only: bool| {
        file.apps.values().any(|app| match &app.schedule {
            Some(raw::Schedule::Cron(_)) => true,
            Some(raw::Schedule::Every(_)) => !cron_only,
            None => false,
        })
    };
    let unused: [(&str, bool, &str); 3] = [
        (
            "timezone",
            defaults.timezone.is_some() && !scheduled(true),
            "no app has a cron `schedule`",
        ),
        (
            "overlap",
            defaults.overlap.is_some() && !scheduled(false),
            "no app has a `schedule`",
        ),
        (
            "run_on_start",
            defaults.run_on_start.is_some() && !scheduled(false),
            "no app has a `schedule`",
        ),
    ];
    for (field, _, why) in unused.iter().filter(|(_, unused, _)| *unused) {
        reporter
            .warning(
                &[key("defaults"), key(field)],
                format!("`{field}` in `defaults` does nothing: {why}"),
            )
            .help(format!("drop `{field}` from `defaults`"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> CronProblem {
        match parse_cron(text) {
            Ok(cron) => panic!("`{text}` parsed as {cron}"),
            Err(problem) => problem,
        }
    }

    #[test]
    fn five_fields_and_nicknames_parse() {
        for text in [
            "0 3 * * *",
            "*/15 * * * *",
            "0 9-17 * * MON-FRI",
            "0 0 L * *",
            "0 0 * * 5L",
            "0 0 * * 1#2",
            "0 0 29 2 *",
            " @Daily ",
            "@hourly",
        ] {
            assert!(parse_cron(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn seconds_and_years_are_refused_by_count() {
        let six = problem("0 */5 * * * *");
        assert_eq!(
            six.message,
            "`0 */5 * * * *` has 6 fields; a cron schedule has 5: minute hour day-of-month month day-of-week"
        );
        assert!(six.help.contains("seconds are not supported"), "{six:?}");
        assert!(problem("0 0 0 * * * 2030").help.contains("years"));
        assert!(problem("0 3 * *").message.contains("has 4 fields"));
        assert_eq!(problem("   ").message, "the schedule is empty");
    }

    #[test]
    fn the_bad_field_is_named() {
        assert_eq!(
            problem("61 * * * *").message,
            "invalid cron schedule `61 * * * *`: minute `61`: number out of bounds"
        );
        let hour = problem("0 25 * * *");
        assert!(hour.message.contains("hour `25`"), "{hour:?}");
        assert!(hour.help.starts_with("hours are 0-23"));
        assert!(problem("0 0 * 13 *").message.contains("month `13`"));
        assert!(problem("0 0 * * 8").message.contains("day-of-week `8`"));
        assert!(
            problem("*/0 * * * *")
                .message
                .contains("step cannot be zero")
        );
        assert!(
            problem("0 0 X * *")
                .message
                .contains("day-of-month `X`: a character this field cannot hold")
        );
    }

    #[test]
    fn expressions_that_never_match_are_refused() {
        assert_eq!(
            problem("0 0 30 2 *").message,
            "`0 0 30 2 *` matches no date: it would never run"
        );
        assert!(problem("0 0 31 4,6 *").message.contains("matches no date"));
        assert!(problem(",,, * * * *").message.contains("no time of day"));
        // Friday the 13th of February happens (2032 is one).
        assert!(parse_cron("0 0 13 2 +5").is_ok());
    }

    proptest::proptest! {
        /// Any text is read or refused with words, never a panic.
        #[test]
        fn any_text_is_read_or_refused(text in "[0-9*/,LW#?+ @A-Za-z-]{0,30}|\\PC{0,30}") {
            if let Err(problem) = parse_cron(&text) {
                proptest::prop_assert!(!problem.message.is_empty() && !problem.help.is_empty());
            }
        }
    }

    #[test]
    fn nicknames_are_checked() {
        assert!(problem("@reboot").help.contains("run_on_start"));
        assert_eq!(problem("@dayly").help, "did you mean `@daily`?");
        assert!(problem("@sometimes").help.starts_with("the nicknames are"));
    }

    #[test]
    fn time_zones_by_iana_name_with_suggestions() {
        assert_eq!(
            parse_timezone("Europe/Paris"),
            Ok(chrono_tz::Tz::Europe__Paris)
        );
        assert_eq!(parse_timezone("UTC"), Ok(chrono_tz::Tz::UTC));
        assert_eq!(
            parse_timezone("europe/paris"),
            Err("did you mean `Europe/Paris`?".to_string())
        );
        assert_eq!(
            parse_timezone("Europe/Pariss"),
            Err("did you mean `Europe/Paris`?".to_string())
        );
        assert!(parse_timezone("Mars/Olympus").is_err());
    }
}
