//! The language-model task of a replica: its token data and the windows of each step.
//!
//! Step `s` with `A` micro-batches draws, for micro-batch `k`, the windows that
//! [`TrainWindows`] keys by `s·A + k`: a function of the seed, the position and the global
//! window index only, so 2 replicas × B draw exactly what 1 replica × 2B draws, and a resumed run
//! draws what the uninterrupted one did.

use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;

use crate::Result;
use crate::data::text::{LmBatch, TrainWindows};
use crate::lm::{self, LmData};
use crate::models::Network;
use crate::report::{Evaluation, TokenCounting};
use crate::spec::Spec;
use crate::step::comm::SharedCollective;
use crate::step::overlap::{Hook, Session};

/// A replica's token data and the buffers of its batches.
pub(super) struct Tokens {
    pub data: LmData,
    windows: TrainWindows,
    batch: LmBatch,
}

impl Tokens {
    pub(super) fn new(data: LmData, spec: &Spec, world: usize, rank: usize) -> Tokens {
        let windows = TrainWindows::new(
            data.train.len(),
            data.block,
            spec.train.batch_size,
            world,
            rank,
            spec.train.seed,
        );
        Tokens {
            data,
            windows,
            batch: LmBatch::new(),
        }
    }

    /// This replica's windows as rank `rank` of `world` (an elastic group re-formed): step
    /// `s` goes on drawing the global windows `[0, world·B)` of `s`.
    pub(super) fn regroup(&mut self, spec: &Spec, world: usize, rank: usize) {
        self.windows = TrainWindows::new(
            self.data.train.len(),
            self.data.block,
            spec.train.batch_size,
            world,
            rank,
            spec.train.seed,
        );
    }

    /// Forward and backward of micro-batch `micro` (`step · grad_accum + k`): its mean loss, its
    /// gradients, its windows, and the time it took to read them. Backward starts from the
    /// loss times `loss_scale` (fp16's; the loss returned is not scaled).
    pub(super) fn micro_batch(
        &mut self,
        net: &Network,
        micro: u64,
        session: Option<&Session>,
        loss_scale: f32,
    ) -> Result<(f32, GradStore, usize, Duration)> {
        let t = Instant::now();
        self.windows.fill(&self.data.train, micro, &mut self.batch);
        // The windows are copied out: their pages go back to the page cache, so a replica's
        // memory does not grow with the token file.
        self.data.train.release_pages();
        let data = t.elapsed();
        // Backward in the forward pass's precision.
        let _precision = net.autocast()?;
        let loss = lm::batch_loss(net, &self.batch, true)?;
        let hook = Hook {
            session,
            part: 0,
            parts: 1,
            loss_scale,
        };
        let grads = hook.backward(&loss)?;
        Ok((loss.to_scalar::<f32>()?, grads, self.batch.rows, data))
    }

    /// Tokens per window.
    pub(super) fn block(&self) -> usize {
        self.data.block
    }

    /// How the reporter counts this data's figures: tokens per window, the text's tokenizer.
    pub(super) fn counting(&self) -> TokenCounting {
        TokenCounting {
            block: self.data.block,
            tokenizer: self.data.tokenizer.as_ref().map(|t| t.kind()),
        }
    }

    /// The validation loss over every evaluation window, all ranks together.
    pub(super) fn evaluate(
        &self,
        net: &Network,
        rank: usize,
        world: usize,
        batch_size: usize,
        comm: &SharedCollective,
    ) -> Result<Evaluation> {
        let d = &self.data;
        let e = lm::evaluate(net, &d.val, d.block, rank, world, batch_size, comm)?;
        d.val.release_pages();
        Ok(e)
    }
}
