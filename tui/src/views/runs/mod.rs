//! The runs list: every run of the workspace as the run-list watch reports it, and what the
//! user did to the list (filter, sort, grouping, marks, selection). Pure state; the rows shown
//! are derived on demand ([`RunsState::rows`]), never stored twice; [`draw`] draws them.

pub mod draw;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use ddp_workspaces::follow::run_list::{RunEntry, RunListEvent};
use ddp_workspaces::index::fields::{RunFields, SpecTable, spec_table};
use ddp_workspaces::index::filter::{Expr, Value};
use ddp_workspaces::runs::workspace::Unreadable;

/// What the list is ordered by (`o` cycles, `O` reverses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Newest first (run ids start with their creation time).
    #[default]
    Created,
    Status,
    Experiment,
    Progress,
    Loss,
    BestVal,
    Test,
    Duration,
}

impl SortKey {
    pub const ALL: [SortKey; 8] = [
        SortKey::Created,
        SortKey::Status,
        SortKey::Experiment,
        SortKey::Progress,
        SortKey::Loss,
        SortKey::BestVal,
        SortKey::Test,
        SortKey::Duration,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Created => "created",
            SortKey::Status => "status",
            SortKey::Experiment => "experiment",
            SortKey::Progress => "progress",
            SortKey::Loss => "loss",
            SortKey::BestVal => "best val",
            SortKey::Test => "test",
            SortKey::Duration => "duration",
        }
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// One line of the list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Row<'a> {
    /// A group heading (grouping by experiment): the experiment and its number of runs shown.
    Group(&'a str, usize),
    Run(&'a RunEntry),
    /// A run folder whose `run.json` cannot be read.
    Unreadable(&'a Unreadable),
}

impl Row<'_> {
    /// The run folder behind the row (none for a heading).
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Row::Group(..) => None,
            Row::Run(e) => Some(&e.run.dir),
            Row::Unreadable(u) => Some(&u.dir),
        }
    }
}

#[derive(Debug, Default)]
pub struct RunsState {
    pub entries: Vec<RunEntry>,
    pub unreadable: Vec<Unreadable>,
    /// Whether the first snapshot has arrived.
    pub loaded: bool,
    pub filter: String,
    pub sort: SortKey,
    /// Reverse of the key's natural order.
    pub reversed: bool,
    pub group: bool,
    pub marked: BTreeSet<PathBuf>,
    /// The selected run folder (kept across re-sorting and updates).
    pub selected: Option<PathBuf>,
    /// Frozen specs read for `spec.KEY` filters, by run folder (they never change): the runs
    /// whose values are not in `spec_values`.
    specs: RefCell<HashMap<PathBuf, Option<SpecTable>>>,
    /// Spec keys' values from the run index, by run folder, for `spec.KEY` filters
    /// ([`RunsState::set_filter`] asks for them); `None` while asked for and not arrived.
    spec_values: HashMap<String, Option<SpecValues>>,
    /// Where each run folder is in `entries`; `None` to be rebuilt.
    positions: RefCell<Option<HashMap<PathBuf, usize>>>,
}

/// One spec key's value in each run that has it, by run folder (its path as text, as the run
/// index keeps it).
pub type SpecValues = HashMap<String, Value>;

/// The filter as typed, parsed once: an expression, else a lowercased substring.
enum Filter {
    Expr(Expr),
    Text(String),
}

impl Filter {
    fn of(text: &str) -> Filter {
        let f = text.trim();
        match Expr::parse(f) {
            Ok(expr) => Filter::Expr(expr),
            Err(_) => Filter::Text(f.to_lowercase()),
        }
    }
}

impl RunsState {
    /// Applies one event of the run-list watch.
    pub fn apply(&mut self, event: RunListEvent) {
        match event {
            RunListEvent::Snapshot {
                entries,
                unreadable,
            } => {
                self.entries = entries;
                self.unreadable = unreadable;
                self.loaded = true;
                *self.positions.get_mut() = None;
            }
            RunListEvent::Changed(entry) => {
                if !self.unreadable.is_empty() {
                    self.unreadable.retain(|u| u.dir != entry.run.dir);
                }
                match self.position(&entry.run.dir) {
                    Some(i) => self.entries[i] = entry,
                    None => {
                        if let Some(p) = self.positions.get_mut() {
                            p.insert(entry.run.dir.clone(), self.entries.len());
                        }
                        self.entries.push(entry);
                    }
                }
            }
            RunListEvent::Removed { dir } => {
                self.entries.retain(|e| e.run.dir != dir);
                *self.positions.get_mut() = None;
                self.unreadable.retain(|u| u.dir != dir);
                self.marked.remove(&dir);
            }
            RunListEvent::Unreadable(u) => {
                self.entries.retain(|e| e.run.dir != u.dir);
                *self.positions.get_mut() = None;
                match self.unreadable.iter_mut().find(|x| x.dir == u.dir) {
                    Some(x) => *x = u,
                    None => self.unreadable.push(u),
                }
            }
        }
        if self.selected.is_none() {
            self.selected = self
                .rows()
                .iter()
                .find_map(|r| r.dir().map(Path::to_path_buf));
        }
    }

    pub fn entry(&self, dir: &Path) -> Option<&RunEntry> {
        self.position(dir).map(|i| &self.entries[i])
    }

    /// Where run folder `dir` is in `entries` (a map kept beside them: 10,000 runs' updates
    /// each find their entry at once).
    fn position(&self, dir: &Path) -> Option<usize> {
        let fresh = |p: &HashMap<PathBuf, usize>| {
            p.get(dir)
                .copied()
                .filter(|&i| self.entries.get(i).is_some_and(|e| e.run.dir == dir))
        };
        let mut positions = self.positions.borrow_mut();
        match positions.as_ref() {
            Some(p) if p.len() == self.entries.len() => fresh(p),
            _ => {
                let p: HashMap<PathBuf, usize> = self
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.run.dir.clone(), i))
                    .collect();
                let found = fresh(&p);
                *positions = Some(p);
                found
            }
        }
    }

    /// Sets the filter; returns the spec keys it names whose values are to be read from the run
    /// index (each asked for once; until they arrive a run has no value for them).
    pub fn set_filter(&mut self, text: String) -> Option<Vec<String>> {
        self.filter = text;
        let mut wanted = Vec::new();
        if let Filter::Expr(expr) = Filter::of(&self.filter) {
            for key in expr.fields().iter().filter_map(|f| f.strip_prefix("spec.")) {
                if !self.spec_values.contains_key(key) {
                    self.spec_values.insert(key.to_string(), None);
                    wanted.push(key.to_string());
                }
            }
        }
        self.fix_selection();
        (!wanted.is_empty()).then_some(wanted)
    }

    /// Spec keys' values read from the run index.
    pub fn spec_values_read(&mut self, values: HashMap<String, SpecValues>) {
        for (key, v) in values {
            self.spec_values.insert(key, Some(v));
        }
        self.fix_selection();
    }

    /// The selected run, if it is a readable one.
    pub fn selected_entry(&self) -> Option<&RunEntry> {
        self.selected.as_deref().and_then(|d| self.entry(d))
    }

    /// Whether `entry` passes the filter: an expression (`ddp ls --where`'s: `spec.train.lr <
    /// 0.01 and status = "completed"`), else a case-insensitive substring of its id,
    /// experiment, name, status or one of its tags.
    pub fn matches(&self, entry: &RunEntry) -> bool {
        self.matches_with(&Filter::of(&self.filter), entry)
    }

    fn matches_with(&self, filter: &Filter, entry: &RunEntry) -> bool {
        match filter {
            Filter::Expr(expr) => self.matches_expr(expr, entry),
            Filter::Text(f) => matches_filter(f, entry),
        }
    }

    /// Whether `entry` satisfies `expr`: `spec.KEY` values from the run index, else (a run
    /// newer than the index's answer, or no answer asked for) from its frozen spec, read once.
    fn matches_expr(&self, expr: &Expr, entry: &RunEntry) -> bool {
        let dir = &entry.run.dir;
        let key = dir.to_string_lossy();
        let own_spec = expr.fields().iter().any(|f| {
            f.strip_prefix("spec.")
                .is_some_and(|k| match self.spec_values.get(k) {
                    Some(Some(values)) => !values.contains_key(key.as_ref()),
                    Some(None) => false,
                    None => true,
                })
        });
        if own_spec && !self.specs.borrow().contains_key(dir) {
            let table = spec_table(&entry.run);
            self.specs.borrow_mut().insert(dir.clone(), table);
        }
        let specs = self.specs.borrow();
        let spec = specs.get(dir).and_then(Option::as_ref);
        let fields = RunFields::of_entry(entry, spec);
        expr.matches(&|name| {
            let indexed = name
                .strip_prefix("spec.")
                .and_then(|k| self.spec_values.get(k));
            match indexed {
                Some(None) => None,
                Some(Some(values)) if values.contains_key(key.as_ref()) => {
                    values.get(key.as_ref()).cloned()
                }
                _ => fields.get(name),
            }
        })
    }
}

/// [`RunsState::matches`] with the filter already trimmed and lowercased.
fn matches_filter(f: &str, entry: &RunEntry) -> bool {
    if f.is_empty() {
        return true;
    }
    {
        let r = &entry.run.record;
        [
            r.id.as_str(),
            r.experiment.as_str(),
            r.name.as_deref().unwrap_or(""),
            r.status.as_str(),
        ]
        .into_iter()
        .chain(entry.tags.iter().map(String::as_str))
        .any(|s| s.to_lowercase().contains(f))
    }
}

impl RunsState {
    /// The rows shown, in order: filtered, sorted, grouped; unreadable folders last.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let f = self.filter.trim().to_lowercase();
        let filter = Filter::of(&self.filter);
        let mut runs: Vec<&RunEntry> = self
            .entries
            .iter()
            .filter(|e| self.matches_with(&filter, e))
            .collect();
        runs.sort_by(|a, b| {
            let o = compare(self.sort, a, b).then_with(|| b.run.record.id.cmp(&a.run.record.id));
            if self.reversed { o.reverse() } else { o }
        });
        let mut rows = Vec::with_capacity(runs.len() + 8);
        if self.group {
            let mut experiments: Vec<&str> = runs
                .iter()
                .map(|e| e.run.record.experiment.as_str())
                .collect();
            experiments.sort_unstable();
            experiments.dedup();
            for exp in experiments {
                let members: Vec<&RunEntry> = runs
                    .iter()
                    .copied()
                    .filter(|e| e.run.record.experiment == exp)
                    .collect();
                rows.push(Row::Group(exp, members.len()));
                rows.extend(members.into_iter().map(Row::Run));
            }
        } else {
            rows.extend(runs.into_iter().map(Row::Run));
        }
        rows.extend(
            self.unreadable
                .iter()
                .filter(|u| f.is_empty() || u.dir.to_string_lossy().to_lowercase().contains(&f))
                .map(Row::Unreadable),
        );
        rows
    }

    /// The index of the selected row among `rows`.
    pub fn selected_index(&self, rows: &[Row]) -> Option<usize> {
        let sel = self.selected.as_deref()?;
        rows.iter().position(|r| r.dir() == Some(sel))
    }

    /// Moves the selection by `delta` rows (headings skipped), clamped to the list.
    pub fn move_selection(&mut self, delta: isize) {
        let rows = self.rows();
        let selectable: Vec<usize> = (0..rows.len())
            .filter(|&i| rows[i].dir().is_some())
            .collect();
        if selectable.is_empty() {
            self.selected = None;
            return;
        }
        let current = self
            .selected_index(&rows)
            .and_then(|i| selectable.iter().position(|&s| s == i));
        let target = match current {
            Some(c) => (c as isize + delta).clamp(0, selectable.len() as isize - 1) as usize,
            None => 0,
        };
        self.selected = rows[selectable[target]].dir().map(Path::to_path_buf);
    }

    /// Keeps a selection that the filter still shows, else selects the first row shown.
    pub fn fix_selection(&mut self) {
        let rows = self.rows();
        if self.selected_index(&rows).is_none() {
            self.selected = rows.iter().find_map(|r| r.dir().map(Path::to_path_buf));
        }
    }

    pub fn cycle_sort(&mut self) {
        self.sort = self.sort.next();
        self.reversed = false;
    }

    /// Marks or unmarks the selected run (for Compare).
    pub fn toggle_mark(&mut self) {
        if let Some(e) = self.selected_entry() {
            let dir = e.run.dir.clone();
            if !self.marked.remove(&dir) {
                self.marked.insert(dir);
            }
        }
    }

    /// The marked runs that still exist, in list order.
    pub fn marked_entries(&self) -> Vec<&RunEntry> {
        self.rows()
            .into_iter()
            .filter_map(|r| match r {
                Row::Run(e) if self.marked.contains(&e.run.dir) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// Number of runs that are not finished.
    pub fn live_count(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| !e.run.record.status.is_terminal())
            .count()
    }
}

/// The natural order of each key: the interesting end first (newest, live, lowest loss, best
/// accuracy, longest).
fn compare(key: SortKey, a: &RunEntry, b: &RunEntry) -> std::cmp::Ordering {
    let (ra, rb) = (&a.run.record, &b.run.record);
    // Larger first, absent values still last.
    let desc = |x: Option<f64>, y: Option<f64>| opt_cmp(x.map(|v| -v), y.map(|v| -v));
    match key {
        SortKey::Created => rb.id.cmp(&ra.id),
        SortKey::Status => ra.status.cmp(&rb.status),
        SortKey::Experiment => ra.experiment.cmp(&rb.experiment),
        SortKey::Progress => desc(progress(a), progress(b)),
        SortKey::Loss => opt_cmp(a.metrics.last_train_loss, b.metrics.last_train_loss),
        SortKey::BestVal => desc(a.metrics.best_val_accuracy, b.metrics.best_val_accuracy),
        SortKey::Test => desc(a.metrics.test_accuracy, b.metrics.test_accuracy),
        SortKey::Duration => desc(duration(a, None), duration(b, None)),
    }
}

/// Present values before absent ones, NaN last among present ones.
fn opt_cmp(x: Option<f64>, y: Option<f64>) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (x, y) {
        (Some(x), Some(y)) => x
            .partial_cmp(&y)
            .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan())),
        (Some(_), None) => Less,
        (None, Some(_)) => Greater,
        (None, None) => Equal,
    }
}

/// Fraction of the epochs (or, for a run counted in steps, the steps) done, when the total is
/// known.
pub fn progress(e: &RunEntry) -> Option<f64> {
    if let Some(steps) = e.steps_total.filter(|&t| t > 0) {
        if e.run.record.status == ddp_workspaces::RunStatus::Completed {
            return Some(1.0);
        }
        return Some(e.metrics.steps.min(steps) as f64 / steps as f64);
    }
    let total = e.epochs_total.filter(|&t| t > 0)?;
    let done = if e.run.record.status == ddp_workspaces::RunStatus::Completed {
        total
    } else {
        e.metrics.epochs_done.min(total)
    };
    Some(done as f64 / total as f64)
}

/// Seconds from start to end (or to `now` while live; `None` for `now` means "use the end or
/// the last record").
pub fn duration(e: &RunEntry, now: Option<f64>) -> Option<f64> {
    let r = &e.run.record;
    let start = r.started?;
    let end = r
        .ended
        .or(now.filter(|_| !r.status.is_terminal()))
        .or(e.metrics.last_time)?;
    Some((end - start).max(0.0))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ddp_workspaces::follow::run_list::MetricDigest;
    use ddp_workspaces::{RunRecord, RunStatus};

    pub(crate) fn entry(id: &str, exp: &str, status: RunStatus) -> RunEntry {
        RunEntry {
            run: RunRecord::sample()
                .id(id)
                .experiment(exp)
                .status(status)
                .spec_hash("abc123")
                .command(vec![])
                .host("box")
                .devices("cpu (1 thread per replica)")
                .created(1_795_000_000.0)
                .started(Some(1_795_000_001.0))
                .in_workspace("/ws"),
            tags: vec![],
            epochs_total: Some(3),
            steps_total: None,
            metrics: MetricDigest::default(),
            warnings: vec![],
        }
    }

    fn state() -> RunsState {
        let mut s = RunsState::default();
        let mut a = entry("20261101-000000-aaaaaa", "mnist", RunStatus::Completed);
        a.metrics.best_val_accuracy = Some(0.97);
        a.tags = vec!["baseline".into()];
        let mut b = entry("20261102-000000-bbbbbb", "cifar", RunStatus::Running);
        b.metrics.best_val_accuracy = Some(0.5);
        let c = entry("20261103-000000-cccccc", "mnist", RunStatus::Failed);
        s.apply(RunListEvent::Snapshot {
            entries: vec![c, b, a],
            unreadable: vec![Unreadable {
                dir: "/ws/experiments/x/runs/bad".into(),
                error: "run.json: not a valid run record".into(),
            }],
        });
        s
    }

    fn ids(rows: &[Row]) -> Vec<String> {
        rows.iter()
            .map(|r| match r {
                Row::Group(e, n) => format!("# {e} {n}"),
                Row::Run(e) => e.run.record.id[16..].to_string(),
                Row::Unreadable(_) => "bad".into(),
            })
            .collect()
    }

    /// [`state`] with run a's frozen spec (`train.lr = 0.003`) in a folder of its own.
    fn with_a_spec() -> (RunsState, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = state();
        s.entries[2].run.dir = dir.path().to_path_buf();
        std::fs::write(
            dir.path().join("spec.toml"),
            "name = \"m\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n[train]\nlr = 0.003\n",
        )
        .unwrap();
        (s, dir)
    }

    /// `/` with an expression filters as `ddp ls --where` does; spec keys read the frozen
    /// spec once per run; text that is no expression filters as a substring.
    #[test]
    fn an_expression_filters_like_ls_where() {
        let (mut s, _dir) = with_a_spec();
        s.entries[2].metrics.test_accuracy = Some(0.96);
        let shown = |s: &mut RunsState, f: &str| {
            s.filter = f.into();
            ids(&s.rows())
        };
        assert_eq!(shown(&mut s, "status = \"completed\""), ["aaaaaa"]);
        assert_eq!(
            shown(&mut s, "test_accuracy > 0.9 or status = \"running\""),
            ["bbbbbb", "aaaaaa"]
        );
        assert_eq!(shown(&mut s, "tags = \"baseline\""), ["aaaaaa"]);
        assert_eq!(shown(&mut s, "spec.train.lr < 0.01"), ["aaaaaa"]);
        assert_eq!(s.specs.borrow().len(), 3, "each run's spec read once");
        // Not an expression: a substring, as before.
        assert_eq!(shown(&mut s, "cifar"), ["bbbbbb"]);
    }

    /// A `spec.KEY` filter set by typing asks for the key's values from the run index once;
    /// until they arrive no run has the key; then runs the answer covers take their value from
    /// it, and a run it does not cover (newer) its own frozen spec.
    #[test]
    fn spec_keys_come_from_the_run_index() {
        let (mut s, _dir) = with_a_spec();
        let f = "spec.train.lr < 0.01";
        assert_eq!(s.set_filter(f.into()), Some(vec!["train.lr".to_string()]));
        assert_eq!(s.set_filter(f.into()), None, "asked for once");
        assert!(ids(&s.rows()).is_empty(), "pending: no run has a value");
        let b = s.entries[1].run.dir.to_string_lossy().into_owned();
        let c = s.entries[0].run.dir.to_string_lossy().into_owned();
        let values: SpecValues = [(b, Value::Num(0.001)), (c, Value::Num(0.1))].into();
        s.spec_values_read([("train.lr".to_string(), values)].into());
        // b from the index; a (not in the answer) from its own spec; c is over.
        assert_eq!(ids(&s.rows()), ["bbbbbb", "aaaaaa"]);
        assert_eq!(s.specs.borrow().len(), 1, "only a's spec read");
    }

    #[test]
    fn filter_sort_group_and_selection() {
        let mut s = state();
        assert_eq!(ids(&s.rows()), ["cccccc", "bbbbbb", "aaaaaa", "bad"]);
        assert_eq!(
            s.selected.as_deref(),
            Some(Path::new(
                "/ws/experiments/mnist/runs/20261103-000000-cccccc"
            ))
        );
        s.sort = SortKey::BestVal;
        assert_eq!(ids(&s.rows()), ["aaaaaa", "bbbbbb", "cccccc", "bad"]);
        s.reversed = true;
        assert_eq!(ids(&s.rows()), ["cccccc", "bbbbbb", "aaaaaa", "bad"]);
        s.reversed = false;
        s.group = true;
        assert_eq!(
            ids(&s.rows()),
            [
                "# cifar 1",
                "bbbbbb",
                "# mnist 2",
                "aaaaaa",
                "cccccc",
                "bad"
            ]
        );
        s.filter = "BASE".into();
        assert_eq!(ids(&s.rows()), ["# mnist 1", "aaaaaa"]);
        s.fix_selection();
        assert!(
            s.selected_entry()
                .unwrap()
                .run
                .record
                .id
                .ends_with("aaaaaa")
        );
        s.filter = "running".into();
        s.group = false;
        assert_eq!(ids(&s.rows()), ["bbbbbb"]);
    }

    #[test]
    fn moving_marks_and_live_updates() {
        let mut s = state();
        s.move_selection(1);
        assert!(
            s.selected_entry()
                .unwrap()
                .run
                .record
                .id
                .ends_with("bbbbbb")
        );
        s.move_selection(10);
        assert_eq!(s.selected_entry(), None); // the unreadable row
        assert!(s.selected.as_deref().unwrap().ends_with("bad"));
        s.move_selection(-10);
        s.toggle_mark();
        s.move_selection(2);
        s.toggle_mark();
        let marked: Vec<_> = s
            .marked_entries()
            .iter()
            .map(|e| &e.run.record.id[16..])
            .collect();
        assert_eq!(marked, ["cccccc", "aaaaaa"]);
        // A run that finished, one that appeared, one that went.
        let mut b = entry("20261102-000000-bbbbbb", "cifar", RunStatus::Completed);
        b.metrics.best_val_accuracy = Some(0.6);
        s.apply(RunListEvent::Changed(b));
        s.apply(RunListEvent::Changed(entry(
            "20261104-000000-dddddd",
            "mnist",
            RunStatus::Queued,
        )));
        s.apply(RunListEvent::Removed {
            dir: "/ws/experiments/mnist/runs/20261103-000000-cccccc".into(),
        });
        assert_eq!(ids(&s.rows()), ["dddddd", "bbbbbb", "aaaaaa", "bad"]);
        assert_eq!(s.live_count(), 1);
        assert_eq!(s.marked.len(), 1);
        // The unreadable folder reads again.
        let mut fixed = entry("bad-but-fixed-0000000", "x", RunStatus::Stopped);
        fixed.run.dir = "/ws/experiments/x/runs/bad".into();
        s.apply(RunListEvent::Changed(fixed));
        assert!(s.unreadable.is_empty());
    }

    #[test]
    fn progress_and_duration() {
        let mut e = entry("20261101-000000-aaaaaa", "m", RunStatus::Running);
        e.metrics.epochs_done = 1;
        assert_eq!(progress(&e), Some(1.0 / 3.0));
        assert_eq!(duration(&e, Some(1_795_000_011.0)), Some(10.0));
        e.run.record.status = RunStatus::Completed;
        e.run.record.ended = Some(1_795_000_101.0);
        assert_eq!(progress(&e), Some(1.0));
        assert_eq!(duration(&e, Some(2e9)), Some(100.0));
        e.epochs_total = None;
        assert_eq!(progress(&e), None);
    }

    #[test]
    fn a_run_counted_in_steps_progresses_by_steps() {
        let mut e = entry("20261101-000000-aaaaaa", "g", RunStatus::Running);
        e.epochs_total = None;
        e.steps_total = Some(2000);
        e.metrics.steps = 500;
        assert_eq!(progress(&e), Some(0.25));
        e.run.record.status = RunStatus::Completed;
        assert_eq!(progress(&e), Some(1.0));
    }
}
