//! The sharded step in memory the ranks share ([`SharedStep::step_buffers`](crate::dist::capability::SharedStep::step_buffers)): one bucket whose
//! reduce-scatter reads the other ranks' gradients in place and hands each summed block straight
//! to the optimizer, and whose all-gather is a barrier: each shard of the parameters is then
//! read from the rank that updated it. This rank's own shard of the first micro-batch's
//! gradients is not even copied into its buffer (nobody else reads it): the reduce-scatter reads
//! it from the gradient tensors.
//!
//! With gradient clipping or fp16's loss scale the reduced blocks are kept aside until the
//! global norm is known, instead of going straight to the optimizer.

use std::ops::Range;
use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Storage, Tensor};

use super::{Prepared, Slot, Stepped, global_norm, prepare};
use crate::dist::capability;
use crate::dist::shm::{HeldGrads, StepBuffers};
use crate::dist::{Collective, ReduceOp};
use crate::models::Network;
use crate::optim::Optimizer;
use crate::step::host::{host_f32, read_tensor};
use crate::step::{Control, StepCost};
use crate::{Error, Result};

/// The shared flat buffers and what this rank keeps beside them.
pub(super) struct SharedStep {
    step: StepBuffers,
    /// Whether this rank's parameter buffer holds every shard's current values; after a step,
    /// each shard is current in the buffer of the rank that updated it only.
    whole: bool,
    /// This rank's shard of the first micro-batch's gradients, left in the model's gradient
    /// tensors until the step reads them ([`HeldGrads`]).
    held: Vec<HeldTensor>,
    /// With clipping or a loss scale, this rank's shard of the reduced gradients.
    clip_scratch: Vec<f32>,
    micro_batches: usize,
}

/// Gradients of this rank's shard not copied into its buffer (yet).
struct HeldTensor {
    /// Their range in the flat buffers.
    at: Range<usize>,
    tensor: Tensor,
    /// Where `at` begins among the tensor's values.
    from: usize,
}

impl SharedStep {
    pub(super) fn new(step: StepBuffers) -> SharedStep {
        SharedStep {
            step,
            whole: true,
            held: Vec::new(),
            clip_scratch: Vec::new(),
            micro_batches: 0,
        }
    }

    /// Floats per buffer (the parameters and the control element).
    pub(super) fn len(&self) -> usize {
        self.step.len()
    }

    /// All current parameters in this rank's buffer (first the other ranks' shards of the last
    /// step copied in).
    pub(super) fn params_mut(&mut self) -> &mut [f32] {
        if !self.whole {
            self.step.gather_params();
            self.whole = true;
        }
        self.step.params_mut()
    }

    /// Copies the current parameters at `at` into `dst`, wherever they are.
    pub(super) fn read_params(&self, at: Range<usize>, dst: &mut [f32]) {
        if self.whole {
            dst.copy_from_slice(&self.step.params()[at]);
        } else {
            self.step.read_params(at, dst);
        }
    }

    /// Adds one micro-batch's gradients (scaled by `scale`) into the gradient buffer; the first
    /// micro-batch's gradients of this rank's own shard `own` stay in their tensors (copied in
    /// here if another micro-batch follows).
    pub(super) fn accumulate(
        &mut self,
        slots: &[Slot],
        own: Option<Range<usize>>,
        net: &Network,
        grads: &GradStore,
        scale: f32,
    ) -> Result<()> {
        let first = self.micro_batches == 0;
        if !first {
            self.copy_held()?;
        }
        let keep = if first { own } else { None };
        for (slot, (_, var)) in slots.iter().zip(&net.params) {
            let buffer = self.step.grads_mut();
            let g = match grads.get(var.as_tensor()) {
                Some(g) if scale == 1.0 => g.clone(),
                Some(g) => (g * scale as f64)?,
                None => {
                    if first {
                        buffer[slot.range.clone()].fill(0.0);
                    }
                    continue;
                }
            };
            let range = &slot.range;
            let base = range.start;
            // Where this slot meets the own shard and its values are in host memory: copy the
            // rest, hold that part.
            let held = keep
                .as_ref()
                .map(|k| k.start.max(range.start)..k.end.min(range.end))
                .filter(|cut| !cut.is_empty())
                .and_then(|cut| {
                    host_f32(&g, |v| {
                        buffer[range.start..cut.start].copy_from_slice(&v[..cut.start - base]);
                        buffer[cut.end..range.end].copy_from_slice(&v[cut.end - base..]);
                        cut
                    })
                });
            let Some(cut) = held else {
                read_tensor(&g, &mut buffer[range.clone()], !first)?;
                continue;
            };
            self.held.push(HeldTensor {
                from: cut.start - base,
                at: cut,
                tensor: g,
            });
        }
        self.micro_batches += 1;
        Ok(())
    }

    /// Copies the held gradients into this rank's buffer.
    fn copy_held(&mut self) -> Result<()> {
        let buffer = self.step.grads_mut();
        for h in self.held.drain(..) {
            let dst = &mut buffer[h.at.clone()];
            host_f32(&h.tensor, |v| {
                dst.copy_from_slice(&v[h.from..h.from + dst.len()])
            })
            .ok_or_else(|| held_not_host_f32(&h))?;
        }
        Ok(())
    }

    /// The reduce-scatter of the one bucket, straight into `opt` at `lr` on this rank's shard
    /// (or kept aside and clipped to the global norm first), then the all-gather's barrier;
    /// `control` travels in the last element.
    pub(super) fn step(
        &mut self,
        c: &mut dyn Collective,
        opt: &mut Optimizer,
        lr: f64,
        control: Control,
    ) -> Result<Stepped> {
        let n = self.step.len() - 1;
        self.step.grads_mut()[n] = control.value(c.world_size());
        let (step, held, scratch) = (&mut self.step, &self.held, &mut self.clip_scratch);
        let mut optimizer = Duration::ZERO;
        let optimizer = &mut optimizer;
        let guards: Vec<_> = held.iter().map(|h| h.tensor.storage_and_layout()).collect();
        let pieces = guards
            .iter()
            .zip(held.iter())
            .map(|((storage, layout), h)| match &**storage {
                Storage::Cpu(CpuStorage::F32(v)) => {
                    let a = layout.start_offset() + h.from;
                    Ok(HeldGrads {
                        at: h.at.clone(),
                        values: &v[a..a + h.at.len()],
                    })
                }
                _ => Err(held_not_host_f32(h)),
            })
            .collect::<Result<Vec<_>>>()?;
        // Where the optimizer waits for the global norm (clipping, fp16's loss scale), the
        // reduced blocks are kept aside first.
        let prepared = if opt.grad_clip.is_some() || opt.scaler.is_some() {
            Some(reduce_and_prepare(c, step, &pieces, scratch, opt)?)
        } else {
            None
        };
        let steps = prepared.as_ref().is_none_or(|p| p.step);
        if steps {
            opt.begin_step();
        }
        let shard = step.shard();
        let mut update = |at: Range<usize>, grads: &[f32], params: &mut [f32]| {
            let t = Instant::now();
            let k = n.clamp(at.start, at.end) - at.start;
            if steps {
                opt.update(&mut params[..k], &grads[..k], at.start..at.start + k, lr);
            }
            if k < at.len() {
                params[k] = grads[k];
            }
            *optimizer += t.elapsed();
        };
        if prepared.is_some() {
            // This rank's shard of its own parameters: between the reduce-scatter and the
            // all-gather nobody else reads it, as in the fused update.
            update(shard.clone(), scratch, &mut step.params_mut()[shard]);
        } else {
            capability::shared_step(c, "reduce_scatter")?.reduce_scatter_step(
                step,
                ReduceOp::Avg,
                &pieces,
                &mut update,
            )?;
        }
        self.whole = false;
        capability::shared_step(c, "all_gather_shards")?.all_gather_step(step)?;
        drop(pieces);
        drop(guards);
        let cost = StepCost {
            optimizer: *optimizer,
            comm_busy: None,
            bytes_sent: None,
        };
        self.held.clear();
        self.micro_batches = 0;
        let mut control = [0.0];
        self.read_params(n..n + 1, &mut control);
        Ok((
            Control::read(control[0]),
            cost,
            prepared.and_then(|p| p.norm),
        ))
    }
}

/// The reduce-scatter of the step's gradients into `scratch` (this rank's shard, control element
/// included), prepared there for `opt` ([`prepare`]: unscaled, clipped). The parameters are not
/// touched: the optimizer runs after.
fn reduce_and_prepare(
    c: &mut dyn Collective,
    step: &mut StepBuffers,
    held: &[HeldGrads<'_>],
    scratch: &mut Vec<f32>,
    opt: &mut Optimizer,
) -> Result<Prepared> {
    let shard = step.shard();
    scratch.resize(shard.len(), 0.0);
    let mut keep = |at: Range<usize>, grads: &[f32], _: &mut [f32]| {
        scratch[at.start - shard.start..at.end - shard.start].copy_from_slice(grads)
    };
    capability::shared_step(c, "reduce_scatter")?.reduce_scatter_step(
        step,
        ReduceOp::Avg,
        held,
        &mut keep,
    )?;
    // The control element, last in the buffers, is no gradient.
    let k = (step.len() - 1).clamp(shard.start, shard.end) - shard.start;
    prepare(opt, |f| f(&mut scratch[..k]), |mine| global_norm(c, mine))
}

fn held_not_host_f32(h: &HeldTensor) -> Error {
    Error::Model(format!(
        "held gradients of flat elements {:?} are no longer contiguous f32 in host memory",
        h.at
    ))
}
