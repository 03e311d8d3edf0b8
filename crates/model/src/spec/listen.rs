//! `listen`: the sockets the supervisor binds and hands to an app's
//! instances, their addresses (what may clash, what a probe reaches), and
//! the key each socket is registered under.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A listening socket shared by every instance of an app.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ListenSpec {
    /// The name passed in `LISTEN_FDNAMES`.
    pub name: String,
    pub address: ListenAddress,
    /// One SO_REUSEPORT socket per instance instead of one shared socket.
    pub reuseport: bool,
    /// Preload the library that hands this socket to a program binding the
    /// same address itself (effects::inject).
    pub inject: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ListenAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ListenAddress {
    /// Would binding both at once fail (same port on overlapping interfaces, or
    /// the same socket path)? Port 0 asks the kernel for a free port: never clashes.
    pub fn overlaps(&self, other: &ListenAddress) -> bool {
        match (self, other) {
            (ListenAddress::Unix(a), ListenAddress::Unix(b)) => a == b,
            (ListenAddress::Tcp(a), ListenAddress::Tcp(b)) => {
                a.port() != 0
                    && a.port() == b.port()
                    && (a.ip() == b.ip()
                        || (a.ip().is_unspecified() && (a.is_ipv6() || b.is_ipv4()))
                        || (b.ip().is_unspecified() && (b.is_ipv6() || a.is_ipv4())))
            }
            _ => false,
        }
    }

    /// Would a connection to `target` reach this listener? (A connection
    /// to `0.0.0.0` or `::` goes to this host, as Linux does it.)
    pub fn covers(&self, target: &SocketAddr) -> bool {
        match self {
            ListenAddress::Tcp(address) => {
                address.port() == target.port()
                    && (address.ip() == target.ip()
                        || address.ip().is_unspecified()
                        || target.ip().is_unspecified())
            }
            ListenAddress::Unix(_) => false,
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Tcp(address) => write!(f, "{address}"),
            ListenAddress::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// What a listening socket is registered under: its address, and for
/// `reuseport` the slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SocketKey {
    pub address: ListenAddress,
    pub slot: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_to_any_address_reaches_a_listener_on_this_host() {
        let listen = ListenAddress::Tcp("127.0.0.1:8000".parse().unwrap());
        assert!(listen.covers(&"0.0.0.0:8000".parse().unwrap()));
        assert!(listen.covers(&"127.0.0.1:8000".parse().unwrap()));
        assert!(!listen.covers(&"127.0.0.2:8000".parse().unwrap()));
        assert!(!listen.covers(&"0.0.0.0:8001".parse().unwrap()));
    }

    #[test]
    fn overlapping_addresses() {
        let tcp = |s: &str| ListenAddress::Tcp(s.parse().unwrap());
        assert!(tcp("0.0.0.0:80").overlaps(&tcp("127.0.0.1:80")));
        assert!(tcp("127.0.0.1:80").overlaps(&tcp("0.0.0.0:80")));
        assert!(tcp("[::]:80").overlaps(&tcp("127.0.0.1:80")));
        assert!(!tcp("127.0.0.1:80").overlaps(&tcp("127.0.0.2:80")));
        assert!(!tcp("127.0.0.1:80").overlaps(&tcp("127.0.0.1:81")));
        assert!(!tcp("127.0.0.1:0").overlaps(&tcp("127.0.0.1:0")));
        assert!(!tcp("0.0.0.0:80").overlaps(&tcp("[::1]:80")));
    }
}
