//! PowerSGD's hook: a bucket's matrices sent as low-rank factors, with error feedback
//! ([`PowerSgd`]); the bucket's state stays with its hook from step to step.

use super::{BucketLayout, CommHook, Plain, ring_bytes};
use crate::Result;
use crate::dist::Collective;
use crate::dist::powersgd::PowerSgd;

/// One bucket's PowerSGD (`ddp.compression = "powersgd"`).
pub struct PowerSgdHook(PowerSgd);

impl PowerSgdHook {
    /// The hook of the bucket `layout` describes, factors of rank `rank`, Q seeded by the
    /// bucket's index (the same on every rank). The first step's buckets, laid out before
    /// backward's order is known and used once, travel as f32 ([`Plain`]).
    pub fn for_bucket(layout: &BucketLayout, rank: usize) -> Box<dyn CommHook> {
        if !layout.learned {
            return Box::new(Plain);
        }
        let tensors: Vec<(usize, Vec<usize>)> = layout
            .tensors
            .iter()
            .map(|t| (t.offset, t.shape.clone()))
            .collect();
        Box::new(PowerSgdHook(PowerSgd::new(
            layout.len,
            &tensors,
            rank,
            layout.index as u64,
        )))
    }
}

impl CommHook for PowerSgdHook {
    fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn Collective) -> Result<u64> {
        self.0.all_reduce(comm, grads)?;
        let (p, q) = self.0.floats_sent();
        Ok(ring_bytes(p + q, 4, comm.world_size()))
    }
}
