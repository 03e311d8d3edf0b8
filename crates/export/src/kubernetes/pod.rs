//! The pod every workload runs (a Deployment, a Job, a CronJob's runs):
//! its one container — command, `env` and the ConfigMap `env_file`
//! becomes, stop signal, memory limit, user and group — and the warnings
//! for the keys of the restart and process policy a pod has no place for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, EnvVar, Lifecycle, PodOS, PodSpec,
    ResourceRequirements, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{AppExport, Objects, yaml};
use crate::{Notes, name_list, reserved_env_name, whole_seconds};
use config::envfile;
use model::spec::{RestartPolicy, Template};

impl AppExport<'_> {
    /// `env_file` as a ConfigMap; the `envFrom` that reads it.
    pub(super) fn config_map(
        &self,
        notes: &mut Notes,
        objects: &mut Objects,
    ) -> Option<EnvFromSource> {
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
            .partition(|(key, _)| reserved_env_name(self.app, key));
        if !reserved.is_empty() {
            let names: Vec<&str> = reserved.iter().map(|(key, _)| key.as_str()).collect();
            self.warn(
                notes,
                &["env_file"],
                format!(
                    "env_file sets {}, which supervise sets itself: left out of the ConfigMap",
                    name_list(&names)
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
    pub(super) fn one_value(
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

    pub(super) fn pod(&self, notes: &mut Notes, env_from: Option<EnvFromSource>) -> PodSpec {
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
}

fn restart_word(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always => "always",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Never => "never",
    }
}
