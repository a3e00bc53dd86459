//! How a buffer is cut between the ranks: W nearly equal, contiguous segments in rank order (the
//! ring's passes, the shared-memory sums and every rank's shard of the DDP step).

use std::ops::Range;

/// The `i`-th of `w` nearly equal segments of `0..n` (sizes differ by at most one, may be 0).
pub(crate) fn segment(n: usize, w: usize, i: usize) -> Range<usize> {
    let at = |k: usize| ((n as u128 * k as u128) / w as u128) as usize;
    at(i)..at(i + 1)
}
