//! `ready` and `health` as the kubelet's readiness and liveness probes: a
//! TCP or HTTP check becomes the same check of the pod, `ready: notify` and
//! `ready: {delay}` a TCP probe of the first port, a health `exec` an exec
//! probe. What the kubelet does differently (it probes the pod's IP, counts
//! whole seconds, has no start timeout) is warned about here.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{AppExport, seconds_i32};
use crate::{Notes, whole_seconds};
use model::spec::{AppSpec, HealthCheck, HealthSpec, Probe as Check, ProbeSpec, Readiness};

/// The probes of `app` with the key each is written under: `ready`, then
/// `health`.
pub(super) fn probes(app: &AppSpec) -> impl Iterator<Item = (&'static str, &ProbeSpec)> {
    let ready = match &app.ready {
        Readiness::Probe(spec) => Some(("ready", spec)),
        _ => None,
    };
    let health = match &app.health {
        Some(HealthSpec {
            check: HealthCheck::Probe(spec),
            ..
        }) => Some(("health", spec)),
        _ => None,
    };
    ready.into_iter().chain(health)
}

/// Where a probe connects, as exported: slot 0's target.
pub(super) fn probe_target(spec: &ProbeSpec) -> Option<SocketAddr> {
    match spec.target(0)? {
        Check::Tcp(address) | Check::Http { address, .. } => Some(*address),
    }
}

/// The probe targets of `app` (`ready` and `health`, as exported: slot 0's).
pub(super) fn probe_targets(app: &AppSpec) -> Vec<SocketAddr> {
    probes(app)
        .filter_map(|(_, spec)| probe_target(spec))
        .collect()
}

fn tcp_probe(port: u16) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(i32::from(port)),
            host: None,
        }),
        ..Probe::default()
    }
}

impl AppExport<'_> {
    /// A probe's handler for a TCP or HTTP check.
    fn handler(&self, spec: &ProbeSpec, notes: &mut Notes, field: &[&str]) -> Probe {
        if spec.written.uses_instance() {
            self.warn(
                notes,
                field,
                format!(
                    "`{}` cannot differ per replica of a Deployment: every pod is probed as instance 0",
                    spec.written
                ),
            );
        }
        let host = |notes: &mut Notes, address: &std::net::SocketAddr| {
            let ip = address.ip();
            if ip.is_loopback() && self.listener_at(*address).is_some() {
                None // another app's port: warned about (loopback_across_pods)
            } else if ip.is_loopback() {
                notes.note(format!(
                    "{}: the probe of {address} is of a loopback address; in a pod the kubelet probes the pod's own IP, so the worker must bind every interface (0.0.0.0:{}) for it to answer",
                    self.app.name,
                    address.port()
                ));
                None
            } else if ip.is_unspecified() {
                None
            } else {
                self.warn(
                    notes,
                    field,
                    format!(
                        "the probe is of another host, {ip}: exported with `host: {ip}`, which the kubelet probes from the node rather than from the pod"
                    ),
                );
                Some(ip.to_string())
            }
        };
        match spec.target(0) {
            Some(Check::Tcp(address)) => Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::Int(i32::from(address.port())),
                    host: host(notes, address),
                }),
                ..Probe::default()
            },
            Some(Check::Http { address, path }) => Probe {
                http_get: Some(HTTPGetAction {
                    path: Some(path.clone()),
                    port: IntOrString::Int(i32::from(address.port())),
                    host: host(notes, address),
                    ..HTTPGetAction::default()
                }),
                ..Probe::default()
            },
            // No slot 0 (instances: 0): the written target, expanded for 0.
            None => {
                let text = spec.written.expand(0);
                let address = match spec.kind {
                    model::spec::ProbeKind::Tcp => config::validate::parse_host_port(&text).ok(),
                    model::spec::ProbeKind::Http => {
                        config::validate::parse_http_url(&text).ok().map(|(a, _)| a)
                    }
                };
                tcp_probe(address.map_or(0, |a| a.port()))
            }
        }
    }

    pub(super) fn readiness(&self, notes: &mut Notes) -> Option<Probe> {
        let tcp_port = self.first_tcp_port();
        // No kind of object has a start timeout (a Deployment's
        // progressDeadlineSeconds only reports a stalled rollout).
        self.warn(
            notes,
            &["ready_timeout"],
            "`ready_timeout` is not exported: a readiness probe keeps probing, and nothing in Kubernetes fails a start that takes too long",
        );
        match &self.app.ready {
            Readiness::Immediate => None,
            Readiness::Notify => {
                notes.warn_with_help(
                    &self.app.name,
                    &["ready"],
                    "`ready: notify` has no Kubernetes equivalent (no NOTIFY_SOCKET in a pod)",
                    Some(match tcp_port {
                        Some(port) => format!("exported as a TCP readiness probe on port {port}"),
                        None => "exported without a readiness probe: the pod is ready once it runs"
                            .to_string(),
                    }),
                );
                tcp_port.map(tcp_probe)
            }
            Readiness::Probe(spec) => {
                let field = match spec.kind {
                    model::spec::ProbeKind::Tcp => "tcp",
                    model::spec::ProbeKind::Http => "http",
                };
                Some(self.handler(spec, notes, &["ready", field]))
            }
            Readiness::Delay(delay) => {
                let (seconds, rounded) = whole_seconds(*delay);
                if rounded {
                    self.warn(
                        notes,
                        &["ready", "delay"],
                        format!("Kubernetes counts whole seconds: the delay becomes {seconds}s"),
                    );
                }
                // With a port, the delay is the probe's; without one, the
                // Deployment's minReadySeconds (set in `deployment`).
                let port = tcp_port?;
                Some(Probe {
                    initial_delay_seconds: Some(seconds_i32(seconds)),
                    ..tcp_probe(port)
                })
            }
        }
    }

    pub(super) fn liveness(&self, notes: &mut Notes) -> Option<Probe> {
        let health = self.app.health.as_ref()?;
        let app = &self.app.name;
        let mut probe = match &health.check {
            HealthCheck::Probe(spec) => {
                let field = match spec.kind {
                    model::spec::ProbeKind::Tcp => "tcp",
                    model::spec::ProbeKind::Http => "http",
                };
                self.handler(spec, notes, &["health", field])
            }
            HealthCheck::Exec(argv) => Probe {
                exec: Some(ExecAction {
                    command: Some(
                        argv.iter()
                            .map(|word| {
                                self.one_value(word, notes, &["health", "exec"], "health.exec")
                            })
                            .collect(),
                    ),
                }),
                ..Probe::default()
            },
        };
        let mut seconds = |field: &str, duration: std::time::Duration| {
            let (value, rounded) = whole_seconds(duration);
            if rounded {
                notes.warn(
                    app,
                    &["health", field],
                    format!("Kubernetes counts whole seconds: {field} becomes {value}s"),
                );
            }
            seconds_i32(value)
        };
        probe.period_seconds = Some(seconds("every", health.every).max(1));
        probe.timeout_seconds = Some(seconds("timeout", health.timeout).max(1));
        if !health.grace.is_zero() {
            probe.initial_delay_seconds = Some(seconds("grace", health.grace));
        }
        probe.failure_threshold = Some(i32::try_from(health.failures).unwrap_or(i32::MAX));
        Some(probe)
    }
}
