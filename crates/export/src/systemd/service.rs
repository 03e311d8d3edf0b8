//! `APP@.service`, the template every instance runs. Its `[Unit]`: the
//! sockets it takes, its dependencies, its start limit; its `[Service]`:
//! the type (`oneshot` for an app waited for as `completed`, `notify`,
//! `exec`) and readiness, the command, where and as whom it runs,
//! restarts, timeouts, how it is stopped, its watchdog and memory limit.
//! The keys that have no systemd equivalent are warned about here.

use std::fmt::Write as _;

use super::sockets::SocketUnit;
use super::syntax::{escape_line, seconds_text, timespan};
use super::{AppUnits, INSTANCE_MARK};
use crate::Notes;
use model::spec::Readiness;

impl AppUnits<'_> {
    /// The template's text: `[Unit]`, then `[Service]`.
    pub(super) fn service(&self, sockets: &[SocketUnit], notes: &mut Notes) -> String {
        let name = self.name();
        let app = self.app;
        let mut unit = Vec::<String>::new();
        let mut service = Vec::<String>::new();
        unit.push(format!(
            "Description={}",
            escape_line(&format!(
                "{name} instance {INSTANCE_MARK} (supervise export)"
            ))
        ));
        unit.push(format!("PartOf={name}.target"));
        for socket in sockets {
            unit.push(format!("Requires={}", socket.instance_name));
            unit.push(format!("After={}", socket.instance_name));
        }
        self.dependencies(&mut unit, notes);
        self.start_limit(&mut unit);

        // `check` allows `completed` only for an app that ends (`never` or
        // `on-failure`); either way it is a `Type=oneshot`, whose start
        // lasts until it exits 0.
        let oneshot = self.source.waited_for_as_completed(name);
        let notify = app.ready == Readiness::Notify;
        if oneshot {
            service.push("Type=oneshot".into());
            service.push("RemainAfterExit=yes".into());
            if notify {
                self.warn(
                    notes,
                    &["ready"],
                    format!(
                        "`ready: notify` is not exported: `{name}` is waited for as `completed`, so it is Type=oneshot, whose start ends when it exits 0, not at READY=1"
                    ),
                );
            }
        } else if notify {
            service.push("Type=notify".into());
        } else {
            service.push("Type=exec".into());
        }
        if (notify && !oneshot) || app.process.watchdog.is_some() {
            // We take READY=1 and WATCHDOG=1 from anything in the group.
            service.push("NotifyAccess=all".into());
        }
        service.push(format!("ExecStart={}", self.exec_start()));
        match &app.ready {
            Readiness::Probe(spec) => {
                let field = match spec.kind {
                    model::spec::ProbeKind::Tcp => "tcp",
                    model::spec::ProbeKind::Http => "http",
                };
                self.warn(
                    notes,
                    &["ready", field],
                    "systemd has no readiness probe: an instance counts as started once its program runs",
                );
            }
            // The default delay is not written: the manual says what it becomes.
            Readiness::Delay(delay) if self.source.written(name, &["ready", "delay"]).is_some() => {
                if oneshot {
                    self.warn(
                        notes,
                        &["ready"],
                        format!(
                            "`ready: {{delay}}` is not exported: `{name}` is waited for as `completed`, so it is Type=oneshot, whose start ends when it exits 0, not after a delay"
                        ),
                    );
                } else {
                    // Alive this long = ready: the start ends after the
                    // sleep, and fails if the program exits during it.
                    service.push(format!("ExecStartPost=/bin/sleep {}", seconds_text(*delay)));
                }
            }
            Readiness::Immediate | Readiness::Notify | Readiness::Delay(_) => {}
        }
        service.push(format!(
            "WorkingDirectory={}",
            escape_line(&app.process.cwd.display().to_string())
        ));
        self.environment(&mut service, notes);
        self.account(&mut service, notes);
        let shared: Vec<&str> = sockets.iter().map(|s| s.instance_name.as_str()).collect();
        if !shared.is_empty() {
            service.push(format!("Sockets={}", shared.join(" ")));
        }
        self.restart(&mut service, notes);
        if oneshot {
            service.push("TimeoutStartSec=infinity".into());
        } else {
            service.push(format!("TimeoutStartSec={}", timespan(app.ready_timeout)));
        }
        service.push(format!("TimeoutStopSec={}", timespan(app.kill_timeout)));
        service.push(format!("KillSignal={}", app.stop_signal.as_str()));
        service.push("KillMode=control-group".into());
        if let Some(watchdog) = app.process.watchdog {
            service.push(format!("WatchdogSec={}", timespan(watchdog)));
            service.push(format!("WatchdogSignal={}", app.watchdog_signal.as_str()));
        } else {
            self.warn(
                notes,
                &["watchdog_signal"],
                "`watchdog_signal` without `watchdog` does nothing",
            );
        }
        if let Some(bytes) = app.max_memory {
            // systemd refuses u64::MAX bytes as out of range: a limit no
            // process reaches is `infinity`.
            if bytes == u64::MAX {
                service.push("MemoryMax=infinity".into());
            } else {
                service.push(format!("MemoryMax={bytes}"));
            }
        }
        self.lost(notes);

        let mut text = self.header("The template of each instance");
        let _ = writeln!(text, "[Unit]");
        for line in unit {
            let _ = writeln!(text, "{line}");
        }
        let _ = writeln!(text, "\n[Service]");
        for line in service {
            let _ = writeln!(text, "{line}");
        }
        text
    }

    /// Keys with no systemd equivalent.
    fn lost(&self, notes: &mut Notes) {
        self.warn(
            notes,
            &["autoscale"],
            "`autoscale` is not exported: systemd runs a fixed count of units, and the target wants `min` of them",
        );
        self.warn(
            notes,
            &["health"],
            "`health` is not exported: systemd runs no liveness checks (WatchdogSec= is its way)",
        );
        self.warn(
            notes,
            &["reload"],
            "`reload` is not exported: systemd restarts an instance at a time when told (`systemctl restart APP@N`), with no surge",
        );
        self.warn(
            notes,
            &["log"],
            "`log` is not exported: the output goes to the journal (`journalctl -u APP@N`)",
        );
    }
}
