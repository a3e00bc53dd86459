//! The Compare view's state: the marked runs, their metrics (followed live) and the spec keys
//! that differ between them (`ddp compare`'s logic, [`ddp_workspaces::present::analysis::comparison`]).
//! [`draw`] draws it.

pub mod draw;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ddp_workspaces::metrics::MetricRecord;
use ddp_workspaces::present::analysis::Comparison;
use ddp_workspaces::{Run, RunEvent, RunRecord};

use crate::views::run::ChartSettings;

/// The differing spec keys with each run's values and figures.
pub type CompareTable = Comparison;

#[derive(Debug)]
pub struct CompareView {
    /// The runs in list order, with their latest records.
    pub runs: Vec<(PathBuf, RunRecord)>,
    pub metrics: BTreeMap<PathBuf, Vec<MetricRecord>>,
    /// `None` until read; `Err`: why a spec could not be read.
    pub table: Option<Result<CompareTable, String>>,
    pub chart: ChartSettings,
    /// Scroll of the key table.
    pub scroll: usize,
}

impl CompareView {
    pub fn new(runs: &[Run]) -> CompareView {
        CompareView {
            runs: runs
                .iter()
                .map(|r| (r.dir.clone(), r.record.clone()))
                .collect(),
            metrics: BTreeMap::new(),
            table: None,
            chart: ChartSettings::default(),
            scroll: 0,
        }
    }

    /// An event of one of the compared runs' watches (others are ignored).
    pub fn apply(&mut self, dir: &Path, event: RunEvent) {
        let Some(i) = self.runs.iter().position(|(d, _)| d == dir) else {
            return;
        };
        match event {
            RunEvent::Metric(m) => self.metrics.entry(dir.to_path_buf()).or_default().push(m),
            RunEvent::Status(r) => self.runs[i].1 = r,
            _ => {}
        }
    }

    /// Rows of the key table: the spec keys that differ (none until the specs are read).
    pub fn table_rows(&self) -> usize {
        match &self.table {
            Some(Ok(t)) => t.differing_keys.len(),
            _ => 0,
        }
    }

    /// A run's label in legends and table headers: its name, else the last part of its id.
    pub fn label(record: &RunRecord) -> String {
        match &record.name {
            Some(n) => n.clone(),
            None => record
                .id
                .rsplit('-')
                .next()
                .unwrap_or(&record.id)
                .to_string(),
        }
    }
}
