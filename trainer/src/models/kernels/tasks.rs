//! Splitting work over rayon's pool in contiguous, ordered pieces.
//!
//! A piece's place never depends on which thread ran it, and partial results come back in order,
//! so with the same thread count every run sums in the same order (bit-reproducible).

use rayon::prelude::*;

/// Threads of the pool the kernels run on (the launcher sets `RAYON_NUM_THREADS` per replica).
pub fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// Items per task when `n` items are split over at most `threads` tasks (at least 1).
pub fn items_per_task(n: usize, threads: usize) -> usize {
    n.div_ceil(threads.clamp(1, n.max(1))).max(1)
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
}
