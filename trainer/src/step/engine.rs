//! Where a step's gradients are reduced and the optimizer runs.

use std::time::Instant;

use candle_core::backprop::GradStore;

use crate::Result;
use crate::models::Network;
use crate::optim::Optimizer;
use crate::step::ddp::Ddp;
use crate::step::device::DeviceStep;
use crate::step::overlap::Session;
use crate::step::{Control, StepCost};

/// Where a step's gradients are reduced and the optimizer runs: the host step (flat host
/// buffers, CPU replicas) or the device step (GPU replicas, see [`crate::step::device`]).
pub(crate) enum Engine {
    Host,
    Device(DeviceStep),
}

impl Engine {
    pub(crate) fn accumulate(
        &mut self,
        ddp: &mut Ddp,
        net: &Network,
        grads: &GradStore,
        scale: f32,
    ) -> Result<()> {
        match self {
            Engine::Host => ddp.accumulate(net, grads, scale),
            Engine::Device(d) => d.accumulate(grads, scale),
        }
    }

    /// The start of a step, before its micro-batches ([`Ddp::begin_step`]).
    pub(crate) fn begin(&mut self, ddp: &mut Ddp) -> Result<()> {
        match self {
            Engine::Host => ddp.begin_step(),
            Engine::Device(_) => Ok(()),
        }
    }

    /// The backward pass of the step's `last` micro-batch where the host step overlaps its
    /// all-reduce with it ([`Ddp::session`]); `None` otherwise (then [`Engine::accumulate`]).
    pub(crate) fn session<'a>(
        &self,
        ddp: &'a mut Ddp,
        last: bool,
        scale: f32,
    ) -> Option<Session<'a>> {
        match self {
            Engine::Host if last => ddp.session(scale),
            _ => None,
        }
    }

    /// Reduces the step's gradients and updates the parameters; says what the replicas agreed
    /// on (a stop, a regroup), and what the reduction and optimizer cost.
    pub(crate) fn sync_and_step(
        &mut self,
        ddp: &mut Ddp,
        opt: &mut Optimizer,
        net: &Network,
        lr: f64,
        control: Control,
    ) -> Result<(Control, StepCost)> {
        match self {
            Engine::Host => {
                let stopped = ddp.sync_and_step(opt, lr, control)?;
                let t = Instant::now();
                ddp.write_params(net)?;
                let mut cost = ddp.cost();
                cost.optimizer += t.elapsed();
                Ok((stopped, cost))
            }
            Engine::Device(d) => {
                let stopped = d.sync(control)?;
                let t = Instant::now();
                d.step(lr)?;
                let cost = StepCost {
                    optimizer: t.elapsed(),
                    ..StepCost::default()
                };
                Ok((stopped, cost))
            }
        }
    }

    /// Brings rank 0's host optimizer up to date before it writes a checkpoint. Every rank calls
    /// it: the host step's ranks each hold the current state of their own shards only and
    /// gather it together; the device step's copy to the host is needed on rank 0 only.
    pub(crate) fn export(&self, ddp: &mut Ddp, opt: &mut Optimizer, rank: usize) -> Result<()> {
        match self {
            Engine::Host => ddp.gather_optimizer_state(opt),
            Engine::Device(d) if rank == 0 => d.export(opt),
            Engine::Device(_) => Ok(()),
        }
    }
}
