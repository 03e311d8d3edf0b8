//! Talking to systemd when it runs us as `Type=notify` (`NOTIFY_SOCKET` set):
//! `READY=1` once every app's instances are ready, `RELOADING=1` … `READY=1`
//! around a reload of the file, `STOPPING=1` on shutdown.

use std::ffi::OsString;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

#[derive(Debug)]
pub struct SystemdNotifier {
    socket: UnixDatagram,
    address: SocketAddr,
}

impl SystemdNotifier {
    /// From the supervisor's own `NOTIFY_SOCKET` (`/path` or `@abstract`).
    pub fn from_env(value: Option<OsString>) -> Option<SystemdNotifier> {
        let value = value?;
        let bytes = value.as_bytes();
        let address = match bytes.first()? {
            b'@' => SocketAddr::from_abstract_name(&bytes[1..]).ok()?,
            b'/' => SocketAddr::from_pathname(std::path::Path::new(&value)).ok()?,
            _ => return None,
        };
        // std creates the socket close-on-exec.
        let socket = UnixDatagram::unbound().ok()?;
        Some(SystemdNotifier { socket, address })
    }

    /// Send one state message; failures are reported to the caller to log.
    pub(crate) fn notify(&self, state: &str) -> std::io::Result<()> {
        self.socket
            .send_to_addr(state.as_bytes(), &self.address)
            .map(|_| ())
    }
}
