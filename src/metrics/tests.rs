use std::collections::HashMap;
use std::time::Duration;

use super::render::render;
use super::snapshot::{AppSeries, InstanceSeries, Measured, SlotUsage};
use super::tally::{ExitReason, SlotCounts};
use super::*;
use effects::GroupUsage;
use model::process::{Exit, StartError, StartStage};
use supervise_core::Event;
use supervise_core::event::Instance;
use supervise_core::worker::{Decision, Outcome, StopEnd};

fn web(slot: u32) -> Instance {
    Instance {
        app: "web".to_string(),
        slot,
        generation: 1,
    }
}

fn restart() -> Decision {
    Decision::Restart {
        attempt: 1,
        delay: Duration::from_millis(100),
    }
}

fn exited(slot: u32, exit: Exit, decision: Decision) -> Event {
    Event::Exited {
        instance: web(slot),
        pid: 100,
        exit,
        ran: Duration::from_secs(1),
        decision,
    }
}

fn stopped(slot: u32, killed: bool, end: StopEnd) -> Event {
    Event::Stopped {
        instance: web(slot),
        pid: 100,
        killed,
        leader_exit: None,
        took: Duration::from_millis(5),
        end,
    }
}

#[test]
fn the_tally_counts_exits_by_reason_and_restarts_per_slot() {
    let mut tally = Tally::default();
    let signal = Exit::Signal {
        signal: libc::SIGKILL,
        core: false,
    };
    for event in [
        exited(0, Exit::Code(0), Decision::Done),
        exited(0, Exit::Code(3), restart()),
        exited(0, signal, restart()),
        Event::StartFailed {
            instance: web(0),
            pid: None,
            error: StartError {
                stage: StartStage::Exec,
                errno: libc::ENOENT,
            },
            detail: None,
            decision: restart(),
        },
        stopped(0, true, StopEnd::Decided(restart())),
        stopped(0, false, StopEnd::Remove),
        Event::Recycling {
            instance: web(1),
            pid: 101,
            why: Outcome::MemoryExceeded,
            attempt: 1,
            delay: Duration::ZERO,
        },
        Event::Applied {
            trigger: "edit".to_string(),
            file_version: 2,
        },
        Event::AllReady,
    ] {
        tally.count(&event);
    }
    let slot0 = tally.slot("web", 0);
    assert_eq!(slot0.restarts, 4, "{slot0:?}");
    let exits: Vec<(&str, u64)> = slot0.exits.iter().map(|(r, n)| (r.label(), *n)).collect();
    assert_eq!(
        exits,
        [
            ("exit_zero", 1),
            ("exit_nonzero", 1),
            ("signal", 1),
            ("start_failed", 1),
            ("stopped", 1),
            ("killed", 1)
        ]
    );
    assert_eq!(tally.slot("web", 1).restarts, 1);
    assert!(tally.slot("web", 1).exits.is_empty());
    assert_eq!(tally.slot("api", 0), SlotCounts::default());
    assert_eq!(tally.applies, 1);
}

fn instance(app: &str, slot: u32, pids: &[i32]) -> InstanceSeries {
    InstanceSeries {
        app: app.to_string(),
        slot,
        up: !pids.is_empty(),
        ready: !pids.is_empty(),
        healthy: None,
        uptime_s: None,
        pids: pids.to_vec(),
        counts: SlotCounts::default(),
    }
}

fn usage(entries: &[(i32, u64, u64)]) -> HashMap<i32, GroupUsage> {
    entries
        .iter()
        .map(|(pid, rss_bytes, cpu_ticks)| {
            (
                *pid,
                GroupUsage {
                    rss_bytes: *rss_bytes,
                    cpu_ticks: *cpu_ticks,
                },
            )
        })
        .collect()
}

fn assert_close(seconds: f64, expected: f64) {
    assert!(
        (seconds - expected).abs() < 1e-9,
        "{seconds} is not {expected}"
    );
}

#[test]
fn a_slots_cpu_time_never_goes_down_when_its_process_is_replaced() {
    let mut ledger = CpuLedger::default();
    let first = ledger.account(
        &[instance("web", 0, &[10])],
        &usage(&[(10, 1000, 250)]),
        100,
    );
    assert_close(first[0].cpu_seconds, 2.5);
    assert_eq!(first[0].rss_bytes, Some(1000));
    // The process died and the slot waits to restart: its time is kept.
    let between = ledger.account(&[instance("web", 0, &[])], &usage(&[]), 100);
    assert_close(between[0].cpu_seconds, 2.5);
    assert_eq!(between[0].rss_bytes, None);
    // A new process (and, during a rollout, an old one beside it).
    let replaced = ledger.account(
        &[instance("web", 0, &[11, 12])],
        &usage(&[(11, 10, 50), (12, 20, 10)]),
        100,
    );
    assert_close(replaced[0].cpu_seconds, 3.1);
    assert_eq!(replaced[0].rss_bytes, Some(30));
    // A leader whose group vanished from /proc between two passes is
    // counted at what it was last seen at, not at zero.
    let vanished = ledger.account(
        &[instance("web", 0, &[11, 12])],
        &usage(&[(12, 20, 20)]),
        100,
    );
    assert_close(vanished[0].cpu_seconds, 3.2);
}

fn measured() -> Measured {
    let mut web0 = instance("web", 0, &[10]);
    web0.healthy = Some(true);
    web0.uptime_s = Some(1.5);
    web0.counts.restarts = 2;
    web0.counts.exits.insert(ExitReason::Signal, 2);
    let web1 = instance("web", 1, &[]);
    Measured {
        snapshot: Snapshot {
            file_version: 3,
            applies: 3,
            rejected_edits: 1,
            apps: vec![AppSeries {
                name: "web".to_string(),
                desired: 2,
                running: 1,
                rollout_replaced: 1,
                rollout_size: 2,
                rollout_halted: false,
                autoscale: None,
            }],
            instances: vec![web0, web1],
            cgroups: Vec::new(),
        },
        usage: vec![
            SlotUsage {
                rss_bytes: Some(4096),
                cpu_seconds: 0.25,
            },
            SlotUsage {
                rss_bytes: None,
                cpu_seconds: 0.0,
            },
        ],
        supervisor_rss_bytes: Some(8192),
    }
}

#[test]
fn the_prometheus_text_format_has_every_series() {
    let text = render(measured(), Format::Prometheus).expect("renders");
    for line in [
        "# TYPE supervise_instance_up gauge",
        "supervise_instance_up{app=\"web\",slot=\"0\"} 1",
        "supervise_instance_up{app=\"web\",slot=\"1\"} 0",
        "supervise_instance_ready{app=\"web\",slot=\"0\"} 1",
        "supervise_instance_healthy{app=\"web\",slot=\"0\"} 1",
        "# TYPE supervise_instance_restarts_total counter",
        "supervise_instance_restarts_total{app=\"web\",slot=\"0\"} 2",
        "supervise_instance_exits_total{app=\"web\",slot=\"0\",reason=\"signal\"} 2",
        "supervise_instance_exits_total{app=\"web\",slot=\"1\",reason=\"killed\"} 0",
        "supervise_instance_rss_bytes{app=\"web\",slot=\"0\"} 4096",
        "supervise_instance_cpu_seconds_total{app=\"web\",slot=\"0\"} 0.25",
        "supervise_instance_uptime_seconds{app=\"web\",slot=\"0\"} 1.5",
        "supervise_app_instances_desired{app=\"web\"} 2",
        "supervise_app_instances_running{app=\"web\"} 1",
        "supervise_app_rollout_replaced{app=\"web\"} 1",
        "supervise_app_rollout_size{app=\"web\"} 2",
        "supervise_app_rollout_halted{app=\"web\"} 0",
        "supervise_config_applies_total 3",
        "supervise_config_rejected_edits_total 1",
        "supervise_config_file_version 3",
        "supervise_rss_bytes 8192",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // No series for what is not known: slot 1 has no process (no memory,
    // no uptime) and no health answer.
    for absent in [
        "supervise_instance_rss_bytes{app=\"web\",slot=\"1\"}",
        "supervise_instance_uptime_seconds{app=\"web\",slot=\"1\"}",
        "supervise_instance_healthy{app=\"web\",slot=\"1\"}",
    ] {
        assert!(!text.contains(absent), "{absent} in\n{text}");
    }
    assert!(!text.contains("# EOF"));
}

#[test]
fn the_openmetrics_format_has_units_and_ends_with_eof() {
    let text = render(measured(), Format::OpenMetrics).expect("renders");
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE supervise_instance_cpu_seconds counter\n# UNIT supervise_instance_cpu_seconds seconds\n"), "{text}");
    assert!(
        text.contains("supervise_instance_cpu_seconds_total{app=\"web\",slot=\"0\"} 0.25\n"),
        "{text}"
    );
}

#[test]
fn an_empty_supervisor_renders_its_own_metrics_only() {
    let measured = Measured {
        snapshot: Snapshot {
            file_version: 1,
            applies: 1,
            ..Snapshot::default()
        },
        usage: Vec::new(),
        supervisor_rss_bytes: None,
    };
    let text = render(measured, Format::Prometheus).expect("renders");
    assert!(!text.contains("supervise_instance"), "{text}");
    assert!(
        text.contains("supervise_config_applies_total 1\n"),
        "{text}"
    );
}

#[test]
fn label_values_are_escaped() {
    let mut measured = measured();
    measured.snapshot.apps[0].name = "a\"b\\c\nd".to_string();
    let text = render(measured, Format::Prometheus).expect("renders");
    assert!(
        text.contains("supervise_app_instances_desired{app=\"a\\\"b\\\\c\\nd\"} 2"),
        "{text}"
    );
}

#[test]
fn accept_headers_choose_the_format() {
    assert_eq!(Format::from_accept(None), Format::Prometheus);
    assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
    assert_eq!(
        Format::from_accept(Some(
            "application/openmetrics-text;version=1.0.0;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )),
        Format::OpenMetrics
    );
}
