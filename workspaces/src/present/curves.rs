//! Metric records turned into curves: the points a plot or a terminal chart draws, shared by
//! `ddp plot` ([`crate::present::plot`]) and the front ends.
//!
//! Layout:
//! - [`XAxis`]: what the horizontal axis counts (step, fractional epoch, wall time).
//! - [`Curves`], [`curves`]: train/val/test loss and accuracy points of one run, a language
//!   model's val perplexity (non-finite values left out; a resumed run's redone steps replace the
//!   history they redo).
//! - `latest_history`, `EpochScale`: the two rules behind them (pure).
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::metrics::{MetricKind, MetricRecord, is_language_model};

use crate::error::{Error, Result};

/// What the horizontal axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XAxis {
    /// The global optimizer step.
    #[default]
    Step,
    /// Epochs: validation and test at whole epochs, training records in between in proportion to
    /// their step within the epoch.
    Epoch,
    /// Wall-clock seconds since the run's first record.
    Time,
}

impl XAxis {
    /// The axis title ("global step", "epoch", "seconds since start").
    pub fn description(self) -> &'static str {
        match self {
            XAxis::Step => "global step",
            XAxis::Epoch => "epoch",
            XAxis::Time => "seconds since start",
        }
    }
}

impl FromStr for XAxis {
    type Err = Error;
    fn from_str(s: &str) -> Result<XAxis> {
        match s {
            "step" => Ok(XAxis::Step),
            "epoch" => Ok(XAxis::Epoch),
            "time" => Ok(XAxis::Time),
            _ => Err(Error::Invalid(format!(
                "unknown x axis `{s}`: expected `step`, `epoch` or `time`"
            ))),
        }
    }
}

impl fmt::Display for XAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XAxis::Step => "step",
            XAxis::Epoch => "epoch",
            XAxis::Time => "time",
        })
    }
}

/// The points of one run, in plot coordinates (x per [`XAxis`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Curves {
    pub train_loss: Vec<(f64, f64)>,
    pub val_loss: Vec<(f64, f64)>,
    pub val_acc: Vec<(f64, f64)>,
    pub test_loss: Option<(f64, f64)>,
    pub test_acc: Option<(f64, f64)>,
    /// A language model's validation perplexity.
    pub val_perplexity: Vec<(f64, f64)>,
    /// The records are a language model's ([`is_language_model`]): its second figure is the
    /// perplexity, not the accuracy.
    pub language_model: bool,
}

/// The curves of one run's records (any ranks, any order of kinds, file order within a rank).
/// Training loss comes from `train_rank`, or by default the lowest rank with train records
/// (rank 0 normally); validation and test are rank 0's figures (all-reduced over the ranks).
pub fn curves(records: &[MetricRecord], x: XAxis, train_rank: Option<usize>) -> Curves {
    let train_rank = train_rank.or_else(|| {
        records
            .iter()
            .filter(|r| r.kind == MetricKind::Train)
            .map(|r| r.rank)
            .min()
    });
    let train = latest_history(
        records
            .iter()
            .filter(|r| r.kind == MetricKind::Train && Some(r.rank) == train_rank),
    );
    let val = latest_history(records.iter().filter(|r| r.kind == MetricKind::Val));
    let test = records.iter().rev().find(|r| r.kind == MetricKind::Test);

    let scale = EpochScale::new(train.iter().chain(&val).copied().chain(test));
    let t0 = records
        .iter()
        .map(|r| r.time)
        .filter(|t| t.is_finite())
        .fold(f64::INFINITY, f64::min);
    let pos = |r: &MetricRecord| match x {
        XAxis::Step => r.step as f64,
        XAxis::Epoch => scale.position(r),
        XAxis::Time => r.time - t0,
    };
    let finite = |p: (f64, f64)| (p.0.is_finite() && p.1.is_finite()).then_some(p);
    let loss = |r: &&MetricRecord| finite((pos(r), r.loss));
    let acc = |r: &&MetricRecord| r.accuracy.and_then(|a| finite((pos(r), a)));
    let ppl = |r: &&MetricRecord| r.perplexity.and_then(|p| finite((pos(r), p)));
    Curves {
        train_loss: train.iter().filter_map(loss).collect(),
        val_loss: val.iter().filter_map(loss).collect(),
        val_acc: val.iter().filter_map(acc).collect(),
        test_loss: test.as_ref().and_then(loss),
        test_acc: test.as_ref().and_then(acc),
        val_perplexity: val.iter().filter_map(ppl).collect(),
        language_model: records.iter().any(is_language_model),
    }
}

/// The records in file order, except that a record whose step is not after the previous one's
/// (a run resumed from an earlier checkpoint redoes those steps) replaces everything from its
/// step on: what remains is the history that led to the latest records.
fn latest_history<'a>(records: impl Iterator<Item = &'a MetricRecord>) -> Vec<&'a MetricRecord> {
    let mut kept: Vec<&MetricRecord> = Vec::new();
    for r in records {
        while kept.last().is_some_and(|k| k.step >= r.step) {
            kept.pop();
        }
        kept.push(r);
    }
    kept
}

/// Maps a record's (epoch, step) to a fractional epoch: epoch `e` spans `(e-1, e]`, its records
/// placed in proportion to their step between the last step of epoch `e-1` and its own last step.
#[derive(Debug)]
struct EpochScale {
    /// Last step seen in each epoch.
    ends: BTreeMap<usize, u64>,
    /// First step seen in each epoch.
    firsts: BTreeMap<usize, u64>,
    /// Epochs known to be finished: not the last epoch seen, or with a val/test record.
    complete: Vec<usize>,
    /// Steps in a finished epoch, for epochs whose start or end has not been seen.
    typical: Option<f64>,
}

impl EpochScale {
    fn new<'a>(records: impl Iterator<Item = &'a MetricRecord>) -> EpochScale {
        let mut ends = BTreeMap::new();
        let mut firsts = BTreeMap::new();
        let mut evaluated = Vec::new();
        for r in records {
            let end = ends.entry(r.epoch).or_insert(r.step);
            *end = (*end).max(r.step);
            let first = firsts.entry(r.epoch).or_insert(r.step);
            *first = (*first).min(r.step);
            if r.kind != MetricKind::Train {
                evaluated.push(r.epoch);
            }
        }
        let last = ends.keys().next_back().copied();
        let complete: Vec<usize> = ends
            .keys()
            .copied()
            .filter(|&e| Some(e) != last || evaluated.contains(&e))
            .collect();
        // Length of the latest finished epoch whose predecessor was seen; else, assuming equal
        // epochs, the latest finished epoch's last step over its number.
        let typical = complete
            .iter()
            .rev()
            .find_map(|&e| {
                let prev = ends.get(&e.checked_sub(1)?)?;
                Some(ends[&e].saturating_sub(*prev) as f64)
            })
            .or_else(|| complete.last().map(|&e| ends[&e] as f64 / e.max(1) as f64))
            .filter(|&t| t > 0.0);
        EpochScale {
            ends,
            firsts,
            complete,
            typical,
        }
    }

    fn position(&self, r: &MetricRecord) -> f64 {
        let e = r.epoch;
        let base = e.saturating_sub(1) as f64;
        let (Some(&end), Some(&first)) = (self.ends.get(&e), self.firsts.get(&e)) else {
            return base;
        };
        let start = match e.checked_sub(1).and_then(|p| self.ends.get(&p)) {
            Some(&prev) => prev as f64,
            None if e <= 1 => 0.0,
            None => match self.typical {
                Some(t) => base * t,
                None => first.saturating_sub(1) as f64,
            },
        };
        let seen = end as f64 - start;
        let len = if self.complete.contains(&e) {
            seen
        } else {
            self.typical.map_or(seen, |t| t.max(seen))
        };
        if len <= 0.0 {
            return e as f64;
        }
        base + ((r.step as f64 - start) / len).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::metric;

    fn record(kind: MetricKind, rank: usize, epoch: usize, step: u64, loss: f64) -> MetricRecord {
        let accuracy = (kind != MetricKind::Train).then_some(0.9);
        metric(kind, epoch, step, loss, accuracy)
            .time(100.0 + step as f64 * 0.5)
            .rank(rank)
    }

    #[test]
    fn train_rank_choice_time_axis_and_time_parsing() {
        let records = vec![
            record(MetricKind::Train, 1, 1, 1, 5.0),
            record(MetricKind::Train, 0, 1, 1, 1.0),
            record(MetricKind::Train, 0, 1, 2, 0.5),
            record(MetricKind::Train, 1, 1, 2, 4.0),
            record(MetricKind::Val, 0, 1, 2, 0.4),
            record(MetricKind::Test, 0, 1, 2, 0.3),
        ];
        let c = curves(&records, XAxis::Step, None);
        assert_eq!(c.train_loss, [(1.0, 1.0), (2.0, 0.5)]);
        assert_eq!(c.val_loss, [(2.0, 0.4)]);
        assert_eq!(c.test_acc, Some((2.0, 0.9)));
        let c = curves(&records, XAxis::Step, Some(1));
        assert_eq!(c.train_loss, [(1.0, 5.0), (2.0, 4.0)]);
        let c = curves(&records, XAxis::Time, None);
        assert_eq!(c.train_loss, [(0.0, 1.0), (0.5, 0.5)]);
        assert_eq!("time".parse::<XAxis>().unwrap(), XAxis::Time);
        assert_eq!(XAxis::Time.to_string(), "time");
        let e = "steps".parse::<XAxis>().unwrap_err().to_string();
        assert!(e.contains("expected `step`, `epoch` or `time`"), "{e}");
        assert!(!c.language_model && c.val_perplexity.is_empty());
    }

    #[test]
    fn a_language_models_perplexity() {
        let c = curves(&crate::test_util::lm_metrics(), XAxis::Step, None);
        assert!(c.language_model);
        assert_eq!(c.train_loss, [(400.0, 2.1), (800.0, 1.6), (1200.0, 1.4)]);
        assert_eq!(
            c.val_perplexity,
            [
                (400.0, 2.0f64.exp()),
                (800.0, 1.5f64.exp()),
                (1200.0, 1.45f64.exp())
            ]
        );
        assert!(c.val_acc.is_empty() && c.test_loss.is_none());
    }
}
