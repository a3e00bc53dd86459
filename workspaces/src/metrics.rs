//! The trainer's metric records, as front ends read them: `RUN/metrics/rank-R.jsonl`, one
//! [`MetricRecord`] per line (the schema is documented field by field in `docs/metrics.md`).
//!
//! Re-exported from the trainer so that front ends depend on this crate alone; [`read_metrics`]
//! returns this crate's [`Error`](crate::Error). [`is_language_model`] tells a language model's
//! records from the others.

use std::path::Path;

pub use ddp_trainer::metrics::{
    MetricKind, MetricRecord, PrecisionFigures, StepBreakdown, SyncFigures, metrics_path, unix_time,
};

use crate::Result;

/// Reads every complete record of a metrics file. A trailing line without its newline (a writer
/// caught mid-write) is skipped; any other line that is not a record is an error naming the file
/// and line (exit code 2, like a missing file).
pub fn read_metrics(path: impl AsRef<Path>) -> Result<Vec<MetricRecord>> {
    Ok(ddp_trainer::metrics::read_metrics(path)?)
}

/// A learning rate without trailing zeros: `0.002`, `0.00098`, `1` (6 decimals at most), as the
/// replicas print it in their logs.
pub use ddp_trainer::report::fmt_lr;

/// Whether `m` is a record of a language model: its train records count tokens
/// (`tokens_per_sec`), its evaluations have a perplexity. The one test by which every front end
/// shows a run as a language model (loss, perplexity, tokens/s, learning rate; progress in
/// steps) rather than as a classifier or regression (accuracy, samples/s; epochs): a run is one
/// when any of its records is.
pub fn is_language_model(m: &MetricRecord) -> bool {
    m.tokens_per_sec.is_some() || m.perplexity.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lr_formatting() {
        assert_eq!(fmt_lr(0.002), "0.002");
        assert_eq!(fmt_lr(0.00098), "0.00098");
        assert_eq!(fmt_lr(1.0), "1");
        assert_eq!(fmt_lr(0.1), "0.1");
    }

    #[test]
    fn a_language_models_records_say_so() {
        use crate::test_util::lm_metrics;
        let lm = lm_metrics();
        assert!(lm.iter().all(is_language_model));
        let image = MetricRecord::sample();
        assert!(!is_language_model(&image));
        assert!(!is_language_model(&image.clone().accuracy(Some(0.9))));
        assert!(is_language_model(&image.clone().tokens_per_sec(Some(1.0))));
        assert!(is_language_model(&image.perplexity(Some(4.0))));
    }

    #[test]
    fn reads_complete_records_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = metrics_path(dir.path(), 0);
        assert!(p.ends_with("metrics/rank-0.jsonl"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let line = r#"{"time":1.0,"rank":0,"kind":"val","epoch":1,"step":10,"loss":0.5,"accuracy":0.9,"lr":0.001,"samples_per_sec":100.0,"world_size":2}"#;
        std::fs::write(&p, format!("{line}\n{{\"time\":")).unwrap();
        let r = read_metrics(&p).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kind, MetricKind::Val);
        assert_eq!(r[0].accuracy, Some(0.9));
        std::fs::write(&p, format!("{line}\nnot json\n")).unwrap();
        let e = read_metrics(&p).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }
}
