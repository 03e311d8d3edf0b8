//! An app's `listen` addresses in a cluster. Kubernetes passes no sockets:
//! the container declares its ports and binds the first one itself (it is
//! given as `PORT`), and each TCP port of a Deployment gets a ClusterIP
//! Service, by whose name the other apps reach it.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{ContainerPort, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::names::{dns_label, port_name};
use super::workloads::runs_to_completion;
use super::{AppExport, Objects, yaml};
use crate::{Notes, Source};
use model::spec::{AppSpec, ListenAddress};

/// The Services of `app`: one per TCP `listen` port of a Deployment, named
/// after the app (`APP`, then `APP-INDEX` for a later entry).
pub(super) fn services_of(source: &Source, app: &AppSpec) -> Vec<(u16, String)> {
    let Ok(name) = dns_label(&app.name) else {
        return Vec::new();
    };
    if app.schedule.is_some() || runs_to_completion(source, app) {
        return Vec::new();
    }
    let mut services = Vec::new();
    for (index, listen) in app.process.listen.iter().enumerate() {
        let ListenAddress::Tcp(address) = &listen.address else {
            continue;
        };
        if address.port() == 0 {
            continue;
        }
        let service = if services.is_empty() {
            name.clone()
        } else {
            format!("{name}-{index}")
        };
        services.push((address.port(), service));
    }
    services
}

impl AppExport<'_> {
    pub(super) fn first_tcp_port(&self) -> Option<u16> {
        self.app
            .process
            .listen
            .iter()
            .find_map(|listen| match &listen.address {
                ListenAddress::Tcp(address) if address.port() != 0 => Some(address.port()),
                _ => None,
            })
    }

    pub(super) fn container_ports(&self, notes: &mut Notes) -> Vec<ContainerPort> {
        let mut ports = Vec::new();
        let mut names = HashSet::new();
        let mut first_tcp = true;
        for (index, listen) in self.app.process.listen.iter().enumerate() {
            let entry = self.source.listen_field(&self.app.name, index);
            let entry: Vec<&str> = entry.iter().map(String::as_str).collect();
            if listen.reuseport {
                let mut field = entry.clone();
                field.push("reuseport");
                self.warn(
                    notes,
                    &field,
                    "`reuseport` has no effect in Kubernetes: each pod has a socket of its own",
                );
            }
            let address = match &listen.address {
                ListenAddress::Unix(path) => {
                    self.warn(
                        notes,
                        &entry,
                        format!(
                            "unix socket {} is not exported: a Service reaches TCP ports only",
                            path.display()
                        ),
                    );
                    continue;
                }
                ListenAddress::Tcp(address) => *address,
            };
            if address.port() == 0 {
                self.warn(
                    notes,
                    &entry,
                    "port 0 (one the kernel picks) cannot be a Service's port: write a port",
                );
                continue;
            }
            if !first_tcp {
                self.warn(
                    notes,
                    &entry,
                    format!(
                        "only the first address is passed as PORT: in a pod the worker must bind port {} itself",
                        address.port()
                    ),
                );
            }
            first_tcp = false;
            if address.ip().is_loopback() && listen.inject {
                let mut field = entry.clone();
                field.push("inject");
                notes.warn_with_help(
                    &self.app.name,
                    &field,
                    format!(
                        "with `inject` the program binds {address} itself: in a pod its Service and the kubelet's probes come to the pod's IP, which it would not answer"
                    ),
                    Some(format!(
                        "make it bind every interface (0.0.0.0:{}) in the image",
                        address.port()
                    )),
                );
            } else if address.ip().is_loopback() {
                notes.note(format!(
                    "{}: listen {address} is a loopback address; in a pod the worker must bind every interface (0.0.0.0:{}) for its Service to reach it",
                    self.app.name,
                    address.port()
                ));
            }
            let name = port_name(&listen.name).filter(|n| names.insert(n.clone()));
            if name.is_none() {
                let mut field = entry.clone();
                field.push("name");
                self.warn(
                    notes,
                    &field,
                    format!(
                        "socket name `{}` is not a Kubernetes port name (at most 15 lowercase letters, digits and `-`); the port is unnamed",
                        listen.name
                    ),
                );
            }
            ports.push(ContainerPort {
                container_port: i32::from(address.port()),
                name,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            });
        }
        ports
    }

    pub(super) fn services(&self, objects: &mut Objects) {
        for (port, name) in services_of(self.source, self.app) {
            let service = Service {
                metadata: self.metadata(name.clone()),
                spec: Some(ServiceSpec {
                    type_: Some("ClusterIP".into()),
                    selector: Some(self.labels()),
                    ports: Some(vec![ServicePort {
                        port: i32::from(port),
                        target_port: Some(IntOrString::Int(i32::from(port))),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    }]),
                    ..ServiceSpec::default()
                }),
                ..Service::default()
            };
            objects.push(("Service", name, yaml(&service)));
        }
    }
}
