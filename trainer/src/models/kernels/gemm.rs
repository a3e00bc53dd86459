//! `dst = [dst +] a · b` for f32 matrices given as strided views, over the `gemm` crate.

use gemm::Parallelism;

/// A read-only matrix view: element (r, c) is `data[r * rs + c * cs]`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `rows × cols` matrix at the start of `data`.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// A matrix with row stride `rs` and column stride `cs` (elements).
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        let m = Mat {
            data,
            rows,
            cols,
            rs,
            cs,
        };
        assert!(
            m.is_empty() || m.last_index() < data.len(),
            "matrix view {rows}x{cols} (strides {rs}, {cs}) is larger than its {} values",
            data.len()
        );
        m
    }

    /// The transposed view (no copy).
    pub fn t(self) -> Self {
        Mat {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// The view's values, shape and strides: `(data, rows, cols, rs, cs)`.
    pub fn parts(&self) -> (&'a [f32], usize, usize, usize, usize) {
        (self.data, self.rows, self.cols, self.rs, self.cs)
    }

    fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    fn last_index(&self) -> usize {
        (self.rows - 1) * self.rs + (self.cols - 1) * self.cs
    }
}

/// `dst = a · b` (or `dst += a · b` with `accumulate`); `dst` is row-major with row stride
/// `dst_rs`. `threads > 1` lets the GEMM split its blocks over rayon's pool.
pub fn gemm(dst: &mut [f32], dst_rs: usize, accumulate: bool, a: Mat, b: Mat, threads: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(
        k, b.rows,
        "gemm: inner dimensions differ ({m}x{k} · {}x{n})",
        b.rows
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        dst_rs >= n && (m - 1) * dst_rs + n <= dst.len(),
        "gemm: a {m}x{n} result with row stride {dst_rs} does not fit {} values",
        dst.len()
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_rs..r * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: every view was checked to lie inside its slice (Mat::strided and the assert on
    // dst above); `dst` is borrowed mutably and cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: Mat, b: Mat) -> Vec<f32> {
        let mut out = vec![0f32; a.rows * b.cols];
        for r in 0..a.rows {
            for c in 0..b.cols {
                out[r * b.cols + c] = (0..a.cols)
                    .map(|i| a.data[r * a.rs + i * a.cs] * b.data[i * b.rs + c * b.cs])
                    .sum();
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 17) as f32 - 8.0)
            .collect()
    }

    /// Plain, transposed and accumulating products agree with a naive loop (small integers, so
    /// every sum is exact whatever the order).
    #[test]
    fn strided_products_match_naive_loops() {
        let (a, b) = (values(5 * 7, 1), values(7 * 3, 2));
        for threads in [1, 3] {
            let (am, bm) = (Mat::row_major(&a, 5, 7), Mat::row_major(&b, 7, 3));
            let mut out = vec![0f32; 5 * 3];
            gemm(&mut out, 3, false, am, bm, threads);
            assert_eq!(out, naive(am, bm));

            // aᵀ·? : a viewed as 7x5, times a 5x4 matrix, into rows of stride 6.
            let c = values(5 * 4, 3);
            let (at, cm) = (am.t(), Mat::row_major(&c, 5, 4));
            let mut wide = vec![1f32; 7 * 6];
            gemm(&mut wide, 6, true, at, cm, threads);
            let want = naive(at, cm);
            for r in 0..7 {
                for col in 0..6 {
                    let expect = if col < 4 {
                        1.0 + want[r * 4 + col]
                    } else {
                        1.0
                    };
                    assert_eq!(wide[r * 6 + col], expect, "row {r} col {col}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "larger than its")]
    fn a_view_past_its_slice_is_refused() {
        let v = vec![0f32; 5];
        let _ = Mat::row_major(&v, 2, 3);
    }
}
