//! Splitting work over rayon's pool in contiguous, ordered pieces.
//!
//! A piece's place never depends on which thread ran it, and partial results come back in order,
//! so with the same thread count every run sums in the same order (bit-reproducible).

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};

use rayon::prelude::*;

thread_local! {
    /// Buffers given back by [`Scratch`] on this thread.
    static SCRATCH: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
    /// Set while this thread runs [`serially`]: kernels do not split their work.
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Most buffers a thread keeps for reuse.
const KEPT: usize = 8;

/// A buffer of `len` values reused across calls on a thread (packing panels, unfolded chunks):
/// no allocation and no zeroing in the steady state. Its values are whatever its last user
/// left: callers that need zeros write them.
pub struct Scratch {
    buf: Vec<f32>,
    len: usize,
}

impl Scratch {
    pub fn take(len: usize) -> Self {
        let mut buf = SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        if buf.len() < len {
            buf.resize(len, 0.0);
        }
        Scratch { buf, len }
    }
}

impl Deref for Scratch {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[..self.len]
    }
}

impl DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // A thread being torn down has no pool any more: the buffer is simply freed.
        let _ = SCRATCH.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEPT {
                s.push(buf);
            }
        });
    }
}

/// Threads the kernels split their work over: the pool's (the launcher sets `RAYON_NUM_THREADS`
/// per replica), or 1 inside [`serially`].
pub fn threads() -> usize {
    if SERIAL.get() {
        1
    } else {
        rayon::current_num_threads().max(1)
    }
}

/// Runs `f` with every kernel it calls on this thread alone: for work that is already split
/// across the pool's threads at a coarser grain (a part of the batch per thread).
pub fn serially<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.set(self.0);
        }
    }
    let _restore = Restore(SERIAL.replace(true));
    f()
}

/// Items per task when `n` items are split over at most `threads` tasks (at least 1).
pub fn items_per_task(n: usize, threads: usize) -> usize {
    n.div_ceil(threads.clamp(1, n.max(1))).max(1)
}

/// How a batch of `n` samples is split for a kernel that works a GEMM per chunk of samples: one
/// contiguous range of samples per thread, each worked in chunks of samples whose GEMM is about
/// `target` columns wide (each sample giving `width` of them), and the GEMM's own threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    pub per_task: usize,
    pub per_chunk: usize,
    pub gemm_threads: usize,
}

impl BatchPlan {
    pub fn new(n: usize, width: usize, target: usize, threads: usize) -> Self {
        let per_task = items_per_task(n, threads);
        BatchPlan {
            per_task,
            per_chunk: target.div_ceil(width.max(1)).clamp(1, per_task),
            // One range for the whole batch (a single sample, or one thread): the GEMM itself
            // may use the pool.
            gemm_threads: if per_task >= n { threads } else { 1 },
        }
    }

    /// (first sample, samples) of each chunk of a range of `count` samples.
    pub fn chunks(&self, count: usize) -> impl Iterator<Item = (usize, usize)> + use<> {
        let g = self.per_chunk;
        (0..count).step_by(g).map(move |s| (s, g.min(count - s)))
    }
}

/// Calls `f(first_item, piece)` for consecutive pieces of `data`, each holding `per` items of
/// `item_len` values (the last one fewer), in parallel when there are several; the results come
/// back in piece order.
pub fn map_pieces<R: Send>(
    data: &mut [f32],
    item_len: usize,
    per: usize,
    f: impl Fn(usize, &mut [f32]) -> R + Sync,
) -> Vec<R> {
    let piece = (per * item_len).max(1);
    if data.len() <= piece {
        return vec![f(0, data)];
    }
    data.par_chunks_mut(piece)
        .enumerate()
        .map(|(i, p)| f(i * per, p))
        .collect()
}

/// A vector of `len` values that the caller writes completely before anyone reads it (a kernel's
/// output), without the zero-fill `vec![0.0; len]` costs: that fill was a serial pass over every
/// output on the calling thread (a tenth of the CNN's single-thread time, all of it serial with
/// more threads). Debug builds (tests included) fill it with NaN instead, so a value a kernel
/// leaves unwritten shows up in the results.
// candle's CPU backend allocates its op outputs the same way (`alloc_uninit`).
#[allow(clippy::uninit_vec)]
pub fn output_vec(len: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(len);
    // SAFETY: the capacity is `len`. Callers write every value before any is read (see above;
    // debug builds make a missed write visible as NaN), and nothing reads it before then.
    unsafe { v.set_len(len) };
    if cfg!(debug_assertions) {
        v.fill(f32::NAN);
    }
    v
}

/// [`map_pieces`] over a new output vector of `len` values that `f` writes completely.
pub fn written_pieces<R: Send>(
    len: usize,
    item_len: usize,
    per: usize,
    f: impl Fn(usize, &mut [f32]) -> R + Sync,
) -> (Vec<f32>, Vec<R>) {
    let mut out = output_vec(len);
    let results = map_pieces(&mut out, item_len, per, f);
    (out, results)
}

/// [`map_pieces`] over a new vector of `len` zeros, each piece zeroed by the thread that then
/// works on it (in parallel, and while it is in that thread's cache), for kernels that add
/// into their output.
pub fn zeroed_pieces<R: Send>(
    len: usize,
    item_len: usize,
    per: usize,
    f: impl Fn(usize, &mut [f32]) -> R + Sync,
) -> (Vec<f32>, Vec<R>) {
    written_pieces(len, item_len, per, |first, piece| {
        piece.fill(0.0);
        f(first, piece)
    })
}

/// `(0..n).map(f)`, in parallel when `threads > 1`, results in order.
pub fn map_range<R: Send>(n: usize, threads: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    if threads <= 1 || n <= 1 {
        (0..n).map(f).collect()
    } else {
        (0..n).into_par_iter().map(&f).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_data_in_order() {
        assert_eq!(items_per_task(10, 3), 4);
        assert_eq!(items_per_task(2, 8), 1);
        assert_eq!(items_per_task(0, 4), 1);
        let mut data: Vec<f32> = (0..10 * 2).map(|v| v as f32).collect();
        let firsts = map_pieces(&mut data, 2, 4, |first, piece| {
            for v in piece.iter_mut() {
                *v += 100.0;
            }
            (first, piece.len())
        });
        assert_eq!(firsts, vec![(0, 8), (4, 8), (8, 4)]);
        assert!(data.iter().enumerate().all(|(i, v)| *v == i as f32 + 100.0));
        assert_eq!(map_range(5, 2, |i| i * i), vec![0, 1, 4, 9, 16]);
    }

    #[test]
    fn scratch_buffers_are_reused_with_the_asked_length() {
        let first = {
            let mut a = Scratch::take(10);
            a.fill(3.0);
            a.as_ptr()
        };
        let b = Scratch::take(4);
        assert_eq!(b.len(), 4);
        assert_eq!(b.as_ptr(), first, "the buffer given back is taken again");
        let c = Scratch::take(20);
        assert_eq!(c.len(), 20);
        assert_ne!(c.as_ptr(), b.as_ptr());
    }
}
