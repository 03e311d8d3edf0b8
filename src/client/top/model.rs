//! The table of `supervise top`, as data: one row per instance of a
//! [`StatusReply`], the sort and the filter over them, and a selection that
//! is kept by identity (`web.2`), not by position, so that a refresh that
//! reorders the rows (a CPU sort, an instance that came or went) leaves the
//! cursor on the same instance.
//!
//! Nothing here draws or talks to the supervisor: the model is pure, so the
//! tests can feed it replies and read back exactly what a user would see.

use std::cmp::Ordering;

use crate::client::status::{duration, percent, size};
use ::model::protocol::{StatusReply, WorkerStatus};

/// One instance, with the values the table shows and sorts by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InstanceRow {
    pub(crate) app: String,
    pub(crate) slot: u32,
    pub(crate) pid: Option<i32>,
    pub(crate) state: String,
    pub(crate) health: Option<String>,
    pub(crate) cpu_percent: Option<f64>,
    pub(crate) rss_bytes: Option<u64>,
    pub(crate) restarts: u32,
    pub(crate) uptime_s: Option<f64>,
}

impl InstanceRow {
    fn new(app: &str, worker: &WorkerStatus) -> InstanceRow {
        InstanceRow {
            app: app.to_string(),
            slot: worker.slot,
            pid: worker.pid,
            state: match worker.completed_s {
                Some(_) => "completed".to_string(),
                None => worker.state.clone(),
            },
            health: worker.health.clone(),
            cpu_percent: worker.cpu_percent,
            rss_bytes: worker.rss_bytes,
            restarts: worker.restarts,
            uptime_s: worker.uptime_s,
        }
    }

    /// `web.2`: the instance, as the control commands name it.
    pub(crate) fn target(&self) -> String {
        format!("{}.{}", self.app, self.slot)
    }

    /// One cell as shown: `-` where there is no value (no process).
    pub(crate) fn cell(&self, column: Column) -> String {
        let dash = || "-".to_string();
        match column {
            Column::Instance => self.target(),
            Column::Pid => self.pid.map_or_else(dash, |p| p.to_string()),
            Column::State => self.state.clone(),
            Column::Health => self.health.clone().unwrap_or_else(dash),
            Column::Cpu => self.cpu_percent.map_or_else(dash, percent),
            Column::Memory => self.rss_bytes.map_or_else(dash, size),
            Column::Restarts => self.restarts.to_string(),
            Column::Uptime => self.uptime_s.map_or_else(dash, duration),
        }
    }

    fn key(&self) -> (&str, u32) {
        (&self.app, self.slot)
    }

    /// Whether the filter (already lowercase) is in the app's name or the state.
    fn matches(&self, filter: &str) -> bool {
        filter.is_empty()
            || self.app.to_lowercase().contains(filter)
            || self.state.to_lowercase().contains(filter)
    }
}

/// The columns, in the order shown; each can be the sort column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Instance,
    Pid,
    State,
    Health,
    Cpu,
    Memory,
    Restarts,
    Uptime,
}

impl Column {
    pub(crate) const ALL: [Column; 8] = [
        Column::Instance,
        Column::Pid,
        Column::State,
        Column::Health,
        Column::Cpu,
        Column::Memory,
        Column::Restarts,
        Column::Uptime,
    ];

    pub(crate) fn title(self) -> &'static str {
        match self {
            Column::Instance => "instance",
            Column::Pid => "pid",
            Column::State => "state",
            Column::Health => "health",
            Column::Cpu => "cpu",
            Column::Memory => "memory",
            Column::Restarts => "restarts",
            Column::Uptime => "uptime",
        }
    }

    fn position(self) -> usize {
        Column::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }

    /// The next column (`forward`) or the one before, wrapping around.
    fn step(self, forward: bool) -> Column {
        let count = Column::ALL.len();
        let offset = if forward { 1 } else { count - 1 };
        Column::ALL[(self.position() + offset) % count]
    }

    /// How two rows compare on this column alone, in the direction asked; a
    /// missing value (no process) sorts after every present one either way,
    /// so that the busiest instances, not the dead ones, head a CPU sort.
    fn compare(self, a: &InstanceRow, b: &InstanceRow, descending: bool) -> Ordering {
        let directed = |order: Ordering| {
            if descending { order.reverse() } else { order }
        };
        fn present_first<T>(
            a: Option<T>,
            b: Option<T>,
            cmp: impl Fn(T, T) -> Ordering,
        ) -> Ordering {
            match (a, b) {
                (Some(a), Some(b)) => cmp(a, b),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
        }
        match self {
            Column::Instance => directed(a.key().cmp(&b.key())),
            Column::Pid => present_first(a.pid, b.pid, |a, b| directed(a.cmp(&b))),
            Column::State => directed(a.state.cmp(&b.state)),
            Column::Health => present_first(a.health.as_ref(), b.health.as_ref(), |a, b| {
                directed(a.cmp(b))
            }),
            Column::Cpu => present_first(a.cpu_percent, b.cpu_percent, |a, b| {
                directed(a.total_cmp(&b))
            }),
            Column::Memory => present_first(a.rss_bytes, b.rss_bytes, |a, b| directed(a.cmp(&b))),
            Column::Restarts => directed(a.restarts.cmp(&b.restarts)),
            Column::Uptime => {
                present_first(a.uptime_s, b.uptime_s, |a, b| directed(a.total_cmp(&b)))
            }
        }
    }
}

/// Which column orders the rows, and which way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sort {
    pub(crate) column: Column,
    /// Largest (or last) first.
    pub(crate) descending: bool,
}

/// The rows of the last status, filtered and sorted, and the selection.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    rows: Vec<InstanceRow>,
    /// Indices into `rows` of the rows shown, in the order shown.
    shown: Vec<usize>,
    sort: Sort,
    /// As typed; matched without regard to case.
    filter: String,
    /// The selected instance (app, slot), kept across refreshes.
    selected: Option<(String, u32)>,
    /// Where the selection was among the shown rows: when the selected
    /// instance goes away, the row that takes its place is selected.
    selected_position: usize,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            rows: Vec::new(),
            shown: Vec::new(),
            sort: Sort {
                column: Column::Instance,
                descending: false,
            },
            filter: String::new(),
            selected: None,
            selected_position: 0,
        }
    }
}

impl Table {
    /// Replace the rows with those of `status`, keeping sort, filter and selection.
    pub(crate) fn update(&mut self, status: &StatusReply) {
        self.rows = status
            .apps
            .iter()
            .flat_map(|app| app.workers.iter().map(|w| InstanceRow::new(&app.name, w)))
            .collect();
        self.reshow();
    }

    pub(crate) fn sort(&self) -> Sort {
        self.sort
    }

    /// Sort by the next column (or the previous one), keeping the direction.
    pub(crate) fn cycle_sort(&mut self, forward: bool) {
        self.sort.column = self.sort.column.step(forward);
        self.reshow();
    }

    pub(crate) fn reverse(&mut self) {
        self.sort.descending = !self.sort.descending;
        self.reshow();
    }

    pub(crate) fn filter(&self) -> &str {
        &self.filter
    }

    pub(crate) fn set_filter(&mut self, filter: &str) {
        self.filter = filter.to_string();
        self.reshow();
    }

    /// Every instance of the last status, shown or not.
    pub(crate) fn total(&self) -> usize {
        self.rows.len()
    }

    /// How many instances `app` has, shown or not.
    pub(crate) fn instances_of(&self, app: &str) -> usize {
        self.rows.iter().filter(|r| r.app == app).count()
    }

    /// The rows shown, in order.
    pub(crate) fn shown(&self) -> impl ExactSizeIterator<Item = &InstanceRow> {
        self.shown.iter().map(|i| &self.rows[*i])
    }

    /// The selected row's position among those shown.
    pub(crate) fn selected_index(&self) -> Option<usize> {
        self.selected.as_ref().map(|_| self.selected_position)
    }

    pub(crate) fn selected(&self) -> Option<&InstanceRow> {
        self.selected_index()
            .and_then(|i| self.shown.get(i))
            .map(|i| &self.rows[*i])
    }

    /// Move the selection by `delta` rows, stopping at either end.
    pub(crate) fn move_selection(&mut self, delta: isize) {
        if self.shown.is_empty() {
            return;
        }
        let last = self.shown.len() - 1;
        let position = self
            .selected_position
            .saturating_add_signed(delta)
            .min(last);
        self.select_position(position);
    }

    pub(crate) fn select_first(&mut self) {
        self.move_selection(isize::MIN);
    }

    pub(crate) fn select_last(&mut self) {
        self.move_selection(isize::MAX);
    }

    fn select_position(&mut self, position: usize) {
        match self.shown.get(position) {
            Some(index) => {
                let row = &self.rows[*index];
                self.selected = Some((row.app.clone(), row.slot));
                self.selected_position = position;
            }
            None => {
                self.selected = None;
                self.selected_position = 0;
            }
        }
    }

    /// Filter and sort again, and find the selection among the rows shown.
    fn reshow(&mut self) {
        let filter = self.filter.to_lowercase();
        let mut shown: Vec<usize> = (0..self.rows.len())
            .filter(|i| self.rows[*i].matches(&filter))
            .collect();
        let sort = self.sort;
        let rows = &self.rows;
        shown.sort_by(|a, b| {
            let (a, b) = (&rows[*a], &rows[*b]);
            sort.column
                .compare(a, b, sort.descending)
                .then_with(|| a.key().cmp(&b.key()))
        });
        self.shown = shown;
        let kept = self.selected.as_ref().and_then(|(app, slot)| {
            self.shown
                .iter()
                .position(|i| self.rows[*i].key() == (app.as_str(), *slot))
        });
        let position = kept.unwrap_or(self.selected_position);
        self.select_position(position.min(self.shown.len().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::top::fixtures::{reply, worker};

    fn targets(table: &Table) -> Vec<String> {
        table.shown().map(InstanceRow::target).collect()
    }

    fn sample() -> StatusReply {
        reply(&[
            (
                "web",
                vec![
                    worker(0, Some(100), Some(5.0)),
                    worker(1, Some(101), Some(50.0)),
                    worker(2, None, None),
                ],
            ),
            ("api", vec![worker(0, Some(200), Some(20.0))]),
        ])
    }

    #[test]
    fn one_row_per_instance_sorted_by_instance() {
        let mut table = Table::default();
        table.update(&sample());
        assert_eq!(targets(&table), ["api.0", "web.0", "web.1", "web.2"]);
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("api.0")
        );
    }

    #[test]
    fn cells_say_dash_where_there_is_no_process() {
        let mut table = Table::default();
        table.update(&sample());
        let rows: Vec<_> = table
            .shown()
            .map(|row| Column::ALL.map(|column| row.cell(column)))
            .collect();
        assert_eq!(
            rows[1],
            ["web.0", "100", "ready", "-", "5.0%", "9.6 MiB", "0", "1m1s"].map(String::from)
        );
        assert_eq!(
            rows[3],
            ["web.2", "-", "backoff", "-", "-", "-", "0", "-"].map(String::from)
        );
    }

    #[test]
    fn sorts_by_each_column_missing_values_last_and_reverses() {
        let mut table = Table::default();
        table.update(&sample());
        table.cycle_sort(true);
        assert_eq!(table.sort().column, Column::Pid);
        assert_eq!(targets(&table), ["web.0", "web.1", "api.0", "web.2"]);
        for _ in 0..3 {
            table.cycle_sort(true);
        }
        assert_eq!(table.sort().column, Column::Cpu);
        assert_eq!(targets(&table), ["web.0", "api.0", "web.1", "web.2"]);
        table.reverse();
        assert_eq!(targets(&table), ["web.1", "api.0", "web.0", "web.2"]);
        // Backwards from the first column wraps to the last.
        let mut table = Table::default();
        table.cycle_sort(false);
        assert_eq!(table.sort().column, Column::Uptime);
    }

    #[test]
    fn the_selection_follows_its_instance_across_a_refresh() {
        let mut table = Table::default();
        table.update(&sample());
        table.move_selection(1);
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("web.0")
        );
        // By CPU, busiest first: web.0 (5%) is third.
        for _ in 0..4 {
            table.cycle_sort(true);
        }
        table.reverse();
        assert_eq!(table.selected_index(), Some(2));
        // Its CPU jumps: it moves to the top, and the selection with it.
        let mut hotter = sample();
        hotter.apps[0].workers[0].cpu_percent = Some(99.0);
        table.update(&hotter);
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("web.0")
        );
        assert_eq!(table.selected_index(), Some(0));
    }

    #[test]
    fn a_selected_instance_that_goes_away_hands_over_to_its_neighbour() {
        let mut table = Table::default();
        table.update(&sample());
        table.select_last();
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("web.2")
        );
        let mut fewer = sample();
        fewer.apps[0].workers.truncate(1);
        table.update(&fewer);
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("web.0")
        );
        table.update(&reply(&[]));
        assert_eq!(table.selected(), None);
        assert_eq!(table.selected_index(), None);
        table.move_selection(1);
        table.update(&sample());
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("api.0")
        );
    }

    #[test]
    fn filters_on_app_name_or_state_ignoring_case() {
        let mut table = Table::default();
        table.update(&sample());
        table.set_filter("WE");
        assert_eq!(targets(&table), ["web.0", "web.1", "web.2"]);
        table.set_filter("backoff");
        assert_eq!(targets(&table), ["web.2"]);
        assert_eq!(
            table.selected().map(InstanceRow::target).as_deref(),
            Some("web.2")
        );
        table.set_filter("nothing matches this");
        assert_eq!(table.shown().len(), 0);
        assert_eq!(table.selected(), None);
        assert_eq!(table.total(), 4);
        table.move_selection(1);
        table.select_last();
        assert_eq!(table.selected(), None);
        table.set_filter("");
        assert_eq!(table.shown().len(), 4);
        assert!(table.selected().is_some());
    }

    #[test]
    fn moving_stops_at_either_end() {
        let mut table = Table::default();
        table.update(&sample());
        table.move_selection(-5);
        assert_eq!(table.selected_index(), Some(0));
        table.move_selection(100);
        assert_eq!(table.selected_index(), Some(3));
        table.select_first();
        assert_eq!(table.selected_index(), Some(0));
    }

    #[test]
    fn completed_one_shots_say_so() {
        let mut done = worker(0, None, None);
        done.state = "stopped".to_string();
        done.completed_s = Some(3.0);
        let mut table = Table::default();
        table.update(&reply(&[("migrate", vec![done])]));
        assert_eq!(
            table
                .shown()
                .next()
                .map(|r| r.cell(Column::State))
                .as_deref(),
            Some("completed")
        );
    }
}
