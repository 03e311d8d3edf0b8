//! The policy fields: `instances`, `restart`, `backoff`, `max_restarts`,
//! `stop_signal`, `reload` — what can change without replacing a process
//! (except `instances`, which adds or removes them). The health policy is in
//! [`super::health`], schedules in [`super::schedule`] and dependencies in
//! [`super::depends`].

use std::time::Duration;

use model::Signal;

use super::{AppContext, key, parse_positive_duration};
use crate::diagnostic::{Reporter, did_you_mean};
use crate::raw;
use model::spec::{BackoffPolicy, MaxRestarts, ReloadLimits, RestartPolicy, defaults};

impl AppContext<'_> {
    pub(super) fn resolve_instances(&self, reporter: &mut Reporter) -> Option<(u32, bool)> {
        let Some((instances, path)) = self.pick("instances", |f| f.instances.as_ref()) else {
            return Some((defaults::INSTANCES, false));
        };
        let (count, from_max) = match instances {
            raw::Instances::Count(n) => (n, false),
            raw::Instances::Keyword(raw::MaxKeyword::Max) => (self.host.cpus, true),
        };
        if count > defaults::MAX_INSTANCES {
            reporter
                .error(
                    &path,
                    format!(
                        "{count} instances is more than the limit of {}",
                        defaults::MAX_INSTANCES
                    ),
                )
                .help("split the work over several apps if you really need this many processes");
            return None;
        }
        Some((count, from_max))
    }

    /// `restart`: `always` by default, but `never` for a scheduled app, which
    /// cannot be `always` (a run would never end).
    pub(super) fn resolve_restart(&self, reporter: &mut Reporter) -> Option<RestartPolicy> {
        let scheduled = self.fields.schedule.is_some();
        let Some((restart, path)) = self.pick("restart", |f| f.restart.as_ref()) else {
            return Some(if scheduled {
                RestartPolicy::Never
            } else {
                RestartPolicy::Always
            });
        };
        if scheduled && restart == RestartPolicy::Always {
            let (message, help) = if path.first() == Some(&key("defaults")) {
                (
                    "`restart: always` from `defaults` applies to scheduled apps too, and a run would never end",
                    "set `restart: never` (the default with a schedule) or `on-failure` under each app with a `schedule`",
                )
            } else {
                (
                    "`restart: always` cannot go with a schedule: a run would never end",
                    "drop it (a scheduled app defaults to `restart: never`), or write `on-failure` to retry a failed run",
                )
            };
            reporter.error(&path, message).help(help);
            return None;
        }
        if scheduled
            && restart == RestartPolicy::OnFailure
            && self
                .pick("max_restarts", |f| f.max_restarts.as_ref())
                .is_none()
        {
            reporter
                .warning(
                    &path,
                    "a run that keeps failing is retried for ever, and later ticks wait for it (unless `overlap: replace`)",
                )
                .help("set `max_restarts` (e.g. `{count: 3, within: 10m}`) so that a failing run gives up");
        }
        Some(restart)
    }

    pub(super) fn resolve_backoff(&self, reporter: &mut Reporter) -> Option<BackoffPolicy> {
        let field = |name: &str,
                     get: fn(&raw::Backoff) -> Option<&raw::DurationText>,
                     default: Duration,
                     reporter: &mut Reporter| {
            match self.pick_nested("backoff", name, |f| f.backoff.as_ref(), get) {
                Some((text, path)) => {
                    parse_positive_duration(&text, &path, reporter).map(|d| (d, Some(path)))
                }
                None => Some((default, None)),
            }
        };
        let initial = field(
            "initial",
            |b| b.initial.as_ref(),
            defaults::BACKOFF_INITIAL,
            reporter,
        );
        let max = field("max", |b| b.max.as_ref(), defaults::BACKOFF_MAX, reporter);
        let reset_after = field(
            "reset_after",
            |b| b.reset_after.as_ref(),
            defaults::BACKOFF_RESET_AFTER,
            reporter,
        );
        let factor = match self.pick_nested(
            "backoff",
            "factor",
            |f| f.backoff.as_ref(),
            |b| b.factor.as_ref(),
        ) {
            Some((factor, path)) if !factor.is_finite() || factor < 1.0 => {
                reporter
                    .error(
                        &path,
                        format!("backoff factor must be a number >= 1, found {factor}"),
                    )
                    .help("1 keeps the delay constant; 2 doubles it after each restart");
                None
            }
            Some((factor, _)) => Some(factor),
            None => Some(defaults::BACKOFF_FACTOR),
        };
        let ((initial, initial_path), (max, max_path)) = (initial?, max?);
        if initial > max && !self.broken("backoff") {
            let path = initial_path
                .or(max_path)
                .unwrap_or_else(|| self.app_path(&["backoff"]));
            reporter
                .error(
                    &path,
                    format!(
                        "backoff.initial ({}) is longer than backoff.max ({})",
                        humantime::format_duration(initial),
                        humantime::format_duration(max)
                    ),
                )
                .help("make `initial` at most `max`");
            return None;
        }
        Some(BackoffPolicy {
            initial,
            max,
            factor: factor?,
            reset_after: reset_after?.0,
        })
    }

    pub(super) fn resolve_max_restarts(&self, reporter: &mut Reporter) -> Option<MaxRestarts> {
        let (limit, path) = self.pick("max_restarts", |f| f.max_restarts.as_ref())?;
        let mut count_path = path.clone();
        count_path.push(key("count"));
        let mut within_path = path;
        within_path.push(key("within"));
        let within = parse_positive_duration(&limit.within, &within_path, reporter);
        if limit.count == 0 {
            reporter
                .error(&count_path, "max_restarts.count must be at least 1")
                .help("use `restart: never` to never restart");
            return None;
        }
        Some(MaxRestarts {
            count: limit.count,
            within: within?,
        })
    }

    /// A signal field (`stop_signal`, `watchdog_signal`), `default` when unset.
    pub(super) fn resolve_signal(
        &self,
        field: &str,
        get: impl Fn(&raw::AppFields) -> Option<&String>,
        default: Signal,
        reporter: &mut Reporter,
    ) -> Option<Signal> {
        let Some((name, path)) = self.pick(field, get) else {
            return Some(default);
        };
        match parse_signal(&name) {
            Some(signal) => Some(signal),
            None => {
                let known: Vec<&str> = Signal::ALL.iter().map(|s| s.as_str()).collect();
                let upper = name.to_ascii_uppercase();
                let guess = if upper.starts_with("SIG") {
                    upper
                } else {
                    format!("SIG{upper}")
                };
                let help = match did_you_mean(&guess, known.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => {
                        "use a signal name such as SIGTERM, SIGINT, SIGQUIT or SIGUSR1".to_string()
                    }
                };
                reporter
                    .error(&path, format!("unknown signal `{name}`"))
                    .help(help);
                None
            }
        }
    }

    pub(super) fn resolve_reload(&self, reporter: &mut Reporter) -> Option<ReloadLimits> {
        let surge = self.pick_nested(
            "reload",
            "max_surge",
            |f| f.reload.as_ref(),
            |r| r.max_surge.as_ref(),
        );
        let unavailable = self.pick_nested(
            "reload",
            "max_unavailable",
            |f| f.reload.as_ref(),
            |r| r.max_unavailable.as_ref(),
        );
        let limits = ReloadLimits {
            max_surge: surge.as_ref().map_or(defaults::MAX_SURGE, |(v, _)| *v),
            max_unavailable: unavailable
                .as_ref()
                .map_or(defaults::MAX_UNAVAILABLE, |(v, _)| *v),
        };
        if limits.max_surge == 0 && limits.max_unavailable == 0 && !self.broken("reload") {
            let path = surge
                .map(|(_, p)| p)
                .or(unavailable.map(|(_, p)| p))
                .unwrap_or_else(|| self.app_path(&["reload"]));
            reporter
                .error(&path, "max_surge and max_unavailable are both 0, so a rolling replacement could never make progress")
                .help("allow one extra instance (`max_surge: 1`) or one fewer (`max_unavailable: 1`)");
            return None;
        }
        Some(limits)
    }
}

/// `SIGTERM`, `TERM`, `sigterm`: the names users write.
pub fn parse_signal(name: &str) -> Option<Signal> {
    Signal::parse_loose(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(parse_signal("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("term"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("SIGQUIT"), Some(Signal::SIGQUIT));
        assert_eq!(parse_signal("SIGTREM"), None);
    }
}
