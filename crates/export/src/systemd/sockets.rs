//! `listen` as socket units: `APP.socket`, bound once and shared by every
//! instance (`Service=APP@0.service` is what a connection starts when none
//! runs), or with `reuseport` a template `APP@.socket` whose instance N
//! serves `APP@N.service` only; `FileDescriptorName=` is the socket's name
//! in `LISTEN_FDNAMES`. The service side (`Sockets=`) is in `service`.

use std::fmt::Write as _;

use super::AppUnits;
use super::syntax::escape_line;
use crate::Notes;
use model::spec::ListenAddress;

/// One socket unit of an app.
pub(super) struct SocketUnit {
    /// `APP.socket`, `APP.1.socket`, or a template `APP@.socket`.
    pub(super) file: String,
    /// The name a service lists in `Sockets=` (`%i` for a template).
    pub(super) instance_name: String,
    pub(super) per_instance: bool,
    pub(super) text: String,
}

impl AppUnits<'_> {
    /// A socket unit per `listen` address that systemd can bind.
    pub(super) fn sockets(&self, notes: &mut Notes) -> Vec<SocketUnit> {
        let name = self.name();
        let listen = &self.app.process.listen;
        if listen.len() > 1 {
            self.warn(
                notes,
                &["listen"],
                "systemd does not promise the file's order for the fds of several socket units: find each by its name in LISTEN_FDNAMES",
            );
        }
        let mut units = Vec::new();
        for (index, spec) in listen.iter().enumerate() {
            let field = self.source.listen_field(name, index);
            let field: Vec<&str> = field.iter().map(String::as_str).collect();
            if spec.inject {
                let mut inject = field.clone();
                inject.push("inject");
                self.warn(
                    notes,
                    &inject,
                    format!(
                        "`inject`: systemd cannot hand a socket to a program that binds {} itself; no socket unit is written, and only one instance can bind the port",
                        spec.address
                    ),
                );
                continue;
            }
            let address = match &spec.address {
                ListenAddress::Tcp(address) if address.port() == 0 => {
                    self.warn(
                        notes,
                        &field,
                        "port 0 (one the kernel picks) cannot be a socket unit's: write a port",
                    );
                    continue;
                }
                ListenAddress::Tcp(address) => address.to_string(),
                ListenAddress::Unix(path) => path.display().to_string(),
            };
            let stem = if index == 0 {
                name.to_string()
            } else {
                format!("{name}.{index}")
            };
            let (file, instance_name, service) = if spec.reuseport {
                (
                    format!("{stem}@.socket"),
                    format!("{stem}@%i.socket"),
                    format!("{name}@%i.service"),
                )
            } else {
                (
                    format!("{stem}.socket"),
                    format!("{stem}.socket"),
                    format!("{name}@0.service"),
                )
            };
            let mut text = self.header("A listening socket");
            let _ = writeln!(text, "[Unit]");
            let _ = writeln!(
                text,
                "Description={}",
                escape_line(&format!(
                    "{name}: listening on {address} (supervise export)"
                ))
            );
            let _ = writeln!(text, "PartOf={name}.target");
            let _ = writeln!(text, "\n[Socket]");
            let _ = writeln!(text, "ListenStream={}", escape_line(&address));
            let _ = writeln!(text, "FileDescriptorName={}", escape_line(&spec.name));
            if spec.reuseport {
                let _ = writeln!(text, "ReusePort=yes");
            }
            let _ = writeln!(text, "Service={service}");
            units.push(SocketUnit {
                file,
                instance_name,
                per_instance: spec.reuseport,
                text,
            });
        }
        units
    }
}
