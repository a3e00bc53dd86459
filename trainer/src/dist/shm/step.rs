//! The DDP step's flat buffers in shared memory: every rank's gradients and parameters lie in one
//! segment that all ranks map, so the two halves of the step's all-reduce read the other ranks'
//! buffers in place: nothing is staged, copied out of another process or sent.
//!
//! One step is two barriers:
//! 1. reduce-scatter: each rank arrives once its gradients are in its buffer, then sums its own
//!    shard over all ranks (in rank order, the bits of every other way), block by block, and hands
//!    each summed block straight to the optimizer, which updates that block of its parameters
//!    (the sums are never stored);
//! 2. all-gather: each rank arrives once its shard of the parameters is updated. From then on
//!    until its next reduce-scatter, [`StepBuffers::read_params`] reads every shard from the
//!    buffer of the rank that updated it.
//!
//! Who reads what, and why no third barrier is needed:
//! - rank `q` reads shard `q` of every rank's gradients between barriers 1 and 2. Their owners
//!   write their gradients again only for the next step, after passing barrier 2 (so after `q`
//!   arrived there, done reading);
//! - every rank reads shard `r` of rank `r`'s parameters after barrier 2, until it arrives at
//!   the next step's barrier 1. Rank `r` writes that shard again only after passing that barrier,
//!   so after every reader is done.
//!
//! [`StepBuffers::gather_params`] copies the other ranks' shards into this rank's own parameter
//! buffer (for checkpoints and tests); nobody else reads those parts of it.

use std::ops::Range;

use super::{
    Mapping, ReduceOp, SUM_BLOCK, ShmReducer, add_rank, scale_sum, segment, share_segment,
};
use crate::Result;
use crate::dist::ring::TcpRing;

/// What the reduce-scatter of a step hands each summed block of this rank's shard to: the
/// block's range in the buffers, its reduced gradients and this rank's parameters there.
pub type ShardUpdate<'a> = dyn FnMut(Range<usize>, &[f32], &mut [f32]) + 'a;

/// Gradients of this rank's own shard that it kept where they are (the model's gradient
/// tensors) instead of copying them into its buffer: nobody else reads that shard, so the
/// reduce-scatter reads them here. `at` is their range in the buffers.
pub struct HeldGrads<'a> {
    pub at: Range<usize>,
    pub values: &'a [f32],
}

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

    /// This rank's parameter buffer: after a step, only its own shard is current there
    /// ([`StepBuffers::gather_params`] completes it).
    pub fn params(&self) -> &[f32] {
        self.peer(self.rank, Which::Params)
    }

    /// This rank's parameter buffer, to write between steps when every rank writes the same
    /// values (a broadcast, a loaded checkpoint): the others read its shard until they begin the
    /// next step.
    pub fn params_mut(&mut self) -> &mut [f32] {
        self.own_mut(Which::Params)
    }

    /// This rank's shard of the buffers.
    pub fn shard(&self) -> Range<usize> {
        segment(self.len, self.world, self.rank)
    }

    /// Copies the parameters at `at` (indices into the buffers) into `dst`, each shard from the
    /// buffer of the rank that updated it. Valid between a step's all-gather and this rank's
    /// next reduce-scatter.
    pub fn read_params(&self, at: Range<usize>, dst: &mut [f32]) {
        assert_eq!(
            at.len(),
            dst.len(),
            "read_params: range and destination differ"
        );
        assert!(
            at.end <= self.len,
            "read_params: {at:?} past {} floats",
            self.len
        );
        let mut q = 0;
        let mut i = at.start;
        while i < at.end {
            let mut part = segment(self.len, self.world, q);
            while part.end <= i {
                q += 1;
                part = segment(self.len, self.world, q);
            }
            let end = part.end.min(at.end);
            dst[i - at.start..end - at.start].copy_from_slice(&self.peer(q, Which::Params)[i..end]);
            i = end;
        }
    }

    /// Copies the other ranks' shards of the parameters into this rank's buffer, which then
    /// holds all of them. Valid where [`StepBuffers::read_params`] is.
    pub fn gather_params(&mut self) {
        for q in (0..self.world).filter(|&q| q != self.rank) {
            let part = segment(self.len, self.world, q);
            let (src, dst) = (
                self.ptr(q, Which::Params),
                self.ptr(self.rank, Which::Params),
            );
            // SAFETY: rank q's shard q, which q does not write before this rank's next step,
            // into this rank's shard q, which nobody else reads; two different ranks' buffers.
            unsafe {
                std::ptr::copy_nonoverlapping(src.add(part.start), dst.add(part.start), part.len())
            };
        }
    }

    /// Sums this rank's shard of the gradients over all ranks, in rank order, block by block,
    /// and hands each block to `update` with this rank's parameters there. This rank's own
    /// values come from `held` where it covers the shard (in order, not overlapping), else from
    /// its buffer.
    fn reduce_own_shard(
        &mut self,
        scale: Option<f32>,
        held: &[HeldGrads<'_>],
        update: &mut ShardUpdate<'_>,
    ) {
        let shard = self.shard();
        let mut sum = [0f32; SUM_BLOCK];
        let own_params = self.ptr(self.rank, Which::Params);
        let mut held = held.iter().peekable();
        let mut at = shard.start;
        while at < shard.end {
            while held.next_if(|h| h.at.end <= at).is_some() {}
            // A block ends where a held piece begins or ends.
            let mut end = (at + SUM_BLOCK).min(shard.end);
            let own = match held.peek() {
                Some(h) if h.at.start <= at => {
                    end = end.min(h.at.end);
                    Some(&h.values[at - h.at.start..end - h.at.start])
                }
                Some(h) => {
                    end = end.min(h.at.start);
                    None
                }
                None => None,
            };
            let block = at..end;
            let sum = &mut sum[..block.len()];
            for q in 0..self.world {
                let values = match own {
                    Some(own) if q == self.rank => own,
                    _ => &self.peer(q, Which::Grads)[block.clone()],
                };
                add_rank(sum, q, values);
            }
            scale_sum(sum, scale);
            // SAFETY: this rank's shard of its own parameters, which nobody else reads between
            // barriers 1 and 2 (module docs); disjoint from the gradient buffers read above.
            let params =
                unsafe { std::slice::from_raw_parts_mut(own_params.add(block.start), block.len()) };
            update(block.clone(), sum, params);
            at = block.end;
        }
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

    /// Reduce-scatter of the step's gradients: each block of this rank's shard, reduced over all
    /// ranks (the same bits as [`ShmReducer::all_reduce`]), goes to `update` with this rank's
    /// parameters there, which it updates. `held`: this rank's gradients of its shard that are
    /// not in its buffer ([`HeldGrads`]).
    pub fn reduce_scatter_step(
        &mut self,
        ring: &mut TcpRing,
        step: &mut StepBuffers,
        op: ReduceOp,
        held: &[HeldGrads<'_>],
        update: &mut ShardUpdate<'_>,
    ) -> Result<()> {
        let scale = self.scale(op);
        self.run(ring, "reduce_scatter", step.len, |shm, op, _| {
            shm.barrier(&op)?;
            shm.check_same_op(&op)?;
            step.reduce_own_shard(scale, held, update);
            Ok(())
        })
    }

    /// All-gather of the step's parameters: returns once every rank's shard is updated, which
    /// [`StepBuffers::read_params`] then reads from its owner.
    pub fn all_gather_step(&mut self, ring: &mut TcpRing, step: &mut StepBuffers) -> Result<()> {
        self.run(ring, "all_gather_shards", step.len, |shm, op, _| {
            shm.barrier(&op)?;
            shm.check_same_op(&op)
        })
    }
}
