//! `supervise check --graph`: which app waits for which, drawn from the
//! resolved file, as Mermaid (renders in GitHub, GitLab and most Markdown
//! viewers) or Graphviz `dot`.
//!
//! Edges go from a dependency to its dependent — the order things start in
//! — labelled with the condition. Nodes are named `n0`, `n1`, … in Mermaid
//! (an app name such as `a--b` would read as an arrow there) and by the app's
//! name in `dot`, which quotes them.

use std::fmt::Write as _;

use clap::ValueEnum;

use super::when_text;
use model::spec::{AppSpec, Desired, RestartPolicy};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    Mermaid,
    Dot,
}

/// The graph of `desired` in `format`.
pub(crate) fn render(desired: &Desired, format: GraphFormat) -> String {
    match format {
        GraphFormat::Mermaid => mermaid(desired),
        GraphFormat::Dot => dot(desired),
    }
}

/// What a node says about its app, one item per line.
fn label_lines(app: &AppSpec) -> Vec<String> {
    let plural = if app.instances == 1 { "" } else { "s" };
    let mut lines = vec![
        app.name.clone(),
        format!("{} instance{plural}", app.instances),
    ];
    match &app.schedule {
        Some(schedule) => lines.push(format!("schedule: {}", when_text(&schedule.when))),
        None if app.restart != RestartPolicy::Always => lines.push("one-shot".to_string()),
        None => {}
    }
    lines
}

/// Every edge `(dependency, dependent, condition)`, dependents in file
/// order, each one's dependencies in its order.
fn edges(desired: &Desired) -> Vec<(usize, usize, &'static str)> {
    let index = |name: &str| desired.apps.iter().position(|app| app.name == name);
    desired
        .apps
        .iter()
        .enumerate()
        .flat_map(|(to, app)| {
            app.depends_on.iter().filter_map(move |dependency| {
                Some((index(&dependency.app)?, to, dependency.condition.name()))
            })
        })
        .collect()
}

fn mermaid(desired: &Desired) -> String {
    let mut out = String::from("flowchart LR\n");
    for (i, app) in desired.apps.iter().enumerate() {
        let label = label_lines(app).join("<br/>").replace('"', "#quot;");
        let _ = writeln!(out, "  n{i}[\"{label}\"]");
    }
    for (from, to, condition) in edges(desired) {
        let _ = writeln!(out, "  n{from} -->|{condition}| n{to}");
    }
    out
}

fn dot(desired: &Desired) -> String {
    let quote = |text: &str| format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = String::from("digraph dependencies {\n  rankdir=LR;\n  node [shape=box];\n");
    for app in &desired.apps {
        let label = label_lines(app)
            .iter()
            .map(|line| line.replace('\\', "\\\\").replace('"', "\\\""))
            .collect::<Vec<_>>()
            .join("\\n");
        let _ = writeln!(out, "  {} [label=\"{label}\"];", quote(&app.name));
    }
    for (from, to, condition) in edges(desired) {
        if let (Some(from), Some(to)) = (desired.apps.get(from), desired.apps.get(to)) {
            let _ = writeln!(
                out,
                "  {} -> {} [label={}];",
                quote(&from.name),
                quote(&to.name),
                quote(condition)
            );
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use model::spec::{Condition, Dependency, Overlap, ScheduleSpec, When};

    fn stack() -> Desired {
        let db = AppSpec::with_defaults("db", &["db"], 1);
        let mut migrate = AppSpec::with_defaults("migrate", &["migrate"], 1);
        migrate.restart = RestartPolicy::Never;
        migrate.depends_on = vec![Dependency {
            app: "db".into(),
            condition: Condition::Ready,
        }];
        let mut web = AppSpec::with_defaults("web", &["web"], 4);
        web.depends_on = vec![
            Dependency {
                app: "db".into(),
                condition: Condition::Started,
            },
            Dependency {
                app: "migrate".into(),
                condition: Condition::Completed,
            },
        ];
        let mut sweep = AppSpec::with_defaults("sweep", &["sweep"], 1);
        sweep.restart = RestartPolicy::Never;
        sweep.schedule = Some(ScheduleSpec {
            when: When::Every(Duration::from_secs(600)),
            overlap: Overlap::Skip,
            run_on_start: false,
        });
        Desired {
            source: "/srv/ecosystem.yaml".into(),
            apps: vec![db, migrate, web, sweep],
            memory_check: model::spec::defaults::MEMORY_CHECK,
            metrics: None,
        }
    }

    #[test]
    fn mermaid_nodes_carry_counts_and_marks_and_edges_run_from_the_dependency() {
        assert_eq!(
            mermaid(&stack()),
            "flowchart LR\n\
             \x20 n0[\"db<br/>1 instance\"]\n\
             \x20 n1[\"migrate<br/>1 instance<br/>one-shot\"]\n\
             \x20 n2[\"web<br/>4 instances\"]\n\
             \x20 n3[\"sweep<br/>1 instance<br/>schedule: every 10m\"]\n\
             \x20 n0 -->|ready| n1\n\
             \x20 n0 -->|started| n2\n\
             \x20 n1 -->|completed| n2\n"
        );
    }

    #[test]
    fn dot_quotes_names_and_labels() {
        let text = dot(&stack());
        assert!(text.starts_with("digraph dependencies {\n  rankdir=LR;\n"));
        assert!(text.contains("  \"migrate\" [label=\"migrate\\n1 instance\\none-shot\"];\n"));
        assert!(text.contains("  \"migrate\" -> \"web\" [label=\"completed\"];\n"));
        assert!(text.ends_with("}\n"));
    }
}
