//! The f32 all-reduce: the bucket averaged as it is.

use super::{CommHook, ring_bytes};
use crate::Result;
use crate::dist::{Collective, ReduceOp};

/// Averages the bucket in f32 (`ddp.compression = "none"`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Plain;

impl CommHook for Plain {
    fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn Collective) -> Result<u64> {
        comm.all_reduce(grads, ReduceOp::Avg)?;
        Ok(ring_bytes(grads.len(), 4, comm.world_size()))
    }
}
