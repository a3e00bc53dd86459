//! Max-pooling with stride = window (no padding, floor mode) and PyTorch's gradient: each
//! output's gradient goes to the first maximal input of its window (NaN counts as maximal).
//! The forward pass records each window's winner (a byte), so the backward pass is a scatter.
//!
//! With `relu`, the kernels compute `max_pool(relu(x))` and its gradient in the same passes: each
//! input is clamped at zero as it is read, and an output's gradient reaches its winner only when
//! that output is positive (ReLU's `grad · (y > 0)` at the one input that got any). Same values
//! and gradients, bit for bit, as the two ops one after the other, without the ReLU's passes over
//! the whole (4× larger) input forward and backward.

use super::tasks::{items_per_task, written_pieces, zeroed_pieces};

/// `(n·c planes, h, w)` of a contiguous NCHW tensor.
pub type Planes = (usize, usize, usize);

/// Outputs (`[planes, h/k, w/k]`) and the position of each window's winner (`dy·k + dx`).
/// With `relu`, of `relu(x)`.
pub fn forward(
    x: &[f32],
    (planes, h, w): Planes,
    k: usize,
    relu: bool,
    threads: usize,
) -> (Vec<f32>, Vec<u8>) {
    if relu {
        forward_with::<true>(x, (planes, h, w), k, threads)
    } else {
        forward_with::<false>(x, (planes, h, w), k, threads)
    }
}

/// [`forward`] with the ReLU decided at compile time (the 2×2 loop stays branch-free).
fn forward_with<const RELU: bool>(
    x: &[f32],
    (planes, h, w): Planes,
    k: usize,
    threads: usize,
) -> (Vec<f32>, Vec<u8>) {
    assert!(k >= 1 && k * k <= 256, "max-pool window {k} is not 1..=16");
    let (oh, ow) = (h / k, w / k);
    let out_plane = oh * ow;
    let per = items_per_task(planes, threads);
    let (y, winners) = written_pieces(planes * out_plane, out_plane, per, |first, out| {
        let mut won = vec![0u8; out.len()];
        for (i, (out, won)) in out
            .chunks_exact_mut(out_plane.max(1))
            .zip(won.chunks_exact_mut(out_plane.max(1)))
            .enumerate()
        {
            let plane = &x[(first + i) * h * w..][..h * w];
            for oy in 0..oh {
                let (out, won) = (&mut out[oy * ow..][..ow], &mut won[oy * ow..][..ow]);
                if k == 2 {
                    let r0 = &plane[2 * oy * w..][..2 * ow];
                    let r1 = &plane[(2 * oy + 1) * w..][..2 * ow];
                    for (ox, (o, at)) in out.iter_mut().zip(won.iter_mut()).enumerate() {
                        let window = [r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]];
                        (*o, *at) = first_max(window.map(clamp::<RELU>));
                    }
                    continue;
                }
                for ox in 0..ow {
                    let origin = oy * k * w + ox * k;
                    let (mut best, mut at) = (clamp::<RELU>(plane[origin]), 0u8);
                    for dy in 0..k {
                        let row = &plane[origin + dy * w..][..k];
                        for (dx, v) in row.iter().enumerate() {
                            let v = clamp::<RELU>(*v);
                            if beats(v, best) {
                                best = v;
                                at = (dy * k + dx) as u8;
                            }
                        }
                    }
                    out[ox] = best;
                    won[ox] = at;
                }
            }
        }
        won
    });
    (y, winners.concat())
}

/// `relu(v)` as [`crate::models::relu`] computes it ([`super::relu_value`]), or `v`.
#[inline(always)]
fn clamp<const RELU: bool>(v: f32) -> f32 {
    if RELU { super::relu_value(v) } else { v }
}

/// Whether `v` takes the lead from `best` (strictly greater, or the first NaN).
#[inline(always)]
fn beats(v: f32, best: f32) -> bool {
    v > best || v.is_nan() && !best.is_nan()
}

/// The first maximum of a 2×2 window (row-major) and its position, without branches.
#[inline(always)]
fn first_max(v: [f32; 4]) -> (f32, u8) {
    let (mut best, mut at) = (v[0], 0u8);
    for (i, v) in v.into_iter().enumerate().skip(1) {
        let b = beats(v, best);
        best = if b { v } else { best };
        at = if b { i as u8 } else { at };
    }
    (best, at)
}

/// The input gradient: each output's gradient at its window's winner, zeros elsewhere. With
/// `relu_out` (the outputs of a forward with `relu`), only positive outputs pass their gradient.
pub fn backward(
    dy: &[f32],
    winner: &[u8],
    (planes, h, w): Planes,
    k: usize,
    relu_out: Option<&[f32]>,
    threads: usize,
) -> Vec<f32> {
    let (oh, ow) = (h / k, w / k);
    let out_plane = oh * ow;
    zeroed_pieces(
        planes * h * w,
        h * w,
        items_per_task(planes, threads),
        |first, piece| {
            for (i, plane) in piece.chunks_exact_mut((h * w).max(1)).enumerate() {
                let at = (first + i) * out_plane;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let j = at + oy * ow + ox;
                        let p = winner[j] as usize;
                        let g = relu_out.map_or(dy[j], |y| super::relu_grad_value(y[j], dy[j]));
                        plane[(oy * k + p / k) * w + ox * k + p % k] = g;
                    }
                }
            }
        },
    )
    .0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both window paths (2×2 and general) against the definition: first maximum, NaN wins,
    /// ties everywhere; backward puts each gradient at the winner.
    #[test]
    fn winners_follow_the_definition() {
        for (k, h, w) in [(2, 5, 6), (2, 4, 7), (2, 6, 8), (3, 7, 9), (3, 6, 10)] {
            let planes = 3;
            let x: Vec<f32> = (0..planes * h * w)
                .map(|i| match i % 11 {
                    7 => f32::NAN,
                    r => (r % 4) as f32,
                })
                .collect();
            let (y, won) = forward(&x, (planes, h, w), k, false, 2);
            let (oh, ow) = (h / k, w / k);
            for p in 0..planes {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut best: Option<(f32, usize)> = None;
                        for dy in 0..k {
                            for dx in 0..k {
                                let v = x[p * h * w + (oy * k + dy) * w + ox * k + dx];
                                let take = match best {
                                    None => true,
                                    Some((b, _)) => v > b || (v.is_nan() && !b.is_nan()),
                                };
                                if take {
                                    best = Some((v, dy * k + dx));
                                }
                            }
                        }
                        let (v, at) = best.unwrap();
                        let j = (p * oh + oy) * ow + ox;
                        assert_eq!(won[j] as usize, at, "k {k} plane {p} ({oy}, {ox})");
                        assert!(y[j] == v || (v.is_nan() && y[j].is_nan()));
                    }
                }
            }
            let dy: Vec<f32> = (0..y.len()).map(|i| i as f32 + 1.0).collect();
            let dx = backward(&dy, &won, (planes, h, w), k, None, 2);
            let mut expected = vec![0.0f32; x.len()];
            for (j, at) in won.iter().enumerate() {
                let (p, oy, ox) = (j / (oh * ow), j / ow % oh, j % ow);
                let at = *at as usize;
                expected[p * h * w + (oy * k + at / k) * w + ox * k + at % k] = dy[j];
            }
            assert_eq!(bits(&dx), bits(&expected), "k {k}, {h}x{w}");
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// `relu` gives what a ReLU pass then the pool give, bit for bit, forward and backward
    /// (ReLU's backward: the gradient where its output is positive, zero elsewhere).
    #[test]
    fn fused_relu_equals_relu_then_pool() {
        for (k, h, w) in [(2, 5, 6), (2, 6, 8), (3, 7, 9)] {
            let planes = 4;
            // Plane 1 holds no positive value: its outputs are all zero.
            let x: Vec<f32> = (0..planes * h * w)
                .map(|i| match i % 13 {
                    5 => f32::NAN,
                    9 => -0.0,
                    r if i / (h * w) == 1 => -(r as f32),
                    r => r as f32 - 8.0,
                })
                .collect();
            let relu: Vec<f32> = x.iter().map(|v| super::super::relu_value(*v)).collect();
            for threads in [1, 3] {
                let (y, won) = forward(&x, (planes, h, w), k, true, threads);
                let (y_ref, won_ref) = forward(&relu, (planes, h, w), k, false, threads);
                assert_eq!(bits(&y), bits(&y_ref), "k {k}, {h}x{w}");
                assert!(y.iter().any(|v| *v > 0.0) && y.contains(&0.0));
                let dy: Vec<f32> = (0..y.len()).map(|i| i as f32 - 7.5).collect();
                let dx = backward(&dy, &won, (planes, h, w), k, Some(&y), threads);
                let pooled = backward(&dy, &won_ref, (planes, h, w), k, None, threads);
                let expected: Vec<f32> = pooled
                    .iter()
                    .zip(&relu)
                    .map(|(g, r)| if *r > 0.0 { *g } else { 0.0 })
                    .collect();
                assert_eq!(bits(&dx), bits(&expected), "k {k}, {h}x{w}");
            }
        }
    }
}
