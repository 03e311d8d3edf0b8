//! `metrics` (top level): the TCP address `/metrics` is served on. It is
//! parsed like a `listen` address (IP literals and `localhost`, no DNS: the
//! address is bound by the supervisor, now and after every edit), and must
//! not be an address an app listens on — both could not be bound.

use std::net::SocketAddr;

use super::key;
use crate::diagnostic::Reporter;
use crate::raw::EcosystemFile;
use model::spec::{ListenAddress, ListenSpec};

/// How to write the address, for every error about it.
const HOW_TO_WRITE: &str = "write IP:PORT, e.g. `127.0.0.1:9464` (port 0 picks a free port), `[::1]:9464`, or `:9464` for every IPv4 interface";

/// The metrics address of `file`: `Some(None)` when it has none, `None`
/// after reporting an error. `listeners` are the apps' resolved `listen`
/// entries, which it must not overlap.
pub(super) fn resolve(
    file: &EcosystemFile,
    listeners: &[(&str, Vec<ListenSpec>)],
    reporter: &mut Reporter,
) -> Option<Option<SocketAddr>> {
    let Some(text) = &file.metrics else {
        return Some(None);
    };
    let path = [key("metrics")];
    if text.trim_start().starts_with("unix:") {
        reporter
            .error(
                &path,
                format!("metrics are served over TCP, not on `{text}`"),
            )
            .help(HOW_TO_WRITE);
        return None;
    }
    let address = match super::parse_host_port(text) {
        Ok(address) => address,
        Err(message) => {
            reporter
                .error(
                    &path,
                    format!("invalid metrics address `{text}`: {message}"),
                )
                .help(HOW_TO_WRITE);
            return None;
        }
    };
    let ours = ListenAddress::Tcp(address);
    for (app, listens) in listeners {
        if let Some(clash) = listens.iter().find(|l| l.address.overlaps(&ours)) {
            reporter
                .error(
                    &path,
                    format!(
                        "metrics address `{address}` overlaps `{}`, which app `{app}` listens on",
                        clash.address
                    ),
                )
                .help(
                    "the metrics server and the app cannot both bind it: give metrics another port",
                );
            return None;
        }
    }
    Some(Some(address))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use crate::{Host, check_text};

    fn metrics_of(yaml: &str) -> Result<Option<SocketAddr>, String> {
        let dir = tempfile::tempdir().expect("a temp dir");
        let host = Host::pinned(2, 1000, "/usr/bin:/bin");
        let checked = check_text(yaml, &dir.path().join("ecosystem.yaml"), &host);
        checked.desired.map(|d| d.metrics).ok_or_else(|| {
            let messages: Vec<_> = checked
                .diagnostics
                .iter()
                .map(|d| d.message.clone())
                .collect();
            messages.join("\n")
        })
    }

    #[test]
    fn an_address_is_parsed_like_a_listen_address() {
        let parsed = metrics_of("metrics: 127.0.0.1:9464\napps: {}\n");
        assert_eq!(parsed, Ok(Some("127.0.0.1:9464".parse().unwrap())));
        let parsed = metrics_of("metrics: \":9464\"\napps: {}\n");
        assert_eq!(parsed, Ok(Some("0.0.0.0:9464".parse().unwrap())));
        let parsed = metrics_of("metrics: \"[::1]:0\"\napps: {}\n");
        assert_eq!(parsed, Ok(Some("[::1]:0".parse().unwrap())));
        assert_eq!(metrics_of("apps: {}\n"), Ok(None));
    }

    #[test]
    fn bad_addresses_are_refused() {
        for (yaml, expected) in [
            ("metrics: 0.0.0.0:99999", "`99999` is not a port number"),
            ("metrics: prometheus.local:9464", "is not an IP address"),
            ("metrics: \"9464\"", "missing `:PORT`"),
            ("metrics: 9464", "expected a string, found the integer 9464"),
            ("metrics: unix:/run/m.sock", "served over TCP"),
        ] {
            let error = metrics_of(&format!("{yaml}\napps: {{}}\n")).expect_err(yaml);
            assert!(error.contains(expected), "{yaml}: {error}");
        }
    }

    #[test]
    fn an_address_an_app_listens_on_is_refused() {
        let yaml = "metrics: 127.0.0.1:8080\napps:\n  web:\n    command: sleep 1\n    listen: 0.0.0.0:8080\n";
        let error = metrics_of(yaml).expect_err("a clash");
        assert!(error.contains("which app `web` listens on"), "{error}");
        // Port 0 on both sides is two free ports, not one.
        let yaml =
            "metrics: 127.0.0.1:0\napps:\n  web:\n    command: sleep 1\n    listen: 127.0.0.1:0\n";
        assert!(metrics_of(yaml).is_ok());
    }
}
