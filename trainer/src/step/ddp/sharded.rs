//! The sharded step over private buffers: the flat gradients reduce-scattered bucket by bucket,
//! the optimizer on this rank's shard of every bucket, the parameters all-gathered.

use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;

use super::{Shards, Slot, Stepped, global_norm, prepare};
use crate::Result;
use crate::dist::{Collective, ReduceOp};
use crate::models::Network;
use crate::optim::Optimizer;
use crate::step::host::read_tensor;
use crate::step::{Control, StepCost};

/// This process's own flat buffers (the parameters and the gradients, each with the control
/// element at the end), reduced with [`Collective::reduce_scatter`] and
/// [`Collective::all_gather_shards`].
pub(super) struct Sharded {
    pub(super) params: Vec<f32>,
    pub(super) grads: Vec<f32>,
    /// Why the buffers are not shared, in a world of several that asked for shared buffers.
    pub(super) why: Option<String>,
    micro_batches: usize,
}

impl Sharded {
    pub(super) fn new(len: usize, why: Option<String>) -> Sharded {
        Sharded {
            params: vec![0.0; len],
            grads: vec![0.0; len],
            why,
            micro_batches: 0,
        }
    }

    /// Adds one micro-batch's gradients (scaled by `scale`) into the gradient buffer.
    /// Parameters that got no gradient count as zero.
    pub(super) fn accumulate(
        &mut self,
        slots: &[Slot],
        net: &Network,
        grads: &GradStore,
        scale: f32,
    ) -> Result<()> {
        let first = self.micro_batches == 0;
        for (slot, (_, var)) in slots.iter().zip(&net.params) {
            let g = match grads.get(var.as_tensor()) {
                Some(g) if scale == 1.0 => g.clone(),
                Some(g) => (g * scale as f64)?,
                None => {
                    if first {
                        self.grads[slot.range.clone()].fill(0.0);
                    }
                    continue;
                }
            };
            read_tensor(&g, &mut self.grads[slot.range.clone()], !first)?;
        }
        self.micro_batches += 1;
        Ok(())
    }

    /// The step is over: the next micro-batch starts the gradients afresh.
    pub(super) fn end_step(&mut self) {
        self.micro_batches = 0;
    }

    /// Per bucket of `shards`, a reduce-scatter (average), `opt` at `lr` on this rank's shard,
    /// an all-gather of the parameters; `control` travels in the last element.
    pub(super) fn step(
        &mut self,
        c: &mut dyn Collective,
        shards: &Shards,
        opt: &mut Optimizer,
        lr: f64,
        control: Control,
    ) -> Result<Stepped> {
        let n = self.params.len() - 1;
        let w = c.world_size();
        self.grads[n] = control.value(w);
        // A ring reduce-scatter and all-gather each send (W-1)/W of the buffer.
        let w = w as u64;
        let bytes_sent = Some((n as u64 + 1) * 4 * 2 * (w - 1) / w);
        let (params, grads) = (&mut self.params, &mut self.grads);
        let (buckets, own) = (&shards.buckets, &shards.own);
        let mut optimizer = Duration::ZERO;
        for (i, b) in buckets.iter().enumerate() {
            c.label_bucket(i, buckets.len());
            c.reduce_scatter(&mut grads[b.clone()], ReduceOp::Avg)?;
        }
        let prepared = prepare(
            opt,
            |f| own.iter().for_each(|r| f(&mut grads[r.clone()])),
            |mine| global_norm(c, mine),
        )?;
        // The optimizer on this rank's shards; the control element travels with the
        // parameters, from the rank that reduced it.
        let t = Instant::now();
        if prepared.step {
            opt.step_parts(&mut params[..n], &grads[..n], own, lr);
        }
        optimizer += t.elapsed();
        if shards.owns_control {
            params[n] = grads[n];
        }
        for (i, b) in buckets.iter().enumerate() {
            c.label_bucket(i, buckets.len());
            c.all_gather_shards(&mut params[b.clone()])?;
        }
        let agreed = Control::read(params[n]);
        self.end_step();
        let cost = StepCost {
            optimizer,
            comm_busy: None,
            bytes_sent,
        };
        Ok((agreed, cost, prepared.norm))
    }
}
