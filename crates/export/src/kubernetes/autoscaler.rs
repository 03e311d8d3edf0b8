//! `autoscale` as a HorizontalPodAutoscaler (autoscaling/v2) of the app's
//! Deployment: the range is `minReplicas`/`maxReplicas`, `cpu` an average
//! CPU per pod (70 % of one CPU is `700m`, which needs no resource request),
//! `up_after` the scale-up stabilization window and `down_after` both the
//! scale-down window and the period of a one-pod step down, as supervise
//! does. The accept queue is not a metric an HPA sees: `queue` is warned
//! about (an external metric from the load balancer could stand for it).

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerSpec, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{AppExport, Objects, seconds_i32, yaml};
use crate::{Notes, whole_seconds};

/// The longest stabilization window an HPA takes (an hour).
const MAX_STABILIZATION_SECONDS: i32 = 3600;
/// The longest period of an HPA's scaling policy (half an hour); the
/// scale-down window is the same here, well within the hour.
const MAX_POLICY_PERIOD_SECONDS: i32 = 1800;

impl AppExport<'_> {
    /// The HorizontalPodAutoscaler of an autoscaled app, if it is one.
    pub(super) fn autoscaler(&self, notes: &mut Notes, objects: &mut Objects) {
        let Some(range) = &self.app.autoscale else {
            return;
        };
        if range.queue.is_some() {
            self.warn(
                notes,
                &["autoscale", "queue"],
                "`autoscale.queue` is not exported: a HorizontalPodAutoscaler does not see a socket's accept queue (an external metric of the load balancer could stand for it)",
            );
        }
        let metrics = range.cpu_percent.map(|percent| {
            vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "AverageValue".into(),
                        average_value: Some(Quantity(format!("{}m", u64::from(percent) * 10))),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]
        });
        if metrics.is_none() {
            self.warn(
                notes,
                &["autoscale"],
                "the HorizontalPodAutoscaler gets no metric (only `queue` is set): Kubernetes then follows 80 % of the pods' CPU requests, which these pods do not set; add `cpu` or an external metric",
            );
        }
        let min = if range.min == 0 {
            self.warn(
                notes,
                &["autoscale", "min"],
                "`autoscale.min: 0` becomes minReplicas: 1 (scaling to zero needs the HPAScaleToZero feature gate)",
            );
            1
        } else {
            range.min
        };
        // `max: max` is one per CPU of the machine the pods run on: as for
        // `instances: max`, --replicas-for-max says how many.
        let max = match (range.max_from_cpus, self.options.replicas_for_max) {
            (true, Some(count)) => count,
            _ => range.max,
        };
        let mut window = |field: &str, after, most: i32| {
            let seconds = seconds_i32(whole_seconds(after).0);
            if seconds > most {
                self.warn(
                    notes,
                    &["autoscale", field],
                    format!("`autoscale.{field}` of {seconds}s becomes {most}s, the most a HorizontalPodAutoscaler takes"),
                );
            }
            seconds.min(most)
        };
        let up = window("up_after", range.up_after, MAX_STABILIZATION_SECONDS);
        let down = window("down_after", range.down_after, MAX_POLICY_PERIOD_SECONDS);
        let autoscaler = HorizontalPodAutoscaler {
            metadata: self.metadata(self.name.clone()),
            spec: HorizontalPodAutoscalerSpec {
                scale_target_ref: CrossVersionObjectReference {
                    api_version: Some("apps/v1".into()),
                    kind: "Deployment".into(),
                    name: self.name.clone(),
                },
                min_replicas: Some(i32::try_from(min).unwrap_or(i32::MAX)),
                max_replicas: i32::try_from(max.max(min)).unwrap_or(i32::MAX),
                metrics,
                behavior: Some(HorizontalPodAutoscalerBehavior {
                    scale_up: Some(HPAScalingRules {
                        stabilization_window_seconds: Some(up),
                        ..HPAScalingRules::default()
                    }),
                    scale_down: Some(HPAScalingRules {
                        stabilization_window_seconds: Some(down),
                        policies: Some(vec![HPAScalingPolicy {
                            type_: "Pods".into(),
                            value: 1,
                            period_seconds: down.max(1),
                        }]),
                        ..HPAScalingRules::default()
                    }),
                }),
            },
            ..HorizontalPodAutoscaler::default()
        };
        objects.push((
            "HorizontalPodAutoscaler",
            self.name.clone(),
            yaml(&autoscaler),
        ));
    }
}
