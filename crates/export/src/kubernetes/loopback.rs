//! Apps that reach each other on a loopback address. Under supervise every
//! app runs on one machine, so `127.0.0.1:7400` reaches another app; in a
//! cluster each app is a pod of its own, whose 127.0.0.1 is its own. Where
//! the file shows that precisely (an `env` value, a probe), the export
//! warns, and names the Service to reach instead.

use std::net::{IpAddr, SocketAddr};

use super::AppExport;
use super::ports::services_of;
use super::probes::{probe_target, probe_targets, probes};
use crate::Notes;
use model::spec::{AppSpec, ListenAddress};

/// Whether `app` listens where `target` (a loopback address) connects.
fn listens_at(app: &AppSpec, target: SocketAddr) -> bool {
    app.process
        .listen
        .iter()
        .any(|listen| match &listen.address {
            ListenAddress::Tcp(address) => {
                address.port() == target.port()
                    && (address.ip() == target.ip() || address.ip().is_unspecified())
            }
            ListenAddress::Unix(_) => false,
        })
}

/// The loopback `host:port` addresses written in `text` (an `env` value:
/// `127.0.0.1:7400`, `localhost:5432`, `[::1]:80`, inside a URL or not).
fn loopback_addresses(text: &str) -> Vec<SocketAddr> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || ".:[]-".contains(c)))
        .filter_map(|word| {
            let (host, port) = word.rsplit_once(':')?;
            let port: u16 = port.parse().ok()?;
            let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
                IpAddr::from([127, 0, 0, 1])
            } else {
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse()
                    .ok()?
            };
            (ip.is_loopback() && port != 0).then_some(SocketAddr::new(ip, port))
        })
        .collect()
}

impl AppExport<'_> {
    /// Another app that listens where `target` connects.
    pub(super) fn listener_at(&self, target: SocketAddr) -> Option<&AppSpec> {
        self.source
            .desired
            .apps
            .iter()
            .find(|other| other.name != self.app.name && listens_at(other, target))
    }

    /// Where the file shows this app reaching another on a loopback
    /// address — an `env` value naming `127.0.0.1:PORT` (or `localhost`,
    /// `[::1]`) at a port another app listens on or probes itself at, or
    /// a probe of a port another app listens on — a warning: in a cluster
    /// every app is a pod of its own, and its 127.0.0.1 is its own. Only
    /// what the file says precisely: a port alone, or an address in the
    /// program's code, is the manual's to explain.
    pub(super) fn loopback_across_pods(&self, notes: &mut Notes) {
        let app = &self.app.name;
        let mine = probe_targets(self.app);
        let others: Vec<&AppSpec> = self
            .source
            .desired
            .apps
            .iter()
            .filter(|other| other.name != *app)
            .collect();
        let owner_help = |owner: &AppSpec, port: u16| match services_of(self.source, owner)
            .into_iter()
            .find(|(p, _)| *p == port)
        {
            Some((_, service)) => format!(
                "reach it through its Service instead: `{service}:{port}` (in the same namespace)"
            ),
            None => format!(
                "`{}` gets no Service for port {port} (only a TCP `listen` address of a Deployment does): give it one, and reach it by that name",
                owner.name
            ),
        };
        for (name, value) in &self.app.process.env {
            if !self.source.env_names(app).contains(name) {
                continue; // from env_file: the ConfigMap's, not placed in the file
            }
            for target in loopback_addresses(&value.expand(0)) {
                if listens_at(self.app, target) {
                    continue;
                }
                // Who serves there: an app that listens there, else (when
                // this app does not probe it too) one that probes itself there.
                let Some(owner) = self.listener_at(target).or_else(|| {
                    if mine.contains(&target) {
                        return None;
                    }
                    others
                        .iter()
                        .find(|o| probe_targets(o).contains(&target))
                        .copied()
                }) else {
                    continue;
                };
                notes.warn_with_help(
                    app,
                    &["env", name],
                    format!(
                        "env `{name}` reaches {target}, where app `{}` serves: in Kubernetes they run in pods of their own, and 127.0.0.1 in `{app}`'s pod is `{app}`'s",
                        owner.name
                    ),
                    Some(owner_help(owner, target.port())),
                );
            }
        }
        for (key, spec) in probes(self.app) {
            let Some(target) = probe_target(spec) else {
                continue;
            };
            if !target.ip().is_loopback() || listens_at(self.app, target) {
                continue;
            }
            let Some(owner) = self.listener_at(target) else {
                continue;
            };
            let field = match spec.kind {
                model::spec::ProbeKind::Tcp => "tcp",
                model::spec::ProbeKind::Http => "http",
            };
            notes.warn_with_help(
                app,
                &[key, field],
                format!(
                    "{target} is where app `{}` listens: in Kubernetes the kubelet probes `{app}`'s own pod, which that port is not in",
                    owner.name
                ),
                Some(format!("probe a port `{app}` serves itself")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_found_in_urls_and_pairs_only() {
        let found = |text: &str| -> Vec<String> {
            loopback_addresses(text)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            found("postgres://u:p@localhost:5432/app"),
            ["127.0.0.1:5432"]
        );
        assert_eq!(found("redis://127.0.0.1:6379"), ["127.0.0.1:6379"]);
        assert_eq!(
            found("http://[::1]:80/x,127.0.0.2:9"),
            ["[::1]:80", "127.0.0.2:9"]
        );
        assert_eq!(found("LOCALHOST:1"), ["127.0.0.1:1"]);
        for nothing in [
            "7400",
            "db:7400",
            "10.0.0.1:80",
            "127.0.0.1",
            "127.0.0.1:0",
            "localhost:99999",
        ] {
            assert!(found(nothing).is_empty(), "{nothing}");
        }
    }
}
