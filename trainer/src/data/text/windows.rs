//! Which windows of tokens a language model trains and evaluates on.
//!
//! Training ([`TrainWindows`]): at optimizer step `s` the global batch is `G = world × batch_size`
//! windows of `block + 1` tokens of the training part; global window `g` starts at a uniform random
//! offset in `0..=len − block − 1` drawn from `SplitMix64::keyed(&[seed, TAG, s, g])`, so it depends
//! only on (seed, step, g): rank `r` takes `g` in `[r·B, (r+1)·B)`, two replicas of `B` draw
//! exactly the windows one replica of `2B` draws, and a run resumed at step `s` draws the same
//! windows with no saved generator state. A window's first `block` tokens are the inputs and its
//! last `block` the targets.
//!
//! Evaluation ([`EvalWindows`]): over a validation part of `L` tokens, window `i` reads tokens
//! `[i·block, (i+1)·block)` and its targets are the tokens one position later, for
//! `i < ⌊(L − 1)/block⌋`: every token but the first is predicted at most once, the windows do not
//! overlap and the set does not depend on the world size. Rank `r` of `world` evaluates the
//! contiguous windows `[⌊r·n/world⌋, ⌊(r+1)·n/world⌋)` of the `n` (a partition; shares differ by at
//! most one window). Each rank sums its windows' mean losses into an [`EvalSum`]; the all-reduced
//! sum over the count is the mean next-token loss (each window has `block` targets, so it is also
//! the mean over tokens), the same for every world size up to the order of `f64` additions.

use std::ops::Range;

use super::tokens::TokenSource;
use crate::data::rng::SplitMix64;
use crate::error::{Error, Result};

/// Stream tag of the training-window offsets (keeps them apart from other keyed streams of a seed).
const TAG_WINDOWS: u64 = 0x4c4d_5749; // "LMWI"

/// A batch of windows: `rows × block` input ids and the `rows × block` target ids (row-major).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LmBatch {
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
    pub rows: usize,
    pub block: usize,
    /// One window of `block + 1` ids, reused.
    window: Vec<u32>,
}

impl LmBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// `[rows, block]`, the shape of both `inputs` and `targets`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.block]
    }

    /// Fills the batch with the windows of `block + 1` ids of `src` starting at `offsets`, one row
    /// each, reusing the buffers (no allocation once it has held a batch this large). Panics when a
    /// window runs past the end of `src`.
    pub fn fill(
        &mut self,
        src: &TokenSource,
        block: usize,
        offsets: impl IntoIterator<Item = usize>,
    ) {
        self.inputs.clear();
        self.targets.clear();
        self.window.resize(block + 1, 0);
        self.block = block;
        self.rows = 0;
        for offset in offsets {
            src.read(offset, &mut self.window);
            self.inputs.extend_from_slice(&self.window[..block]);
            self.targets.extend_from_slice(&self.window[1..]);
            self.rows += 1;
        }
    }
}

/// The error for a part of `len` tokens too short for one window of `block + 1`: names `path`,
/// the part and the sizes; `hint` says what to change.
pub fn check_part_len(
    path: &std::path::Path,
    part: &str,
    len: usize,
    block: usize,
    hint: &str,
) -> Result<()> {
    if len > block {
        return Ok(());
    }
    Err(Error::data(
        path,
        format!(
            "the {part} part has {len} tokens, fewer than block + 1 = {} (one window of block \
             tokens and its next-token targets); {hint}",
            block + 1
        ),
    ))
}

/// The training windows of every step for one rank (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainWindows {
    /// Tokens in the training part (≥ `block + 1`).
    pub len: usize,
    pub block: usize,
    /// Windows per rank per step (`B`).
    pub batch_size: usize,
    pub world: usize,
    pub rank: usize,
    pub seed: u64,
}

impl TrainWindows {
    /// Panics unless `len > block`, `world > 0` and `rank < world` (the loader checks the part
    /// with [`check_part_len`], the environment checks the rank).
    pub fn new(
        len: usize,
        block: usize,
        batch_size: usize,
        world: usize,
        rank: usize,
        seed: u64,
    ) -> Self {
        assert!(
            len > block,
            "a training part of {len} tokens has no window of {}",
            block + 1
        );
        assert!(rank < world, "rank {rank} outside world {world}");
        TrainWindows {
            len,
            block,
            batch_size,
            world,
            rank,
            seed,
        }
    }

    /// `world × batch_size`: windows per optimizer step over all ranks.
    pub fn global_batch(&self) -> usize {
        self.world * self.batch_size
    }

    /// The global window indices of this rank: `[rank·B, (rank+1)·B)`.
    pub fn global_range(&self) -> Range<usize> {
        self.rank * self.batch_size..(self.rank + 1) * self.batch_size
    }

    /// The start of global window `g` at `step`: a function of (seed, step, g) only.
    pub fn offset(&self, step: u64, g: usize) -> usize {
        let positions = (self.len - self.block) as u64;
        SplitMix64::keyed(&[self.seed, TAG_WINDOWS, step, g as u64]).below(positions) as usize
    }

    /// This rank's window starts at `step`, in global-index order.
    pub fn offsets(&self, step: u64) -> impl Iterator<Item = usize> + '_ {
        self.global_range().map(move |g| self.offset(step, g))
    }

    /// Fills `batch` with this rank's windows of `step` from the training part `src`.
    pub fn fill(&self, src: &TokenSource, step: u64, batch: &mut LmBatch) {
        debug_assert_eq!(src.len(), self.len);
        batch.fill(src, self.block, self.offsets(step));
    }
}

/// The deterministic evaluation windows of a validation part (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalWindows {
    /// Tokens in the validation part (`L`).
    pub len: usize,
    pub block: usize,
}

impl EvalWindows {
    pub fn new(len: usize, block: usize) -> Self {
        assert!(block > 0, "block must be positive");
        EvalWindows { len, block }
    }

    /// `⌊(L − 1)/block⌋` windows (0 for an empty part).
    pub fn count(&self) -> usize {
        self.len.saturating_sub(1) / self.block
    }

    /// The first token of window `i`: `i·block`.
    pub fn offset(&self, i: usize) -> usize {
        i * self.block
    }

    /// The windows rank `rank` of `world` evaluates: `[⌊r·n/world⌋, ⌊(r+1)·n/world⌋)`.
    pub fn for_rank(&self, rank: usize, world: usize) -> Range<usize> {
        assert!(rank < world, "rank {rank} outside world {world}");
        let n = self.count();
        rank * n / world..(rank + 1) * n / world
    }

    /// `windows` cut into consecutive batches of at most `batch_size` windows.
    pub fn batches(windows: Range<usize>, batch_size: usize) -> impl Iterator<Item = Range<usize>> {
        assert!(batch_size > 0, "batch_size must be positive");
        (windows.start..windows.end)
            .step_by(batch_size)
            .map(move |s| s..(s + batch_size).min(windows.end))
    }

    /// Fills `batch` with windows `windows` of the validation part `src`.
    pub fn fill(&self, src: &TokenSource, windows: Range<usize>, batch: &mut LmBatch) {
        debug_assert_eq!(src.len(), self.len);
        assert!(
            windows.end <= self.count(),
            "window {} of {}",
            windows.end,
            self.count()
        );
        batch.fill(src, self.block, windows.map(|i| self.offset(i)));
    }
}

/// A running sum of per-window mean losses and their count: each rank's share of an evaluation,
/// all-reduced (summed) as two `f64`s, then [`mean`](Self::mean).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvalSum {
    pub loss_sum: f64,
    pub windows: u64,
}

impl EvalSum {
    /// Adds a batch of `rows` windows whose mean loss (over all its targets) is `mean_loss`.
    pub fn add_batch(&mut self, mean_loss: f64, rows: usize) {
        self.loss_sum += mean_loss * rows as f64;
        self.windows += rows as u64;
    }

    /// Adds another rank's (or batch's) sum.
    pub fn merge(&mut self, other: EvalSum) {
        self.loss_sum += other.loss_sum;
        self.windows += other.windows;
    }

    /// `[loss_sum, windows]`, the buffer an all-reduce (sum) combines.
    pub fn to_array(self) -> [f64; 2] {
        [self.loss_sum, self.windows as f64]
    }

    /// The sum from an all-reduced [`to_array`](Self::to_array) buffer.
    pub fn from_array(a: [f64; 2]) -> Self {
        EvalSum {
            loss_sum: a[0],
            windows: a[1].round() as u64,
        }
    }

    /// The mean next-token cross-entropy (nats); NaN with no windows.
    pub fn mean(&self) -> f64 {
        if self.windows == 0 {
            f64::NAN
        } else {
            self.loss_sum / self.windows as f64
        }
    }

    /// `exp(mean)`.
    pub fn perplexity(&self) -> f64 {
        perplexity(self.mean())
    }

    /// `mean / ln 2`: bits per token (per character for `char`, per byte for `byte`).
    pub fn bits_per_token(&self) -> f64 {
        bits_per_token(self.mean())
    }
}

/// `exp(loss)` of a mean cross-entropy in nats.
pub fn perplexity(loss: f64) -> f64 {
    loss.exp()
}

/// `loss / ln 2` of a mean cross-entropy in nats.
pub fn bits_per_token(loss: f64) -> f64 {
    loss / std::f64::consts::LN_2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(n: u32) -> TokenSource {
        TokenSource::memory((0..n).collect())
    }

    #[test]
    fn a_window_is_inputs_and_next_token_targets() {
        let src = corpus(100);
        let mut b = LmBatch::new();
        b.fill(&src, 4, [10, 0, 95]);
        assert_eq!(b.shape(), [3, 4]);
        assert_eq!(b.inputs, vec![10, 11, 12, 13, 0, 1, 2, 3, 95, 96, 97, 98]);
        assert_eq!(b.targets, vec![11, 12, 13, 14, 1, 2, 3, 4, 96, 97, 98, 99]);
        let ptrs = (b.inputs.as_ptr(), b.targets.as_ptr());
        b.fill(&src, 4, [1, 2]);
        assert_eq!(b.inputs, vec![1, 2, 3, 4, 2, 3, 4, 5]);
        assert_eq!((b.inputs.as_ptr(), b.targets.as_ptr()), ptrs);
    }

    #[test]
    fn two_replicas_draw_the_windows_of_one_with_twice_the_batch() {
        let (len, block, b, seed) = (5000, 16, 3, 1337);
        let src = corpus(len as u32);
        let one = TrainWindows::new(len, block, 2 * b, 1, 0, seed);
        let ranks: Vec<TrainWindows> = (0..2)
            .map(|r| TrainWindows::new(len, block, b, 2, r, seed))
            .collect();
        assert_eq!(one.global_batch(), ranks[0].global_batch());
        assert_eq!(ranks[1].global_range(), 3..6);
        let (mut whole, mut part) = (LmBatch::new(), LmBatch::new());
        for step in [0u64, 1, 2, 7, 1000] {
            one.fill(&src, step, &mut whole);
            let (mut inputs, mut targets) = (Vec::new(), Vec::new());
            for r in &ranks {
                r.fill(&src, step, &mut part);
                assert_eq!(part.shape(), [b, block]);
                inputs.extend_from_slice(&part.inputs);
                targets.extend_from_slice(&part.targets);
            }
            assert_eq!(
                (inputs, targets),
                (whole.inputs.clone(), whole.targets.clone())
            );
            // Three replicas of 2 draw them too.
            let threes: Vec<usize> = (0..3)
                .flat_map(|r| {
                    TrainWindows::new(len, block, 2, 3, r, seed)
                        .offsets(step)
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(threes, one.offsets(step).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_step_draws_the_same_windows_every_time_and_steps_differ() {
        let w = TrainWindows::new(10_000, 64, 12, 2, 1, 7);
        let again = TrainWindows::new(10_000, 64, 12, 2, 1, 7);
        let s5: Vec<usize> = w.offsets(5).collect();
        assert_eq!(s5, again.offsets(5).collect::<Vec<_>>());
        assert_eq!(s5.len(), 12);
        assert_ne!(s5, w.offsets(6).collect::<Vec<_>>());
        assert_ne!(
            s5,
            TrainWindows::new(10_000, 64, 12, 2, 1, 8)
                .offsets(5)
                .collect::<Vec<_>>()
        );
        // Offsets cover 0..=len-block-1 and never run past the end.
        let tiny = TrainWindows::new(10, 7, 50, 1, 0, 0);
        let mut seen = [false; 3];
        for step in 0..20 {
            for o in tiny.offsets(step) {
                seen[o] = true;
            }
        }
        assert_eq!(seen, [true; 3]);
        let exact = TrainWindows::new(8, 7, 4, 1, 0, 0);
        assert_eq!(exact.offsets(3).collect::<Vec<_>>(), vec![0; 4]);
    }

    #[test]
    fn evaluation_windows_cover_the_part_once_and_ranks_partition_them() {
        for (len, block, count) in [
            (0, 4, 0),
            (1, 4, 0),
            (4, 4, 0),
            (5, 4, 1),
            (100, 4, 24),
            (101, 4, 25),
            (1000, 64, 15),
        ] {
            let e = EvalWindows::new(len, block);
            assert_eq!(e.count(), count, "L {len} block {block}");
            for world in 1..=5 {
                let shares: Vec<Range<usize>> = (0..world).map(|r| e.for_rank(r, world)).collect();
                let all: Vec<usize> = shares.iter().cloned().flatten().collect();
                assert_eq!(all, (0..count).collect::<Vec<_>>(), "L {len} world {world}");
                let sizes: Vec<usize> = shares.iter().map(|s| s.len()).collect();
                assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
            }
        }
        // The last window's last target is token count·block ≤ L − 1.
        let src = corpus(101);
        let e = EvalWindows::new(101, 4);
        let mut b = LmBatch::new();
        e.fill(&src, 23..25, &mut b);
        assert_eq!(b.inputs, vec![92, 93, 94, 95, 96, 97, 98, 99]);
        assert_eq!(b.targets, vec![93, 94, 95, 96, 97, 98, 99, 100]);
        assert_eq!(e.for_rank(1, 3), 8..16);
        let batches: Vec<Range<usize>> = EvalWindows::batches(8..16, 3).collect();
        assert_eq!(batches, vec![8..11, 11..14, 14..16]);
        assert_eq!(EvalWindows::batches(3..3, 2).count(), 0);
    }

    #[test]
    fn evaluation_sums_are_invariant_to_the_world_size() {
        // Per-window losses (as a model would give), summed per rank in batches, then all-reduced.
        let e = EvalWindows::new(1000, 8);
        let loss = |i: usize| 1.0 + (i % 7) as f64 / 8.0; // exact in binary: sums do not round
        let want: f64 = (0..e.count()).map(loss).sum::<f64>() / e.count() as f64;
        for world in 1..=5 {
            let mut total = [0.0f64; 2];
            let mut batched = EvalSum::default();
            for r in 0..world {
                let mut s = EvalSum::default();
                for i in e.for_rank(r, world) {
                    s.add_batch(loss(i), 1);
                }
                let a = s.to_array();
                total = [total[0] + a[0], total[1] + a[1]];
                // In batches of 5 windows the batch means round, within 1e-12.
                for batch in EvalWindows::batches(e.for_rank(r, world), 5) {
                    let mean = batch.clone().map(loss).sum::<f64>() / batch.len() as f64;
                    batched.add_batch(mean, batch.len());
                }
            }
            let s = EvalSum::from_array(total);
            assert_eq!(s.windows, 124);
            assert_eq!(s.mean(), want, "world {world}");
            assert_eq!(batched.windows, 124);
            assert!((batched.mean() - want).abs() < 1e-12, "world {world}");
        }
        let mut s = EvalSum::default();
        assert!(s.mean().is_nan());
        s.add_batch(2.0, 3);
        s.merge(EvalSum {
            loss_sum: 2.0,
            windows: 1,
        });
        assert_eq!(s.mean(), 2.0);
        assert_eq!(s.perplexity(), 2.0f64.exp());
        assert_eq!(s.bits_per_token(), 2.0 / std::f64::consts::LN_2);
        assert_eq!(bits_per_token(std::f64::consts::LN_2), 1.0);
        assert_eq!(perplexity(0.0), 1.0);
    }

    #[test]
    fn too_short_parts_are_errors() {
        let p = std::path::Path::new("input.txt");
        check_part_len(p, "training", 65, 64, "x").unwrap();
        assert_eq!(
            check_part_len(p, "validation", 64, 64, "use a smaller block")
                .unwrap_err()
                .to_string(),
            "input.txt: the validation part has 64 tokens, fewer than block + 1 = 65 (one window \
             of block tokens and its next-token targets); use a smaller block"
        );
    }
}
