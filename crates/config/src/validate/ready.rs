//! `ready` and `ready_timeout`: how a new instance counts as ready, with its
//! probe targets parsed once, for every slot (`health` targets are parsed by
//! the same function).

use std::net::SocketAddr;
use std::time::Duration;

use super::listen::parse_host_port;
use super::{AppContext, key, parse_positive_duration};
use crate::diagnostic::{PathSeg, Reporter};
use crate::raw;
use model::spec::{ListenSpec, Probe, ProbeKind, ProbeSpec, Readiness, Template, defaults};

impl AppContext<'_> {
    pub(super) fn resolve_ready(
        &self,
        instances: Option<u32>,
        listen: &[ListenSpec],
        ready_timeout: Option<Duration>,
        reporter: &mut Reporter,
    ) -> Option<Readiness> {
        let Some((ready, path)) = self.pick("ready", |f| f.ready.as_ref()) else {
            return Some(Readiness::Delay(defaults::READY_DELAY));
        };
        let timeout = ready_timeout.unwrap_or(defaults::READY_TIMEOUT);
        let probe = |kind: ProbeKind, text: &str, reporter: &mut Reporter| {
            let mut probe_path = path.clone();
            probe_path.push(key(kind.field()));
            parse_probe_target(
                ProbeTarget {
                    kind,
                    text,
                    path: &probe_path,
                    purpose: ProbePurpose::Ready,
                },
                instances,
                listen,
                reporter,
            )
        };
        match ready {
            raw::Ready::Keyword(raw::ReadyKeyword::None) => Some(Readiness::Immediate),
            raw::Ready::Keyword(raw::ReadyKeyword::Notify) => Some(Readiness::Notify),
            raw::Ready::Tcp(tcp) => probe(ProbeKind::Tcp, &tcp.tcp, reporter).map(Readiness::Probe),
            raw::Ready::Http(http) => {
                probe(ProbeKind::Http, &http.http, reporter).map(Readiness::Probe)
            }
            raw::Ready::Delay(delay) => {
                let mut delay_path = path.clone();
                delay_path.push(key("delay"));
                let delay = parse_positive_duration(&delay.delay, &delay_path, reporter)?;
                if delay >= timeout && !self.broken("ready_timeout") {
                    reporter
                        .error(
                            &delay_path,
                            format!(
                                "ready after {} can never happen within ready_timeout {}",
                                humantime::format_duration(delay),
                                humantime::format_duration(timeout)
                            ),
                        )
                        .help("make `delay` shorter than `ready_timeout`");
                    return None;
                }
                Some(Readiness::Delay(delay))
            }
        }
    }
}

/// What a probe target is checked for: the rules are the same, the words differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProbePurpose {
    /// `ready: {tcp|http}`: when a new instance counts as ready.
    Ready,
    /// `health: {tcp|http}`: whether a ready instance is still alive.
    Health,
}

impl ProbePurpose {
    /// How diagnostics name the target: `http probe`, `health http check`.
    fn noun(self, kind: ProbeKind) -> String {
        match self {
            ProbePurpose::Ready => format!("{} probe", kind.field()),
            ProbePurpose::Health => format!("health {} check", kind.field()),
        }
    }

    /// Why one address for several instances does not work, and what does.
    fn shared_target_help(self) -> &'static str {
        match self {
            ProbePurpose::Ready => {
                "otherwise every instance probes the same address and any one answer marks them all ready; use e.g. `{instance+8000}` for the port, or `ready: notify`"
            }
            ProbePurpose::Health => {
                "otherwise every instance's check reaches the same address and one healthy instance vouches for all; use e.g. `{instance+8000}` for the port, or an `exec` check"
            }
        }
    }

    /// Why a target on the app's own `listen` address does not work.
    fn listen_target_help(self) -> &'static str {
        match self {
            ProbePurpose::Ready => "a sibling would answer the probe; use `ready: notify` instead",
            ProbePurpose::Health => {
                "a sibling would answer the check, and supervise's socket accepts connections even while this instance hangs; check a port of the instance's own (e.g. `{instance+9000}`), or use `exec` or `watchdog`"
            }
        }
    }
}

/// One `tcp:` or `http:` target as written, and where.
pub(super) struct ProbeTarget<'a> {
    pub(crate) kind: ProbeKind,
    pub(crate) text: &'a str,
    pub(crate) path: &'a [PathSeg],
    pub(crate) purpose: ProbePurpose,
}

/// Parse a probe target for every slot, `0..instances`. With several
/// instances it must depend on the slot, and no slot's target may be an
/// address the app's `listen` shares (with or without `reuseport`, siblings
/// answer there).
pub(super) fn parse_probe_target(
    target: ProbeTarget<'_>,
    instances: Option<u32>,
    listen: &[ListenSpec],
    reporter: &mut Reporter,
) -> Option<ProbeSpec> {
    let ProbeTarget {
        kind,
        text,
        path,
        purpose,
    } = target;
    let noun = purpose.noun(kind);
    let template = match Template::parse(text) {
        Ok(template) => template,
        Err(error) => {
            reporter.error(path, error.0);
            return None;
        }
    };
    let targets: Vec<Result<Probe, String>> = (0..instances.unwrap_or(1).max(1))
        .map(|i| {
            let expanded = template.expand(i);
            match kind {
                ProbeKind::Tcp => parse_tcp_target(&expanded).map(Probe::Tcp),
                ProbeKind::Http => {
                    parse_http_url(&expanded).map(|(address, path)| Probe::Http { address, path })
                }
            }
        })
        .collect();
    if let Some(message) = targets.iter().find_map(|t| t.as_ref().err()) {
        let help = match kind {
            ProbeKind::Tcp => "write it as IP:PORT, e.g. 127.0.0.1:{instance+8000}",
            ProbeKind::Http => {
                "write it as http://IP:PORT/path, e.g. http://127.0.0.1:{instance+8000}/health"
            }
        };
        reporter
            .error(path, format!("bad {noun} `{text}`: {message}"))
            .help(help);
        return None;
    }
    if instances.unwrap_or(1) > 1 && !template.uses_instance() {
        reporter
            .error(
                path,
                format!("with several instances, the {noun} must contain `{{instance}}`"),
            )
            .help(purpose.shared_target_help());
        return None;
    }
    let targets: Vec<Probe> = targets.into_iter().flatten().collect();
    let address = |probe: &Probe| match probe {
        Probe::Tcp(address) | Probe::Http { address, .. } => *address,
    };
    if let Some(covered) = targets
        .iter()
        .find_map(|t| listen.iter().find(|l| l.address.covers(&address(t))))
    {
        reporter
            .error(
                path,
                format!(
                    "the {noun} targets `{}`, which this app's `listen` shares between all its instances",
                    covered.address
                ),
            )
            .help(purpose.listen_target_help());
        return None;
    }
    Some(ProbeSpec {
        kind,
        written: template,
        targets,
    })
}

/// `IP:PORT` to connect to (port 0 names no listener).
fn parse_tcp_target(text: &str) -> Result<SocketAddr, String> {
    let address = parse_host_port(text)?;
    if address.port() == 0 {
        return Err("port 0 cannot be probed".into());
    }
    Ok(address)
}

/// `http://HOST:PORT/path` → the address to connect to and the request path.
pub fn parse_http_url(text: &str) -> Result<(SocketAddr, String), String> {
    let rest = text
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &text[7..])
        .ok_or_else(|| "only http:// URLs can be probed".to_string())?;
    // The authority ends at the first `/`, `?` or `#` (RFC 3986 §3.2); a
    // `#fragment` is the client's and is not sent (RFC 9110 §4.2.5).
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(index) => (&rest[..index], &rest[index..]),
        None => (rest, "/"),
    };
    let path = path.split_once('#').map_or(path, |(before, _)| before);
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_string()
    };
    let address = parse_host_port(&with_port)?;
    if address.port() == 0 {
        return Err("port 0 cannot be probed".into());
    }
    // The path goes into the request line as written: nothing that would
    // end it or add a header.
    if let Some(bad) = path.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the path contains {bad:?}; write spaces and control characters as %20, %0D …"
        ));
    }
    Ok((address, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls() {
        let (address, path) = parse_http_url("http://127.0.0.1:8080/health?x=1").unwrap();
        assert_eq!(address, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(path, "/health?x=1");
        assert_eq!(
            parse_http_url("http://[::1]").unwrap().0,
            "[::1]:80".parse().unwrap()
        );
        assert!(parse_http_url("https://127.0.0.1/").is_err());
        assert_eq!(
            parse_http_url("HTTP://127.0.0.1:8080/").unwrap().0,
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(parse_http_url("http://127.0.0.1:8080/x\r\nX-Injected: 1").is_err());
        assert!(parse_http_url("http://127.0.0.1:8080/a b").is_err());
        // A fragment is not part of what is sent, and the authority ends
        // before a query or a fragment.
        for (url, path) in [
            ("http://127.0.0.1:8080/health#top", "/health"),
            ("http://127.0.0.1:8080#top", "/"),
            ("http://127.0.0.1:8080?ready=1", "/?ready=1"),
            ("http://127.0.0.1:8080/a?b=1#c d", "/a?b=1"),
        ] {
            let parsed = parse_http_url(url);
            assert_eq!(parsed.map(|(_, p)| p), Ok(path.to_string()), "{url}");
        }
        assert!(parse_http_url("http://127.0.0.1:0/").is_err());
        assert!(parse_tcp_target("127.0.0.1:0").is_err());
        assert!(parse_tcp_target("127.0.0.1:80").is_ok());
    }
}
