//! Where a replica's figures go: its metrics JSONL (every rank), TensorBoard events and the human
//! progress lines (rank 0).

use std::path::Path;
use std::time::Instant;

use crate::Result;
use crate::data::text::{TokenizerKind, bits_per_token, perplexity};
use crate::metrics::{
    MetricKind, MetricRecord, MetricsWriter, PrecisionFigures, StepBreakdown, SyncFigures,
    unix_time,
};
use crate::scaler::LossScaler;
use crate::spec::Precision;
use crate::tensorboard::EventWriter;

/// The result of evaluating a split, all-reduced over the ranks.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub loss: f64,
    pub accuracy: Option<f64>,
    pub samples: usize,
    pub samples_per_sec: f64,
    /// A custom objective's metrics, each the mean over the samples, in the metrics' order.
    pub metrics: Vec<(String, f64)>,
}

pub struct Reporter {
    rank: usize,
    world: usize,
    epochs: usize,
    steps_per_epoch: u64,
    metrics: MetricsWriter,
    tb: Option<EventWriter>,
    /// A language model's run: throughput in tokens, evaluation over windows with perplexity.
    tokens: Option<TokenCounting>,
    /// The last validation, on every rank: (loss, a language model's perplexity).
    last_val: Option<(f64, Option<f64>)>,
    /// `train.precision` where it is not f32 (train records say it).
    precision: Option<&'static str>,
}

/// How a language model's figures are counted: tokens per window (a record's samples are its
/// windows) and, for text, the tokenizer whose unit the bits are counted in (`char`: one token
/// is a character, `byte`: a byte; token files have no such unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenCounting {
    pub block: usize,
    pub tokenizer: Option<TokenizerKind>,
}

/// What an evaluation record of a language model adds to its loss: perplexity, and bits per
/// character or per byte as its tokenizer counts them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LmFigures {
    pub perplexity: Option<f64>,
    pub bits_per_char: Option<f64>,
    pub bits_per_byte: Option<f64>,
}

impl LmFigures {
    /// The figures of a mean next-token loss `loss` (nats) of a model counted as `counting`.
    pub fn of(loss: f64, counting: &TokenCounting) -> LmFigures {
        let bits = bits_per_token(loss);
        LmFigures {
            perplexity: Some(perplexity(loss)),
            bits_per_char: (counting.tokenizer == Some(TokenizerKind::Char)).then_some(bits),
            bits_per_byte: (counting.tokenizer == Some(TokenizerKind::Byte)).then_some(bits),
        }
    }

    /// ` perplexity 19.71 bits/char 4.301` (or `bits/byte`), as progress lines print them.
    fn text(&self) -> String {
        let mut s = String::new();
        if let Some(p) = self.perplexity {
            s += &format!(" perplexity {p:.2}");
        }
        if let Some(b) = self.bits_per_char {
            s += &format!(" bits/char {b:.3}");
        }
        if let Some(b) = self.bits_per_byte {
            s += &format!(" bits/byte {b:.3}");
        }
        s
    }
}

impl Reporter {
    pub fn create(
        out: &Path,
        rank: usize,
        world: usize,
        epochs: usize,
        steps_per_epoch: u64,
    ) -> Result<Reporter> {
        let metrics = MetricsWriter::create(out, rank)?;
        let tb = if rank == 0 {
            Some(EventWriter::create(&out.join("tb"))?)
        } else {
            None
        };
        Ok(Reporter {
            rank,
            world,
            epochs,
            steps_per_epoch,
            metrics,
            tb,
            tokens: None,
            last_val: None,
            precision: None,
        })
    }

    /// After an elastic group re-formed: `world` replicas, `steps_per_epoch` steps in the current
    /// epoch, and this replica now rank 0 (`lead`) or not. A new rank 0 starts writing
    /// TensorBoard events (a file of its own in `tb/`) and the global figures; the metrics stay
    /// in this replica's own file.
    pub fn regroup(
        &mut self,
        out: &Path,
        world: usize,
        steps_per_epoch: u64,
        lead: bool,
    ) -> Result<()> {
        self.world = world;
        self.steps_per_epoch = steps_per_epoch;
        if lead && self.tb.is_none() {
            self.tb = Some(EventWriter::create(&out.join("tb"))?);
        } else if !lead {
            self.tb = None;
        }
        Ok(())
    }

    /// The steps of the current epoch (an elastic run's change with its world).
    pub fn set_steps_per_epoch(&mut self, steps: u64) {
        self.steps_per_epoch = steps;
    }

    /// This reporter for a language model: progress in steps and tokens/s, validation with its
    /// perplexity (and bits per character or byte), over windows.
    pub fn counting_tokens(mut self, counting: TokenCounting) -> Reporter {
        self.tokens = Some(counting);
        self
    }

    /// This reporter for a run in `precision`: its train records say so (with fp16, the loss
    /// scale and the steps skipped).
    pub fn in_precision(mut self, precision: Precision) -> Reporter {
        self.precision = (!precision.is_f32()).then(|| precision.name());
        self
    }

    /// The last validation's (loss, perplexity of a language model), on every rank.
    pub fn last_val(&self) -> Option<(f64, Option<f64>)> {
        self.last_val
    }

    /// A training window: mean loss over it, this rank's samples/s, samples it covered (a
    /// language model's windows: its tokens are counted from them).
    /// `epoch` is 1-based; `step_in_epoch` counts optimizer steps from 1; `scaler` is fp16's
    /// loss scaler after the window's last step; `sync`, where the local steps' syncs stand.
    #[allow(clippy::too_many_arguments)]
    pub fn train(
        &mut self,
        epoch: usize,
        step_in_epoch: u64,
        global_step: u64,
        loss: f64,
        lr: f64,
        sps: f64,
        samples: usize,
        breakdown: Option<StepBreakdown>,
        scaler: Option<LossScaler>,
        sync: Option<SyncFigures>,
    ) -> Result<()> {
        let tokens = self.tokens.map(|t| t.block);
        let rec = MetricRecord {
            breakdown,
            samples: Some(samples as u64),
            tokens_per_sec: tokens.map(|block| sps * block as f64),
            tokens: tokens.map(|block| (samples * block) as u64),
            precision: self.precision.map(|name| PrecisionFigures {
                name: name.to_string(),
                loss_scale: scaler.map(|s| s.scale as f64),
                skipped_steps: scaler.map(|s| s.skipped),
            }),
            sync,
            ..self.record(MetricKind::Train, epoch, global_step, loss, lr, sps)
        };
        self.metrics.write(&rec)?;
        let Some(tb) = self.tb.as_mut() else {
            return Ok(());
        };
        let step = global_step as i64;
        tb.add_scalar("train/loss", loss as f32, step, rec.time)?;
        tb.add_scalar("train/lr", lr as f32, step, rec.time)?;
        if let Some(s) = scaler {
            tb.add_scalar("train/loss_scale", s.scale, step, rec.time)?;
            tb.add_scalar("train/skipped_steps", s.skipped as f32, step, rec.time)?;
        }
        if let Some(s) = &rec.sync {
            tb.add_scalar("sync/last_sync", s.last_sync as f32, step, rec.time)?;
            for (rank, d) in s.drift.iter().enumerate() {
                tb.add_scalar(&format!("sync/drift/{rank}"), *d as f32, step, rec.time)?;
            }
        }
        if let Some(b) = &breakdown {
            for (name, v) in [
                ("step_s", b.step_s),
                ("compute_s", b.compute_s),
                ("comm_exposed_s", b.comm_exposed_s),
                ("data_s", b.data_s),
                ("optimizer_s", b.optimizer_s),
                ("comm_s", b.comm_s),
            ] {
                tb.add_scalar(&format!("time/{name}"), v as f32, step, rec.time)?;
            }
            if let Some(bytes) = b.bytes_sent {
                tb.add_scalar("time/bytes_sent", bytes as f32, step, rec.time)?;
            }
        }
        if let Some(tps) = rec.tokens_per_sec {
            let global_tps = tps * self.world as f64;
            tb.add_scalar("train/tokens_per_sec", global_tps as f32, step, rec.time)?;
            println!(
                "step {step_in_epoch}/{} loss {loss:.4} lr {} {global_tps:.0} tokens/s",
                self.steps_per_epoch,
                fmt_lr(lr)
            );
        } else {
            let global_sps = sps * self.world as f64;
            tb.add_scalar("train/samples_per_sec", global_sps as f32, step, rec.time)?;
            println!(
                "epoch {epoch}/{} step {step_in_epoch}/{} loss {loss:.4} lr {} {global_sps:.0} samples/s",
                self.epochs,
                self.steps_per_epoch,
                fmt_lr(lr)
            );
        }
        Ok(())
    }

    /// A validation (end of `epoch`) or test evaluation; rank 0 records the global figures.
    pub fn eval(
        &mut self,
        kind: MetricKind,
        epoch: usize,
        global_step: u64,
        lr: f64,
        e: &Evaluation,
    ) -> Result<()> {
        let lm = self
            .tokens
            .map(|t| LmFigures::of(e.loss, &t))
            .unwrap_or_default();
        if kind == MetricKind::Val {
            self.last_val = Some((e.loss, lm.perplexity));
        }
        if self.tb.is_none() {
            // Rank 0 alone records the (global) evaluation.
            return Ok(());
        }
        let rec = MetricRecord {
            accuracy: e.accuracy,
            perplexity: lm.perplexity,
            bits_per_char: lm.bits_per_char,
            bits_per_byte: lm.bits_per_byte,
            samples: Some(e.samples as u64),
            metrics: e.metrics.iter().cloned().collect(),
            ..self.record(kind, epoch, global_step, e.loss, lr, e.samples_per_sec)
        };
        self.metrics.write(&rec)?;
        let prefix = if kind == MetricKind::Val {
            "val"
        } else {
            "test"
        };
        let figures = [
            ("loss", Some(e.loss)),
            ("accuracy", e.accuracy),
            ("perplexity", lm.perplexity),
            ("bits_per_char", lm.bits_per_char),
            ("bits_per_byte", lm.bits_per_byte),
        ];
        if let Some(tb) = self.tb.as_mut() {
            for (name, value) in figures {
                if let Some(v) = value {
                    let tag = format!("{prefix}/{name}");
                    tb.add_scalar(&tag, v as f32, global_step as i64, rec.time)?;
                }
            }
            for (name, v) in &e.metrics {
                let tag = format!("{prefix}/{name}");
                tb.add_scalar(&tag, *v as f32, global_step as i64, rec.time)?;
            }
        }
        if self.tokens.is_some() {
            println!(
                "step {global_step} val loss {:.4}{} ({} windows)",
                e.loss,
                lm.text(),
                e.samples
            );
            return Ok(());
        }
        let mut acc = e
            .accuracy
            .map(|a| format!(" accuracy {:.2}%", a * 100.0))
            .unwrap_or_default();
        for (name, v) in &e.metrics {
            acc.push_str(&format!(" {name} {v:.4}"));
        }
        match kind {
            MetricKind::Val => println!(
                "epoch {epoch}/{} val loss {:.4}{acc} ({} samples)",
                self.epochs, e.loss, e.samples
            ),
            _ => println!("test loss {:.4}{acc} ({} samples)", e.loss, e.samples),
        }
        Ok(())
    }

    /// Makes everything written so far durable (end of an epoch, end of the run).
    pub fn sync(&mut self) -> Result<()> {
        self.metrics.sync()?;
        if let Some(tb) = self.tb.as_mut() {
            tb.flush()?;
        }
        Ok(())
    }

    /// A record of this rank with no sample count and none of the optional figures.
    fn record(
        &self,
        kind: MetricKind,
        epoch: usize,
        step: u64,
        loss: f64,
        lr: f64,
        sps: f64,
    ) -> MetricRecord {
        MetricRecord {
            time: unix_time(),
            rank: self.rank,
            kind,
            epoch,
            step,
            loss,
            accuracy: None,
            perplexity: None,
            bits_per_char: None,
            bits_per_byte: None,
            lr,
            samples_per_sec: sps,
            samples: None,
            tokens_per_sec: None,
            tokens: None,
            world_size: self.world,
            metrics: Default::default(),
            breakdown: None,
            precision: None,
            sync: None,
        }
    }
}

/// Loss and throughput over a logging window.
pub struct Window {
    start: Instant,
    loss_sum: f64,
    samples: usize,
    batches: usize,
    /// Samples of [`Window::samples`] trained before this process (carried in a checkpoint):
    /// counted in the record, not in its throughput.
    untimed: usize,
}

/// What a [`Window`] has added up since its last record, as a checkpoint carries it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowState {
    pub loss_sum: f64,
    pub batches: usize,
    pub samples: usize,
}

impl Window {
    pub fn start() -> Self {
        Window::resume(WindowState::default())
    }

    /// A window that goes on from `state` (a resumed run's, from its checkpoint).
    pub fn resume(state: WindowState) -> Self {
        Window {
            start: Instant::now(),
            loss_sum: state.loss_sum,
            samples: state.samples,
            batches: state.batches,
            untimed: state.samples,
        }
    }

    /// What the window holds so far.
    pub fn state(&self) -> WindowState {
        WindowState {
            loss_sum: self.loss_sum,
            batches: self.batches,
            samples: self.samples,
        }
    }

    pub fn add(&mut self, loss: f64, n: usize) {
        self.loss_sum += loss;
        self.batches += 1;
        self.samples += n;
    }

    /// The window's figures since the last take; restarts the window.
    pub fn take(&mut self) -> Taken {
        let secs = self.start.elapsed().as_secs_f64();
        let timed = self.samples - self.untimed;
        let out = Taken {
            loss: self.loss_sum / self.batches.max(1) as f64,
            samples_per_sec: timed as f64 / secs.max(1e-9),
            samples: self.samples,
            timed,
            secs,
        };
        *self = Window::start();
        out
    }
}

/// A window's record: its mean loss, this rank's samples/s, the samples it covered, and of
/// these the samples this process trained in `secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    pub loss: f64,
    pub samples_per_sec: f64,
    pub samples: usize,
    pub timed: usize,
    pub secs: f64,
}

/// `0.002`, `0.00098`: the learning rate without trailing zeros.
pub fn fmt_lr(lr: f64) -> String {
    let s = format!("{lr:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_language_models_figures_of_its_loss() {
        let char = TokenCounting {
            block: 64,
            tokenizer: Some(TokenizerKind::Char),
        };
        let f = LmFigures::of(2.0, &char);
        assert_eq!(f.perplexity, Some(2.0f64.exp()));
        assert_eq!(f.bits_per_char, Some(2.0 / std::f64::consts::LN_2));
        assert_eq!(f.bits_per_byte, None);
        assert_eq!(f.text(), " perplexity 7.39 bits/char 2.885");
        let byte = TokenCounting {
            tokenizer: Some(TokenizerKind::Byte),
            ..char
        };
        let f = LmFigures::of(std::f64::consts::LN_2, &byte);
        assert_eq!((f.bits_per_char, f.bits_per_byte), (None, Some(1.0)));
        assert_eq!(f.text(), " perplexity 2.00 bits/byte 1.000");
        // Token files: no unit to count bits in.
        let ids = TokenCounting {
            tokenizer: None,
            ..char
        };
        assert_eq!(LmFigures::of(1.0, &ids).text(), " perplexity 2.72");
    }

    #[test]
    fn lr_formatting() {
        assert_eq!(fmt_lr(0.002), "0.002");
        assert_eq!(fmt_lr(0.00098), "0.00098");
        assert_eq!(fmt_lr(1.0), "1");
    }
}
