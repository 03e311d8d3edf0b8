//! `schedule`: apps that run at times instead of for ever: when (a period
//! or a cron expression in a timezone), what a tick does while a run still
//! goes, and how cron expressions are read.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::serde_as;

/// `schedule` with `overlap` and `run_on_start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub when: When,
    pub overlap: Overlap,
    /// Run once as soon as the app is started, before the first tick.
    pub run_on_start: bool,
}

/// When a scheduled app runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per scheduled app, read where it is: a box would only add a pointer"
)]
pub enum When {
    /// `{every: 10m}`: every period from the time the app was started.
    Every(Duration),
    /// A 5-field cron expression, evaluated in `timezone`.
    Cron {
        #[serde(with = "serde_as::cron")]
        cron: croner::Cron,
        #[serde(with = "serde_as::timezone")]
        timezone: chrono_tz::Tz,
    },
}

impl When {
    /// The first cron time strictly after `wall`, in the schedule's timezone
    /// (`None` for `every`, which counts on the monotonic clock, and for an
    /// expression that matches no time to come). A local time that a DST
    /// change skips or repeats is handled as croner documents it.
    pub fn next_cron_after(&self, wall: std::time::SystemTime) -> Option<std::time::SystemTime> {
        let When::Cron { cron, timezone } = self else {
            return None;
        };
        let utc: chrono::DateTime<chrono::Utc> = wall.into();
        // Whole seconds: croner keeps the fraction of its input in its answer
        // (a run at :00.498 instead of :00).
        let utc = chrono::Timelike::with_nanosecond(&utc, 0)?;
        let next = cron
            .find_next_occurrence(&utc.with_timezone(timezone), false)
            .ok()?;
        Some(next.with_timezone(&chrono::Utc).into())
    }
}

/// What a tick does while the previous run still goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Overlap {
    /// Nothing: the tick is skipped (the default).
    Skip,
    /// The run starts when the current one ends (one waits at most).
    Queue,
    /// The current run is stopped; the new one starts once it is gone.
    Replace,
}

/// How the file's cron expressions are read: five fields (no seconds, no
/// year), as `check` and the state a re-exec hands over both read them.
pub fn cron_parser() -> croner::parser::CronParser {
    use croner::parser::{CronParser, Seconds, Year};
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `at` as seconds since the epoch, from a UTC date and time.
    fn utc(text: &str) -> std::time::SystemTime {
        humantime::parse_rfc3339(text).unwrap()
    }

    fn cron(expression: &str, timezone: chrono_tz::Tz) -> When {
        When::Cron {
            cron: std::str::FromStr::from_str(expression).unwrap(),
            timezone,
        }
    }

    /// croner's documented DST rules, pinned on America/New_York in 2026
    /// (spring forward 2026-03-08 02:00 → 03:00, fall back 2026-11-01
    /// 02:00 → 01:00): a fixed time in the gap runs at the first time
    /// after it the same day; a fixed time in the repeated hour runs once.
    #[test]
    fn cron_times_across_daylight_saving_changes() {
        let new_york = chrono_tz::America::New_York;
        let gap = cron("30 2 * * *", new_york);
        // 03:00 EDT = 07:00 UTC: the first valid time after the gap.
        assert_eq!(
            gap.next_cron_after(utc("2026-03-08T05:00:00Z")),
            Some(utc("2026-03-08T07:00:00Z"))
        );
        // The day after, 02:30 EDT again.
        assert_eq!(
            gap.next_cron_after(utc("2026-03-08T07:00:00Z")),
            Some(utc("2026-03-09T06:30:00Z"))
        );
        let repeated = cron("30 1 * * *", new_york);
        // 01:30 EDT (05:30 UTC) runs; 01:30 EST an hour later does not.
        assert_eq!(
            repeated.next_cron_after(utc("2026-11-01T04:00:00Z")),
            Some(utc("2026-11-01T05:30:00Z"))
        );
        assert_eq!(
            repeated.next_cron_after(utc("2026-11-01T05:30:00Z")),
            Some(utc("2026-11-02T06:30:00Z"))
        );
        // `every` is not on the wall clock.
        assert_eq!(
            When::Every(Duration::from_secs(1)).next_cron_after(utc("2026-11-01T05:30:00Z")),
            None
        );
    }
}
