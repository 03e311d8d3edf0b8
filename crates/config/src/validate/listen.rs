//! `listen`: addresses, socket names, `reuseport`, and addresses that two
//! listeners would both bind.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use super::{AppContext, MAX_UNIX_PATH, join_clean, key};
use crate::diagnostic::{PathSeg, Reporter};
use crate::raw::{self, EcosystemFile};
use model::spec::{ListenAddress, ListenSpec};

impl AppContext<'_> {
    pub(super) fn resolve_listen(&self, reporter: &mut Reporter) -> Vec<ListenSpec> {
        let Some((listen, path)) = self.pick("listen", |f| f.listen.as_ref()) else {
            return Vec::new();
        };
        let entries: Vec<(raw::ListenEntry, Vec<PathSeg>)> = match listen {
            raw::Listen::One(entry) => vec![(entry, path.clone())],
            raw::Listen::Many(entries) => entries
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    let mut p = path.clone();
                    p.push(PathSeg::Index(i));
                    (e, p)
                })
                .collect(),
        };
        if entries.len() > model::limits::MAX_LISTEN_FDS {
            reporter.error(
                &path,
                format!(
                    "{} listening sockets is more than the limit of {}",
                    entries.len(),
                    model::limits::MAX_LISTEN_FDS
                ),
            );
            return Vec::new();
        }
        let mut specs = Vec::new();
        let mut names = HashSet::new();
        for (entry, entry_path) in entries {
            let (name, address, address_path, reuseport, inject) = match entry {
                raw::ListenEntry::Address(address) => {
                    (self.name.to_string(), address, entry_path, false, false)
                }
                raw::ListenEntry::Socket(socket) => {
                    let mut name_path = entry_path.clone();
                    name_path.push(key("name"));
                    let name = socket.name.unwrap_or_else(|| self.name.to_string());
                    if !valid_fd_name(&name) {
                        reporter
                            .error(&name_path, format!("invalid socket name `{name}`"))
                            .help("names go into LISTEN_FDNAMES: 1 to 255 printable ASCII characters, no `:`");
                    } else if name != self.name && !names.insert(name.clone()) {
                        reporter.error(
                            &name_path,
                            format!("socket name `{name}` is used twice in this app"),
                        );
                    }
                    let mut address_path = entry_path;
                    address_path.push(key("address"));
                    (
                        name,
                        socket.address,
                        address_path,
                        socket.reuseport.unwrap_or(false),
                        socket.inject.unwrap_or(false),
                    )
                }
            };
            match parse_listen_address(&address, self.folder) {
                Ok(ListenAddress::Unix(_)) if reuseport => {
                    reporter
                        .error(&address_path, "`reuseport` works with TCP addresses only")
                        .help("drop `reuseport: true`, or listen on IP:PORT");
                }
                Ok(ListenAddress::Tcp(address)) if reuseport && address.port() == 0 => {
                    reporter
                        .error(&address_path, "`reuseport` needs a fixed port")
                        .help("every instance binds its own socket to the same port, so port 0 (any free port) cannot work");
                }
                Ok(ListenAddress::Unix(_)) if inject => {
                    reporter
                        .error(&address_path, "`inject` works with TCP addresses only")
                        .help("a program that binds a unix socket itself cannot be handed ours: drop `inject: true`, or listen on IP:PORT");
                }
                Ok(ListenAddress::Tcp(address)) if inject && address.port() == 0 => {
                    reporter
                        .error(&address_path, "`inject` needs a fixed port")
                        .help("the program is handed this socket when it binds the same port, so write the port it binds");
                }
                Ok(address) => specs.push(ListenSpec {
                    name,
                    address,
                    reuseport,
                    inject,
                }),
                Err((message, help)) => {
                    reporter.error(&address_path, message).help(help);
                }
            }
        }
        let injected = specs.iter().filter(|s| s.inject).count();
        if injected > model::limits::MAX_INJECTED_SOCKETS {
            reporter
                .error(
                    &path,
                    format!(
                        "{injected} sockets with `inject` is more than the limit of {}",
                        model::limits::MAX_INJECTED_SOCKETS
                    ),
                )
                .help("the preload library hands over at most that many sockets to one program");
        }
        specs
    }
}

fn valid_fd_name(name: &str) -> bool {
    (1..=255).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

/// Parse a `listen` address: `host:port`, `[v6]:port`, `:port`, `unix:/path`.
fn parse_listen_address(text: &str, folder: &Path) -> Result<ListenAddress, (String, String)> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err((
                "`unix:` needs a socket path".into(),
                "write e.g. unix:/run/app.sock".into(),
            ));
        }
        let absolute = join_clean(folder, path);
        if absolute.as_os_str().len() > MAX_UNIX_PATH {
            return Err((
                format!(
                    "unix socket path `{}` is {} bytes; the limit is {MAX_UNIX_PATH}",
                    absolute.display(),
                    absolute.as_os_str().len()
                ),
                "use a shorter path, e.g. under /run".into(),
            ));
        }
        return Ok(ListenAddress::Unix(absolute));
    }
    parse_host_port(text).map(ListenAddress::Tcp).map_err(|message| {
        (
            format!("invalid listen address `{text}`: {message}"),
            "write IP:PORT (`0.0.0.0:5000`, `127.0.0.1:8080`, `[::]:443`), `:PORT` for all IPv4 interfaces, or `unix:/path`".into(),
        )
    })
}

/// `IP:PORT`, `[v6]:PORT`, `:PORT` (all IPv4 interfaces), `localhost:PORT`.
/// Host names other than `localhost` are not resolved: an address is bound once
/// at start and must not depend on DNS.
pub fn parse_host_port(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("missing `:PORT`".into());
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number (0 to 65535)"))?;
    let ip: IpAddr = match host {
        "" => Ipv4Addr::UNSPECIFIED.into(),
        "localhost" => Ipv4Addr::LOCALHOST.into(),
        _ => {
            let bare = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            let ip: IpAddr = bare.parse().map_err(|_| {
                format!("`{host}` is not an IP address (host names are not resolved)")
            })?;
            if ip.is_ipv6() && !host.starts_with('[') {
                return Err("write IPv6 addresses in brackets: [::1]:PORT".into());
            }
            ip
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// Report addresses that two listeners (of any apps) would both bind.
pub(super) fn check_listen_clashes(
    file: &EcosystemFile,
    listeners: &[(&str, Vec<ListenSpec>)],
    reporter: &mut Reporter,
) {
    let mut seen: Vec<(&str, &ListenSpec)> = Vec::new();
    for (app, listens) in listeners {
        for (index, listen) in listens.iter().enumerate() {
            if let Some((other_app, other)) = seen
                .iter()
                .find(|(_, s)| s.address.overlaps(&listen.address))
            {
                let path = listen_entry_path(file, app, index);
                let what = if other.address == listen.address {
                    "is also"
                } else {
                    "overlaps"
                };
                let message = if other_app == app {
                    format!(
                        "`{}` {what} `{}` in this app's listen",
                        listen.address, other.address
                    )
                } else {
                    format!(
                        "`{}` {what} `{}` of app `{other_app}`",
                        listen.address, other.address
                    )
                };
                reporter
                    .error(&path, message)
                    .help("every address can be bound once; let one app own it (all its instances share it)");
            }
            seen.push((app, listen));
        }
    }
}

fn listen_entry_path(file: &EcosystemFile, app: &str, index: usize) -> Vec<PathSeg> {
    let own = file.apps.get(app).and_then(|a| a.listen.as_ref());
    let (base, listen) = match own {
        Some(listen) => (vec![key("apps"), key(app), key("listen")], Some(listen)),
        None => (
            vec![key("defaults"), key("listen")],
            file.defaults.as_ref().and_then(|d| d.listen.as_ref()),
        ),
    };
    let mut path = base;
    if let Some(raw::Listen::Many(_)) = listen {
        path.push(PathSeg::Index(index));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            parse_host_port("0.0.0.0:5000").unwrap(),
            "0.0.0.0:5000".parse().unwrap()
        );
        assert_eq!(
            parse_host_port(":80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(
            parse_host_port("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert_eq!(
            parse_host_port("localhost:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert!(parse_host_port("example.com:80").is_err());
        assert!(parse_host_port("1.2.3.4").is_err());
        assert!(parse_host_port("1.2.3.4:70000").is_err());
        assert!(parse_host_port("::1:80").is_err());
    }

    #[test]
    fn fd_names() {
        assert!(valid_fd_name("http"));
        assert!(!valid_fd_name("a:b"));
        assert!(!valid_fd_name(""));
    }
}
