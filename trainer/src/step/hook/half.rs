//! 16-bit floats on the wire, added in f32 ([`Collective::all_reduce_coded`]).

use super::{CommHook, ring_bytes};
use crate::Result;
use crate::dist::codec::Codec;
use crate::dist::{Collective, ReduceOp};

/// Averages the bucket with 16 bits a value on the wire (`ddp.compression = "bf16"` or
/// `"fp16"`); the average is rounded to 16 bits, the same on every rank.
#[derive(Debug, Clone, Copy)]
pub struct Half(pub Codec);

impl CommHook for Half {
    fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn Collective) -> Result<u64> {
        comm.all_reduce_coded(grads, ReduceOp::Avg, self.0)?;
        Ok(ring_bytes(grads.len(), Codec::WIDTH, comm.world_size()))
    }
}
