//! `depends_on` and `on_dependency_restart`: apps that wait for others.
//!
//! An app's own entries are read where the app is resolved ([`entries`]),
//! but whether they make sense needs the whole file: every name must be an
//! app, the graph must have no cycle (the apps in one would wait for each
//! other for ever), and each condition must be one the other app can meet —
//! `healthy` needs a `health` check, `completed` an app that ends, and
//! nothing can wait for a scheduled app, which only runs at times. Those
//! checks run in [`check`], once every app is resolved, and each is reported
//! at the entry that names the other app: that is where the fix goes, also
//! when the other app was just removed from the file.
//!
//! Cycles are found by one depth-first walk in file order: each edge back to
//! an app still on the walk's path closes one cycle, reported once (not once
//! per app in it), starting at its app that comes first in the file. Two
//! cycles that share apps are two errors; cutting every back edge would
//! leave none, so there are never more errors than edges to remove.

use std::collections::{HashMap, HashSet};

use super::{AppContext, BrokenFields, key};
use crate::diagnostic::{Diagnostic, PathSeg, Reporter, did_you_mean};
use crate::node::Node;
use crate::raw::{self, AppFields, EcosystemFile};
use model::spec::{AppSpec, Condition, Dependency, OnDependencyRestart, RestartPolicy};

/// Unknown names get the list of apps as help when there are at most this many.
const MAX_APPS_LISTED: usize = 12;
/// Bounds on what a hostile file can make the checks do: unknown names
/// given a suggestion (each is compared with every app), cycles described
/// (a dense graph has as many as edges), and steps shown of one cycle.
const MAX_SUGGESTIONS: usize = 32;
const MAX_CYCLES_SHOWN: usize = 10;
const MAX_CYCLE_STEPS_SHOWN: usize = 12;

/// One `depends_on` entry and where it is written.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry<'a> {
    /// The app whose entry this is.
    pub(crate) owner: &'a str,
    pub(crate) dependency: Dependency,
    /// The position of a list item (`[db]`); `None` for a mapping entry
    /// (`{db: ready}`), whose key is the name and value the condition.
    pub(crate) index: Option<usize>,
}

impl Entry<'_> {
    /// The path of the entry (built only to report: a hostile file has many).
    fn path(&self) -> Vec<PathSeg> {
        let last = match self.index {
            Some(index) => PathSeg::Index(index),
            None => key(&self.dependency.app),
        };
        vec![key("apps"), key(self.owner), key("depends_on"), last]
    }

    fn in_mapping(&self) -> bool {
        self.index.is_none()
    }

    fn name_error<'r>(&self, reporter: &'r mut Reporter, message: String) -> &'r mut Diagnostic {
        if self.in_mapping() {
            reporter.key_error(&self.path(), message)
        } else {
            reporter.error(&self.path(), message)
        }
    }

    fn name_warning<'r>(&self, reporter: &'r mut Reporter, message: String) -> &'r mut Diagnostic {
        if self.in_mapping() {
            reporter.key_warning(&self.path(), message)
        } else {
            reporter.warning(&self.path(), message)
        }
    }

    /// An error at the condition: the mapping's value (in the list form,
    /// where `ready` is implied, the name).
    fn condition_error<'r>(
        &self,
        reporter: &'r mut Reporter,
        message: String,
    ) -> &'r mut Diagnostic {
        reporter.error(&self.path(), message)
    }

    /// The line the other app is named on.
    fn line(&self, root: &Node) -> u64 {
        root.find(&self.path(), self.in_mapping()).location.line
    }
}

/// The `depends_on` entries of one app, in file order.
pub(super) fn entries<'a>(app: &'a str, fields: &AppFields) -> Vec<Entry<'a>> {
    let entry = |name: &str, condition, index| Entry {
        owner: app,
        dependency: Dependency {
            app: name.to_string(),
            condition,
        },
        index,
    };
    match &fields.depends_on {
        None => Vec::new(),
        Some(raw::DependsOn::Names(names)) => names
            .iter()
            .enumerate()
            .map(|(index, name)| entry(name, Condition::Ready, Some(index)))
            .collect(),
        Some(raw::DependsOn::Conditions(conditions)) => conditions
            .iter()
            .map(|(name, condition)| {
                let condition = match condition {
                    raw::DependencyCondition::Started => Condition::Started,
                    raw::DependencyCondition::Ready => Condition::Ready,
                    raw::DependencyCondition::Healthy => Condition::Healthy,
                    raw::DependencyCondition::Completed => Condition::Completed,
                };
                entry(name, condition, None)
            })
            .collect(),
    }
}

impl AppContext<'_> {
    /// `depends_on` as the spec holds it; [`check`] judges it against the
    /// other apps.
    pub(super) fn resolve_depends_on(&self) -> Vec<Dependency> {
        entries(self.name, self.fields)
            .into_iter()
            .map(|entry| entry.dependency)
            .collect()
    }

    /// `on_dependency_restart`, with a warning where an app sets it without
    /// waiting for anything.
    pub(super) fn resolve_on_dependency_restart(
        &self,
        reporter: &mut Reporter,
    ) -> OnDependencyRestart {
        let Some((value, _)) = self.pick("on_dependency_restart", |f| {
            f.on_dependency_restart.as_ref()
        }) else {
            return OnDependencyRestart::Ignore;
        };
        if self.fields.on_dependency_restart.is_some()
            && self.fields.depends_on.is_none()
            && !self.broken("depends_on")
        {
            reporter
                .warning(
                    &self.app_path(&["on_dependency_restart"]),
                    "`on_dependency_restart` does nothing without `depends_on`",
                )
                .help("list the apps this one waits for in `depends_on`, or drop `on_dependency_restart`");
        }
        match value {
            raw::OnDependencyRestart::Ignore => OnDependencyRestart::Ignore,
            raw::OnDependencyRestart::Restart => OnDependencyRestart::Restart,
        }
    }
}

/// Judge every app's `depends_on` against the others. `resolved` holds each
/// app of `file` with its spec (`None` when it had errors of its own: then
/// nothing is said about what it can be waited for).
pub(super) fn check(
    file: &EcosystemFile,
    resolved: &[(&str, Option<AppSpec>)],
    broken: &BrokenFields,
    reporter: &mut Reporter,
) {
    check_defaults(file, reporter);
    let root = reporter.root();
    // Every app written in the file, also one whose block was set aside as
    // broken: waiting for it is not waiting for an unknown app.
    let declared: Vec<&str> = root
        .get("apps")
        .and_then(|(_, apps)| apps.entries())
        .map(|apps| apps.iter().filter_map(|(name, _)| name.as_str()).collect())
        .unwrap_or_default();
    let index: HashMap<&str, usize> = declared
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, i))
        .collect();
    let specs: HashMap<&str, &AppSpec> = resolved
        .iter()
        .filter_map(|(name, spec)| spec.as_ref().map(|spec| (*name, spec)))
        .collect();
    // Per app (by its index in `declared`), the entries that name another app.
    let mut edges: Vec<Vec<(usize, Entry<'_>)>> = vec![Vec::new(); declared.len()];
    let mut suggestions_left = MAX_SUGGESTIONS;
    for (name, fields) in &file.apps {
        let Some(from) = index.get(name.as_str()).and_then(|&i| edges.get_mut(i)) else {
            continue;
        };
        let mut named = HashSet::new();
        for entry in entries(name, fields) {
            let other = entry.dependency.app.as_str();
            if !named.insert(other.to_string()) {
                entry
                    .name_error(
                        reporter,
                        format!("`{other}` is named twice in `depends_on`"),
                    )
                    .help("remove one of them");
            } else if other == name {
                entry
                    .name_error(reporter, format!("`{name}` depends on itself"))
                    .help(format!(
                        "an app cannot wait for itself: remove `{name}` from its `depends_on`"
                    ));
            } else if let Some(&to) = index.get(other) {
                let target = Target {
                    name: other,
                    fields: file.apps.get(other),
                    spec: specs.get(other).copied(),
                    broken,
                };
                target.judge(name, &entry, reporter);
                from.push((to, entry));
            } else {
                let others = declared.iter().copied().filter(|n| *n != name);
                let meant = if suggestions_left > 0 {
                    suggestions_left -= 1;
                    did_you_mean(other, others.clone())
                } else {
                    None
                };
                let help = match meant {
                    Some(meant) => format!("did you mean `{meant}`?"),
                    None if declared.len() <= MAX_APPS_LISTED => format!(
                        "the apps in this file are {}; declare `{other}` under `apps:`, or remove it from `depends_on`",
                        others
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None => {
                        format!("declare `{other}` under `apps:`, or remove it from `depends_on`")
                    }
                };
                entry
                    .name_error(
                        reporter,
                        format!("`{name}` depends on `{other}`, which is not an app in this file"),
                    )
                    .help(help);
            }
        }
    }
    let successors: Vec<Vec<usize>> = edges
        .iter()
        .map(|out| out.iter().map(|(to, _)| *to).collect())
        .collect();
    let (shown, total) = cycles(&successors, MAX_CYCLES_SHOWN + 1);
    for cycle in shown.iter().take(MAX_CYCLES_SHOWN) {
        report_cycle(cycle, &declared, &edges, reporter);
    }
    if let Some(next) = shown.get(MAX_CYCLES_SHOWN)
        && let Some(entry) = next
            .first()
            .and_then(|&(from, edge)| edges.get(from)?.get(edge))
            .map(|(_, entry)| entry)
    {
        entry
            .name_error(
                reporter,
                format!(
                    "{} more dependency cycles are not shown; the next one goes through here",
                    total - MAX_CYCLES_SHOWN
                ),
            )
            .help("break the cycles above first; `supervise check` then shows the next ones");
    }
}

/// The app an entry names, as far as the checks of a condition need it.
struct Target<'a> {
    name: &'a str,
    fields: Option<&'a AppFields>,
    spec: Option<&'a AppSpec>,
    broken: &'a BrokenFields,
}

impl Target<'_> {
    /// A field of the target known to be written as it is (not set aside as broken).
    fn sound(&self, field: &str) -> bool {
        !self.broken.contains(self.name, field) && !self.broken.contains("defaults", field)
    }

    /// Can `dependent` wait for this app on `entry`'s condition?
    fn judge(&self, dependent: &str, entry: &Entry<'_>, reporter: &mut Reporter) {
        let other = self.name;
        if self.fields.is_some_and(|f| f.schedule.is_some()) {
            entry
                .name_error(
                    reporter,
                    format!("`{other}` has a schedule: it runs at times, so nothing can wait for it"),
                )
                .help(format!(
                    "remove `{other}` from `depends_on`; a scheduled app can itself wait for others (`depends_on` on `{other}`)"
                ));
            return;
        }
        let Some(spec) = self.spec else {
            return;
        };
        match entry.dependency.condition {
            Condition::Healthy if spec.health.is_none() && self.sound("health") => {
                entry
                    .condition_error(
                        reporter,
                        format!("`healthy` needs a health check, and `{other}` has none"),
                    )
                    .help(format!(
                        "give `{other}` a `health` check (e.g. `health: {{tcp: \"127.0.0.1:5432\"}}`), or wait for `ready`"
                    ));
                return;
            }
            Condition::Completed
                if spec.restart == RestartPolicy::Always && self.sound("restart") =>
            {
                entry
                    .condition_error(
                        reporter,
                        format!("`{other}` never completes: its `restart` policy is `always`"),
                    )
                    .help("`completed` waits for a one-shot app (`restart: never` or `on-failure`) to exit 0; to wait for a service, use `ready`");
                return;
            }
            Condition::Ready | Condition::Started
                if spec.restart == RestartPolicy::Never && self.sound("restart") =>
            {
                let condition = entry.dependency.condition.name();
                entry
                    .name_warning(
                        reporter,
                        format!(
                            "`{other}` is a one-shot (`restart: never`): it is {condition} while it runs, not once it is done"
                        ),
                    )
                    .help(format!(
                        "to start `{dependent}` once `{other}` has exited 0, write `{other}: completed`"
                    ));
            }
            _ => {}
        }
        if spec.instances == 0 && self.sound("instances") {
            entry
                .name_warning(
                    reporter,
                    format!("`{other}` has 0 instances, so this dependency is met at once"),
                )
                .help(format!(
                    "`{dependent}` starts without waiting for `{other}`; scale `{other}` up, or remove it from `depends_on`"
                ));
        }
    }
}

/// `depends_on` belongs to one app; `on_dependency_restart` in `defaults`
/// is only worth a word when no app waits for anything.
fn check_defaults(file: &EcosystemFile, reporter: &mut Reporter) {
    let Some(defaults) = &file.defaults else {
        return;
    };
    if defaults.depends_on.is_some() {
        reporter
            .key_error(
                &[key("defaults"), key("depends_on")],
                "`depends_on` cannot be in `defaults`",
            )
            .help("each app names the apps it waits for: move `depends_on` under those apps");
    }
    if defaults.on_dependency_restart.is_some()
        && !file.apps.values().any(|app| app.depends_on.is_some())
    {
        reporter
            .warning(
                &[key("defaults"), key("on_dependency_restart")],
                "`on_dependency_restart` in `defaults` does nothing: no app has `depends_on`",
            )
            .help("drop it, or give the apps that wait for others a `depends_on`");
    }
}

/// One error for a cycle, at its first edge: `a (line 4) → b (line 9) → a`,
/// each line being where the app before the arrow names the app after it.
fn report_cycle(
    cycle: &[(usize, usize)],
    declared: &[&str],
    edges: &[Vec<(usize, Entry<'_>)>],
    reporter: &mut Reporter,
) {
    let root = reporter.root();
    let steps: Vec<(&str, &Entry<'_>)> = cycle
        .iter()
        .filter_map(|&(from, edge)| {
            let name = declared.get(from)?;
            let (_, entry) = edges.get(from)?.get(edge)?;
            Some((*name, entry))
        })
        .collect();
    let (Some((first, first_entry)), true) = (steps.first(), steps.len() == cycle.len()) else {
        return;
    };
    let step = |(name, entry): &(&str, &Entry<'_>)| format!("{name} (line {})", entry.line(root));
    let path = if steps.len() > MAX_CYCLE_STEPS_SHOWN {
        let head: Vec<String> = steps
            .iter()
            .take(MAX_CYCLE_STEPS_SHOWN - 1)
            .map(step)
            .collect();
        let hidden = steps.len() - MAX_CYCLE_STEPS_SHOWN;
        let last = steps.last().map(step).unwrap_or_default();
        format!("{} → … {hidden} more … → {last}", head.join(" → "))
    } else {
        steps.iter().map(step).collect::<Vec<_>>().join(" → ")
    };
    first_entry
        .name_error(reporter, format!("dependency cycle: {path} → {first}"))
        .help("each line is where an app names the next one; apps in a cycle wait for each other and none could ever start: remove one of these dependencies");
}

/// The cycles a depth-first walk in node order closes, each as its edges
/// `(node, index in successors[node])`, starting at its lowest node: the
/// first `limit` of them, and how many there are.
pub(super) fn cycles(successors: &[Vec<usize>], limit: usize) -> (Vec<Vec<(usize, usize)>>, usize) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        /// On the walk's path, at this position.
        OnPath(usize),
        Finished,
    }
    let mut marks = vec![Mark::Unseen; successors.len()];
    let mut found = Vec::new();
    let mut total = 0;
    for root in 0..successors.len() {
        if marks.get(root) != Some(&Mark::Unseen) {
            continue;
        }
        // The path from `root`: each node with the index of the edge it
        // follows (to the next node on the path, or the next one to try).
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        if let Some(mark) = marks.get_mut(root) {
            *mark = Mark::OnPath(0);
        }
        while let Some(&(node, edge)) = path.last() {
            let next = successors.get(node).and_then(|out| out.get(edge)).copied();
            let Some(to) = next else {
                path.pop();
                if let Some(mark) = marks.get_mut(node) {
                    *mark = Mark::Finished;
                }
                advance(&mut path);
                continue;
            };
            match marks.get(to).copied() {
                Some(Mark::Unseen) => {
                    if let Some(mark) = marks.get_mut(to) {
                        *mark = Mark::OnPath(path.len());
                    }
                    path.push((to, 0));
                }
                Some(Mark::OnPath(at)) => {
                    total += 1;
                    if found.len() < limit {
                        let mut cycle = path.get(at..).unwrap_or_default().to_vec();
                        let lowest = (0..cycle.len()).min_by_key(|&i| cycle.get(i).map(|c| c.0));
                        cycle.rotate_left(lowest.unwrap_or(0));
                        found.push(cycle);
                    }
                    advance(&mut path);
                }
                Some(Mark::Finished) | None => advance(&mut path),
            }
        }
    }
    (found, total)
}

/// Move the last node of the path on to its next edge.
fn advance(path: &mut [(usize, usize)]) {
    if let Some((_, edge)) = path.last_mut() {
        *edge += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_without_cycles_has_none() {
        // a → b → c, a → c, d alone
        assert_eq!(
            cycles(&[vec![1, 2], vec![2], vec![], vec![]], 10),
            (vec![], 0)
        );
        assert_eq!(cycles(&[], 10), (vec![], 0));
    }

    #[test]
    fn each_cycle_is_found_once_from_its_first_node() {
        // 0 → 1 → 2 → 0: one cycle, however many nodes are in it.
        assert_eq!(
            cycles(&[vec![1], vec![2], vec![0]], 10),
            (vec![vec![(0, 0), (1, 0), (2, 0)]], 1)
        );
        // Entered at 1 (0 only leads into it), it still starts at 1, its lowest.
        assert_eq!(
            cycles(&[vec![2], vec![2], vec![3], vec![1]], 10),
            (vec![vec![(1, 0), (2, 0), (3, 0)]], 1)
        );
        // Found from 2 (the walk enters at 2 via 0 → 2), printed from 1.
        assert_eq!(
            cycles(&[vec![2], vec![2], vec![1]], 10),
            (vec![vec![(1, 0), (2, 0)]], 1)
        );
    }

    #[test]
    fn several_cycles_are_each_reported() {
        // Two cycles sharing node 1: 0 ⇄ 1 and 1 ⇄ 2; and a separate 3 ⇄ 4.
        let (found, total) = cycles(&[vec![1], vec![0, 2], vec![1], vec![4], vec![3]], 10);
        assert_eq!(
            found,
            [
                vec![(0, 0), (1, 0)],
                vec![(1, 1), (2, 0)],
                vec![(3, 0), (4, 0)]
            ]
        );
        assert_eq!(total, 3);
    }

    #[test]
    fn in_a_dense_graph_each_reported_cycle_is_real_and_distinct() {
        // Every app waits for every other: many cycles, each reported one real.
        let graph: Vec<Vec<usize>> = (0..4)
            .map(|n| (0..4).filter(|m| *m != n).collect())
            .collect();
        let (found, total) = cycles(&graph, 10);
        assert_eq!(total, 6, "one per edge back to the path: {found:?}");
        for cycle in &found {
            let nodes: Vec<usize> = cycle.iter().map(|(node, _)| *node).collect();
            for (i, (node, edge)) in cycle.iter().enumerate() {
                let next = nodes[(i + 1) % nodes.len()];
                assert_eq!(graph[*node][*edge], next, "{cycle:?} follows edges");
            }
            assert_eq!(nodes.iter().min(), nodes.first(), "starts at its lowest");
        }
        let distinct: HashSet<&Vec<(usize, usize)>> = found.iter().collect();
        assert_eq!(distinct.len(), found.len());
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 200_000;
        let mut graph: Vec<Vec<usize>> = (1..n).map(|next| vec![next]).collect();
        graph.push(vec![0]);
        let (found, total) = cycles(&graph, 10);
        assert_eq!(total, 1);
        assert_eq!(found[0].len(), n);
    }

    #[test]
    fn beyond_the_limit_cycles_are_counted_not_kept() {
        let graph: Vec<Vec<usize>> = (0..300)
            .map(|n| (0..300).filter(|m| *m != n).collect())
            .collect();
        let (found, total) = cycles(&graph, 3);
        assert_eq!(found.len(), 3);
        assert_eq!(total, 300 * 299 / 2);
    }
}
