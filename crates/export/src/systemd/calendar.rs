//! A cron expression as a systemd calendar (`OnCalendar=`), field by
//! field, as systemd reads each.

/// A 5-field cron expression (or `@daily` …) as a systemd calendar
/// (`Mon..Fri *-*-* 03:00:00`), and whether both day fields are restricted
/// (cron then runs when *either* matches, systemd when both do).
pub(super) fn cron_to_calendar(expression: &str) -> Result<(String, bool), String> {
    let expression = expression.trim();
    let alias = match expression {
        "@hourly" => Some("*-*-* *:00:00"),
        "@daily" | "@midnight" => Some("*-*-* 00:00:00"),
        "@weekly" => Some("Sun *-*-* 00:00:00"),
        "@monthly" => Some("*-*-01 00:00:00"),
        "@yearly" | "@annually" => Some("*-01-01 00:00:00"),
        _ => None,
    };
    if let Some(alias) = alias {
        return Ok((alias.to_string(), false));
    }
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let [minute, hour, day, month, weekday] = fields.as_slice() else {
        return Err("expected 5 fields".into());
    };
    let minute = field(minute, 0, 59, None, 0)?;
    let hour = field(hour, 0, 23, None, 0)?;
    let day_text = field(day, 1, 31, None, 1)?;
    let month = field(month, 1, 12, Some(&MONTHS), 1)?;
    let weekday_text = weekday_field(weekday)?;
    let both_days = *day != "*" && *weekday != "*";
    let prefix = match weekday_text {
        Some(days) => format!("{days} "),
        None => String::new(),
    };
    Ok((
        format!("{prefix}*-{month}-{day_text} {hour}:{minute}:00"),
        both_days,
    ))
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// One numeric cron field: `*`, `N`, `A-B`, `*/S`, `N/S`, lists of them.
fn field(
    text: &str,
    min: u32,
    max: u32,
    names: Option<&[&str; 12]>,
    first: u32,
) -> Result<String, String> {
    let number = |word: &str| -> Result<u32, String> {
        let value = match names.and_then(|n| {
            n.iter()
                .position(|name| name.eq_ignore_ascii_case(word))
                .map(|i| i as u32 + 1)
        }) {
            Some(value) => value,
            None => word
                .parse::<u32>()
                .map_err(|_| format!("`{word}` is not a number"))?,
        };
        if (min..=max).contains(&value) {
            Ok(value)
        } else {
            Err(format!("{value} is outside {min}..{max}"))
        }
    };
    let two = |n: u32| format!("{n:02}");
    let mut items = Vec::new();
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (
                range,
                Some(
                    step.parse::<u32>()
                        .map_err(|_| format!("`{step}` is not a step"))?,
                ),
            ),
            None => (item, None),
        };
        // systemd refuses a repetition that cannot repeat within the field
        // (`00/25` hours): that is just its first value.
        let repeat = |start: u32, step: u32| {
            if step == 0 {
                Err(format!("`{item}`: a step of 0"))
            } else if start + step > max {
                Ok(two(start))
            } else {
                Ok(format!("{}/{step}", two(start)))
            }
        };
        let converted = match (range, step) {
            ("*" | "?", None) => "*".to_string(),
            ("*", Some(step)) => repeat(first, step)?,
            (range, step) => match range.split_once('-') {
                Some((from, to)) => {
                    if step.is_some() {
                        return Err(format!("`{item}`: a stepped range"));
                    }
                    format!("{}..{}", two(number(from)?), two(number(to)?))
                }
                None => match step {
                    Some(step) => repeat(number(range)?, step)?,
                    None => two(number(range)?),
                },
            },
        };
        items.push(converted);
    }
    Ok(items.join(","))
}

/// The day-of-week field as systemd's names (`None` for `*`). systemd's
/// week starts on Monday and its ranges may not wrap (`Sun..Fri` is
/// refused), so the days are taken as a set and written in its order:
/// `0-5` → `Mon..Fri,Sun`.
fn weekday_field(text: &str) -> Result<Option<String>, String> {
    if text == "*" || text == "?" {
        return Ok(None);
    }
    let day = |word: &str| -> Result<usize, String> {
        if let Some(index) = DAYS.iter().position(|d| d.eq_ignore_ascii_case(word)) {
            return Ok(index);
        }
        match word.parse::<usize>() {
            Ok(n) if n <= 7 => Ok(n),
            _ => Err(format!("`{word}` is not a day of the week")),
        }
    };
    // Days 0 (Sunday) to 7 (Sunday again), as cron counts them.
    let mut days = [false; 8];
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (
                range,
                step.parse::<usize>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("`{step}` is not a step"))?,
            ),
            None => (item, 1),
        };
        let (from, to) = match range.split_once('-') {
            _ if range == "*" => (0, 6),
            Some((from, to)) => (day(from)?, day(to)?),
            // `N/S` is N to the end of the week.
            None if item.contains('/') => (day(range)?, 6),
            None => (day(range)?, day(range)?),
        };
        if from > to {
            return Err(format!("`{item}`: a range that wraps"));
        }
        for d in (from..=to).step_by(step) {
            days[d] = true;
        }
    }
    days[0] |= days[7];
    // Runs of consecutive days, Monday first.
    let order = [1, 2, 3, 4, 5, 6, 0];
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (position, &d) in order.iter().enumerate() {
        if !days[d] {
            continue;
        }
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == position => *end = position,
            _ => runs.push((position, position)),
        }
    }
    let items: Vec<String> = runs
        .iter()
        .map(|&(start, end)| {
            if start == end {
                DAYS[order[start]].to_string()
            } else {
                format!("{}..{}", DAYS[order[start]], DAYS[order[end]])
            }
        })
        .collect();
    Ok(Some(items.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_expressions_become_calendars() {
        let calendar = |e: &str| cron_to_calendar(e).unwrap();
        assert_eq!(calendar("0 3 * * *"), ("*-*-* 03:00:00".into(), false));
        assert_eq!(
            calendar("*/15 * * * 1-5"),
            ("Mon..Fri *-*-* *:00/15:00".into(), false)
        );
        assert_eq!(
            calendar("30 2 1,15 jan *"),
            ("*-01-01,15 02:30:00".into(), false)
        );
        assert_eq!(calendar("0 0 1 * 0"), ("Sun *-*-01 00:00:00".into(), true));
        assert_eq!(calendar("@weekly"), ("Sun *-*-* 00:00:00".into(), false));
        assert_eq!(
            calendar("0 12 * * 5-7"),
            ("Fri..Sun *-*-* 12:00:00".into(), false)
        );
        // systemd's week starts on Monday: a range from Sunday is split.
        assert_eq!(
            calendar("0 0 * * 0-5"),
            ("Mon..Fri,Sun *-*-* 00:00:00".into(), false)
        );
        assert_eq!(
            calendar("0 0 * * sun-sat"),
            ("Mon..Sun *-*-* 00:00:00".into(), false)
        );
        assert_eq!(
            calendar("0 0 * * 7,1-2"),
            ("Mon..Tue,Sun *-*-* 00:00:00".into(), false)
        );
        assert_eq!(
            calendar("0 0 * * */2"),
            ("Tue,Thu,Sat..Sun *-*-* 00:00:00".into(), false)
        );
        // A step longer than its field repeats never: its first value.
        assert_eq!(calendar("0 */25 * * *"), ("*-*-* 00:00:00".into(), false));
        assert_eq!(calendar("*/30 * * * *"), ("*-*-* *:00/30:00".into(), false));
        assert_eq!(calendar("50/10 * * * *"), ("*-*-* *:50:00".into(), false));
        assert!(cron_to_calendar("0 0 L * *").is_err());
    }
}
