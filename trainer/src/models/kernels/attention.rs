//! Causal self-attention straight from the fused `c_attn` output, as PyTorch's
//! `scaled_dot_product_attention(q, k, v, is_causal=True)` computes it, with no head split or
//! merge copies: `qkv` is `[B·T, 3E]` (each row q | k | v, head h at columns h·d..(h+1)·d of each
//! part), the output `[B·T, E]` has head h at the same columns, ready for `c_proj`.
//!
//! Per sequence and head: `S = q·kᵀ`, `P = softmax(S/√d)` over the keys up to the query's own
//! position ([`probabilities`], kept for the backward pass: `B·H·T²` values), `y = P·v`
//! ([`forward`]). The backward pass writes `dqkv` in the layout of `qkv`:
//! `dv = Pᵀ·dy`, `dP = dy·vᵀ`, `dS = P∘(dP − rowsum(P∘dP))/√d`, `dq = dS·k`, `dk = dSᵀ·q`.
//! Parallel over sequences; each product is a small GEMM over strided views of `qkv`.

use super::Rounding;
use super::gemm::{Mat, gemm};
use super::math::exp;
use super::simd::widest_simd;
use super::tasks::{Scratch, items_per_task, written_pieces};

/// The shapes: `batch` sequences of `seq` positions, `heads` heads of `head_dim` channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl Dims {
    /// Channels of q (k, v): E = heads · head_dim.
    pub fn embd(&self) -> usize {
        self.heads * self.head_dim
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// Head `h`'s q (part 0), k (1) or v (2) of sequence `b`: a `T × d` view of `qkv`.
    fn part<'a>(&self, qkv: &'a [f32], b: usize, h: usize, part: usize) -> Mat<'a> {
        let e = self.embd();
        let at = b * self.seq * 3 * e + part * e + h * self.head_dim;
        Mat::strided(&qkv[at..], self.seq, self.head_dim, 3 * e, 1)
    }
}

/// Lanes of the row reductions: independent partial results the compiler keeps in one vector
/// register (a single running sum is a chain of dependent scalar additions).
const LANES: usize = 16;

/// `(Σ f(a, b), max f(a, b))` over the pairs of `a` and `b`, in [`LANES`] lanes added (or
/// compared) in order at the end.
#[inline(always)]
fn lane_fold(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> (f32, f32) {
    let (mut sum, mut max) = ([0f32; LANES], [f32::NEG_INFINITY; LANES]);
    let n = a.len().min(b.len());
    let full = n / LANES * LANES;
    for base in (0..full).step_by(LANES) {
        for j in 0..LANES {
            let v = f(a[base + j], b[base + j]);
            sum[j] += v;
            max[j] = if v > max[j] { v } else { max[j] };
        }
    }
    let (mut s, mut m) = (0f32, f32::NEG_INFINITY);
    for k in full..n {
        let v = f(a[k], b[k]);
        s += v;
        m = if v > m { v } else { m };
    }
    for j in 0..LANES {
        s += sum[j];
        m = if max[j] > m { max[j] } else { m };
    }
    (s, m)
}

widest_simd! {
    /// `S` (`t × t`, row-major) to the causal softmax of `S·scale`: row i over columns 0..=i,
    /// zeros after. Every row is worked whole, the future columns masked to −∞ (so `exp` makes
    /// them 0): fixed-length loops that vectorise, where the rows' own lengths (1 to t) would
    /// leave most of the work in scalar tails.
    fn causal_softmax(s: &mut [f32], t: usize, scale: f32) {
        for (i, row) in s.chunks_exact_mut(t).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = if j <= i { *v * scale } else { f32::NEG_INFINITY };
            }
            let (_, max) = lane_fold(row, row, |v, _| v);
            for v in row.iter_mut() {
                *v = exp(*v - max);
            }
            let (sum, _) = lane_fold(row, row, |v, _| v);
            let inv = 1.0 / sum;
            for v in row.iter_mut() {
                *v *= inv;
            }
        }
    }
}

widest_simd! {
    /// `dP` (`t × t`) to `dS = P∘(dP − rowsum(P∘dP))·scale`.
    fn softmax_backward(p: &[f32], dp: &mut [f32], t: usize, scale: f32) {
        for (prow, drow) in p.chunks_exact(t).zip(dp.chunks_exact_mut(t)) {
            let (dot, _) = lane_fold(prow, drow, |p, d| p * d);
            for (p, d) in prow.iter().zip(drow.iter_mut()) {
                *d = p * (*d - dot) * scale;
            }
        }
    }
}

/// The attention probabilities of head `h` of sequence `b` into `p` (`T × T`).
fn head_probabilities(qkv: &[f32], dims: Dims, b: usize, h: usize, p: &mut [f32]) {
    let t = dims.seq;
    let (q, k) = (dims.part(qkv, b, h, 0), dims.part(qkv, b, h, 1));
    gemm(p, t, false, q, k.t(), 1);
    causal_softmax(p, t, dims.scale());
}

/// Sequences per parallel task.
fn per_task(dims: Dims, threads: usize) -> usize {
    items_per_task(dims.batch, threads)
}

fn check(qkv: &[f32], dims: Dims) {
    let n = dims.batch * dims.seq * 3 * dims.embd();
    assert_eq!(qkv.len(), n, "attention: qkv of {dims:?}");
}

/// Every head's attention probabilities `[B, H, T, T]` (row i: query i over the keys): the
/// first half of the forward pass, kept for the backward pass.
pub fn probabilities(qkv: &[f32], dims: Dims, threads: usize) -> Vec<f32> {
    check(qkv, dims);
    let (t, h) = (dims.seq, dims.heads);
    let per = per_task(dims, threads);
    written_pieces(dims.batch * h * t * t, h * t * t, per, |first, out| {
        for (i, heads) in out.chunks_exact_mut(h * t * t).enumerate() {
            for (head, p) in heads.chunks_exact_mut(t * t).enumerate() {
                head_probabilities(qkv, dims, first + i, head, p);
            }
        }
    })
    .0
}

/// The attention output `[B·T, E]` of `qkv` (`[B·T, 3E]`) with its [`probabilities`]. With
/// `rounding` (mixed precision; `qkv` already rounded by the caller) the probabilities are
/// rounded for the product with `v`, as `torch.autocast` casts softmax's output.
pub fn forward(
    qkv: &[f32],
    probs: &[f32],
    dims: Dims,
    rounding: Option<Rounding>,
    threads: usize,
) -> Vec<f32> {
    check(qkv, dims);
    let (t, e, h) = (dims.seq, dims.embd(), dims.heads);
    assert_eq!(
        probs.len(),
        dims.batch * h * t * t,
        "attention: probabilities of {dims:?}"
    );
    let per = per_task(dims, threads);
    written_pieces(dims.batch * t * e, t * e, per, |first, out| {
        let mut rounded = Scratch::take(if rounding.is_some() { t * t } else { 0 });
        for (i, y) in out.chunks_exact_mut(t * e).enumerate() {
            let b = first + i;
            for head in 0..h {
                let p = &probs[(b * h + head) * t * t..][..t * t];
                let p = Mat::row_major(rounded_into(p, rounding, &mut rounded), t, t);
                let v = dims.part(qkv, b, head, 2);
                gemm(&mut y[head * dims.head_dim..], e, false, p, v, 1);
            }
        }
    })
    .0
}

/// `p` as it is, or rounded into `scratch` (`p.len()` long) under mixed precision.
fn rounded_into<'a>(p: &'a [f32], rounding: Option<Rounding>, scratch: &'a mut [f32]) -> &'a [f32] {
    match rounding {
        None => p,
        Some(r) => {
            for (s, v) in scratch.iter_mut().zip(p) {
                *s = r.round(*v);
            }
            scratch
        }
    }
}

/// The gradient `[B·T, 3E]` of `qkv` for the output gradient `dy` (`[B·T, E]`), given the
/// forward pass's [`probabilities`]. With `rounding` (`qkv` and `dy` already rounded by the
/// caller), the probabilities and `dS` are rounded for the products they enter.
pub fn backward(
    qkv: &[f32],
    probs: &[f32],
    dy: &[f32],
    dims: Dims,
    rounding: Option<Rounding>,
    threads: usize,
) -> Vec<f32> {
    check(qkv, dims);
    let (t, e, d, h) = (dims.seq, dims.embd(), dims.head_dim, dims.heads);
    assert_eq!(
        probs.len(),
        dims.batch * h * t * t,
        "attention: probabilities of {dims:?}"
    );
    assert_eq!(dy.len(), dims.batch * t * e, "attention: dy of {dims:?}");
    let per = per_task(dims, threads);
    written_pieces(qkv.len(), t * 3 * e, per, |first, out| {
        let mut ds = Scratch::take(t * t);
        let mut rounded = Scratch::take(if rounding.is_some() { t * t } else { 0 });
        for (i, dqkv) in out.chunks_exact_mut(t * 3 * e).enumerate() {
            let b = first + i;
            for head in 0..h {
                let p = &probs[(b * h + head) * t * t..][..t * t];
                let (q, k, v) = (
                    dims.part(qkv, b, head, 0),
                    dims.part(qkv, b, head, 1),
                    dims.part(qkv, b, head, 2),
                );
                let g = Mat::strided(&dy[b * t * e + head * d..], t, d, e, 1);
                let pm = Mat::row_major(rounded_into(p, rounding, &mut rounded), t, t);
                gemm(&mut dqkv[2 * e + head * d..], 3 * e, false, pm.t(), g, 1);
                gemm(&mut ds, t, false, g, v.t(), 1);
                softmax_backward(p, &mut ds, t, dims.scale());
                if let Some(r) = rounding {
                    r.apply(&mut ds);
                }
                let dsm = Mat::row_major(&ds, t, t);
                gemm(&mut dqkv[head * d..], 3 * e, false, dsm, k, 1);
                gemm(&mut dqkv[e + head * d..], 3 * e, false, dsm.t(), q, 1);
            }
        }
    })
    .0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::test_util::uniform_values(n, seed, -1.0, 1.0)
    }

    /// Forward and backward of one sequence's head in f64, loop by loop.
    fn naive(qkv: &[f32], dy: &[f32], dims: Dims) -> (Vec<f64>, Vec<f64>) {
        let (t, e, d) = (dims.seq, dims.embd(), dims.head_dim);
        let scale = 1.0 / (d as f64).sqrt();
        let mut y = vec![0.0; dims.batch * t * e];
        let mut dqkv = vec![0.0; qkv.len()];
        let at = |b: usize, i: usize, part: usize, h: usize, c: usize| {
            (b * t + i) * 3 * e + part * e + h * d + c
        };
        for b in 0..dims.batch {
            for h in 0..dims.heads {
                let val = |i, part, c| qkv[at(b, i, part, h, c)] as f64;
                let mut p = vec![vec![0.0; t]; t];
                for (i, prow) in p.iter_mut().enumerate() {
                    let s: Vec<f64> = (0..=i)
                        .map(|j| (0..d).map(|c| val(i, 0, c) * val(j, 1, c)).sum::<f64>() * scale)
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = s.iter().map(|v| (v - m).exp()).sum();
                    for j in 0..=i {
                        prow[j] = (s[j] - m).exp() / z;
                    }
                }
                let g = |i: usize, c: usize| dy[(b * t + i) * e + h * d + c] as f64;
                for i in 0..t {
                    for c in 0..d {
                        y[(b * t + i) * e + h * d + c] =
                            (0..t).map(|j| p[i][j] * val(j, 2, c)).sum();
                    }
                }
                // dP, then dS.
                let mut ds = vec![vec![0.0; t]; t];
                for i in 0..t {
                    let dp: Vec<f64> = (0..t)
                        .map(|j| (0..d).map(|c| g(i, c) * val(j, 2, c)).sum())
                        .collect();
                    let dot: f64 = (0..t).map(|j| p[i][j] * dp[j]).sum();
                    for j in 0..t {
                        ds[i][j] = p[i][j] * (dp[j] - dot) * scale;
                    }
                }
                for i in 0..t {
                    for c in 0..d {
                        dqkv[at(b, i, 0, h, c)] = (0..t).map(|j| ds[i][j] * val(j, 1, c)).sum();
                        dqkv[at(b, i, 1, h, c)] = (0..t).map(|j| ds[j][i] * val(j, 0, c)).sum();
                        dqkv[at(b, i, 2, h, c)] = (0..t).map(|j| p[j][i] * g(j, c)).sum();
                    }
                }
            }
        }
        (y, dqkv)
    }

    #[test]
    fn forward_and_backward_match_the_loops() {
        for dims in [
            Dims {
                batch: 3,
                seq: 7,
                heads: 2,
                head_dim: 4,
            },
            Dims {
                batch: 2,
                seq: 16,
                heads: 4,
                head_dim: 8,
            },
            Dims {
                batch: 1,
                seq: 1,
                heads: 1,
                head_dim: 3,
            },
        ] {
            let (t, e) = (dims.seq, dims.embd());
            let qkv = values(dims.batch * t * 3 * e, 7);
            let dy = values(dims.batch * t * e, 8);
            let (want_y, want_d) = naive(&qkv, &dy, dims);
            for threads in [1, 2] {
                let p = probabilities(&qkv, dims, threads);
                let y = forward(&qkv, &p, dims, None, threads);
                let dq = backward(&qkv, &p, &dy, dims, None, threads);
                let diff = |a: &[f32], b: &[f64]| {
                    a.iter()
                        .zip(b)
                        .map(|(a, b)| (*a as f64 - b).abs())
                        .fold(0.0, f64::max)
                };
                assert!(diff(&y, &want_y) < 1e-5, "y of {dims:?}");
                assert!(diff(&dq, &want_d) < 1e-5, "dqkv of {dims:?}");
            }
        }
    }
}
