//! A fully connected layer `y = x·Wᵀ + b` over row-major matrices (`x` `[rows, in]`, `W`
//! `[out, in]` as PyTorch stores it): the output written contiguous with the bias as the GEMM's
//! starting value, and the backward `dx = dy·W`, `dW = dyᵀ·x`, `db = Σ_rows dy`, every product a
//! GEMM over views (no transposed copies).

use super::gemm::{Mat, gemm};
use super::simd::widest_simd;
use super::tasks::output_vec;

/// `rows` inputs of `inputs` values each mapped to `outputs` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub rows: usize,
    pub inputs: usize,
    pub outputs: usize,
}

impl Dims {
    /// Checks the lengths of `x` and `w`; `(rows, inputs, outputs)`.
    fn check(&self, x: &[f32], w: &[f32]) -> (usize, usize, usize) {
        assert_eq!(
            x.len(),
            self.rows * self.inputs,
            "linear: input of {self:?}"
        );
        assert_eq!(
            w.len(),
            self.outputs * self.inputs,
            "linear: weight of {self:?}"
        );
        (self.rows, self.inputs, self.outputs)
    }
}

/// `x·Wᵀ (+ b)`: `[rows, outputs]`.
pub fn forward(x: &[f32], w: &[f32], b: Option<&[f32]>, dims: Dims, threads: usize) -> Vec<f32> {
    let (rows, inputs, outputs) = dims.check(x, w);
    let mut y = output_vec(rows * outputs);
    if let Some(b) = b {
        assert_eq!(b.len(), outputs, "linear: bias of {dims:?}");
        for row in y.chunks_exact_mut(outputs) {
            row.copy_from_slice(b);
        }
    }
    let xm = Mat::row_major(x, rows, inputs);
    let wt = Mat::row_major(w, outputs, inputs).t();
    gemm(&mut y, outputs, b.is_some(), xm, wt, threads);
    y
}

widest_simd! {
    /// `acc += Σ rows` (each row `acc.len()` long), in row order.
    fn column_sums(rows: &[f32], acc: &mut [f32]) {
        for row in rows.chunks_exact(acc.len()) {
            for (a, v) in acc.iter_mut().zip(row) {
                *a += v;
            }
        }
    }
}

/// The bias gradient of [`forward`] for the output gradient `dy` (`rows × outputs`): its column
/// sums, as [`backward`] adds them. Mixed precision takes it from the f32 gradient while the
/// products take the rounded one.
pub fn bias_grad(dy: &[f32], outputs: usize) -> Vec<f32> {
    let mut db = vec![0f32; outputs];
    column_sums(dy, &mut db);
    db
}

/// The gradients of [`forward`] for the output gradient `dy`: `dx` (if `want_dx`), `dW`, and
/// `db` (if `want_db`).
pub fn backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    dims: Dims,
    (want_dx, want_db): (bool, bool),
    threads: usize,
) -> (Option<Vec<f32>>, Vec<f32>, Option<Vec<f32>>) {
    let (rows, inputs, outputs) = dims.check(x, w);
    assert_eq!(
        dy.len(),
        rows * outputs,
        "linear: output gradient of {dims:?}"
    );
    let g = Mat::row_major(dy, rows, outputs);
    let dx = want_dx.then(|| {
        let mut dx = output_vec(rows * inputs);
        gemm(
            &mut dx,
            inputs,
            false,
            g,
            Mat::row_major(w, outputs, inputs),
            threads,
        );
        dx
    });
    let mut dw = output_vec(outputs * inputs);
    gemm(
        &mut dw,
        inputs,
        false,
        g.t(),
        Mat::row_major(x, rows, inputs),
        threads,
    );
    let db = want_db.then(|| {
        let mut db = vec![0f32; outputs];
        column_sums(dy, &mut db);
        db
    });
    (dx, dw, db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 13) as f32 - 6.0)
            .collect()
    }

    /// Small integers: every sum is exact whatever its order.
    #[test]
    fn forward_and_backward_match_naive_loops() {
        let dims = Dims {
            rows: 9,
            inputs: 5,
            outputs: 7,
        };
        let (x, w, b, dy) = (values(45, 1), values(35, 2), values(7, 3), values(63, 4));
        for threads in [1, 2] {
            let y = forward(&x, &w, Some(&b), dims, threads);
            let y0 = forward(&x, &w, None, dims, threads);
            let (dx, dw, db) = backward(&x, &w, &dy, dims, (true, true), threads);
            let (dx, db) = (dx.unwrap(), db.unwrap());
            for r in 0..9 {
                for o in 0..7 {
                    let dot: f32 = (0..5).map(|i| x[r * 5 + i] * w[o * 5 + i]).sum();
                    assert_eq!(y[r * 7 + o], dot + b[o]);
                    assert_eq!(y0[r * 7 + o], dot);
                }
                for i in 0..5 {
                    let want: f32 = (0..7).map(|o| dy[r * 7 + o] * w[o * 5 + i]).sum();
                    assert_eq!(dx[r * 5 + i], want);
                }
            }
            for o in 0..7 {
                for i in 0..5 {
                    let want: f32 = (0..9).map(|r| dy[r * 7 + o] * x[r * 5 + i]).sum();
                    assert_eq!(dw[o * 5 + i], want);
                }
                assert_eq!(db[o], (0..9).map(|r| dy[r * 7 + o]).sum::<f32>());
            }
            let (none, _, no_db) = backward(&x, &w, &dy, dims, (false, false), threads);
            assert!(none.is_none() && no_db.is_none());
        }
    }
}
