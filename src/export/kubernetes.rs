//! `supervise export kubernetes`: each app as the Kubernetes objects that do
//! its job, built from `k8s-openapi`'s types so every object is well-formed
//! by construction (the tests also validate them against the 1.33 schemas).
//!
//! - an app that runs for ever → a `Deployment` (replicas = instances);
//! - a one-shot (`restart: never`, or `on-failure` when an app waits for it
//!   to be `completed`) → a `Job`: a Deployment would run it again after
//!   every exit;
//! - each TCP `listen` address → a ClusterIP `Service` on that port; the
//!   container gets `PORT` and binds it itself, since Kubernetes passes no
//!   sockets (a worker written for fd 3 must fall back to `PORT`);
//! - `env_file` → a `ConfigMap` read with `envFrom` (`env` wins over it, as
//!   it does for us);
//! - a `schedule` → a `CronJob`.
//!
//! What has no Kubernetes equivalent is warned about where it is written
//! (see [`super`]). Names: an app name is `[a-z0-9][a-z0-9_-]*`, a
//! Kubernetes name is a DNS label; `_` becomes `-` (with a warning), and a
//! name that still does not fit (too long, or clashing with another app's
//! after the change) is refused with an error.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, EnvVar, ExecAction,
    HTTPGetAction, Lifecycle, PodOS, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SecurityContext, Service, ServicePort, ServiceSpec, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Exported, Notes, Source, whole_seconds};
use crate::config::diagnostic::PathSeg;
use crate::config::envfile;
use crate::spec::{
    AppSpec, HealthCheck, HealthSpec, ListenAddress, Overlap, Probe as Check, ProbeSpec, Readiness,
    RestartPolicy, Template, When,
};

/// The command line's choices.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The image every container runs (default: the app's name).
    pub image: Option<String>,
    /// The namespace of every object (default: none, i.e. kubectl's).
    pub namespace: Option<String>,
    /// Export this app only.
    pub app: Option<String>,
    /// The replica count for `instances: max` (default: this machine's CPUs).
    pub replicas_for_max: Option<u32>,
}

/// The label every object of an app carries, and its Services select.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// The annotation that keeps the app's name as written.
pub const APP_ANNOTATION: &str = "supervise/app";
/// The annotation that records `depends_on`, which Kubernetes does not order.
pub const DEPENDS_ANNOTATION: &str = "supervise/depends-on";

/// The Service through which pods reach the API server, in `default`.
const API_SERVER_SERVICE: &str = "kubernetes";

/// The longest name of most objects (a DNS label).
const MAX_NAME: usize = 63;
/// A CronJob's name: its Jobs append 11 characters.
const MAX_CRONJOB_NAME: usize = 52;

/// Translate the file. `Err` is a usage error (an unknown `--app`).
pub fn export(source: &Source, options: &Options) -> Result<Exported, String> {
    let apps = source.apps(options.app.as_deref())?;
    let mut notes = Notes::new(source);
    let mut files = Vec::new();
    let mut taken: HashSet<(&'static str, String)> = HashSet::new();
    if options.image.is_none() {
        notes.note("no --image given: each container runs an image named after its app");
    }
    warn_top_level(source, &mut notes);
    for app in apps {
        let Some(name) = object_name(app, &mut notes) else {
            continue;
        };
        let mut objects = Vec::new();
        let exporter = AppExport {
            source,
            options,
            app,
            name: name.clone(),
        };
        exporter.objects(&mut notes, &mut objects);
        for (kind, object_name, text) in objects {
            // A name made from the app's (`APP-1`, `APP-env`) can be longer.
            if object_name.len() > MAX_NAME {
                notes.error_key(
                    &app_path(&app.name),
                    format!(
                        "the {kind} `{object_name}` of app `{}` would be {} characters: a Kubernetes name has at most {MAX_NAME}",
                        app.name,
                        object_name.len()
                    ),
                    "use a shorter app name",
                );
                continue;
            }
            if kind == "Service"
                && object_name == API_SERVER_SERVICE
                && options
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| ns == "default")
            {
                notes.error_key(
                    &app_path(&app.name),
                    format!(
                        "the Service `{object_name}` of app `{}` would replace the API server's own, `{API_SERVER_SERVICE}` in the namespace `default`",
                        app.name
                    ),
                    "rename the app, or export it into a namespace of its own with --namespace",
                );
                continue;
            }
            if !taken.insert((kind, object_name.clone())) {
                notes.error_key(
                    &app_path(&app.name),
                    format!(
                        "the {kind} `{object_name}` of app `{}` has the name of another app's",
                        app.name
                    ),
                    "rename one of the apps: Kubernetes names are made from app names, `_` read as `-`",
                );
                continue;
            }
            files.push((format!("{kind}/{object_name}"), text));
        }
    }
    let (diagnostics, notes) = notes.finish();
    Ok(Exported {
        files,
        diagnostics,
        notes,
    })
}

/// All documents as one YAML stream.
pub fn render(exported: &Exported) -> String {
    let mut out = String::new();
    for (index, (_, text)) in exported.files.iter().enumerate() {
        if index > 0 {
            out.push_str("---\n");
        }
        out.push_str(text);
    }
    out
}

fn app_path(app: &str) -> Vec<PathSeg> {
    vec![PathSeg::Key("apps".into()), PathSeg::Key(app.into())]
}

fn warn_top_level(source: &Source, notes: &mut Notes) {
    let top = |key: &str| vec![PathSeg::Key(key.to_string())];
    if source.node_at(&top("memory_check")).is_some() {
        notes.warn_key(
            &top("memory_check"),
            "`memory_check` has no effect in Kubernetes: the kernel holds each container to its memory limit",
            "`max_memory` becomes resources.limits.memory",
        );
    }
    if source.node_at(&top("metrics")).is_some() {
        notes.warn_key(
            &top("metrics"),
            "`metrics` is not exported: there is no supervisor in the cluster to serve them",
            "kube-state-metrics reports Deployments, replicas and restarts",
        );
    }
}

/// The DNS-label name of an app's objects, or `None` (with an error) when
/// the app's name cannot be made one.
fn object_name(app: &AppSpec, notes: &mut Notes) -> Option<String> {
    match dns_label(&app.name) {
        Ok(name) => {
            if name != app.name {
                notes.warn_key(
                    &app_path(&app.name),
                    format!(
                        "app name `{}` is not a Kubernetes name; its objects are named `{name}`",
                        app.name
                    ),
                    "Kubernetes names are DNS labels: lowercase letters, digits and `-`, starting and ending with a letter or digit",
                );
            }
            let limit = if app.schedule.is_some() {
                MAX_CRONJOB_NAME
            } else {
                MAX_NAME
            };
            if name.len() > limit {
                notes.error_key(
                    &app_path(&app.name),
                    format!(
                        "app name `{}` is {} characters: a Kubernetes {} name has at most {limit}",
                        app.name,
                        name.len(),
                        if app.schedule.is_some() {
                            "CronJob"
                        } else {
                            "Service or Deployment"
                        }
                    ),
                    "use a shorter app name",
                );
                return None;
            }
            Some(name)
        }
        Err(message) => {
            notes.error_key(&app_path(&app.name), message, "rename the app");
            None
        }
    }
}

/// An app name (`[a-z0-9][a-z0-9_-]*`) as a DNS-1035 label (what a Service
/// needs, and so every object of the app): `_` → `-`, trailing `-` dropped,
/// a leading digit prefixed with `app-`.
pub fn dns_label(name: &str) -> Result<String, String> {
    let mut label: String = name
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .collect();
    while label.ends_with('-') {
        label.pop();
    }
    if label.starts_with(|c: char| c.is_ascii_digit()) {
        label.insert_str(0, "app-");
    }
    let valid = label.starts_with(|c: char| c.is_ascii_lowercase())
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(label)
    } else {
        Err(format!(
            "app name `{name}` cannot be made a Kubernetes name"
        ))
    }
}

/// Whether `name` is a DNS-1123 label (what a namespace is): 1 to 63
/// lowercase letters, digits and `-`, starting and ending with a letter or
/// digit.
pub fn is_dns1123_label(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A port name (IANA service name: at most 15 characters, lowercase letters,
/// digits and single `-`, a letter somewhere, no `-` at either end).
fn port_name(name: &str) -> Option<String> {
    let name: String = name
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .collect();
    let valid = (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.chars().any(|c| c.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    valid.then_some(name)
}

/// Whether `app` is a one-shot exported as a Job (`restart: never`, or
/// `on-failure` when another app waits for it to be `completed`).
fn runs_to_completion(source: &Source, app: &AppSpec) -> bool {
    app.schedule.is_none()
        && (app.restart == RestartPolicy::Never
            || (app.restart == RestartPolicy::OnFailure
                && source.waited_for_as_completed(&app.name)))
}

/// The Services of `app`: one per TCP `listen` port of a Deployment, named
/// after the app (`APP`, then `APP-INDEX` for a later entry).
fn services_of(source: &Source, app: &AppSpec) -> Vec<(u16, String)> {
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

/// The probes of `app` with the key each is written under: `ready`, then
/// `health`.
fn probes(app: &AppSpec) -> impl Iterator<Item = (&'static str, &ProbeSpec)> {
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
fn probe_target(spec: &ProbeSpec) -> Option<SocketAddr> {
    match spec.target(0)? {
        Check::Tcp(address) | Check::Http { address, .. } => Some(*address),
    }
}

/// The probe targets of `app` (`ready` and `health`, as exported: slot 0's).
fn probe_targets(app: &AppSpec) -> Vec<SocketAddr> {
    probes(app)
        .filter_map(|(_, spec)| probe_target(spec))
        .collect()
}

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

fn yaml<T: serde::Serialize>(object: &T) -> String {
    // Serializing plain data (strings, numbers, maps) cannot fail; if it
    // ever did, the output says so instead of dropping the object.
    serde_saphyr::to_string(object)
        .unwrap_or_else(|error| format!("# error: this object could not be written: {error}\n"))
}

fn seconds_i32(seconds: i64) -> i32 {
    i32::try_from(seconds).unwrap_or(i32::MAX)
}

struct AppExport<'a> {
    source: &'a Source,
    options: &'a Options,
    app: &'a AppSpec,
    /// The DNS-label name of the app's objects.
    name: String,
}

type Objects = Vec<(&'static str, String, String)>;

impl AppExport<'_> {
    fn warn(&self, notes: &mut Notes, field: &[&str], message: impl Into<String>) -> bool {
        notes.warn(&self.app.name, field, message)
    }

    fn metadata(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: self.options.namespace.clone(),
            labels: Some(self.labels()),
            annotations: Some(BTreeMap::from([(
                APP_ANNOTATION.to_string(),
                self.app.name.clone(),
            )])),
            ..ObjectMeta::default()
        }
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(NAME_LABEL.to_string(), self.name.clone())])
    }

    fn objects(&self, notes: &mut Notes, objects: &mut Objects) {
        self.loopback_across_pods(notes);
        let env_from = self.config_map(notes, objects);
        let pod = self.pod(notes, env_from);
        if self.app.schedule.is_some() || self.is_job() {
            if self.app.schedule.is_some() {
                self.cron_job(pod, notes, objects);
            } else {
                self.job(pod, notes, objects);
            }
            if !self.app.process.listen.is_empty() {
                self.warn(
                    notes,
                    &["listen"],
                    "an app that runs to completion gets no Service: its pods come and go with each run",
                );
            }
        } else {
            self.deployment(pod, notes, objects);
            self.services(objects);
        }
    }

    /// Another app that listens where `target` connects.
    fn listener_at(&self, target: SocketAddr) -> Option<&AppSpec> {
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
    /// program's code, is the README's to explain.
    fn loopback_across_pods(&self, notes: &mut Notes) {
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
                crate::spec::ProbeKind::Tcp => "tcp",
                crate::spec::ProbeKind::Http => "http",
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

    /// `env_file` as a ConfigMap; the `envFrom` that reads it.
    fn config_map(&self, notes: &mut Notes, objects: &mut Objects) -> Option<EnvFromSource> {
        let path = self.source.written(&self.app.name, &["env_file"])?;
        let file = self.source.node_at(&path)?.as_str()?;
        let absolute = self.source.folder.join(file);
        let entries = match envfile::read(&absolute) {
            Ok(entries) => entries,
            Err(error) => {
                // `check` read it a moment ago; it changed since.
                self.warn(
                    notes,
                    &["env_file"],
                    format!("env_file could not be read again: {error}"),
                );
                return None;
            }
        };
        // What supervise sets itself overrides the file's value: so it
        // does not reach the pod either.
        let (reserved, entries): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|(key, _)| super::reserved_env_name(self.app, key));
        if !reserved.is_empty() {
            let names: Vec<&str> = reserved.iter().map(|(key, _)| key.as_str()).collect();
            self.warn(
                notes,
                &["env_file"],
                format!(
                    "env_file sets {}, which supervise sets itself: left out of the ConfigMap",
                    super::name_list(&names)
                ),
            );
        }
        let name = format!("{}-env", self.name);
        let map = ConfigMap {
            metadata: self.metadata(name.clone()),
            data: Some(entries.into_iter().collect()),
            ..ConfigMap::default()
        };
        objects.push(("ConfigMap", name.clone(), yaml(&map)));
        Some(EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name,
                optional: None,
            }),
            ..EnvFromSource::default()
        })
    }

    /// A template as one replica's text: `{instance}` cannot differ per
    /// replica of a Deployment, so it is expanded for instance 0.
    fn one_value(
        &self,
        template: &Template,
        notes: &mut Notes,
        field: &[&str],
        what: &str,
    ) -> String {
        if template.uses_instance() {
            self.warn(
                notes,
                field,
                format!(
                    "`{template}` in {what} cannot differ per replica of a Deployment: every pod gets `{}`",
                    template.expand(0)
                ),
            );
        }
        template.expand(0)
    }

    fn env(&self, notes: &mut Notes) -> Vec<EnvVar> {
        let names = self.source.env_names(&self.app.name);
        let mut env: Vec<EnvVar> = Vec::new();
        for (name, value) in &self.app.process.env {
            if !names.contains(name) {
                continue;
            }
            let value = self.one_value(value, notes, &["env", name], &format!("env `{name}`"));
            env.push(EnvVar {
                name: name.clone(),
                value: Some(value),
                value_from: None,
            });
        }
        env.push(EnvVar {
            name: "SUPERVISE_APP".into(),
            value: Some(self.app.name.clone()),
            value_from: None,
        });
        if let Some(port) = self.first_tcp_port() {
            env.push(EnvVar {
                name: "PORT".into(),
                value: Some(port.to_string()),
                value_from: None,
            });
        }
        env
    }

    fn first_tcp_port(&self) -> Option<u16> {
        self.app
            .process
            .listen
            .iter()
            .find_map(|listen| match &listen.address {
                ListenAddress::Tcp(address) if address.port() != 0 => Some(address.port()),
                _ => None,
            })
    }

    fn command(&self, notes: &mut Notes) -> (Vec<String>, Vec<String>) {
        let words: Vec<String> = self
            .app
            .process
            .argv
            .iter()
            .map(|word| self.one_value(word, notes, &["command"], "command"))
            .collect();
        match words.split_first() {
            Some((program, args)) => (vec![program.clone()], args.to_vec()),
            None => (Vec::new(), Vec::new()),
        }
    }

    fn pod(&self, notes: &mut Notes, env_from: Option<EnvFromSource>) -> PodSpec {
        let (command, args) = self.command(notes);
        let (grace, _) = whole_seconds(self.app.kill_timeout);
        if whole_seconds(self.app.kill_timeout).1 {
            self.warn(
                notes,
                &["kill_timeout"],
                format!("terminationGracePeriodSeconds takes whole seconds: {grace}s"),
            );
        }
        let lifecycle = self
            .source
            .written(&self.app.name, &["stop_signal"])
            .map(|_| Lifecycle {
                stop_signal: Some(self.app.stop_signal.as_str().to_string()),
                ..Lifecycle::default()
            });
        let container = Container {
            name: self.name.clone(),
            image: Some(
                self.options
                    .image
                    .clone()
                    .unwrap_or_else(|| self.name.clone()),
            ),
            command: Some(command),
            args: Some(args).filter(|a| !a.is_empty()),
            working_dir: Some(self.app.process.cwd.display().to_string()),
            env: Some(self.env(notes)),
            env_from: env_from.map(|e| vec![e]),
            ports: Some(self.container_ports(notes)).filter(|p| !p.is_empty()),
            readiness_probe: self.readiness(notes),
            liveness_probe: self.liveness(notes),
            resources: self.app.max_memory.map(|bytes| ResourceRequirements {
                limits: Some(BTreeMap::from([(
                    "memory".to_string(),
                    Quantity(bytes.to_string()),
                )])),
                ..ResourceRequirements::default()
            }),
            security_context: self.security_context(notes),
            lifecycle: lifecycle.clone(),
            ..Container::default()
        };
        self.policy_warnings(notes);
        PodSpec {
            containers: vec![container],
            termination_grace_period_seconds: Some(grace),
            // A container's stopSignal needs the pod's OS to be named.
            os: lifecycle.map(|_| PodOS {
                name: "linux".into(),
            }),
            ..PodSpec::default()
        }
    }

    /// Keys of the restart and process policy that a pod has no place for.
    fn policy_warnings(&self, notes: &mut Notes) {
        let app = &self.app.name;
        notes.warn_with_help(
            app,
            &["backoff"],
            "`backoff` is not exported: the kubelet restarts crashed containers with its own backoff (10s doubling to 5m)",
            Some("Kubernetes does not let a pod choose its restart delays"),
        );
        if self.app.schedule.is_none() && !self.is_job() {
            self.warn(
                notes,
                &["max_restarts"],
                "`max_restarts` is not exported: a Deployment never gives up restarting a container",
            );
            if self.app.restart != RestartPolicy::Always {
                self.warn(
                    notes,
                    &["restart"],
                    format!(
                        "restart `{}` is not exported: a Deployment restarts its containers after every exit",
                        restart_word(self.app.restart)
                    ),
                );
            }
        }
        self.warn(
            notes,
            &["watchdog"],
            "`watchdog` is not exported: Kubernetes has no sd_notify watchdog",
        );
        self.warn(
            notes,
            &["watchdog_signal"],
            "`watchdog_signal` is not exported: Kubernetes has no sd_notify watchdog",
        );
        self.warn(
            notes,
            &["log"],
            "`log` is not exported: a container's output is kept by the kubelet (`kubectl logs`)",
        );
        self.warn(
            notes,
            &["on_dependency_restart"],
            "`on_dependency_restart` is not exported: Kubernetes restarts nothing when another Deployment rolls",
        );
        if self.source.written(app, &["stop_signal"]).is_some() {
            notes.note(format!(
                "{app}: stop_signal {} is the container's lifecycle.stopSignal, which needs the ContainerStopSignals feature gate (alpha in Kubernetes 1.33)",
                self.app.stop_signal.as_str()
            ));
        }
    }

    /// `user`/`group` as `runAsUser`/`runAsGroup` when written as numbers;
    /// a name is this machine's, not the image's, so it is a warning.
    fn security_context(&self, notes: &mut Notes) -> Option<SecurityContext> {
        let app = &self.app.name;
        let user = self.source.written_account(app, "user");
        let group = self.source.written_account(app, "group");
        let uid = user.as_ref().and_then(|(_, number)| *number);
        let gid = group.as_ref().and_then(|(_, number)| *number);
        if let (Some((name, None)), Some(identity)) = (&user, &self.app.process.identity) {
            notes.warn_with_help(
                app,
                &["user"],
                format!(
                    "user `{name}` is a name: Kubernetes takes a numeric uid, and the image's users are not this machine's"
                ),
                Some(format!(
                    "here `{name}` is uid {}: write `user: {}` if the image has the same (it becomes securityContext.runAsUser)",
                    identity.uid, identity.uid
                )),
            );
        }
        if let Some((name, None)) = &group {
            self.warn(
                notes,
                &["group"],
                format!("group `{name}` is a name: Kubernetes takes a numeric gid (runAsGroup)"),
            );
        }
        if let (Some(uid), None) = (uid, &group) {
            notes.note(format!(
                "{app}: user {uid} has no `group`: in a pod its group is the image's for uid {uid}, or 0 (root) where the image has no entry for it; write `group:` as a number for runAsGroup"
            ));
        }
        (uid.is_some() || gid.is_some()).then(|| SecurityContext {
            run_as_user: uid.map(i64::from),
            run_as_group: gid.map(i64::from),
            ..SecurityContext::default()
        })
    }

    fn container_ports(&self, notes: &mut Notes) -> Vec<ContainerPort> {
        let mut ports = Vec::new();
        let mut names = HashSet::new();
        let mut first_tcp = true;
        for (index, listen) in self.app.process.listen.iter().enumerate() {
            let entry = listen_field(self.source, &self.app.name, index);
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
                    crate::spec::ProbeKind::Tcp => {
                        crate::config::validate::parse_host_port(&text).ok()
                    }
                    crate::spec::ProbeKind::Http => crate::config::validate::parse_http_url(&text)
                        .ok()
                        .map(|(a, _)| a),
                };
                tcp_probe(address.map_or(0, |a| a.port()))
            }
        }
    }

    fn readiness(&self, notes: &mut Notes) -> Option<Probe> {
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
                    crate::spec::ProbeKind::Tcp => "tcp",
                    crate::spec::ProbeKind::Http => "http",
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

    fn liveness(&self, notes: &mut Notes) -> Option<Probe> {
        let health = self.app.health.as_ref()?;
        let app = &self.app.name;
        let mut probe = match &health.check {
            HealthCheck::Probe(spec) => {
                let field = match spec.kind {
                    crate::spec::ProbeKind::Tcp => "tcp",
                    crate::spec::ProbeKind::Http => "http",
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

    /// The pod count of a Deployment or a Job (`kind`): `instances`, or
    /// for `max` `--replicas-for-max` (else this machine's CPUs); at most
    /// what the field holds (an int32).
    fn replicas(&self, notes: &mut Notes, kind: &str) -> i32 {
        let fits = |count: u32| i32::try_from(count).unwrap_or(i32::MAX);
        if !self.app.instances_from_max {
            return fits(self.app.instances);
        }
        let wanted = self.options.replicas_for_max.unwrap_or(self.app.instances);
        let count = fits(wanted);
        notes.warn_with_help(
            &self.app.name,
            &["instances"],
            format!(
                "`instances: max` means one per CPU of the machine; a {kind} needs a number: {count}"
            ),
            Some(match self.options.replicas_for_max {
                Some(_) if i64::from(count) < i64::from(wanted) => format!(
                    "from --replicas-for-max {wanted}, clamped to {count}, the most Kubernetes takes"
                ),
                Some(_) => "from --replicas-for-max".to_string(),
                None => format!(
                    "{count} is this machine's CPU count; choose with --replicas-for-max N"
                ),
            }),
        );
        count
    }

    fn depends_annotation(&self, notes: &mut Notes, meta: &mut ObjectMeta) {
        if self.app.depends_on.is_empty() {
            return;
        }
        let text: Vec<String> = self
            .app
            .depends_on
            .iter()
            .map(|d| format!("{} ({})", d.app, d.condition.name()))
            .collect();
        let text = text.join(", ");
        notes.warn_with_help(
            &self.app.name,
            &["depends_on"],
            format!(
                "Kubernetes starts every object at once: `{}` must itself wait for {text}",
                self.app.name
            ),
            Some(format!(
                "recorded as the annotation {DEPENDS_ANNOTATION}; an init container that waits is the usual way"
            )),
        );
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(DEPENDS_ANNOTATION.to_string(), text);
    }

    /// `depends_on` as a comment above the object (the annotation holds it too).
    fn depends_comment(&self) -> String {
        if self.app.depends_on.is_empty() {
            return String::new();
        }
        let list: Vec<String> = self
            .app
            .depends_on
            .iter()
            .map(|d| format!("{} ({})", d.app, d.condition.name()))
            .collect();
        format!(
            "# note: depends_on is not ordered by Kubernetes: {} waits for {} itself\n",
            self.app.name,
            list.join(", ")
        )
    }

    fn deployment(&self, pod: PodSpec, notes: &mut Notes, objects: &mut Objects) {
        let mut metadata = self.metadata(self.name.clone());
        self.depends_annotation(notes, &mut metadata);
        let min_ready = match (&self.app.ready, self.first_tcp_port()) {
            (Readiness::Delay(delay), None) => Some(seconds_i32(whole_seconds(*delay).0)),
            _ => None,
        };
        let deployment = Deployment {
            metadata,
            spec: DeploymentSpec {
                replicas: Some(self.replicas(notes, "Deployment")),
                selector: LabelSelector {
                    match_labels: Some(self.labels()),
                    ..LabelSelector::default()
                },
                min_ready_seconds: min_ready,
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(IntOrString::Int(
                            i32::try_from(self.app.reload.max_surge).unwrap_or(i32::MAX),
                        )),
                        max_unavailable: Some(IntOrString::Int(
                            i32::try_from(self.app.reload.max_unavailable).unwrap_or(i32::MAX),
                        )),
                    }),
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(pod),
                },
                ..DeploymentSpec::default()
            },
            ..Deployment::default()
        };
        let mut text = self.depends_comment();
        text.push_str(&yaml(&deployment));
        objects.push(("Deployment", self.name.clone(), text));
    }

    fn services(&self, objects: &mut Objects) {
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

    /// An app that runs to completion (`restart: never`, or `on-failure`
    /// when another app waits for it to be `completed`): a Job, since a
    /// Deployment would run it again after every exit.
    fn is_job(&self) -> bool {
        runs_to_completion(self.source, self.app)
    }

    /// The Job of a one-shot or of each scheduled run: `restart` is its
    /// pods' restartPolicy, `max_restarts.count` its backoffLimit.
    fn job_spec(&self, mut pod: PodSpec, notes: &mut Notes) -> JobSpec {
        pod.restart_policy = Some(
            match self.app.restart {
                RestartPolicy::OnFailure => "OnFailure",
                _ => "Never",
            }
            .into(),
        );
        let backoff_limit = match (self.app.restart, self.app.max_restarts) {
            (RestartPolicy::Never, _) => Some(0),
            (_, Some(max)) => {
                self.warn(
                    notes,
                    &["max_restarts", "within"],
                    "a Job's backoffLimit counts retries of one run, without a time window",
                );
                Some(i32::try_from(max.count).unwrap_or(i32::MAX))
            }
            _ => None,
        };
        JobSpec {
            backoff_limit,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(self.labels()),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }
    }

    fn job(&self, pod: PodSpec, notes: &mut Notes, objects: &mut Objects) {
        let mut metadata = self.metadata(self.name.clone());
        self.depends_annotation(notes, &mut metadata);
        let count = self.replicas(notes, "Job");
        self.run_warnings(notes);
        let job = Job {
            metadata,
            spec: Some(JobSpec {
                parallelism: Some(count),
                completions: Some(count),
                ..self.job_spec(pod, notes)
            }),
            ..Job::default()
        };
        let mut text = self.depends_comment();
        text.push_str(
            "# note: a Job's pod template cannot be changed once created: delete the Job to apply an edit\n",
        );
        text.push_str(&yaml(&job));
        objects.push(("Job", self.name.clone(), text));
    }

    /// What a Job (one-shot, or a CronJob's run) has no place for.
    fn run_warnings(&self, notes: &mut Notes) {
        self.warn(
            notes,
            &["reload"],
            "`reload` is not exported: a Job runs to completion, it is not rolled",
        );
        if let Readiness::Delay(_) = self.app.ready
            && self.first_tcp_port().is_none()
        {
            self.warn(
                notes,
                &["ready"],
                "a Job has no minReadySeconds: `ready: {delay}` is not exported",
            );
        }
    }

    fn cron_job(&self, pod: PodSpec, notes: &mut Notes, objects: &mut Objects) {
        let Some(schedule) = &self.app.schedule else {
            return;
        };
        self.run_warnings(notes);
        let (expression, time_zone) = match &schedule.when {
            When::Cron { cron, timezone } => {
                let expression = match kubernetes_cron(cron.as_str()) {
                    Ok(expression) => expression,
                    Err(why) => {
                        self.warn(
                            notes,
                            &["schedule"],
                            format!(
                                "`{}` cannot be a Kubernetes schedule: {why}; exported as written, the API server will refuse it",
                                cron.as_str()
                            ),
                        );
                        cron.as_str().to_string()
                    }
                };
                (expression, Some(timezone.name().to_string()))
            }
            When::Every(period) => {
                let (expression, exact) = every_as_cron(*period);
                let written = super::duration_text(*period);
                self.warn(
                    notes,
                    &["schedule"],
                    if exact {
                        format!(
                            "every {written} becomes the cron `{expression}`: runs on the clock, not from when the app started"
                        )
                    } else {
                        format!(
                            "every {written} cannot be a cron expression; exported as `{expression}`"
                        )
                    },
                );
                (expression, None)
            }
        };
        let concurrency = match schedule.overlap {
            Overlap::Skip => "Forbid",
            Overlap::Replace => "Replace",
            Overlap::Queue => {
                self.warn(
                    notes,
                    &["overlap"],
                    "overlap `queue` has no CronJob equivalent: exported as Forbid (the run is skipped)",
                );
                "Forbid"
            }
        };
        if schedule.run_on_start {
            self.warn(
                notes,
                &["run_on_start"],
                "`run_on_start` is not exported: a CronJob runs at its times only (`kubectl create job --from=cronjob/NAME` runs it now)",
            );
        }
        // `instances: 0` pauses a schedule.
        let paused = self.app.instances == 0;
        if paused {
            notes.note(format!(
                "{}: `instances: 0` pauses its schedule: the CronJob is suspended (set spec.suspend to false to resume it)",
                self.app.name
            ));
        }
        let mut metadata = self.metadata(self.name.clone());
        self.depends_annotation(notes, &mut metadata);
        let cron = CronJob {
            metadata,
            spec: CronJobSpec {
                schedule: expression,
                time_zone,
                concurrency_policy: Some(concurrency.into()),
                suspend: paused.then_some(true),
                job_template: JobTemplateSpec {
                    metadata: None,
                    spec: Some(self.job_spec(pod, notes)),
                },
                ..CronJobSpec::default()
            },
            ..CronJob::default()
        };
        let mut text = self.depends_comment();
        text.push_str(&yaml(&cron));
        objects.push(("CronJob", self.name.clone(), text));
    }
}

/// The path of `listen` entry `index` inside the app: `listen` itself for
/// the one-entry form, `listen[i]` for a list (as `Source::written` takes
/// text segments, an index is written as its number).
fn listen_field(source: &Source, app: &str, index: usize) -> Vec<String> {
    let is_list = source
        .written(app, &["listen"])
        .and_then(|path| source.node_at(&path))
        .is_some_and(|node| matches!(node.kind, crate::config::node::NodeKind::Seq(_)));
    if is_list {
        vec!["listen".into(), index.to_string()]
    } else {
        vec!["listen".into()]
    }
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

fn restart_word(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always => "always",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Never => "never",
    }
}

/// A cron expression as Kubernetes' cron (robfig/cron's standard parser)
/// reads it: a day of the week is 0-6 there, so 7 (Sunday, as croner also
/// reads it) becomes 0; and what it cannot read at all — `L`, `W`, `#` —
/// is named in the `Err`.
pub fn kubernetes_cron(expression: &str) -> Result<String, String> {
    let expression = expression.trim();
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let [minute, hour, day, month, weekday] = fields.as_slice() else {
        return Ok(expression.to_string()); // a nickname (`@daily`): robfig's too
    };
    if day.contains(['L', 'l', 'W', 'w']) {
        return Err(format!(
            "the day of the month `{day}` (`L`, `W`): Kubernetes' cron has neither"
        ));
    }
    let numbered_l = |item: &str| {
        item.strip_suffix(['L', 'l'])
            .is_some_and(|rest| rest.is_empty() || rest.bytes().all(|b| b.is_ascii_digit()))
    };
    if weekday.contains('#') || weekday.split(',').any(numbered_l) {
        return Err(format!(
            "the day of the week `{weekday}` (`L`, `#`): Kubernetes' cron has neither"
        ));
    }
    fn seven(word: &str) -> &str {
        if word == "7" { "0" } else { word }
    }
    let items: Vec<String> = weekday
        .split(',')
        .map(|item| {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            match range.split_once('-') {
                // A range to 7: to 6, and 0 if the steps reach 7 (`5-7` →
                // `5-6,0`, `1-7/3` → `1-6/3,0`, `0-7` → `0-6`).
                Some((from, "7")) => {
                    let (Ok(from), Ok(step)) =
                        (from.parse::<u32>(), step.map_or(Ok(1), str::parse::<u32>))
                    else {
                        return item.to_string();
                    };
                    let every = match step {
                        1 => String::new(),
                        step => format!("/{step}"),
                    };
                    let reaches_seven = step > 0 && (7 - from.min(7)).is_multiple_of(step);
                    match (from, reaches_seven) {
                        (7, _) => "0".to_string(),
                        (0, true) if step == 1 => "0-6".to_string(),
                        (_, true) => format!("{from}-6{every},0"),
                        (_, false) => format!("{from}-6{every}"),
                    }
                }
                Some((from, to)) => item.replacen(
                    &format!("{from}-{to}"),
                    &format!("{}-{}", seven(from), to),
                    1,
                ),
                None if step.is_none() => seven(range).to_string(),
                None => item.to_string(),
            }
        })
        .collect();
    Ok(format!("{minute} {hour} {day} {month} {}", items.join(",")))
}

/// `{every: D}` as a cron expression: exact when D divides an hour or a day
/// evenly (`10m` → `*/10 * * * *`), else the nearest shorter period that
/// does (runs at least as often), with `false`.
pub fn every_as_cron(period: std::time::Duration) -> (String, bool) {
    const MINUTES: [u64; 11] = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30];
    const HOURS: [u64; 7] = [1, 2, 3, 4, 6, 8, 12];
    let seconds = period.as_secs();
    let exact = period.subsec_nanos() == 0 && seconds.is_multiple_of(60);
    let minutes = seconds / 60;
    let expression = |minutes: u64| -> String {
        match minutes {
            0 | 1 => "* * * * *".to_string(),
            m if m < 60 => format!("*/{m} * * * *"),
            60 => "0 * * * *".to_string(),
            m if m < 1440 => format!("0 */{} * * *", m / 60),
            1440 => "0 0 * * *".to_string(),
            _ => "0 0 * * 0".to_string(),
        }
    };
    let candidates: Vec<u64> = MINUTES
        .iter()
        .copied()
        .chain(HOURS.iter().map(|h| h * 60))
        .chain([1440, 7 * 1440])
        .collect();
    if exact && candidates.contains(&minutes) {
        return (expression(minutes), true);
    }
    let nearest = candidates
        .iter()
        .copied()
        .filter(|c| *c <= minutes.max(1))
        .max()
        .unwrap_or(1);
    (expression(nearest), false)
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
    use std::time::Duration;

    #[test]
    fn app_names_become_dns_labels() {
        assert_eq!(dns_label("web").unwrap(), "web");
        assert_eq!(dns_label("my_app").unwrap(), "my-app");
        assert_eq!(dns_label("web_").unwrap(), "web");
        assert_eq!(dns_label("1api").unwrap(), "app-1api");
        assert_eq!(dns_label("a-b_c").unwrap(), "a-b-c");
    }

    #[test]
    fn namespaces_are_dns_1123_labels() {
        assert!(is_dns1123_label("shop"));
        assert!(is_dns1123_label("1abc"));
        assert!(is_dns1123_label(&"n".repeat(63)));
        assert!(!is_dns1123_label(&"n".repeat(64)));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("Bad_NS"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
    }

    #[test]
    fn port_names_follow_the_iana_rules() {
        assert_eq!(port_name("http").as_deref(), Some("http"));
        assert_eq!(port_name("admin_api").as_deref(), Some("admin-api"));
        assert_eq!(port_name("a-very-long-port-name"), None);
        assert_eq!(port_name("8080"), None);
        assert_eq!(port_name("a--b"), None);
    }

    #[test]
    fn cron_expressions_are_read_as_kubernetes_reads_them() {
        let cron = |e: &str| kubernetes_cron(e).unwrap();
        assert_eq!(cron("0 3 * * *"), "0 3 * * *");
        assert_eq!(cron("@daily"), "@daily");
        assert_eq!(cron("0 0 * * 7"), "0 0 * * 0");
        assert_eq!(cron("0 0 * * 5-7"), "0 0 * * 5-6,0");
        assert_eq!(cron("0 0 * * 0-7"), "0 0 * * 0-6");
        assert_eq!(cron("0 0 * * 1,7"), "0 0 * * 1,0");
        assert_eq!(cron("0 0 * * 1-5/2"), "0 0 * * 1-5/2");
        assert_eq!(cron("0 0 * * 1-7/3"), "0 0 * * 1-6/3,0");
        assert_eq!(cron("0 0 * * 2-7/2"), "0 0 * * 2-6/2");
        assert_eq!(cron("0 0 * * 7-7"), "0 0 * * 0");
        assert_eq!(cron("0 0 * * WED"), "0 0 * * WED");
        assert_eq!(cron("0 0 * JUL *"), "0 0 * JUL *");
        for unreadable in [
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 * * 5L",
            "0 0 * * 1#2",
            "0 0 * * L",
        ] {
            assert!(kubernetes_cron(unreadable).is_err(), "{unreadable}");
        }
    }

    #[test]
    fn periods_become_cron_expressions() {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(every_as_cron(minutes(10)), ("*/10 * * * *".into(), true));
        assert_eq!(every_as_cron(minutes(1)), ("* * * * *".into(), true));
        assert_eq!(every_as_cron(minutes(120)), ("0 */2 * * *".into(), true));
        assert_eq!(every_as_cron(minutes(1440)), ("0 0 * * *".into(), true));
        assert_eq!(every_as_cron(minutes(7)), ("*/6 * * * *".into(), false));
        assert_eq!(
            every_as_cron(Duration::from_secs(30)),
            ("* * * * *".into(), false)
        );
    }
}
