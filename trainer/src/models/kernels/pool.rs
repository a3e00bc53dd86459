//! Max-pooling with stride = window (no padding, floor mode) and PyTorch's gradient: each
//! output's gradient goes to the first maximal input of its window (NaN counts as maximal).
//! The forward pass records each window's winner (a byte), so the backward pass is a scatter.

use super::tasks::{items_per_task, map_pieces};

/// `(n·c planes, h, w)` of a contiguous NCHW tensor.
pub type Planes = (usize, usize, usize);

/// Outputs (`[planes, h/k, w/k]`) and the position of each window's winner (`dy·k + dx`).
pub fn forward(x: &[f32], (planes, h, w): Planes, k: usize, threads: usize) -> (Vec<f32>, Vec<u8>) {
    assert!(k >= 1 && k * k <= 256, "max-pool window {k} is not 1..=16");
    let (oh, ow) = (h / k, w / k);
    let out_plane = oh * ow;
    let mut y = vec![0f32; planes * out_plane];
    let mut winner = vec![0u8; planes * out_plane];
    let per = items_per_task(planes, threads);
    let winners = map_pieces(&mut y, out_plane, per, |first, out| {
        let mut won = vec![0u8; out.len()];
        for (i, (out, won)) in out
            .chunks_exact_mut(out_plane.max(1))
            .zip(won.chunks_exact_mut(out_plane.max(1)))
            .enumerate()
        {
            let plane = &x[(first + i) * h * w..][..h * w];
            for oy in 0..oh {
                for ox in 0..ow {
                    let origin = oy * k * w + ox * k;
                    let (mut best, mut at) = (plane[origin], 0u8);
                    for dy in 0..k {
                        let row = &plane[origin + dy * w..][..k];
                        for (dx, v) in row.iter().enumerate() {
                            if *v > best || v.is_nan() && !best.is_nan() {
                                best = *v;
                                at = (dy * k + dx) as u8;
                            }
                        }
                    }
                    out[oy * ow + ox] = best;
                    won[oy * ow + ox] = at;
                }
            }
        }
        won
    });
    let mut at = 0;
    for w in winners {
        winner[at..at + w.len()].copy_from_slice(&w);
        at += w.len();
    }
    (y, winner)
}

/// The input gradient: each output's gradient at its window's winner, zeros elsewhere.
pub fn backward(
    dy: &[f32],
    winner: &[u8],
    (planes, h, w): Planes,
    k: usize,
    threads: usize,
) -> Vec<f32> {
    let (oh, ow) = (h / k, w / k);
    let out_plane = oh * ow;
    let mut dx = vec![0f32; planes * h * w];
    map_pieces(
        &mut dx,
        h * w,
        items_per_task(planes, threads),
        |first, piece| {
            for (i, plane) in piece.chunks_exact_mut((h * w).max(1)).enumerate() {
                let at = (first + i) * out_plane;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let j = at + oy * ow + ox;
                        let p = winner[j] as usize;
                        plane[(oy * k + p / k) * w + ox * k + p % k] = dy[j];
                    }
                }
            }
        },
    );
    dx
}
