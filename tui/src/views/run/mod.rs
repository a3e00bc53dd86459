//! The state of one open run: its record, metrics of every rank, logs per rank and merged,
//! supervisor events and frozen spec, fed by the run's [`ddp_workspaces::RunWatch`] events.
//! Pure state: the watch and the spec file are read elsewhere and arrive as messages. [`draw`]
//! draws it (with [`charts`], which the Compare view shares); [`sample`] is the Sample pane's
//! state and drawing.

pub mod charts;
pub mod draw;
pub mod sample;

use std::collections::BTreeMap;
use std::path::PathBuf;

use ddp_workspaces::metrics::MetricRecord;
use ddp_workspaces::present::curves::XAxis;
use ddp_workspaces::runs::run::EventRecord;
use ddp_workspaces::{RunEvent, RunRecord};

use self::sample::SampleState;
use crate::widgets::logview::{LogBuffer, LogLine, LogSource, LogViewState};

/// Lines kept per log source, and in the merged view (the files keep everything: `ddp logs`).
pub const LINES_PER_SOURCE: usize = 20_000;
pub const MERGED_LINES: usize = 50_000;
/// Lines of each log read from its end when the run is opened.
pub const LOG_BACKLOG: usize = 2_000;
/// TensorBoard's smoothing slider, in steps of `+`/`-`.
pub const SMOOTHING_STEPS: [f64; 8] = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95];

/// The panes of the run view (`Tab` or `1`–`5`); Sample only for a language model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pane {
    #[default]
    Charts,
    Logs,
    Events,
    Spec,
    Sample,
}

impl Pane {
    /// The panes every run has.
    pub const ALL: [Pane; 4] = [Pane::Charts, Pane::Logs, Pane::Events, Pane::Spec];

    pub fn name(self) -> &'static str {
        match self {
            Pane::Charts => "Charts",
            Pane::Logs => "Logs",
            Pane::Events => "Events",
            Pane::Spec => "Spec",
            Pane::Sample => "Sample",
        }
    }
}

/// Which log the Logs pane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogTab {
    /// Every source, in arrival order, each line prefixed with its source.
    Merged,
    Source(LogSource),
}

impl LogTab {
    pub fn label(self) -> String {
        match self {
            LogTab::Merged => "all".into(),
            LogTab::Source(LogSource::Rank(r)) => format!("rank {r}"),
            LogTab::Source(LogSource::Supervisor) => "supervisor".into(),
        }
    }
}

/// Chart settings of the Charts pane (and of Compare).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChartSettings {
    pub x: XAxis,
    /// Index into [`SMOOTHING_STEPS`].
    pub smoothing: usize,
    pub log_loss: bool,
}

impl Default for ChartSettings {
    fn default() -> Self {
        ChartSettings {
            x: XAxis::Step,
            smoothing: 3,
            log_loss: false,
        }
    }
}

impl ChartSettings {
    pub fn smoothing_weight(&self) -> f64 {
        SMOOTHING_STEPS[self.smoothing.min(SMOOTHING_STEPS.len() - 1)]
    }

    pub fn smoother(&mut self) {
        self.smoothing = (self.smoothing + 1).min(SMOOTHING_STEPS.len() - 1);
    }

    pub fn rougher(&mut self) {
        self.smoothing = self.smoothing.saturating_sub(1);
    }

    pub fn cycle_x(&mut self) {
        self.x = match self.x {
            XAxis::Step => XAxis::Epoch,
            XAxis::Epoch => XAxis::Time,
            XAxis::Time => XAxis::Step,
        };
    }
}

/// The logs of a run: a buffer per source, the merged buffer, and a view state per tab.
#[derive(Debug)]
pub struct Logs {
    pub merged: LogBuffer,
    pub sources: BTreeMap<LogSource, LogBuffer>,
    pub views: BTreeMap<LogTab, LogViewState>,
    pub tab: LogTab,
}

impl Default for Logs {
    fn default() -> Self {
        Logs {
            merged: LogBuffer::new(MERGED_LINES),
            sources: BTreeMap::new(),
            views: BTreeMap::new(),
            tab: LogTab::Merged,
        }
    }
}

impl Logs {
    pub fn push(&mut self, source: LogSource, text: String) {
        self.sources
            .entry(source)
            .or_insert_with(|| LogBuffer::new(LINES_PER_SOURCE))
            .push(LogLine {
                source,
                text: text.clone(),
            });
        self.merged.push(LogLine { source, text });
    }

    /// The tabs: merged, each rank of `replicas` (and any other rank that logged), supervisor.
    pub fn tabs(&self, replicas: usize) -> Vec<LogTab> {
        let mut ranks: Vec<usize> = (0..replicas).collect();
        for s in self.sources.keys() {
            if let LogSource::Rank(r) = s
                && !ranks.contains(r)
            {
                ranks.push(*r);
            }
        }
        ranks.sort_unstable();
        let mut tabs = vec![LogTab::Merged];
        tabs.extend(
            ranks
                .into_iter()
                .map(|r| LogTab::Source(LogSource::Rank(r))),
        );
        tabs.push(LogTab::Source(LogSource::Supervisor));
        tabs
    }

    /// The buffer of a tab (a source that has not logged yet has none).
    pub fn buffer(&self, tab: LogTab) -> Option<&LogBuffer> {
        match tab {
            LogTab::Merged => Some(&self.merged),
            LogTab::Source(s) => self.sources.get(&s),
        }
    }

    /// The current tab's buffer and view state (created on first use).
    pub fn current(&mut self) -> (Option<&LogBuffer>, &mut LogViewState) {
        let tab = self.tab;
        let view = self.views.entry(tab).or_default();
        let buf = match tab {
            LogTab::Merged => Some(&self.merged),
            LogTab::Source(s) => self.sources.get(&s),
        };
        (buf, view)
    }

    pub fn view(&self, tab: LogTab) -> Option<&LogViewState> {
        self.views.get(&tab)
    }

    /// Moves to the next (`+1`) or previous (`-1`) tab.
    pub fn switch(&mut self, replicas: usize, delta: isize) {
        let tabs = self.tabs(replicas);
        let i = tabs.iter().position(|t| *t == self.tab).unwrap_or(0) as isize;
        let n = tabs.len() as isize;
        self.tab = tabs[((i + delta) % n + n) as usize % tabs.len()];
    }
}

/// One open run.
#[derive(Debug)]
pub struct RunView {
    pub dir: PathBuf,
    pub record: RunRecord,
    pub pane: Pane,
    /// Metric records by rank, in arrival (file) order.
    pub metrics: BTreeMap<usize, Vec<MetricRecord>>,
    pub logs: Logs,
    pub events: Vec<EventRecord>,
    /// Scroll of the Events pane (rows from the top).
    pub events_scroll: usize,
    /// The frozen spec, once read (`Err`: why it could not be).
    pub spec: Option<Result<String, String>>,
    pub spec_scroll: usize,
    /// Lines that did not parse, `run.json` errors: shown in the header.
    pub warnings: Vec<String>,
    pub chart: ChartSettings,
    /// Text generated by the run, when it is a language model.
    pub sample: SampleState,
    /// The folder was deleted while shown.
    pub gone: bool,
}

impl RunView {
    pub fn new(dir: PathBuf, record: RunRecord) -> RunView {
        RunView {
            dir,
            record,
            pane: Pane::Charts,
            metrics: BTreeMap::new(),
            logs: Logs::default(),
            events: Vec::new(),
            events_scroll: 0,
            spec: None,
            spec_scroll: 0,
            warnings: Vec::new(),
            chart: ChartSettings::default(),
            sample: SampleState::default(),
            gone: false,
        }
    }

    /// The panes of this run: [`Pane::ALL`], and Sample for a language model.
    pub fn panes(&self) -> Vec<Pane> {
        let mut panes = Pane::ALL.to_vec();
        if matches!(self.sample.lm, Some(Ok(()))) {
            panes.push(Pane::Sample);
        }
        panes
    }

    /// The pane after the current one, around.
    pub fn next_pane(&self) -> Pane {
        let panes = self.panes();
        let i = panes.iter().position(|p| *p == self.pane).unwrap_or(0);
        panes[(i + 1) % panes.len()]
    }

    /// Applies one event of the run's watch.
    pub fn apply(&mut self, event: RunEvent) {
        match event {
            RunEvent::Log { rank, line } => {
                let source = rank.map_or(LogSource::Supervisor, LogSource::Rank);
                self.logs.push(source, line);
            }
            RunEvent::Metric(m) => self.metrics.entry(m.rank).or_default().push(m),
            RunEvent::Status(record) => self.record = record,
            RunEvent::Supervisor(e) => self.events.push(e),
            RunEvent::Unparsed { path, line, error } => {
                let w = if line.is_empty() {
                    format!("{}: {error}", path.display())
                } else {
                    format!("{}: a line does not parse ({error})", path.display())
                };
                if !self.warnings.contains(&w) && self.warnings.len() < 20 {
                    self.warnings.push(w);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::runs::tests::entry;
    use ddp_workspaces::RunStatus;

    #[test]
    fn events_fill_logs_metrics_status_and_warnings() {
        let e = entry("20261101-000000-aaaaaa", "m", RunStatus::Running);
        let mut v = RunView::new(e.run.dir.clone(), e.run.record.clone());
        v.apply(RunEvent::Log {
            rank: Some(1),
            line: "hello".into(),
        });
        v.apply(RunEvent::Log {
            rank: None,
            line: "sup".into(),
        });
        assert_eq!(v.logs.merged.len(), 2);
        assert_eq!(
            v.logs
                .buffer(LogTab::Source(LogSource::Rank(1)))
                .unwrap()
                .len(),
            1
        );
        assert!(v.logs.buffer(LogTab::Source(LogSource::Rank(0))).is_none());
        assert_eq!(
            v.logs.tabs(2),
            [
                LogTab::Merged,
                LogTab::Source(LogSource::Rank(0)),
                LogTab::Source(LogSource::Rank(1)),
                LogTab::Source(LogSource::Supervisor)
            ]
        );
        v.logs.switch(2, -1);
        assert_eq!(v.logs.tab, LogTab::Source(LogSource::Supervisor));
        v.logs.switch(2, 1);
        assert_eq!(v.logs.tab, LogTab::Merged);
        let mut rec = e.run.record.clone();
        rec.status = RunStatus::Completed;
        v.apply(RunEvent::Status(rec));
        assert_eq!(v.record.status, RunStatus::Completed);
        v.apply(RunEvent::Unparsed {
            path: "m/rank-0.jsonl".into(),
            line: "{x".into(),
            error: "bad".into(),
        });
        assert_eq!(v.warnings, ["m/rank-0.jsonl: a line does not parse (bad)"]);
    }

    #[test]
    fn chart_settings_cycle_and_clamp() {
        let mut c = ChartSettings::default();
        assert_eq!(c.smoothing_weight(), 0.6);
        for _ in 0..20 {
            c.smoother();
        }
        assert_eq!(c.smoothing_weight(), 0.95);
        for _ in 0..20 {
            c.rougher();
        }
        assert_eq!(c.smoothing_weight(), 0.0);
        c.cycle_x();
        assert_eq!(c.x, XAxis::Epoch);
        c.cycle_x();
        c.cycle_x();
        assert_eq!(c.x, XAxis::Step);
        let e = entry("20261101-000000-aaaaaa", "m", RunStatus::Running);
        let mut v = RunView::new(e.run.dir.clone(), e.run.record.clone());
        v.pane = Pane::Spec;
        assert_eq!(v.next_pane(), Pane::Charts);
        v.sample.lm = Some(Ok(()));
        assert_eq!(v.next_pane(), Pane::Sample);
        assert_eq!(v.panes().len(), 5);
    }
}
