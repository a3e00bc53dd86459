//! One training step, the same body for the epoch loop of sample tasks and the step loop of
//! language models: its micro-batches' forward and backward (the last one's backward
//! overlapped with the all-reduce where the host step does that), then the DDP sync and the
//! optimizer step, each part timed into the window's clock.

use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;

use super::clock::StepClock;
use crate::Result;
use crate::models::Network;
use crate::optim::Optimizer;
use crate::report::Window;
use crate::step::Control;
use crate::step::ddp::Ddp;
use crate::step::engine::Engine;
use crate::step::overlap::{self, Session};

/// What one micro-batch's forward and backward gave: its mean loss, its gradients (one store
/// per part where a batch is trained in parts side by side), the rows it counted, and the time
/// it took to read its data.
pub(super) struct MicroBatch {
    pub loss: f32,
    pub grads: Vec<GradStore>,
    pub rows: usize,
    pub data: Duration,
}

/// What a step works on: where its gradients are reduced, the window and clock it is counted
/// in, and the replica's model, DDP step and optimizer.
pub(super) struct Stepper<'a> {
    pub engine: &'a mut Engine,
    pub window: &'a mut Window,
    pub clock: &'a mut StepClock,
    pub net: &'a Network,
    pub ddp: &'a mut Ddp,
    pub opt: &'a mut Optimizer,
}

impl Stepper<'_> {
    /// Trains `micro_batches` micro-batches, each by `micro(net, k, session, loss_scale)` (the
    /// `k`-th, from 0; `session` is the overlapped backward's of the last one, where there is
    /// one; backward starts from the loss times `loss_scale`, fp16's, else 1), their gradients
    /// averaged, then syncs with the control element `control` and steps the optimizer at
    /// `lr`. Returns what the replicas agreed on (a stop, a regroup).
    pub(super) fn step(
        self,
        lr: f64,
        control: Control,
        micro_batches: usize,
        mut micro: impl FnMut(&Network, usize, Option<&Session>, f32) -> Result<MicroBatch>,
    ) -> Result<Control> {
        let Stepper {
            engine,
            window,
            clock,
            net,
            ddp,
            opt,
        } = self;
        let step_start = Instant::now();
        let scale = 1.0 / micro_batches as f32;
        let loss_scale = opt.scaler.map_or(1.0, |s| s.scale);
        let skipped_before = opt.scaler.map(|s| s.skipped);
        engine.begin(ddp)?;
        for k in 0..micro_batches {
            let t0 = Instant::now();
            let session = engine.session(ddp, k + 1 == micro_batches, scale);
            let m = micro(net, k, session.as_ref(), loss_scale)?;
            // Counted before its collectives: a step that a lost peer leaves applied by the
            // others was trained on this batch too (see `elastic::regroup`).
            window.add(m.loss as f64, m.rows);
            let finish = overlap::finish(session, net, &m.grads, control)?;
            for grads in m.grads.iter().filter(|_| finish.is_none()) {
                engine.accumulate(ddp, net, grads, scale)?;
            }
            // Freeing the gradients and the graph is part of the pass.
            drop(m.grads);
            let finish = finish.unwrap_or_default();
            let compute = t0.elapsed().saturating_sub(m.data + finish);
            clock.micro(m.data, compute, finish);
        }
        let t = Instant::now();
        let (agreed, cost) = engine.sync_and_step(ddp, opt, net, lr, control)?;
        clock.step(t.elapsed(), &cost, step_start.elapsed());
        if let Some(s) = opt.scaler
            && Some(s.skipped) != skipped_before
            && ddp.rank() == 0
        {
            println!(
                "step skipped: a gradient was infinite or NaN at loss scale {loss_scale}; now {} \
                 ({} skipped so far)",
                s.scale, s.skipped
            );
        }
        Ok(agreed)
    }
}
