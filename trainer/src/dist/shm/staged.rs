//! Staged copies: the buffer moves in chunks of at most one slot, with one barrier per chunk.
//!
//! A rank stages a chunk by copying the parts the others own into its next slot. After the
//! barrier that says every rank has staged chunk k, each rank sums its own part over all ranks
//! (its own values from its buffer, the others' from their slots) into its slot and its buffer,
//! stages chunk k + 1, and passes the next barrier; then it copies the other ranks' reduced parts
//! of chunk k out of their slots. A rank may stage chunk k + 1 while a slower one still copies out
//! of chunk k − 1, hence [`SLOTS`](super::SLOTS) = 3 slots per rank, used in turn.

use super::{Op, SUM_BLOCK, ShmReducer, add_rank, scale_sum, segment};
use crate::Result;

impl ShmReducer {
    /// All-reduces `buf` in chunks staged through the slots.
    pub(super) fn all_reduce_staged(
        &mut self,
        op: Op<'_>,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<()> {
        let chunk_count = buf.len().div_ceil(self.slot_floats).max(1);
        let (n, size) = (buf.len(), self.slot_floats);
        let chunk_at = move |k: usize| k * size..((k + 1) * size).min(n);
        let first = self.next_slot();
        self.stage(first, &buf[chunk_at(0)]);
        self.barrier(&op)?;
        self.check_same_op(&op)?;
        let mut slot = first;
        for k in 0..chunk_count {
            self.reduce_part(slot, &mut buf[chunk_at(k)], scale);
            // Stage the next chunk before the barrier, so that one barrier per chunk says both
            // "my part of chunk k is reduced" and "chunk k + 1 is staged".
            let next = if k + 1 < chunk_count {
                let next = self.next_slot();
                self.stage(next, &buf[chunk_at(k + 1)]);
                next
            } else {
                slot
            };
            self.barrier(&op)?;
            self.gather_parts(slot, &mut buf[chunk_at(k)]);
            slot = next;
        }
        Ok(())
    }

    /// Copies the parts of `chunk` that other ranks reduce into this rank's `slot`. (Its own part
    /// is read from `chunk` itself; that part of the slot receives the reduced values.)
    fn stage(&self, slot: usize, chunk: &[f32]) {
        let mine = segment(chunk.len(), self.world, self.rank);
        // SAFETY: this rank's slot is written only by this rank. The last readers of this slot
        // (the others' gathers of the chunk that used it `SLOTS` chunks ago) finished before they
        // arrived at the barrier this rank last passed (see the module docs).
        let dst =
            unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(self.rank, slot), chunk.len()) };
        dst[..mine.start].copy_from_slice(&chunk[..mine.start]);
        dst[mine.end..].copy_from_slice(&chunk[mine.end..]);
    }

    /// Copies the other ranks' reduced parts of `chunk` out of their `slot`s.
    fn gather_parts(&self, slot: usize, chunk: &mut [f32]) {
        for q in (0..self.world).filter(|&q| q != self.rank) {
            let part = segment(chunk.len(), self.world, q);
            // SAFETY: rank q wrote its reduced part before the barrier just passed and leaves its
            // slot alone until it stages a chunk into it again, after the next barrier.
            let src = unsafe {
                std::slice::from_raw_parts(self.slot_ptr(q, slot).add(part.start), part.len())
            };
            chunk[part].copy_from_slice(src);
        }
    }

    /// Sums this rank's part of the chunk over all ranks (in rank order, block by block to stay
    /// in cache: its own values from `chunk`, the others' from their `slot`s) into this rank's
    /// slot, where the others will copy it from, and into `chunk`.
    fn reduce_part(&self, slot: usize, chunk: &mut [f32], scale: Option<f32>) {
        let mine = segment(chunk.len(), self.world, self.rank);
        let own = self.slot_ptr(self.rank, slot);
        let mut at = mine.start;
        while at < mine.end {
            let len = SUM_BLOCK.min(mine.end - at);
            let src = &mut chunk[at..at + len];
            // SAFETY: every rank staged its slot before the barrier just passed; other ranks'
            // slots are only read here, and this part of this rank's slot is written only by
            // this rank and read by the others only after the next barrier.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(own.add(at), len);
                let slot_of =
                    |q: usize| std::slice::from_raw_parts(self.slot_ptr(q, slot).add(at), len);
                for q in 0..self.world {
                    let x: &[f32] = if q == self.rank { src } else { slot_of(q) };
                    add_rank(dst, q, x);
                }
                scale_sum(dst, scale);
                src.copy_from_slice(dst);
            }
            at += len;
        }
    }
}
