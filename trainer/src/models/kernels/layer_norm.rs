//! LayerNorm over the last dimension of a row-major `[rows, cols]` matrix, as PyTorch's
//! `nn.LayerNorm`: each row's mean and biased variance (two passes), `y = (x − mean)·rstd·w + b`
//! with `rstd = 1/√(var + eps)`; and its backward, the closed form
//! `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))` with `g = dy·w`, `x̂ = (x − mean)·rstd`, and the
//! column sums `dw = Σ dy·x̂`, `db = Σ dy`. One pass over the rows each way, parallel over
//! contiguous ranges of rows; nothing is kept between the two passes but the input.

use super::simd::widest_simd;
use super::tasks::{items_per_task, written_pieces};

/// Sum of `v` in 16 f32 lanes (vectorised), the lanes then added in order.
#[inline(always)]
fn lane_sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = v.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ (v − m)²` in 16 lanes.
#[inline(always)]
fn lane_sq_dev(v: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = v.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().map(|x| (x - m) * (x - m)).sum();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += (x - m) * (x - m);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A row's mean and `1/√(var + eps)`.
#[inline(always)]
fn row_stats(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = lane_sum(row) / n;
    let var = lane_sq_dev(row, mean) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

widest_simd! {
    /// Normalises the rows of `x` (each `w.len()` long) into `out`.
    fn forward_rows(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
        let cols = w.len();
        for (row, o) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
            let (mean, rstd) = row_stats(row, eps);
            for (((o, x), w), b) in o.iter_mut().zip(row).zip(w).zip(b) {
                *o = (x - mean) * rstd * w + b;
            }
        }
    }
}

widest_simd! {
    /// The input gradient of the rows of `x` into `dx`, and the rows' `dy·x̂` and `dy` added
    /// into `dw` and `db`.
    fn backward_rows(
        x: &[f32],
        w: &[f32],
        dy: &[f32],
        eps: f32,
        dx: &mut [f32],
        dw: &mut [f32],
        db: &mut [f32],
    ) {
        let cols = w.len();
        let n = cols as f32;
        let rows = x.chunks_exact(cols).zip(dy.chunks_exact(cols));
        for ((row, g), d) in rows.zip(dx.chunks_exact_mut(cols)) {
            let (mean, rstd) = row_stats(row, eps);
            // mean(g) and mean(g·x̂), with g = dy·w, in 16 lanes.
            let (mut sa, mut sb) = ([0f32; 16], [0f32; 16]);
            let full = cols / 16 * 16;
            for base in (0..full).step_by(16) {
                for j in 0..16 {
                    let k = base + j;
                    let gw = g[k] * w[k];
                    sa[j] += gw;
                    sb[j] += gw * (row[k] - mean) * rstd;
                }
            }
            let (mut ta, mut tb) = (0f32, 0f32);
            for k in full..cols {
                let gw = g[k] * w[k];
                ta += gw;
                tb += gw * (row[k] - mean) * rstd;
            }
            let a = (sa.iter().sum::<f32>() + ta) / n;
            let c = (sb.iter().sum::<f32>() + tb) / n;
            for k in 0..cols {
                let xhat = (row[k] - mean) * rstd;
                d[k] = rstd * (g[k] * w[k] - a - xhat * c);
                dw[k] += g[k] * xhat;
                db[k] += g[k];
            }
        }
    }
}

/// Rows per parallel task: at least 32 (a task costs a wake-up).
fn rows_per_task(rows: usize, threads: usize) -> usize {
    items_per_task(rows, threads).max(32)
}

/// LayerNorm of the rows of `x` (`w.len()` columns) with weight `w`, bias `b`.
pub fn forward(x: &[f32], w: &[f32], b: &[f32], eps: f32, threads: usize) -> Vec<f32> {
    let cols = w.len();
    let rows = x.len() / cols.max(1);
    let per = rows_per_task(rows, threads);
    written_pieces(x.len(), cols, per, |first, out| {
        forward_rows(&x[first * cols..][..out.len()], w, b, eps, out)
    })
    .0
}

/// The gradients `(dx, dw, db)` of [`forward`] for the output gradient `dy`.
pub fn backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    eps: f32,
    threads: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let cols = w.len();
    let rows = x.len() / cols.max(1);
    let per = rows_per_task(rows, threads);
    let (dx, partials) = written_pieces(x.len(), cols, per, |first, d| {
        let (mut dw, mut db) = (vec![0f32; cols], vec![0f32; cols]);
        let at = first * cols..first * cols + d.len();
        backward_rows(&x[at.clone()], w, &dy[at], eps, d, &mut dw, &mut db);
        (dw, db)
    });
    let (mut dw, mut db) = (vec![0f32; cols], vec![0f32; cols]);
    for (pw, pb) in partials {
        for (a, v) in dw.iter_mut().zip(pw) {
            *a += v;
        }
        for (a, v) in db.iter_mut().zip(pb) {
            *a += v;
        }
    }
    (dx, dw, db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::test_util::uniform_values(n, seed, -2.0, 2.0)
    }

    /// The textbook formulas in f64.
    fn naive(x: &[f32], w: &[f32], b: &[f32], dy: &[f32], eps: f64) -> [Vec<f64>; 4] {
        let cols = w.len();
        let mut y = vec![0.0; x.len()];
        let mut dx = vec![0.0; x.len()];
        let (mut dw, mut db) = (vec![0.0; cols], vec![0.0; cols]);
        for r in 0..x.len() / cols {
            let row: Vec<f64> = x[r * cols..][..cols].iter().map(|v| *v as f64).collect();
            let mean = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (var + eps).sqrt();
            let xhat: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
            let g: Vec<f64> = (0..cols)
                .map(|k| dy[r * cols + k] as f64 * w[k] as f64)
                .collect();
            let a = g.iter().sum::<f64>() / cols as f64;
            let c = (0..cols).map(|k| g[k] * xhat[k]).sum::<f64>() / cols as f64;
            for k in 0..cols {
                y[r * cols + k] = xhat[k] * w[k] as f64 + b[k] as f64;
                dx[r * cols + k] = rstd * (g[k] - a - xhat[k] * c);
                dw[k] += dy[r * cols + k] as f64 * xhat[k];
                db[k] += dy[r * cols + k] as f64;
            }
        }
        [y, dx, dw, db]
    }

    fn max_diff(a: &[f32], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn forward_and_backward_match_the_formulas() {
        // 37 columns: full 16-lane chunks and a tail; 100 rows: several tasks.
        for (rows, cols) in [(100, 37), (3, 128), (70, 5)] {
            let x = values(rows * cols, 1);
            let w = values(cols, 2);
            let b = values(cols, 3);
            let dy = values(rows * cols, 4);
            let want = naive(&x, &w, &b, &dy, 1e-5);
            for threads in [1, 3] {
                let y = forward(&x, &w, &b, 1e-5, threads);
                assert!(max_diff(&y, &want[0]) < 1e-5, "y {rows}x{cols}");
                let (dx, dw, db) = backward(&x, &w, &dy, 1e-5, threads);
                assert!(max_diff(&dx, &want[1]) < 1e-4, "dx {rows}x{cols}");
                assert!(max_diff(&dw, &want[2]) < 1e-4, "dw {rows}x{cols}");
                assert!(max_diff(&db, &want[3]) < 1e-4, "db {rows}x{cols}");
            }
        }
    }

    #[test]
    fn a_constant_row_normalises_to_the_bias() {
        let x = vec![3.0f32; 8];
        let y = forward(&x, &[2.0; 8], &[0.5; 8], 1e-5, 1);
        assert!(y.iter().all(|v| *v == 0.5), "{y:?}");
    }
}
