//! PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019), as PyTorch's `powerSGD_hook` does
//! it: the average of a buffer of gradients, each matrix sent as two thin factors of rank `r`.
//!
//! A buffer holds whole tensors. Each tensor of two or more dimensions is a matrix M of
//! `rows = shape[0]` by `cols = the rest`; where `r (rows + cols)` is at most half of
//! `rows · cols` it is compressed, the rest (biases, norms, small matrices, the control element)
//! travels as it is. One step of a buffer:
//!
//! 1. error feedback: M += the error this rank kept from the last step;
//! 2. P = M Q (rows × r; Q is the last step's, `cols × r`, seeded the same on every rank at the
//!    start), all-reduced (averaged) together with the uncompressed values;
//! 3. P orthogonalized (Gram-Schmidt, columns, ε = 1e-8 as PyTorch);
//! 4. Q = Mᵀ P, all-reduced (averaged);
//! 5. M̂ = P Qᵀ is the averaged gradient on every rank; this rank keeps `M - M̂` as its error,
//!    and Q for the next step (warm start).
//!
//! P and Q are linear in M, so N replicas each compressing their gradient give what one
//! replica compressing the average would, up to the order of the sums. Every rank runs the
//! same loops in the same order (no thread pool, no CPU-dependent kernels), so the factors and
//! M̂ are the same bits on every rank.

use std::ops::Range;

use super::{Collective, ReduceOp};
use crate::Result;
use crate::data::rng::SplitMix64;

/// PyTorch's `min_compression_rate`: a matrix is compressed when its factors are at most half
/// of it.
const MIN_RATE: usize = 2;
/// PyTorch's Gram-Schmidt ε, against a column of zeros.
const EPS: f32 = 1e-8;

/// Whether a `rows × cols` matrix is worth sending as factors of rank `r`.
pub fn compresses(rows: usize, cols: usize, r: usize) -> bool {
    rows > 1 && cols > 1 && (rows + cols) * r * MIN_RATE <= rows * cols
}

/// One compressed matrix of the buffer, and what this rank keeps of it between steps.
struct Matrix {
    offset: usize,
    rows: usize,
    cols: usize,
    r: usize,
    /// Qᵀ (r × cols): row k is column k of Q.
    qt: Vec<f32>,
    /// Pᵀ (r × rows).
    pt: Vec<f32>,
    /// M - M̂ of the last step (rows × cols).
    error: Vec<f32>,
}

/// The PowerSGD state of one buffer layout (a gradient bucket).
pub struct PowerSgd {
    len: usize,
    matrices: Vec<Matrix>,
    plain: Vec<Range<usize>>,
    send: Vec<f32>,
}

impl PowerSgd {
    /// A buffer of `len` floats holding `tensors` (offset, shape) and possibly more elements
    /// after them (sent uncompressed); rank `r`; Q seeded from `seed` (the same on every rank).
    pub fn new(len: usize, tensors: &[(usize, Vec<usize>)], r: usize, seed: u64) -> PowerSgd {
        let mut matrices = Vec::new();
        let mut covered: Vec<Range<usize>> = Vec::new();
        for (i, (offset, shape)) in tensors.iter().enumerate() {
            let n: usize = shape.iter().product();
            if shape.len() < 2 {
                continue;
            }
            let (rows, cols) = (shape[0], n / shape[0].max(1));
            if !compresses(rows, cols, r) {
                continue;
            }
            let r = r.min(rows).min(cols);
            let mut rng = SplitMix64::keyed(&[seed, i as u64]);
            matrices.push(Matrix {
                offset: *offset,
                rows,
                cols,
                r,
                qt: (0..r * cols).map(|_| rng.normal() as f32).collect(),
                pt: vec![0.0; r * rows],
                error: vec![0.0; n],
            });
            covered.push(*offset..offset + n);
        }
        covered.sort_by_key(|c| c.start);
        let mut plain = Vec::new();
        let mut at = 0;
        for c in &covered {
            if c.start > at {
                plain.push(at..c.start);
            }
            at = c.end;
        }
        if at < len {
            plain.push(at..len);
        }
        PowerSgd {
            len,
            matrices,
            plain,
            send: Vec::new(),
        }
    }

    /// Floats of the first all-reduce (the uncompressed values and the P factors) and of the
    /// second (the Q factors).
    pub fn floats_sent(&self) -> (usize, usize) {
        let plain: usize = self.plain.iter().map(|p| p.len()).sum();
        let p: usize = self.matrices.iter().map(|m| m.r * m.rows).sum();
        let q: usize = self.matrices.iter().map(|m| m.r * m.cols).sum();
        (plain + p, q)
    }

    /// How many matrices are compressed.
    pub fn compressed(&self) -> usize {
        self.matrices.len()
    }

    /// Averages `buf` across the ranks of `c`, compressed; the result is the same on every rank.
    pub fn all_reduce(&mut self, c: &mut dyn Collective, buf: &mut [f32]) -> Result<()> {
        debug_assert_eq!(buf.len(), self.len);
        self.project(buf);
        let mut send = std::mem::take(&mut self.send);
        let reduced = c.all_reduce(&mut send, ReduceOp::Avg);
        self.send = send;
        reduced?;
        self.orthogonalize_and_back(buf);
        let mut send = std::mem::take(&mut self.send);
        let reduced = c.all_reduce(&mut send, ReduceOp::Avg);
        self.send = send;
        reduced?;
        self.rebuild(buf);
        Ok(())
    }

    /// Steps 1-2: error feedback into `buf`, then `send` = [uncompressed values, Pᵀ of every
    /// matrix].
    fn project(&mut self, buf: &mut [f32]) {
        self.send.clear();
        for p in &self.plain {
            self.send.extend_from_slice(&buf[p.clone()]);
        }
        for m in &mut self.matrices {
            let mat = &mut buf[m.offset..m.offset + m.rows * m.cols];
            for (x, e) in mat.iter_mut().zip(&m.error) {
                *x += e;
            }
            // Pᵀ[k][i] = row i of M · column k of Q.
            for k in 0..m.r {
                let q = &m.qt[k * m.cols..(k + 1) * m.cols];
                for i in 0..m.rows {
                    m.pt[k * m.rows + i] = dot(&mat[i * m.cols..(i + 1) * m.cols], q);
                }
            }
            self.send.extend_from_slice(&m.pt);
        }
    }

    /// Step 3-4: the averaged uncompressed values into `buf`, the averaged P orthogonalized,
    /// then `send` = [Qᵀ = (Mᵀ P)ᵀ of every matrix].
    fn orthogonalize_and_back(&mut self, buf: &mut [f32]) {
        let mut at = 0;
        for p in &self.plain {
            buf[p.clone()].copy_from_slice(&self.send[at..at + p.len()]);
            at += p.len();
        }
        for m in &mut self.matrices {
            let n = m.pt.len();
            m.pt.copy_from_slice(&self.send[at..at + n]);
            at += n;
            gram_schmidt(&mut m.pt, m.r, m.rows);
        }
        self.send.clear();
        for m in &mut self.matrices {
            let mat = &buf[m.offset..m.offset + m.rows * m.cols];
            // Qᵀ[k] = Σ_i P[i][k] · row i of M.
            m.qt.fill(0.0);
            for k in 0..m.r {
                let q = &mut m.qt[k * m.cols..(k + 1) * m.cols];
                for i in 0..m.rows {
                    axpy(m.pt[k * m.rows + i], &mat[i * m.cols..(i + 1) * m.cols], q);
                }
            }
            self.send.extend_from_slice(&m.qt);
        }
    }

    /// Step 5: M̂ = P Qᵀ into `buf`, this rank's error kept.
    fn rebuild(&mut self, buf: &mut [f32]) {
        let mut at = 0;
        for m in &mut self.matrices {
            let n = m.qt.len();
            m.qt.copy_from_slice(&self.send[at..at + n]);
            at += n;
            let mat = &mut buf[m.offset..m.offset + m.rows * m.cols];
            for i in 0..m.rows {
                let row = &mut mat[i * m.cols..(i + 1) * m.cols];
                let err = &mut m.error[i * m.cols..(i + 1) * m.cols];
                err.copy_from_slice(row);
                row.fill(0.0);
                for k in 0..m.r {
                    axpy(
                        m.pt[k * m.rows + i],
                        &m.qt[k * m.cols..(k + 1) * m.cols],
                        row,
                    );
                }
                for (e, x) in err.iter_mut().zip(row.iter()) {
                    *e -= x;
                }
            }
        }
    }
}

/// Orthonormal columns, in place: `pt` holds `r` columns of length `n`, one after the other.
fn gram_schmidt(pt: &mut [f32], r: usize, n: usize) {
    for k in 0..r {
        let (done, rest) = pt.split_at_mut(k * n);
        let col = &mut rest[..n];
        for j in 0..k {
            let prev = &done[j * n..(j + 1) * n];
            let d = dot(col, prev);
            axpy(-d, prev, col);
        }
        let norm = dot(col, col).sqrt() + EPS;
        for x in col.iter_mut() {
            *x /= norm;
        }
    }
}

/// Eight partial sums, added in a fixed order: vectorized, and the same bits on every rank.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `y += a · x`.
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ring::tests::with_ring;
    use std::time::Duration;

    /// A buffer: a 40×30 matrix, a bias of 40, a 6×5 matrix (not worth compressing at rank 2
    /// or 4), a 40×3×4 tensor (40×12), then one control element.
    fn layout() -> (usize, Vec<(usize, Vec<usize>)>) {
        let tensors = vec![
            (0, vec![40, 30]),
            (1200, vec![40]),
            (1240, vec![6, 5]),
            (1270, vec![40, 3, 4]),
        ];
        (1270 + 480 + 1, tensors)
    }

    fn grads(rank: usize, step: usize, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7 + rank * 13 + step * 31) % 23) as f32 - 11.0) / 10.0)
            .collect()
    }

    #[test]
    fn only_matrices_worth_it_are_compressed() {
        let (len, tensors) = layout();
        let p = PowerSgd::new(len, &tensors, 4, 1);
        assert_eq!(p.compressed(), 2);
        assert_eq!(p.plain, vec![1200..1270, 1750..1751]);
        assert_eq!(p.floats_sent(), (70 + 1 + 4 * 40 + 4 * 40, 4 * 30 + 4 * 12));
        assert!(compresses(512, 4608, 4) && !compresses(1, 1000, 1) && !compresses(8, 8, 4));
    }

    #[test]
    fn the_factors_are_orthonormal_and_a_low_rank_gradient_comes_back_exactly() {
        let mut pt: Vec<f32> = (0..3 * 50).map(|i| ((i * 37 % 11) as f32).sin()).collect();
        gram_schmidt(&mut pt, 3, 50);
        for a in 0..3 {
            for b in 0..3 {
                let d = dot(&pt[a * 50..(a + 1) * 50], &pt[b * 50..(b + 1) * 50]);
                assert!((d - f32::from(a == b)).abs() < 1e-5, "{a}·{b} = {d}");
            }
        }
        // A gradient of rank 2 in every matrix, the same on 2 ranks: rank 2 recovers it.
        let (len, tensors) = layout();
        let rank2 = |i: usize, j: usize| {
            let (i, j) = (i as f32, j as f32);
            (i - 20.0) * (j / 30.0) + (i * 0.37).sin() * (j * 0.11).cos()
        };
        let g: Vec<f32> = (0..len)
            .map(|i| match i {
                0..1200 => rank2(i / 30, i % 30),
                1270..1750 => rank2((i - 1270) / 12, (i - 1270) % 12),
                _ => 0.5,
            })
            .collect();
        let out = with_ring(2, Duration::from_secs(10), |_, ring| {
            let mut p = PowerSgd::new(len, &tensors, 2, 9);
            let mut buf = g.clone();
            p.all_reduce(ring, &mut buf).unwrap();
            buf
        });
        let worst = out[0]
            .iter()
            .zip(&g)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "{worst}");
    }

    /// N ranks compressing their gradients equal one replica compressing their average, step
    /// after step (the factors and the error feedback are linear), and every rank gets the same
    /// bits.
    #[test]
    fn ranks_compressing_their_gradients_equal_one_compressing_the_average() {
        let (len, tensors) = layout();
        let steps = 4;
        let ranks = with_ring(3, Duration::from_secs(10), |rank, ring| {
            let mut p = PowerSgd::new(len, &tensors, 2, 5);
            (0..steps)
                .map(|s| {
                    let mut buf = grads(rank, s, len);
                    p.all_reduce(ring, &mut buf).unwrap();
                    buf
                })
                .collect::<Vec<_>>()
        });
        let solo = with_ring(1, Duration::from_secs(10), |_, ring| {
            let mut p = PowerSgd::new(len, &tensors, 2, 5);
            (0..steps)
                .map(|s| {
                    let mut buf: Vec<f32> = (0..len)
                        .map(|i| (0..3).map(|r| grads(r, s, len)[i]).sum::<f32>() / 3.0)
                        .collect();
                    p.all_reduce(ring, &mut buf).unwrap();
                    buf
                })
                .collect::<Vec<_>>()
        });
        for r in 1..3 {
            assert!(ranks[r] == ranks[0], "rank {r} got other bits than rank 0");
        }
        for s in 0..steps {
            let worst = ranks[0][s]
                .iter()
                .zip(&solo[0][s])
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "step {s}: {worst}");
        }
        // Compression is lossy: the first step's matrix is not the plain average.
        let avg0: f32 = (0..3).map(|r| grads(r, 0, len)[5]).sum::<f32>() / 3.0;
        assert!((ranks[0][0][5] - avg0).abs() > 1e-3);
        // The uncompressed values are the plain average.
        let bias: f32 = (0..3).map(|r| grads(r, 0, len)[1210]).sum::<f32>() / 3.0;
        assert!((ranks[0][0][1210] - bias).abs() < 1e-6);
    }
}
