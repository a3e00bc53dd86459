//! BatchNorm over `[N, C, H·W]`: per-channel statistics, the normalise(+ReLU) forward and its
//! backward, each one or two passes over the data, parallel over channels (reductions) or
//! samples (element-wise passes).
//!
//! Numerics follow PyTorch's CPU kernels: statistics from the batch (here summed in f64, two
//! passes), the forward folded into `y = x·scale + shift` with `scale = γ/√(var+ε)` and
//! `shift = β − mean·scale`, the ReLU mask `y > 0`.

use super::simd::widest_simd;
use super::tasks::{items_per_task, map_range, written_pieces};
use super::{relu_grad_value, relu_value};

/// `(n, c, hw)` of an NCHW tensor with the spatial dimensions flattened.
pub type Dims = (usize, usize, usize);

/// The values of channel `ch` of sample `s`.
fn plane(x: &[f32], (_, c, hw): Dims, s: usize, ch: usize) -> &[f32] {
    &x[(s * c + ch) * hw..][..hw]
}

/// `(Σ f(v).0, Σ f(v).1)` over the aligned values `v` of `S` planes, in 8 independent f32 lanes
/// (so that the compiler vectorises it: one bounds check per 8 values), the lanes added in f64.
#[inline(always)]
fn lane_sums<const S: usize>(
    planes: [&[f32]; S],
    f: impl Fn([f32; S]) -> (f32, f32),
) -> (f64, f64) {
    let len = planes.iter().map(|p| p.len()).min().unwrap_or(0);
    let (mut acc0, mut acc1) = ([0f32; 8], [0f32; 8]);
    let full = len / 8 * 8;
    for base in (0..full).step_by(8) {
        let chunks: [&[f32; 8]; S] =
            planes.map(|p| p[base..base + 8].try_into().expect("8 values"));
        for j in 0..8 {
            let (a, b) = f(chunks.map(|c| c[j]));
            acc0[j] += a;
            acc1[j] += b;
        }
    }
    let (mut tail0, mut tail1) = (0f64, 0f64);
    for i in full..len {
        let (a, b) = f(planes.map(|p| p[i]));
        tail0 += a as f64;
        tail1 += b as f64;
    }
    let lanes = |acc: [f32; 8]| acc.iter().map(|a| *a as f64).sum::<f64>();
    (lanes(acc0) + tail0, lanes(acc1) + tail1)
}

/// Per-channel mean and biased variance: two passes (mean, then squared deviations), each
/// plane summed in f32 lanes and the planes in f64.
pub fn channel_stats(x: &[f32], dims: Dims, threads: usize) -> Vec<(f64, f64)> {
    map_range(dims.1, threads, |ch| mean_var(x, dims, ch))
}

widest_simd! {
    /// [`channel_stats`] of channel `ch`.
    fn mean_var(x: &[f32], dims: Dims, ch: usize) -> (f64, f64) {
        let (n, _, hw) = dims;
        let count = (n * hw).max(1) as f64;
        // Plain loops, not `Iterator::sum` over a closure, which stayed a baseline function
        // outside the wide copies; they start from -0.0 as `sum` does (the same bits).
        let mut sum = -0.0f64;
        for s in 0..n {
            sum += lane_sums([plane(x, dims, s, ch)], |[v]| (v, 0.0)).0;
        }
        let mean = sum / count;
        let m = mean as f32;
        let mut sq = -0.0f64;
        for s in 0..n {
            sq += lane_sums([plane(x, dims, s, ch)], |[v]| ((v - m) * (v - m), 0.0)).0;
        }
        (mean, sq / count)
    }
}

/// `y = x·scale[c] + shift[c]`, then `max(y, 0)` when `relu`.
pub fn normalize(
    x: &[f32],
    dims: Dims,
    scale: &[f32],
    shift: &[f32],
    relu: bool,
    threads: usize,
) -> Vec<f32> {
    let (n, c, hw) = dims;
    let (y, _) = written_pieces(x.len(), c * hw, items_per_task(n, threads), |first, out| {
        for (i, out) in out.chunks_exact_mut(hw).enumerate() {
            let (s, ch) = (first + i / c, i % c);
            normalize_plane(plane(x, dims, s, ch), scale[ch], shift[ch], relu, out);
        }
    });
    y
}

widest_simd! {
    /// `out = x·a + b` (then `max(·, 0)` when `relu`) over one plane.
    fn normalize_plane(x: &[f32], a: f32, b: f32, relu: bool, out: &mut [f32]) {
        if relu {
            for (o, v) in out.iter_mut().zip(x) {
                *o = relu_value(v * a + b);
            }
        } else {
            for (o, v) in out.iter_mut().zip(x) {
                *o = v * a + b;
            }
        }
    }
}

/// What the backward pass needs of the forward.
pub struct Saved<'a> {
    pub x: &'a [f32],
    /// The forward's output, for the ReLU mask (`None`: no ReLU).
    pub relu_out: Option<&'a [f32]>,
    pub mean: &'a [f32],
    pub inv_std: &'a [f32],
    pub gamma: &'a [f32],
    /// Statistics of this batch (training): the gradient flows through mean and variance too.
    /// Otherwise they are constants (running statistics).
    pub batch_stats: bool,
}

/// `(dx, dγ, dβ)` for the output gradient `dy`.
pub fn backward(
    saved: &Saved,
    dy: &[f32],
    dims: Dims,
    threads: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (n, c, hw) = dims;
    let Saved {
        x,
        relu_out,
        mean,
        inv_std,
        gamma,
        batch_stats,
    } = *saved;
    // Σ dy' and Σ dy'·x̂ per channel.
    let sums = map_range(c, threads, |ch| {
        let (sd, sdx) = grad_sums(dy, x, relu_out, dims, ch, mean[ch]);
        (sd, sdx * inv_std[ch] as f64)
    });
    let dgamma: Vec<f32> = sums.iter().map(|s| s.1 as f32).collect();
    let dbeta: Vec<f32> = sums.iter().map(|s| s.0 as f32).collect();
    // dx = a·dy' + b·x + d per channel.
    let count = (n * hw).max(1) as f64;
    let coef: Vec<(f32, f32, f32)> = (0..c)
        .map(|ch| {
            let (g, is, m) = (gamma[ch] as f64, inv_std[ch] as f64, mean[ch] as f64);
            let a = g * is;
            if !batch_stats {
                return (a as f32, 0.0, 0.0);
            }
            let b = -a * is * sums[ch].1 / count;
            let d = -a * sums[ch].0 / count - b * m;
            (a as f32, b as f32, d as f32)
        })
        .collect();
    let (dx, _) = written_pieces(x.len(), c * hw, items_per_task(n, threads), |first, out| {
        for (i, out) in out.chunks_exact_mut(hw).enumerate() {
            let (s, ch) = (first + i / c, i % c);
            let (g, xs) = (plane(dy, dims, s, ch), plane(x, dims, s, ch));
            let y = relu_out.map(|y| plane(y, dims, s, ch));
            grad_plane(g, xs, y, coef[ch], out);
        }
    });
    (dx, dgamma, dbeta)
}

widest_simd! {
    /// `(Σ dy', Σ dy'·(x − m))` of channel `ch`, `dy'` being `dy` masked by the ReLU's output
    /// when there is one: both sums in one pass over the planes.
    fn grad_sums(
        dy: &[f32],
        x: &[f32],
        relu_out: Option<&[f32]>,
        dims: Dims,
        ch: usize,
        m: f32,
    ) -> (f64, f64) {
        let (mut sd, mut sdx) = (0f64, 0f64);
        for s in 0..dims.0 {
            let (d, xs) = (plane(dy, dims, s, ch), plane(x, dims, s, ch));
            let (a, b) = match relu_out.map(|y| plane(y, dims, s, ch)) {
                Some(y) => lane_sums([d, xs, y], |[d, v, y]| {
                    let g = relu_grad_value(y, d);
                    (g, g * (v - m))
                }),
                None => lane_sums([d, xs], |[d, v]| (d, d * (v - m))),
            };
            sd += a;
            sdx += b;
        }
        (sd, sdx)
    }
}

widest_simd! {
    /// `dx = a·dy' + b·x + d` over one plane (`dy'` as in [`grad_sums`]).
    fn grad_plane(
        dy: &[f32],
        x: &[f32],
        relu_out: Option<&[f32]>,
        coef: (f32, f32, f32),
        out: &mut [f32],
    ) {
        let (a, b, d) = coef;
        match relu_out {
            Some(y) => {
                for (((o, v), g), y) in out.iter_mut().zip(x).zip(dy).zip(y) {
                    *o = a * relu_grad_value(*y, *g) + b * v + d;
                }
            }
            None => {
                for ((o, v), g) in out.iter_mut().zip(x).zip(dy) {
                    *o = a * g + b * v + d;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gradients against central differences of the scalar `Σ k·BN(x)` in f64.
    #[test]
    fn backward_matches_finite_differences() {
        let dims = (3, 2, 5);
        let x: Vec<f32> = (0..30)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let k: Vec<f32> = (0..30)
            .map(|i| ((i * 11 % 13) as f32 - 6.0) / 5.0)
            .collect();
        let (gamma, beta) = ([1.5f32, -0.7], [0.2f32, 0.4]);
        let eps = 1e-5;
        // Forward in f64, statistics from the batch, optional ReLU.
        let loss = |x: &[f64], gamma: &[f64], beta: &[f64], relu: bool, fixed: bool| -> f64 {
            let mut total = 0.0;
            for ch in 0..2 {
                let vals: Vec<f64> = (0..3)
                    .flat_map(|s| (0..5).map(move |j| (s * 2 + ch) * 5 + j))
                    .map(|i| x[i])
                    .collect();
                let (mean, var) = if fixed {
                    (0.3, 0.8)
                } else {
                    let m = vals.iter().sum::<f64>() / 15.0;
                    (m, vals.iter().map(|v| (v - m).powi(2)).sum::<f64>() / 15.0)
                };
                for s in 0..3 {
                    for j in 0..5 {
                        let i = (s * 2 + ch) * 5 + j;
                        let y = (x[i] - mean) / (var + eps).sqrt() * gamma[ch] + beta[ch];
                        total += k[i] as f64 * if relu { y.max(0.0) } else { y };
                    }
                }
            }
            total
        };
        for (relu, fixed) in [(false, false), (true, false), (false, true), (true, true)] {
            let stats: Vec<(f64, f64)> = if fixed {
                vec![(0.3, 0.8); 2]
            } else {
                channel_stats(&x, dims, 2)
            };
            let mean: Vec<f32> = stats.iter().map(|s| s.0 as f32).collect();
            let inv_std: Vec<f32> = stats
                .iter()
                .map(|s| (1.0 / (s.1 + eps).sqrt()) as f32)
                .collect();
            let scale: Vec<f32> = (0..2).map(|c| gamma[c] * inv_std[c]).collect();
            let shift: Vec<f32> = (0..2).map(|c| beta[c] - mean[c] * scale[c]).collect();
            let y = normalize(&x, dims, &scale, &shift, relu, 2);
            let saved = Saved {
                x: &x,
                relu_out: relu.then_some(&y[..]),
                mean: &mean,
                inv_std: &inv_std,
                gamma: &gamma,
                batch_stats: !fixed,
            };
            let (dx, dg, db) = backward(&saved, &k, dims, 2);
            let x64: Vec<f64> = x.iter().map(|v| *v as f64).collect();
            let (g64, b64) = (gamma.map(|v| v as f64), beta.map(|v| v as f64));
            let h = 1e-6;
            let what = format!("relu {relu} fixed stats {fixed}");
            for i in 0..30 {
                let (mut p, mut m) = (x64.clone(), x64.clone());
                p[i] += h;
                m[i] -= h;
                let num = (loss(&p, &g64, &b64, relu, fixed) - loss(&m, &g64, &b64, relu, fixed))
                    / (2.0 * h);
                assert!(
                    (num - dx[i] as f64).abs() < 1e-3,
                    "dx[{i}] {what}: {num} vs {}",
                    dx[i]
                );
            }
            for ch in 0..2 {
                let (mut p, mut m) = (g64, g64);
                p[ch] += h;
                m[ch] -= h;
                let num = (loss(&x64, &p, &b64, relu, fixed) - loss(&x64, &m, &b64, relu, fixed))
                    / (2.0 * h);
                assert!((num - dg[ch] as f64).abs() < 1e-3, "dgamma {what}");
                let (mut p, mut m) = (b64, b64);
                p[ch] += h;
                m[ch] -= h;
                let num = (loss(&x64, &g64, &p, relu, fixed) - loss(&x64, &g64, &m, relu, fixed))
                    / (2.0 * h);
                assert!((num - db[ch] as f64).abs() < 1e-3, "dbeta {what}");
            }
        }
    }
}
