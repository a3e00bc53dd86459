//! Training one batch in parts side by side, a part per thread of the replica.
//!
//! Splitting every kernel over the threads (the default) pays a fork and a join per layer,
//! forward and backward, and leaves candle's own per-step work (the backward pass's gradient
//! bookkeeping, small ops) on one thread: with the reference CNN at batch 32, 2 threads made a
//! replica only 1.2–1.3× faster than 1. Where the samples of a batch do not interact (no
//! BatchNorm), the batch can instead be cut into one part per thread: each thread runs forward
//! and backward of its part with its kernels unsplit, and the parts' gradients, each scaled by
//! its share of the batch, add up to the whole batch's gradient, as DDP's replicas do.
//!
//! The policy is pure (`parts_for`, `part_ranges`); `for_replica` feeds it a replica's model and
//! `DDP_BATCH_PARTS`; `train` runs it, and `cli` sets candle's threads by it. `DDP_BATCH_PARTS=0`
//! turns it off (per-kernel splitting only).

use std::ops::Range;

use crate::models::samples_independent;
use crate::spec::ModelName;

/// Fewest samples worth a part of their own.
pub const MIN_PART_SAMPLES: usize = 4;

/// How many parts (at most) a training batch is split into: one per thread when the model's
/// samples are independent in training and it runs on the CPU, else 1. `enabled` is false when
/// `DDP_BATCH_PARTS=0`.
pub fn parts_for(threads: usize, samples_independent: bool, on_cpu: bool, enabled: bool) -> usize {
    if enabled && on_cpu && samples_independent {
        threads.max(1)
    } else {
        1
    }
}

/// [`parts_for`] a replica of `model` with `threads` threads, as `DDP_BATCH_PARTS` allows.
pub fn for_replica(threads: usize, model: ModelName, on_cpu: bool) -> usize {
    parts_for(
        threads,
        samples_independent(model),
        on_cpu,
        enabled_by_env(),
    )
}

/// Whether `DDP_BATCH_PARTS` allows splitting (anything but `0`).
fn enabled_by_env() -> bool {
    std::env::var("DDP_BATCH_PARTS").map_or(true, |v| v.trim() != "0")
}

/// Consecutive, nearly equal ranges covering `0..len`: at most `parts`, each of at least
/// [`MIN_PART_SAMPLES`] samples (one range when the batch is too small to split).
pub fn part_ranges(len: usize, parts: usize) -> Vec<Range<usize>> {
    let n = parts.min(len / MIN_PART_SAMPLES).max(1);
    let (base, extra) = (len / n, len % n);
    let mut start = 0;
    (0..n)
        .map(|i| {
            let end = start + base + usize::from(i < extra);
            let r = start..end;
            start = end;
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_independent_cpu_models_with_threads_are_split() {
        assert_eq!(parts_for(2, true, true, true), 2);
        assert_eq!(parts_for(4, true, true, true), 4);
        assert_eq!(parts_for(1, true, true, true), 1);
        assert_eq!(
            parts_for(2, false, true, true),
            1,
            "BatchNorm couples samples"
        );
        assert_eq!(parts_for(2, true, false, true), 1, "GPU replicas");
        assert_eq!(parts_for(2, true, true, false), 1, "DDP_BATCH_PARTS=0");
    }

    #[test]
    fn ranges_cover_the_batch_in_order() {
        assert_eq!(part_ranges(32, 2), vec![0..16, 16..32]);
        assert_eq!(part_ranges(14, 3), vec![0..5, 5..10, 10..14]);
        assert_eq!(
            part_ranges(10, 3),
            vec![0..5, 5..10],
            "3 parts would have 3 samples"
        );
        assert_eq!(part_ranges(9, 4), vec![0..5, 5..9], "parts of at least 4");
        assert_eq!(part_ranges(7, 2), vec![0..7]);
        assert_eq!(part_ranges(0, 2), vec![0..0]);
        assert_eq!(part_ranges(32, 1), vec![0..32]);
    }
}
