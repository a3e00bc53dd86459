//! Where a replica's figures go: its metrics JSONL (every rank), TensorBoard events and the human
//! progress lines (rank 0).

use std::path::Path;
use std::time::Instant;

use crate::Result;
use crate::metrics::{MetricKind, MetricRecord, MetricsWriter, unix_time};
use crate::tensorboard::EventWriter;

/// The result of evaluating a split, all-reduced over the ranks.
#[derive(Debug, Clone, Copy)]
pub struct Evaluation {
    pub loss: f64,
    pub accuracy: Option<f64>,
    pub samples: usize,
    pub samples_per_sec: f64,
}

pub struct Reporter {
    rank: usize,
    world: usize,
    epochs: usize,
    steps_per_epoch: u64,
    metrics: MetricsWriter,
    tb: Option<EventWriter>,
    /// A language model's run: throughput in tokens, evaluation over windows with perplexity.
    tokens: bool,
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
            tokens: false,
        })
    }

    /// This reporter for a language model: progress in steps and tokens/s, validation with its
    /// perplexity, over windows.
    pub fn counting_tokens(mut self) -> Reporter {
        self.tokens = true;
        self
    }

    /// A training window: mean loss over it, this rank's samples/s, samples it covered.
    /// `epoch` is 1-based; `step_in_epoch` counts optimizer steps from 1.
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
    ) -> Result<()> {
        let rec = self.record(
            MetricKind::Train,
            epoch,
            global_step,
            loss,
            None,
            lr,
            sps,
            samples,
        );
        self.metrics.write(&rec)?;
        let global_sps = sps * self.world as f64;
        if let Some(tb) = self.tb.as_mut() {
            let step = global_step as i64;
            tb.add_scalar("train/loss", loss as f32, step, rec.time)?;
            tb.add_scalar("train/lr", lr as f32, step, rec.time)?;
            if self.tokens {
                tb.add_scalar("train/tokens_per_sec", global_sps as f32, step, rec.time)?;
                println!(
                    "step {step_in_epoch}/{} loss {loss:.4} lr {} {global_sps:.0} tokens/s",
                    self.steps_per_epoch,
                    fmt_lr(lr)
                );
            } else {
                tb.add_scalar("train/samples_per_sec", global_sps as f32, step, rec.time)?;
                println!(
                    "epoch {epoch}/{} step {step_in_epoch}/{} loss {loss:.4} lr {} {global_sps:.0} samples/s",
                    self.epochs,
                    self.steps_per_epoch,
                    fmt_lr(lr)
                );
            }
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
        let Some(tb) = self.tb.as_mut() else {
            return Ok(());
        };
        let rec = MetricRecord {
            time: unix_time(),
            rank: self.rank,
            kind,
            epoch,
            step: global_step,
            loss: e.loss,
            accuracy: e.accuracy,
            lr,
            samples_per_sec: e.samples_per_sec,
            samples: Some(e.samples as u64),
            world_size: self.world,
        };
        self.metrics.write(&rec)?;
        let prefix = if kind == MetricKind::Val {
            "val"
        } else {
            "test"
        };
        tb.add_scalar(
            &format!("{prefix}/loss"),
            e.loss as f32,
            global_step as i64,
            rec.time,
        )?;
        if let Some(a) = e.accuracy {
            tb.add_scalar(
                &format!("{prefix}/accuracy"),
                a as f32,
                global_step as i64,
                rec.time,
            )?;
        }
        let acc = e
            .accuracy
            .map(|a| format!(" accuracy {:.2}%", a * 100.0))
            .unwrap_or_default();
        if self.tokens {
            let perplexity = e.loss.exp();
            tb.add_scalar(
                &format!("{prefix}/perplexity"),
                perplexity as f32,
                global_step as i64,
                rec.time,
            )?;
            println!(
                "step {global_step} val loss {:.4} perplexity {perplexity:.2} ({} windows)",
                e.loss, e.samples
            );
            return Ok(());
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

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        kind: MetricKind,
        epoch: usize,
        step: u64,
        loss: f64,
        accuracy: Option<f64>,
        lr: f64,
        sps: f64,
        samples: usize,
    ) -> MetricRecord {
        MetricRecord {
            time: unix_time(),
            rank: self.rank,
            kind,
            epoch,
            step,
            loss,
            accuracy,
            lr,
            samples_per_sec: sps,
            samples: Some(samples as u64),
            world_size: self.world,
        }
    }
}

/// Loss and throughput over a logging window.
pub struct Window {
    start: Instant,
    loss_sum: f64,
    samples: usize,
    batches: usize,
}

impl Window {
    pub fn start() -> Self {
        Window {
            start: Instant::now(),
            loss_sum: 0.0,
            samples: 0,
            batches: 0,
        }
    }

    pub fn add(&mut self, loss: f64, n: usize) {
        self.loss_sum += loss;
        self.batches += 1;
        self.samples += n;
    }

    /// (mean loss, local samples/s, samples) since the last take; restarts the window.
    pub fn take(&mut self) -> (f64, f64, usize) {
        let dt = self.start.elapsed().as_secs_f64();
        let out = (
            self.loss_sum / self.batches.max(1) as f64,
            self.samples as f64 / dt.max(1e-9),
            self.samples,
        );
        *self = Window::start();
        out
    }
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
    fn lr_formatting() {
        assert_eq!(fmt_lr(0.002), "0.002");
        assert_eq!(fmt_lr(0.00098), "0.00098");
        assert_eq!(fmt_lr(1.0), "1");
    }
}
