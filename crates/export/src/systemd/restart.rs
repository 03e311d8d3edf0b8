//! The restart policy: `max_restarts` as systemd's start limit, `restart`
//! as `Restart=`, and `backoff` as `RestartSec=` and, from systemd 254, the
//! growing delays of `RestartSteps=` and `RestartMaxDelaySec=`.

use super::AppUnits;
use super::syntax::timespan;
use crate::{Notes, duration_text};
use config::diagnostic::PathSeg;
use model::spec::RestartPolicy;

/// The first systemd with `RestartSteps=` and `RestartMaxDelaySec=`.
const RESTART_STEPS_SINCE: u32 = 254;
/// How far (relative) the factor systemd's whole `RestartSteps=` make may
/// be from the file's before the export says so.
const FACTOR_TOLERANCE: f64 = 0.005;

impl AppUnits<'_> {
    /// `max_restarts` as `StartLimitBurst=` and `StartLimitIntervalSec=`.
    pub(super) fn start_limit(&self, unit: &mut Vec<String>) {
        match self.app.max_restarts {
            Some(max) => {
                // `count` restarts are `count + 1` starts; systemd's count is a
                // u32, so u32::MAX restarts are one fewer (in four billion).
                unit.push(format!("StartLimitBurst={}", max.count.saturating_add(1)));
                unit.push(format!("StartLimitIntervalSec={}", timespan(max.within)));
            }
            // We never give up; systemd's default would after 5 starts in 10s.
            None => unit.push("StartLimitIntervalSec=0".into()),
        }
    }

    /// `restart` as `Restart=`, and its `backoff`.
    pub(super) fn restart(&self, service: &mut Vec<String>, notes: &mut Notes) {
        service.push(format!(
            "Restart={}",
            match self.app.restart {
                RestartPolicy::Always => "always",
                RestartPolicy::OnFailure => "on-failure",
                RestartPolicy::Never => "no",
            }
        ));
        self.backoff(service, notes);
    }

    /// `backoff` as `RestartSec=`, and with systemd 254 `RestartSteps=`
    /// and `RestartMaxDelaySec=`: systemd waits `RestartSec` before the
    /// first restart, `RestartSec · (max/RestartSec)^((n-1)/steps)` before
    /// restart n, and the max after `steps`; so `steps` = log_factor(max /
    /// initial) gives our delays, rounded to whole steps. Before 254 every
    /// restart waits `RestartSec`: said for every app that restarts with a
    /// growing backoff, the default one included (a crash loop then
    /// restarts ten times a second for ever, where we back off to 30s).
    fn backoff(&self, service: &mut Vec<String>, notes: &mut Notes) {
        let name = self.name();
        let backoff = self.app.backoff;
        service.push(format!("RestartSec={}", timespan(backoff.initial)));
        let grows = backoff.max > backoff.initial && backoff.factor > 1.0;
        let growth = || {
            let (from, to) = (duration_text(backoff.initial), duration_text(backoff.max));
            if backoff.factor == 2.0 {
                format!("doubles from {from} to {to}")
            } else {
                format!(
                    "grows by a factor of {} from {from} to {to}",
                    backoff.factor
                )
            }
        };
        if self.options.systemd_version >= RESTART_STEPS_SINCE {
            if grows {
                let ratio = backoff.max.as_secs_f64() / backoff.initial.as_secs_f64();
                let steps = (ratio.ln() / backoff.factor.ln()).round().max(1.0);
                service.push(format!("RestartSteps={}", steps as u64));
                service.push(format!("RestartMaxDelaySec={}", timespan(backoff.max)));
                let effective = ratio.powf(1.0 / steps);
                if (effective - backoff.factor).abs() > FACTOR_TOLERANCE * backoff.factor {
                    notes.note(format!(
                        "{name}: the backoff {}, in whole steps under systemd: RestartSteps={} makes each delay {effective:.2} times the last, not {}",
                        growth(),
                        steps as u64,
                        backoff.factor
                    ));
                }
            }
        } else if grows && self.app.restart != RestartPolicy::Never {
            let written = self.source.written(name, &["backoff"]).is_some();
            let message = format!(
                "systemd {} has no RestartSteps= (254 and later): {}the backoff {}, but every restart waits RestartSec={}; the exponential part is lost",
                self.options.systemd_version,
                if written { "" } else { "by default " },
                growth(),
                timespan(backoff.initial)
            );
            let help = format!(
                "with systemd {RESTART_STEPS_SINCE} or later on the machine, pass --systemd-version {RESTART_STEPS_SINCE} to keep it"
            );
            if !notes.warn_with_help(name, &["backoff"], message.clone(), Some(help.clone())) {
                notes.warn_key(
                    &[PathSeg::Key("apps".into()), PathSeg::Key(name.into())],
                    message,
                    &help,
                );
            }
        }
        self.warn(
            notes,
            &["backoff", "reset_after"],
            "`reset_after` is not exported: systemd resets its restart counter only on a manual start",
        );
    }
}
