//! The registry of listening sockets (DESIGN.md §5).
//!
//! Sockets are bound by the supervisor, keyed by address, and stay open for as
//! long as some app wants the address — across scale-downs to zero, bad edits,
//! and moves of an address from one app to another — so there is never a moment
//! with nobody listening. Every instance of an app receives the same sockets as
//! fd 3, 4, …. The sockets stay in blocking mode: that is a property shared
//! with the workers (systemd does the same), and the supervisor never accepts.
//!
//! With `reuseport`, each instance slot gets a socket of its own on the same
//! address (SO_REUSEPORT): the kernel then spreads connections over the
//! sockets by hash, which keeps workers with greedy accept loops even. A
//! closing socket's queued connections move to its siblings only with the
//! `net.ipv4.tcp_migrate_req` sysctl set to 1; we warn when it is not.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use socket2::{Domain, SockAddr, Socket, Type};

use model::spec::ListenAddress;
pub(crate) use model::spec::SocketKey;

/// The listen backlog. The kernel caps it at `net.core.somaxconn`.
pub(crate) const LISTEN_BACKLOG: i32 = 1024;

#[derive(Debug)]
struct Bound {
    fd: OwnedFd,
    /// What the socket is actually bound to (port 0 resolved).
    local: ListenAddress,
}

#[derive(Debug, Default)]
pub struct SocketRegistry {
    sockets: HashMap<SocketKey, Bound>,
    warned_about_migration: bool,
}

/// A socket that could not be bound, with the address and the reason.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {address}: {reason}")]
pub struct BindError {
    pub address: ListenAddress,
    pub reason: String,
}

impl SocketRegistry {
    /// The fd and actual address for `key`, binding it (for `app`, in the
    /// log) if new.
    pub fn ensure(
        &mut self,
        key: &SocketKey,
        app: &str,
    ) -> Result<(RawFd, ListenAddress), BindError> {
        if let Some(bound) = self.sockets.get(key) {
            return Ok((bound.fd.as_raw_fd(), bound.local.clone()));
        }
        let address = &key.address;
        let reuseport = key.slot.is_some();
        if reuseport && !self.warned_about_migration && !connection_migration_enabled() {
            self.warned_about_migration = true;
            tracing::warn!(
                "net.ipv4.tcp_migrate_req is not 1: connections queued on a stopping instance's \
                 reuseport socket are lost instead of moving to its siblings (sysctl -w net.ipv4.tcp_migrate_req=1)"
            );
        }
        let fail = |reason: String| BindError {
            address: address.clone(),
            reason,
        };
        let socket = match address {
            ListenAddress::Tcp(socket_address) => bind_tcp(socket_address, reuseport),
            ListenAddress::Unix(path) => bind_unix(path),
        }
        .map_err(|e| fail(e.to_string()))?;
        let local = match address {
            ListenAddress::Tcp(_) => socket
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .map_or_else(|| address.clone(), ListenAddress::Tcp),
            ListenAddress::Unix(_) => address.clone(),
        };
        match key.slot {
            Some(slot) => tracing::info!(
                event = "listening", app, slot, address = %local,
                "{app}.{slot}: listening on {local} (reuseport)"
            ),
            None => {
                tracing::info!(event = "listening", app, address = %local, "{app}: listening on {local}")
            }
        }
        let fd = OwnedFd::from(socket);
        let raw = fd.as_raw_fd();
        self.sockets.insert(
            key.clone(),
            Bound {
                fd,
                local: local.clone(),
            },
        );
        Ok((raw, local))
    }

    /// The fd of the socket of `key`, if it is bound.
    pub(crate) fn fd_of(&self, key: &SocketKey) -> Option<RawFd> {
        self.sockets.get(key).map(|bound| bound.fd.as_raw_fd())
    }

    /// Close every socket whose key is not in `wanted` (a Unix socket's
    /// file is removed too).
    pub(crate) fn retain(&mut self, wanted: &HashSet<SocketKey>) -> Vec<SocketKey> {
        let unwanted: Vec<SocketKey> = self
            .sockets
            .keys()
            .filter(|k| !wanted.contains(k))
            .cloned()
            .collect();
        for key in &unwanted {
            self.sockets.remove(key);
            if let ListenAddress::Unix(path) = &key.address {
                let _ = std::fs::remove_file(path);
            }
        }
        unwanted
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sockets.len()
    }
}

/// One bound socket as an upgrade hands it over: its fd is kept open
/// across the exec.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SocketState {
    pub(crate) key: SocketKey,
    pub(crate) fd: RawFd,
    pub(crate) local: ListenAddress,
}

impl SocketRegistry {
    /// Every socket, for an upgrade (the registry keeps owning them).
    pub(crate) fn export(&self) -> Vec<SocketState> {
        self.sockets
            .iter()
            .map(|(key, bound)| SocketState {
                key: key.clone(),
                fd: bound.fd.as_raw_fd(),
                local: bound.local.clone(),
            })
            .collect()
    }

    /// The registry the previous image handed over.
    pub(crate) fn restore(states: Vec<SocketState>) -> std::io::Result<SocketRegistry> {
        let mut registry = SocketRegistry::default();
        for state in states {
            let fd =
                crate::upgrade::exec::adopt_fd(state.fd, &format!("the socket {}", state.local))?;
            registry.sockets.insert(
                state.key,
                Bound {
                    fd,
                    local: state.local,
                },
            );
        }
        // Told once per run; the previous image may have, too.
        registry.warned_about_migration = true;
        Ok(registry)
    }
}

impl Drop for SocketRegistry {
    fn drop(&mut self) {
        self.retain(&HashSet::new());
    }
}

/// Whether the kernel moves a closing reuseport socket's queue to its siblings.
fn connection_migration_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_migrate_req").is_ok_and(|v| v.trim() == "1")
}

fn bind_tcp(address: &SocketAddr, reuseport: bool) -> io::Result<Socket> {
    // socket2 creates the socket close-on-exec.
    let socket = Socket::new(Domain::for_address(*address), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if reuseport {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&SockAddr::from(*address))?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket)
}

fn bind_unix(path: &Path) -> io::Result<Socket> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(metadata) = std::fs::symlink_metadata(path) {
        if !metadata.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        // A stale socket file is replaced only if nothing listens on it.
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process is listening on it",
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)?,
            Err(e) => return Err(e),
        }
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.bind(&SockAddr::unix(path)?)?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(address: ListenAddress) -> SocketKey {
        SocketKey {
            address,
            slot: None,
        }
    }

    #[test]
    fn reuseport_gives_each_slot_its_own_socket_on_one_port() {
        let mut registry = SocketRegistry::default();
        let (_, local) = registry
            .ensure(
                &shared(ListenAddress::Tcp("127.0.0.1:0".parse().unwrap())),
                "probe",
            )
            .unwrap();
        registry.retain(&HashSet::new());
        let per_slot = |slot| SocketKey {
            address: local.clone(),
            slot: Some(slot),
        };
        let (first, _) = registry.ensure(&per_slot(0), "test").unwrap();
        let (second, second_local) = registry.ensure(&per_slot(1), "test").unwrap();
        assert_ne!(first, second);
        assert_eq!(second_local, local);
        registry.retain(&HashSet::from([per_slot(0)]));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn binds_once_per_address_and_resolves_port_zero() {
        let mut registry = SocketRegistry::default();
        let address = shared(ListenAddress::Tcp("127.0.0.1:0".parse().unwrap()));
        let (fd, local) = registry.ensure(&address, "test").unwrap();
        let (again, _) = registry.ensure(&address, "test").unwrap();
        assert_eq!(fd, again);
        match local {
            ListenAddress::Tcp(bound) => assert_ne!(bound.port(), 0),
            other => panic!("{other:?}"),
        }
        // SAFETY: fcntl on a live fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        registry.retain(&HashSet::new());
        assert_eq!(registry.len(), 0);
    }

    #[test]
    fn binds_ipv6_when_the_machine_has_it() {
        if std::net::TcpListener::bind("[::1]:0").is_err() {
            println!("skipped: no IPv6 loopback here");
            return;
        }
        let mut registry = SocketRegistry::default();
        let (_, local) = registry
            .ensure(
                &shared(ListenAddress::Tcp("[::1]:0".parse().unwrap())),
                "test",
            )
            .unwrap();
        assert!(matches!(local, ListenAddress::Tcp(a) if a.is_ipv6() && a.port() != 0));
    }

    #[test]
    fn a_port_in_use_is_an_error_naming_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = shared(ListenAddress::Tcp(taken.local_addr().unwrap()));
        let error = SocketRegistry::default()
            .ensure(&address, "test")
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains(&taken.local_addr().unwrap().to_string()),
            "{error}"
        );
    }

    #[test]
    fn unix_sockets_replace_stale_files_but_not_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let address = shared(ListenAddress::Unix(path.clone()));
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let mut registry = SocketRegistry::default();
        registry
            .ensure(&address, "test")
            .expect("a stale file is replaced");
        assert!(
            SocketRegistry::default().ensure(&address, "test").is_err(),
            "a live socket is kept"
        );
        registry.retain(&HashSet::new());
        assert!(!path.exists());
        std::fs::write(&path, "data").unwrap();
        assert!(
            SocketRegistry::default().ensure(&address, "test").is_err(),
            "a regular file is never removed"
        );
    }
}
