//! The overlapped step: the gradients averaged bucket by bucket while backward runs
//! ([`Overlap`]), unscaled (fp16) and clipped to the global norm (every rank has every
//! gradient), then the whole optimizer on every rank over private parameters.

use std::time::Instant;

use super::{Slot, Stepped, prepare, whole_norm};
use crate::Result;
use crate::optim::Optimizer;
use crate::step::overlap::Overlap;
use crate::step::{Control, StepCost};

/// The private flat parameters (the control element at the end) and the gradient buckets.
pub(super) struct Overlapped {
    pub(super) params: Vec<f32>,
    /// Why the buffers are not shared, in a world of several that asked for shared buffers.
    pub(super) why: Option<String>,
    pub(super) overlap: Overlap,
}

impl Overlapped {
    /// The step after backward: the buckets averaged (now, unless a session did), clipped, and
    /// `opt` at `lr` on every parameter; `control` travels in the last bucket.
    pub(super) fn step(
        &mut self,
        slots: &[Slot],
        opt: &mut Optimizer,
        lr: f64,
        control: Control,
    ) -> Result<Stepped> {
        let o = &mut self.overlap;
        if !o.reduced() {
            o.reduce_all(control)?;
        }
        let t = Instant::now();
        let prepared = prepare(opt, |f| o.grads_mut().for_each(f), whole_norm)?;
        if prepared.step {
            opt.begin_step();
            for (p, slot) in slots.iter().enumerate() {
                let at = slot.range.clone();
                opt.update(&mut self.params[at.clone()], o.grad(p), at, lr);
            }
        }
        let agreed = o.control();
        let figures = o.figures();
        let cost = StepCost {
            optimizer: t.elapsed(),
            comm_busy: Some(figures.busy),
            bytes_sent: Some(figures.bytes_sent),
        };
        o.end_step();
        Ok((agreed, cost, prepared.norm))
    }
}
