//! The core on its own: inputs in, actions out, no processes.

use std::time::{Duration, Instant};

use super::*;
use crate::commands::Order;
use crate::reconcile::StopReason;
use model::orders::WatchdogMessage;
use model::process::{Exit, StartError, StartStage};
use model::spec::{AppSpec, Readiness, SocketKey};

mod commands;
mod inject;
mod sockets;
mod spawns;
mod stalls;

fn core_with(apps: Vec<AppSpec>, now: Instant) -> Core {
    let desired = Desired {
        source: "/srv/ecosystem.yaml".into(),
        apps,
        memory_check: model::spec::defaults::MEMORY_CHECK,
        metrics: None,
    };
    Core::new(&desired, 1000, now)
}

fn spawns(actions: &[Action]) -> Vec<(String, WorkerId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Spawn(order) => Some((order.app.clone(), order.id)),
            _ => None,
        })
        .collect()
}
