//! What a run list shows per run: [`RunEntry`] (record, tags, plan, metrics so far) and
//! [`MetricDigest`], rank 0's metric records folded, read with [`fold_metrics`] (from where a
//! [`LineTailer`] left off) or [`MetricDigest::read`] (a whole file).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::files::tail::{LineTailer, TailFrom};
use crate::metrics::{
    MetricKind, MetricRecord, PrecisionFigures, StepBreakdown, SyncFigures, is_language_model,
    metrics_path,
};
use crate::runs::run::Run;

/// How many recent train losses a [`MetricDigest`] keeps (for a sparkline).
pub const RECENT_LOSSES: usize = 64;

/// Rank 0's metric records of one run, folded: what a run list shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricDigest {
    /// The highest epoch with a validation record.
    pub epochs_done: usize,
    /// The highest step of any record.
    pub steps: u64,
    pub last_train_loss: Option<f64>,
    /// The last [`RECENT_LOSSES`] train losses, oldest first.
    pub recent_train_loss: Vec<f64>,
    /// Samples per second of the whole run (rank 0's rate × world size) at the last train record.
    pub samples_per_sec: Option<f64>,
    /// A language model's tokens per second, like `samples_per_sec`.
    pub tokens_per_sec: Option<f64>,
    /// The learning rate of the last train record.
    pub last_lr: Option<f64>,
    /// Where the steps of the last train record's window went (rank 0's).
    pub step_breakdown: Option<StepBreakdown>,
    /// A mixed-precision run's precision, with fp16's loss scale and skipped steps, at the
    /// last train record.
    pub precision: Option<PrecisionFigures>,
    /// Local steps' syncs (`[ddp.sync]`) at the last train record.
    pub sync: Option<SyncFigures>,
    pub best_val_accuracy: Option<f64>,
    pub last_val_loss: Option<f64>,
    pub last_val_accuracy: Option<f64>,
    /// A language model's last validation: perplexity, bits per character or per byte.
    pub last_val_perplexity: Option<f64>,
    pub last_val_bits_per_char: Option<f64>,
    pub last_val_bits_per_byte: Option<f64>,
    /// Some record is a language model's ([`crate::metrics::is_language_model`]).
    pub language_model: bool,
    pub test_loss: Option<f64>,
    pub test_accuracy: Option<f64>,
    /// Time of the newest record (Unix seconds).
    pub last_time: Option<f64>,
    /// Lines of the metrics file that did not parse.
    pub bad_lines: usize,
}

impl MetricDigest {
    /// Rank 0's metrics of the run in folder `dir`, read to their end and folded, with what
    /// could not be read (what a list shows of a finished run).
    pub fn read(dir: &Path) -> (MetricDigest, Vec<String>) {
        let mut tailer = LineTailer::new(metrics_path(dir, 0), TailFrom::Start);
        let (mut digest, mut warnings) = (MetricDigest::default(), Vec::new());
        fold_metrics(&mut tailer, &mut digest, &mut warnings);
        (digest, warnings)
    }

    /// Folds records in file order.
    pub fn of(records: &[MetricRecord]) -> MetricDigest {
        let mut d = MetricDigest::default();
        for r in records {
            d.push(r);
        }
        d
    }

    /// Folds one more record.
    pub fn push(&mut self, m: &MetricRecord) {
        self.steps = self.steps.max(m.step);
        self.last_time = Some(self.last_time.map_or(m.time, |t| t.max(m.time)));
        self.language_model |= is_language_model(m);
        match m.kind {
            MetricKind::Train => {
                self.last_train_loss = Some(m.loss);
                if self.recent_train_loss.len() == RECENT_LOSSES {
                    self.recent_train_loss.remove(0);
                }
                self.recent_train_loss.push(m.loss);
                let world = m.world_size as f64;
                self.samples_per_sec = Some(m.samples_per_sec * world);
                self.tokens_per_sec = m.tokens_per_sec.map(|t| t * world);
                self.last_lr = Some(m.lr);
                self.step_breakdown = m.breakdown.or(self.step_breakdown);
                if m.precision.is_some() {
                    self.precision.clone_from(&m.precision);
                }
                if m.sync.is_some() {
                    self.sync.clone_from(&m.sync);
                }
            }
            MetricKind::Val => {
                self.epochs_done = self.epochs_done.max(m.epoch);
                self.last_val_loss = Some(m.loss);
                self.last_val_accuracy = m.accuracy;
                self.last_val_perplexity = m.perplexity;
                self.last_val_bits_per_char = m.bits_per_char;
                self.last_val_bits_per_byte = m.bits_per_byte;
                if let Some(a) = m.accuracy {
                    self.best_val_accuracy = Some(self.best_val_accuracy.map_or(a, |b| b.max(a)));
                }
            }
            MetricKind::Test => {
                self.test_loss = Some(m.loss);
                self.test_accuracy = m.accuracy;
            }
        }
    }
}

/// One run as a list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    pub run: Run,
    /// The run's tags ([`Run::tags`]).
    pub tags: Vec<String>,
    /// `train.epochs` of the frozen spec, when it can be read and the run counts epochs.
    pub epochs_total: Option<usize>,
    /// `train.steps` of the frozen spec (capped by `train.max_steps`): a run counted in
    /// optimizer steps (a language model), whose progress is steps done of these.
    pub steps_total: Option<u64>,
    /// Rank 0's metrics so far.
    pub metrics: MetricDigest,
    /// What could not be read about this run (it is still listed).
    pub warnings: Vec<String>,
}

/// Reads the new lines of a metrics file into `digest` (a line that does not parse is counted,
/// the first named in `warnings`, as is a file that cannot be read); whether anything changed.
pub fn fold_metrics(
    tailer: &mut LineTailer,
    digest: &mut MetricDigest,
    warnings: &mut Vec<String>,
) -> bool {
    let mut changed = false;
    loop {
        let lines = match tailer.poll() {
            Ok(lines) => lines,
            Err(e) => {
                let w = e.to_string();
                if !warnings.contains(&w) {
                    warnings.push(w);
                    changed = true;
                }
                return changed;
            }
        };
        for line in lines.iter().filter(|l| !l.trim().is_empty()) {
            changed = true;
            match serde_json::from_str::<MetricRecord>(line) {
                Ok(m) => digest.push(&m),
                Err(e) => {
                    digest.bad_lines += 1;
                    if digest.bad_lines == 1 {
                        warnings.push(format!(
                            "{}: a line does not parse ({e})",
                            tailer.path().display()
                        ));
                    }
                }
            }
        }
        if tailer.caught_up() {
            return changed;
        }
    }
}
