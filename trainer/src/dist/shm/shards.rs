//! Reduce-scatter and all-gather of shards: the two halves of an all-reduce, for a DDP step that
//! updates each rank's shard of the parameters on that rank only.
//!
//! Rank r's shard is segment r of the whole buffer (see [`segment`]), whichever way the data
//! moves. Direct copies work as in [`super::direct`]. Staged copies move the buffer in chunks:
//! chunk k holds, for every rank q, piece k of q's shard (`slot_floats / world` floats of it), at
//! offset `q · piece` of the slot.
//! - reduce-scatter: a rank stages the pieces the others own; after the barrier it sums its own
//!   piece over all ranks (its values from its buffer, the others' from their slots).
//! - all-gather: a rank stages its own piece; after the barrier it copies the others' pieces.
//!
//! As in [`super::staged`], every stage is followed by one barrier, and a stage's data is read
//! only between that barrier and the reader's next one, so the [`SLOTS`](super::SLOTS) slots
//! used in turn are never overwritten while read.

use super::{Op, ReduceOp, SUM_BLOCK, ShmReducer, add_rank, scale_sum, segment};
use crate::Result;
use crate::dist::ring::TcpRing;

/// Where piece `k` of each rank's shard lies in the buffer and in a slot.
struct Pieces {
    n: usize,
    world: usize,
    /// Floats of one piece: a slot holds one piece of every rank.
    len: usize,
    /// Chunks (pieces per shard, at least 1).
    chunks: usize,
}

impl Pieces {
    fn new(n: usize, world: usize, slot_floats: usize) -> Pieces {
        let len = (slot_floats / world).max(1);
        let widest = (0..world).map(|q| segment(n, world, q).len()).max();
        Pieces {
            n,
            world,
            len,
            chunks: widest.unwrap_or(0).div_ceil(len).max(1),
        }
    }

    /// Piece `k` of rank `q`'s shard, as a range of the buffer (empty past the shard's end).
    fn of(&self, q: usize, k: usize) -> std::ops::Range<usize> {
        let shard = segment(self.n, self.world, q);
        let start = (shard.start + k * self.len).min(shard.end);
        start..(start + self.len).min(shard.end)
    }
}

impl ShmReducer {
    /// Rank `rank`'s shard of a `len`-float buffer: its part, segment `rank`.
    pub fn shard(&self, len: usize, rank: usize) -> std::ops::Range<usize> {
        segment(len, self.world, rank)
    }

    /// Reduce-scatter of `buf` with the other ranks (the op is numbered by `ring`): on return
    /// segment `rank` of `buf` holds the reduction (the same bits an all-reduce gives there).
    pub fn reduce_scatter(
        &mut self,
        ring: &mut TcpRing,
        buf: &mut [f32],
        op: ReduceOp,
    ) -> Result<()> {
        let scale = self.scale(op);
        self.run(ring, "reduce_scatter", buf.len(), |shm, op, direct| {
            if direct {
                shm.reduce_scatter_direct(op, buf, scale)
            } else {
                shm.reduce_scatter_staged(op, buf, scale)
            }
        })
    }

    /// All-gather of the ranks' shards (segment q of rank q's `buf`) into every rank's `buf`.
    pub fn all_gather_shards(&mut self, ring: &mut TcpRing, buf: &mut [f32]) -> Result<()> {
        self.run(ring, "all_gather_shards", buf.len(), |shm, op, direct| {
            if direct {
                shm.all_gather_direct(op, buf)
            } else {
                shm.all_gather_staged(op, buf)
            }
        })
    }

    fn reduce_scatter_staged(
        &mut self,
        op: Op<'_>,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<()> {
        let pieces = Pieces::new(buf.len(), self.world, self.slot_floats);
        let mut slot = self.next_slot();
        self.stage_others_pieces(slot, buf, &pieces, 0);
        self.barrier(&op)?;
        self.check_same_op(&op)?;
        for k in 0..pieces.chunks {
            self.reduce_own_piece(slot, buf, &pieces, k, scale);
            if k + 1 < pieces.chunks {
                slot = self.next_slot();
                self.stage_others_pieces(slot, buf, &pieces, k + 1);
                self.barrier(&op)?;
            }
        }
        Ok(())
    }

    fn all_gather_staged(&mut self, op: Op<'_>, buf: &mut [f32]) -> Result<()> {
        let pieces = Pieces::new(buf.len(), self.world, self.slot_floats);
        let mut slot = self.next_slot();
        self.stage_own_piece(slot, buf, &pieces, 0);
        self.barrier(&op)?;
        self.check_same_op(&op)?;
        for k in 0..pieces.chunks {
            self.copy_others_pieces(slot, buf, &pieces, k);
            if k + 1 < pieces.chunks {
                slot = self.next_slot();
                self.stage_own_piece(slot, buf, &pieces, k + 1);
                self.barrier(&op)?;
            }
        }
        Ok(())
    }

    /// `len` floats at float offset `at` of rank `q`'s `slot`.
    fn peer_piece(&self, q: usize, slot: usize, at: usize, len: usize) -> &[f32] {
        // SAFETY: rank q staged this piece before the barrier this rank last passed and does not
        // overwrite it before this rank arrives at its next barrier (module docs).
        unsafe { std::slice::from_raw_parts(self.slot_ptr(q, slot).add(at), len) }
    }

    /// Copies `src` into this rank's `slot` at float offset `at`.
    fn stage_at(&self, slot: usize, at: usize, src: &[f32]) {
        // SAFETY: this rank's slot is written only by this rank, and not while others read it
        // (module docs); `at + src.len()` stays within the slot (a piece per rank).
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.slot_ptr(self.rank, slot).add(at), src.len())
        };
        dst.copy_from_slice(src);
    }

    fn stage_others_pieces(&self, slot: usize, buf: &[f32], pieces: &Pieces, k: usize) {
        for q in (0..self.world).filter(|&q| q != self.rank) {
            self.stage_at(slot, q * pieces.len, &buf[pieces.of(q, k)]);
        }
    }

    fn stage_own_piece(&self, slot: usize, buf: &[f32], pieces: &Pieces, k: usize) {
        self.stage_at(slot, 0, &buf[pieces.of(self.rank, k)]);
    }

    fn copy_others_pieces(&self, slot: usize, buf: &mut [f32], pieces: &Pieces, k: usize) {
        for q in (0..self.world).filter(|&q| q != self.rank) {
            let piece = pieces.of(q, k);
            let len = piece.len();
            buf[piece].copy_from_slice(self.peer_piece(q, slot, 0, len));
        }
    }

    /// Sums this rank's piece `k` over all ranks, in rank order, block by block, into `buf`.
    fn reduce_own_piece(
        &self,
        slot: usize,
        buf: &mut [f32],
        pieces: &Pieces,
        k: usize,
        scale: Option<f32>,
    ) {
        let mut sum = [0f32; SUM_BLOCK];
        let piece = pieces.of(self.rank, k);
        let in_slot = self.rank * pieces.len;
        let mut done = 0;
        while done < piece.len() {
            let len = SUM_BLOCK.min(piece.len() - done);
            let own = piece.start + done..piece.start + done + len;
            let sum = &mut sum[..len];
            for q in 0..self.world {
                let x = if q == self.rank {
                    &buf[own.clone()]
                } else {
                    self.peer_piece(q, slot, in_slot + done, len)
                };
                add_rank(sum, q, x);
            }
            scale_sum(sum, scale);
            buf[own].copy_from_slice(sum);
            done += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_tile_every_shard_in_chunks() {
        for (n, w, slot) in [(0, 2, 8), (1, 2, 8), (10, 3, 4), (1001, 2, 64), (7, 4, 3)] {
            let p = Pieces::new(n, w, slot);
            assert!(p.len * w <= slot.max(w));
            for q in 0..w {
                let shard = segment(n, w, q);
                let mut at = shard.start;
                for k in 0..p.chunks {
                    let piece = p.of(q, k);
                    assert_eq!(piece.start, at, "n {n} w {w} q {q} k {k}");
                    assert!(piece.len() <= p.len);
                    at = piece.end;
                }
                assert_eq!(at, shard.end, "n {n} w {w} q {q}: pieces stop short");
            }
        }
    }
}
