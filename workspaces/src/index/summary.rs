//! A run's figures at a glance (epochs, steps, losses, accuracies, duration; a language model's
//! perplexity, bits and tokens/s), from rank 0's metric records: what `ddp ls`, `ddp show`, `ddp compare` and the end of `ddp run` print, and
//! what their `--json` carries.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::index::entry::MetricDigest;
use crate::metrics::{MetricRecord, PrecisionFigures, StepBreakdown, SyncFigures};
use crate::runs::plan::Plan;
use crate::runs::run::{Run, RunRecord, now};

/// Figures from rank 0's metrics (`None`: no such record yet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Summary {
    /// The highest epoch validated so far.
    pub epochs_done: usize,
    /// The highest optimizer step recorded.
    pub steps: u64,
    pub last_train_loss: Option<f64>,
    pub best_val_accuracy: Option<f64>,
    pub final_val_loss: Option<f64>,
    pub final_val_accuracy: Option<f64>,
    pub test_loss: Option<f64>,
    pub test_accuracy: Option<f64>,
    /// From the run's start to its end (or to now while it is live).
    pub duration_s: Option<f64>,
    /// The learning rate of the last train record.
    pub last_lr: Option<f64>,
    /// Throughput of all replicas at the last train record (a language model's samples are its
    /// windows).
    pub samples_per_sec: Option<f64>,
    /// The run is a language model's ([`crate::metrics::is_language_model`]): its figures are
    /// the loss, perplexity and tokens/s below, its progress steps (no accuracy, no test).
    pub language_model: bool,
    /// A language model's tokens per second, all replicas, at the last train record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_sec: Option<f64>,
    /// A language model's last validation: perplexity, bits per character (`char` tokenizer) or
    /// per byte (`byte`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_val_perplexity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_val_bits_per_char: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_val_bits_per_byte: Option<f64>,
    /// Where rank 0's steps went at the last train record (per step: compute, exposed
    /// communication, data wait, optimizer; bytes sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_breakdown: Option<StepBreakdown>,
    /// A mixed-precision run's precision (and fp16's loss scale and skipped steps) at the last
    /// train record; absent in f32.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<PrecisionFigures>,
    /// Local steps' syncs (method, encoding, the last sync, the replicas' drift) at the last
    /// train record; absent for every-step DDP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncFigures>,
}

impl Summary {
    /// Reads the run's rank-0 metrics and summarises them; a run without readable metrics gets
    /// the figures of no records. Whether it is a language model's run is its frozen spec's say
    /// ([`Plan::language_model`]: a run that failed before its first record is one too), else
    /// its records'.
    pub fn of(run: &Run) -> Summary {
        let mut s = summarize(run, &run.metrics().unwrap_or_default());
        if let Some(lm) = Plan::read(&run.spec_path()).language_model {
            s.language_model = lm;
        }
        s
    }
}

/// Summarises `metrics` (rank 0's records of `run`). Pure apart from the clock: the duration of
/// a live run is measured up to now.
pub fn summarize(run: &Run, metrics: &[MetricRecord]) -> Summary {
    let d = MetricDigest::of(metrics);
    let r = &run.record;
    Summary {
        epochs_done: d.epochs_done,
        steps: d.steps,
        last_train_loss: d.last_train_loss,
        best_val_accuracy: d.best_val_accuracy,
        final_val_loss: d.last_val_loss,
        final_val_accuracy: d.last_val_accuracy,
        test_loss: d.test_loss,
        test_accuracy: d.test_accuracy,
        duration_s: r.started.map(|s| r.ended.unwrap_or_else(now) - s),
        last_lr: d.last_lr,
        samples_per_sec: d.samples_per_sec,
        language_model: d.language_model,
        tokens_per_sec: d.tokens_per_sec,
        final_val_perplexity: d.last_val_perplexity,
        final_val_bits_per_char: d.last_val_bits_per_char,
        final_val_bits_per_byte: d.last_val_bits_per_byte,
        step_breakdown: d.step_breakdown,
        precision: d.precision,
        sync: d.sync,
    }
}

/// One run as `ddp ls --json` (one line each) and `ddp show --json` print it: the fields of
/// `run.json`, then `dir`, `tags` and `summary`.
#[derive(Debug, Clone, Serialize)]
pub struct RunOverview<'a> {
    #[serde(flatten)]
    pub record: &'a RunRecord,
    pub dir: &'a Path,
    pub tags: Vec<String>,
    pub summary: Summary,
}

impl<'a> RunOverview<'a> {
    /// Reads the run's tags and metrics.
    pub fn of(run: &'a Run) -> Self {
        RunOverview {
            record: &run.record,
            dir: &run.dir,
            tags: run.tags(),
            summary: Summary::of(run),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricKind;
    use crate::runs::run::RunStatus;
    use crate::test_util::{lm_metrics, metric};

    fn run(started: Option<f64>, ended: Option<f64>) -> Run {
        RunRecord::sample()
            .status(RunStatus::Completed)
            .started(started)
            .ended(ended)
            .in_workspace("/ws")
    }

    #[test]
    fn figures_from_records() {
        use MetricKind::*;
        let m = [
            metric(Train, 1, 5, 1.0, None),
            metric(Val, 1, 10, 0.8, Some(0.7)),
            metric(Train, 2, 15, 0.6, None),
            metric(Val, 2, 20, 0.5, Some(0.65)),
            metric(Test, 2, 20, 0.45, Some(0.66)),
        ];
        let s = summarize(&run(Some(100.0), Some(112.5)), &m);
        assert_eq!(
            s,
            Summary {
                epochs_done: 2,
                steps: 20,
                last_train_loss: Some(0.6),
                best_val_accuracy: Some(0.7),
                final_val_loss: Some(0.5),
                final_val_accuracy: Some(0.65),
                test_loss: Some(0.45),
                test_accuracy: Some(0.66),
                duration_s: Some(12.5),
                last_lr: Some(0.01),
                samples_per_sec: Some(200.0),
                ..Summary::default()
            }
        );
        assert_eq!(summarize(&run(None, None), &[]), Summary::default());
        let live = summarize(&run(Some(now() - 5.0), None), &[]);
        assert!(live.duration_s.unwrap() >= 5.0);
    }

    #[test]
    fn a_language_models_figures() {
        let s = summarize(&run(Some(100.0), Some(112.5)), &lm_metrics());
        assert_eq!(
            s,
            Summary {
                epochs_done: 1,
                steps: 1200,
                last_train_loss: Some(1.4),
                final_val_loss: Some(1.45),
                duration_s: Some(12.5),
                last_lr: Some(0.0005),
                samples_per_sec: Some(260.0),
                language_model: true,
                tokens_per_sec: Some(16640.0),
                final_val_perplexity: Some(1.45f64.exp()),
                final_val_bits_per_char: Some(1.45 / std::f64::consts::LN_2),
                ..Summary::default()
            }
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["language_model"], true);
        assert_eq!(v["tokens_per_sec"], 16640.0);
        assert_eq!(v["final_val_perplexity"], 1.45f64.exp());
        assert_eq!(v["final_val_accuracy"], serde_json::Value::Null);
        assert!(v.get("final_val_bits_per_byte").is_none(), "{v}");
        // An image run's summary says it is none, without a language model's fields.
        let v = serde_json::to_value(Summary::default()).unwrap();
        assert_eq!(v["language_model"], false);
        assert!(v.get("tokens_per_sec").is_none() && v.get("final_val_perplexity").is_none());
    }

    #[test]
    fn a_language_model_is_one_by_its_spec_before_any_record() {
        let dir = tempfile::tempdir().unwrap();
        let r = RunRecord::sample()
            .status(RunStatus::Failed)
            .in_dir(dir.path().join("run"));
        std::fs::create_dir_all(&r.dir).unwrap();
        // No spec, no metrics: nothing says it is one.
        assert!(!Summary::of(&r).language_model);
        let gpt = "name = 'gpt'\n[model]\nname = 'gpt'\n[data]\nname = 'text'\npath = 'a.txt'\n[train]\nsteps = 100\n";
        std::fs::write(r.spec_path(), gpt).unwrap();
        let s = Summary::of(&r);
        assert!(s.language_model && s.steps == 0, "{s:?}");
        // What `ddp run` and `ddp show` print of it: no accuracy, no test.
        let shown = crate::present::report::show_text(&r);
        assert!(shown.contains("steps       0/100"), "{shown}");
        assert!(
            !shown.contains("accuracy") && !shown.contains("\ntest "),
            "{shown}"
        );
        // The spec says an image run is none, whatever its records.
        std::fs::write(r.spec_path(), "name = 'm'\n[data]\nname = 'mnist'\n").unwrap();
        let m = crate::metrics::metrics_path(&r.dir, 0);
        std::fs::create_dir_all(m.parent().unwrap()).unwrap();
        let lm = lm_metrics();
        std::fs::write(&m, serde_json::to_string(&lm[0]).unwrap() + "\n").unwrap();
        assert!(!Summary::of(&r).language_model);
    }

    #[test]
    fn overview_json_flattens_the_record() {
        let r = run(Some(1.0), Some(2.0));
        assert_eq!(r.record.status, RunStatus::Completed);
        let v = serde_json::to_value(RunOverview::of(&r)).unwrap();
        assert_eq!(v["id"], "20261121-101500-abc123");
        assert_eq!(v["status"], "completed");
        assert_eq!(
            v["dir"],
            "/ws/experiments/mnist/runs/20261121-101500-abc123"
        );
        assert_eq!(v["tags"], serde_json::json!([]));
        assert_eq!(v["summary"]["duration_s"], 1.0);
        assert_eq!(v["summary"]["test_accuracy"], serde_json::Value::Null);
    }
}
