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
//!
//! The translation is split by concern: `names` (what Kubernetes accepts as
//! a name, and the names an export must not take), `pod` (the container),
//! `probes` (`ready` and `health`), `ports` (`listen`: container ports and
//! Services), `loopback` (apps that reach each other on 127.0.0.1),
//! `workloads` (Deployment or Job) and `cron` (CronJob). This file holds
//! the entry point and what every object shares: metadata and labels.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

mod autoscaler;
mod cron;
mod loopback;
mod names;
mod pod;
mod ports;
mod probes;
mod workloads;

pub use names::is_dns1123_label;

use super::{Exported, Notes, Source};
use model::spec::AppSpec;

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
const NAME_LABEL: &str = "app.kubernetes.io/name";
/// The annotation that keeps the app's name as written.
const APP_ANNOTATION: &str = "supervise/app";

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
        let Some(name) = names::object_name(app, &mut notes) else {
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
            if names::object_fits(
                kind,
                &object_name,
                app,
                options.namespace.as_deref(),
                &mut taken,
                &mut notes,
            ) {
                files.push((format!("{kind}/{object_name}"), text));
            }
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

fn warn_top_level(source: &Source, notes: &mut Notes) {
    notes.warn_top_level_key(
        source,
        "memory_check",
        "`memory_check` has no effect in Kubernetes: the kernel holds each container to its memory limit",
        "`max_memory` becomes resources.limits.memory",
    );
    notes.warn_top_level_key(
        source,
        "metrics",
        "`metrics` is not exported: there is no supervisor in the cluster to serve them",
        "kube-state-metrics reports Deployments, replicas and restarts",
    );
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
            self.autoscaler(notes, objects);
            self.services(objects);
        }
    }
}
