//! Which object runs an app: a Deployment for an app that runs for ever, a
//! Job for a one-shot (a Deployment would run it again after every exit);
//! with its pod count, and its `depends_on`, which Kubernetes does not
//! order, recorded on the object. A scheduled app's CronJob (see `cron`)
//! shares the Job's parts.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{AppExport, Objects, seconds_i32, yaml};
use crate::{Notes, Source, whole_seconds};
use model::spec::{AppSpec, Readiness, RestartPolicy};

/// The annotation that records `depends_on`, which Kubernetes does not order.
const DEPENDS_ANNOTATION: &str = "supervise/depends-on";

/// Whether `app` is a one-shot exported as a Job (`restart: never`, or
/// `on-failure` when another app waits for it to be `completed`).
pub(super) fn runs_to_completion(source: &Source, app: &AppSpec) -> bool {
    app.schedule.is_none()
        && (app.restart == RestartPolicy::Never
            || (app.restart == RestartPolicy::OnFailure
                && source.waited_for_as_completed(&app.name)))
}

impl AppExport<'_> {
    /// An app that runs to completion (`restart: never`, or `on-failure`
    /// when another app waits for it to be `completed`): a Job, since a
    /// Deployment would run it again after every exit.
    pub(super) fn is_job(&self) -> bool {
        runs_to_completion(self.source, self.app)
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

    pub(super) fn depends_annotation(&self, notes: &mut Notes, meta: &mut ObjectMeta) {
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
    pub(super) fn depends_comment(&self) -> String {
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

    pub(super) fn deployment(&self, pod: PodSpec, notes: &mut Notes, objects: &mut Objects) {
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

    /// The Job of a one-shot or of each scheduled run: `restart` is its
    /// pods' restartPolicy, `max_restarts.count` its backoffLimit.
    pub(super) fn job_spec(&self, mut pod: PodSpec, notes: &mut Notes) -> JobSpec {
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

    pub(super) fn job(&self, pod: PodSpec, notes: &mut Notes, objects: &mut Objects) {
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
    pub(super) fn run_warnings(&self, notes: &mut Notes) {
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
}
