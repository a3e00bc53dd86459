//! The DDP step's flat buffers in shared memory: every rank's gradients and parameters lie in one
//! segment that all ranks map, so the two halves of the step's all-reduce read the other ranks'
//! buffers in place: nothing is staged, copied out of another process or sent.
//!
//! One step is three barriers:
//! 1. reduce-scatter: each rank arrives once its gradients are in its buffer, then sums its own
//!    shard over all ranks (in rank order, the bits of every other way) into its buffer;
//! 2. all-gather: each rank arrives once its shard of the parameters is updated, then copies the
//!    other ranks' shards out of their parameter buffers;
//! 3. and arrives again: nobody reads its buffers any more.
//!
//! Between the ranks' steps a rank's buffers are its own. Within one, a rank writes only its own
//! shard of its own buffers, which no other rank reads at that time: the gradients' shard `q` is
//! read by rank `q` between barriers 1 and 2, the parameters' shard `r` by the others between
//! barriers 2 and 3, and rank `r` writes its gradients' and parameters' shard `r` between 1 and 2.

use super::{
    Mapping, ReduceOp, SUM_BLOCK, ShmReducer, add_rank, scale_sum, segment, share_segment,
};
use crate::Result;
use crate::dist::ring::TcpRing;

/// This rank's gradient and parameter buffers of `len` floats each, and the other ranks', in one
/// mapped segment.
pub struct StepBuffers {
    map: Mapping,
    len: usize,
    /// Bytes from one buffer to the next (a whole number of pages).
    stride: usize,
    rank: usize,
    world: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the other ranks touch it only as the
// module's protocol allows.
unsafe impl Send for StepBuffers {}

#[derive(Clone, Copy)]
enum Which {
    Grads = 0,
    Params = 1,
}

impl StepBuffers {
    /// Floats per buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn ptr(&self, q: usize, which: Which) -> *mut f32 {
        // SAFETY: the segment holds 2 buffers of `stride` bytes per rank.
        unsafe {
            self.map
                .base
                .add((2 * q + which as usize) * self.stride)
                .cast()
        }
    }

    /// Rank `q`'s buffer, read while the protocol says `q` does not write it.
    fn peer(&self, q: usize, which: Which) -> &[f32] {
        // SAFETY: inside the mapping; see the module docs for when it is read.
        unsafe { std::slice::from_raw_parts(self.ptr(q, which), self.len) }
    }

    fn own_mut(&mut self, which: Which) -> &mut [f32] {
        // SAFETY: this rank's own buffer: only this rank writes it, and not the parts the others
        // read at that time (module docs).
        unsafe { std::slice::from_raw_parts_mut(self.ptr(self.rank, which), self.len) }
    }

    pub fn grads_mut(&mut self) -> &mut [f32] {
        self.own_mut(Which::Grads)
    }

    pub fn params(&self) -> &[f32] {
        self.peer(self.rank, Which::Params)
    }

    pub fn params_mut(&mut self) -> &mut [f32] {
        self.own_mut(Which::Params)
    }

    /// This rank's gradients and parameters together (for the optimizer).
    pub fn grads_and_params_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        let (g, p) = (
            self.ptr(self.rank, Which::Grads),
            self.ptr(self.rank, Which::Params),
        );
        // SAFETY: two disjoint buffers of this rank (as in own_mut).
        unsafe {
            (
                std::slice::from_raw_parts_mut(g, self.len),
                std::slice::from_raw_parts_mut(p, self.len),
            )
        }
    }

    /// This rank's shard of the buffers.
    pub fn shard(&self) -> std::ops::Range<usize> {
        segment(self.len, self.world, self.rank)
    }
}

impl ShmReducer {
    /// Sets up [`StepBuffers`] of `len` floats with the other ranks (every rank calls this at the
    /// same point). `Ok(Err(why))` when some rank cannot (`/dev/shm` too small for
    /// 2 × world × `len` floats, or `DDP_SHM_STEP=0` on some rank): the step then keeps its
    /// buffers private and uses [`ShmReducer::reduce_scatter`] and
    /// [`ShmReducer::all_gather_shards`].
    pub fn step_buffers(
        &mut self,
        ring: &mut TcpRing,
        len: usize,
    ) -> Result<std::result::Result<StepBuffers, String>> {
        let wanted = std::env::var("DDP_SHM_STEP").map_or(true, |v| v != "0");
        self.step_buffers_if(ring, len, wanted)
    }

    /// [`ShmReducer::step_buffers`] where this rank wants them or not (tests).
    pub(super) fn step_buffers_if(
        &mut self,
        ring: &mut TcpRing,
        len: usize,
        wanted: bool,
    ) -> Result<std::result::Result<StepBuffers, String>> {
        use crate::dist::Collective;
        let wants = ring.all_gather_bytes(&[wanted as u8])?;
        if let Some(r) = wants.iter().position(|w| w.first() != Some(&1)) {
            return Ok(Err(format!("rank {r} has DDP_SHM_STEP=0")));
        }
        let stride = (len * 4).next_multiple_of(4096).max(4096);
        let map = match share_segment(ring, self.rank, 2 * self.world * stride)? {
            Ok(map) => map,
            Err(why) => return Ok(Err(why)),
        };
        Ok(Ok(StepBuffers {
            map,
            len,
            stride,
            rank: self.rank,
            world: self.world,
        }))
    }

    /// Reduce-scatter of the step's gradients: on return this rank's shard of its gradient
    /// buffer holds the reduction over all ranks (the same bits as [`ShmReducer::all_reduce`]).
    pub fn reduce_scatter_step(
        &mut self,
        ring: &mut TcpRing,
        step: &mut StepBuffers,
        op: ReduceOp,
    ) -> Result<()> {
        let scale = self.scale(op);
        self.run(ring, "reduce_scatter", step.len, |shm, op, _| {
            shm.barrier(&op)?;
            shm.check_same_op(&op)?;
            reduce_own_shard(step, scale);
            Ok(())
        })
    }

    /// All-gather of the step's parameters: every rank's shard of its parameter buffer is
    /// copied into that shard of every other rank's.
    pub fn all_gather_step(&mut self, ring: &mut TcpRing, step: &mut StepBuffers) -> Result<()> {
        self.run(ring, "all_gather_shards", step.len, |shm, op, _| {
            shm.barrier(&op)?;
            shm.check_same_op(&op)?;
            copy_other_shards(step);
            // Nobody reads this rank's buffers past this barrier.
            shm.barrier(&op)
        })
    }
}

/// Sums this rank's shard of the gradients over all ranks, in rank order, block by block.
fn reduce_own_shard(step: &mut StepBuffers, scale: Option<f32>) {
    let shard = step.shard();
    let mut sum = [0f32; SUM_BLOCK];
    let mut at = shard.start;
    while at < shard.end {
        let block = at..(at + SUM_BLOCK).min(shard.end);
        let sum = &mut sum[..block.len()];
        for q in 0..step.world {
            add_rank(sum, q, &step.peer(q, Which::Grads)[block.clone()]);
        }
        scale_sum(sum, scale);
        step.grads_mut()[block.clone()].copy_from_slice(sum);
        at = block.end;
    }
}

/// Copies the other ranks' shards of the parameters into this rank's buffer.
fn copy_other_shards(step: &mut StepBuffers) {
    for q in (0..step.world).filter(|&q| q != step.rank) {
        let part = segment(step.len, step.world, q);
        let (src, dst) = (
            step.ptr(q, Which::Params),
            step.ptr(step.rank, Which::Params),
        );
        // SAFETY: rank q's shard q, which q does not write until barrier 3, into this rank's
        // shard q, which nobody else reads now (module docs); two different ranks' buffers.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(part.start), dst.add(part.start), part.len())
        };
    }
}
