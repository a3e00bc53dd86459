//! Convolution forward and backward as GEMMs over batch chunks.
//!
//! The batch is split into one contiguous range of samples per thread; each range is worked in
//! chunks of `g` samples whose unfolded matrix `[C·k·k, g·L]` is wide enough for an efficient
//! GEMM (about [`TARGET_COLUMNS`] columns) and small enough to stay in cache-sized buffers that
//! are reused chunk after chunk. Nothing is kept between forward and backward but the input: the
//! backward pass unfolds each chunk again, which costs a copy where keeping the whole batch's
//! unfolded matrix cost memory 9× (3×3) the input's.
//!
//! - forward: `Y_chunk [O, g·L] = W [O, C·k·k] · cols [C·k·k, g·L]` (+ bias), written into the
//!   NCHW output (directly when g = 1).
//! - backward: `dW += dY_chunk · colsᵀ`, `db += Σ dY_chunk`, `dcols = Wᵀ · dY_chunk` folded back
//!   into `dx` (col2im). Each thread sums its own dW/db; the partials are added in range order.

use super::conv_shape::{ConvShape, add_bias_grads};
use super::gemm::{Mat, gemm};
use super::tasks::{BatchPlan, Scratch, map_pieces, map_range, output_vec, written_pieces};
use super::winograd;

/// Columns of the unfolded chunk worth one GEMM call.
pub const TARGET_COLUMNS: usize = 512;

/// The unfolded-matrix buffer of one thread range, reused chunk after chunk: zeroed when it is
/// taken and when its width changes, so that padding positions (never written by im2col) stay
/// zero.
struct ColsBuffer {
    data: Option<Scratch>,
    width: usize,
}

impl ColsBuffer {
    fn new() -> Self {
        ColsBuffer {
            data: None,
            width: 0,
        }
    }

    /// The unfolded `g` samples of `x` as a `[C·k·k, g·L]` view (`x` itself when pointwise).
    fn unfold<'a>(&'a mut self, s: &ConvShape, x: &'a [f32], g: usize) -> Mat<'a> {
        let (rows, width) = (s.ckk(), g * s.l());
        if s.unfold.is_pointwise() && g == 1 {
            return Mat::row_major(x, rows, width);
        }
        if self.width != width || self.data.is_none() {
            let mut data = Scratch::take(rows * width);
            if s.unfold.padding > 0 {
                data.fill(0.0);
            }
            self.data = Some(data);
            self.width = width;
        }
        let data = self.data.as_mut().expect("set above");
        s.unfold.im2col(x, g, (s.c, s.h, s.w), data);
        Mat::row_major(data, rows, width)
    }
}

/// `y = conv(x, w) + b` for `x` `[N, C, H, W]`, `w` `[O, C, k, k]`, `b` `[O]`; returns
/// `[N, O, OH, OW]`.
/// 3×3 stride-1 convolutions with enough channels go through [`winograd`], the others through
/// [`im2col_forward`].
pub fn forward(s: &ConvShape, x: &[f32], w: &[f32], b: Option<&[f32]>, threads: usize) -> Vec<f32> {
    if winograd::applies(s) {
        winograd::forward(s, x, w, b, threads)
    } else {
        im2col_forward(s, x, w, b, threads)
    }
}

/// [`forward`] as GEMMs over unfolded batch chunks.
pub fn im2col_forward(
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    threads: usize,
) -> Vec<f32> {
    let (l, o) = (s.l(), s.o);
    let plan = BatchPlan::new(s.n, s.l(), TARGET_COLUMNS, threads);
    let wmat = Mat::row_major(w, o, s.ckk());
    let (y, _) = written_pieces(
        s.n * s.out_plane(),
        s.out_plane(),
        plan.per_task,
        |first, out| {
            let count = out.len() / s.out_plane();
            let mut cols = ColsBuffer::new();
            let mut wide = Scratch::take(0);
            for (c0, g) in plan.chunks(count) {
                let x = &x[(first + c0) * s.plane()..(first + c0 + g) * s.plane()];
                let xcols = cols.unfold(s, x, g);
                let out = &mut out[c0 * s.out_plane()..(c0 + g) * s.out_plane()];
                if g == 1 {
                    if let Some(b) = b {
                        for (row, bias) in out.chunks_exact_mut(l).zip(b) {
                            row.fill(*bias);
                        }
                    }
                    gemm(out, l, b.is_some(), wmat, xcols, plan.gemm_threads);
                } else {
                    if wide.len() != o * g * l {
                        wide = Scratch::take(o * g * l);
                    }
                    gemm(&mut wide, g * l, false, wmat, xcols, plan.gemm_threads);
                    for (oc, row) in wide.chunks_exact(g * l).enumerate() {
                        let bias = b.map_or(0.0, |b| b[oc]);
                        for (si, src) in row.chunks_exact(l).enumerate() {
                            let dst = &mut out[si * s.out_plane() + oc * l..][..l];
                            for (d, v) in dst.iter_mut().zip(src) {
                                *d = v + bias;
                            }
                        }
                    }
                }
            }
        },
    );
    y
}

/// Gradients of [`forward`]: `(dx, dw, db)` for the output gradient `dy` `[N, O, OH, OW]`;
/// `dx` only when `want_dx` (not for a first layer), `db` only when `with_bias`. Dispatched like
/// [`forward`].
pub fn backward(
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    want_dx: bool,
    with_bias: bool,
    threads: usize,
) -> (Option<Vec<f32>>, Vec<f32>, Option<Vec<f32>>) {
    if winograd::applies(s) {
        winograd::backward(s, x, w, dy, want_dx, with_bias, threads)
    } else {
        im2col_backward(s, x, w, dy, want_dx, with_bias, threads)
    }
}

/// [`backward`] as GEMMs over unfolded batch chunks.
pub fn im2col_backward(
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    want_dx: bool,
    with_bias: bool,
    threads: usize,
) -> (Option<Vec<f32>>, Vec<f32>, Option<Vec<f32>>) {
    let (l, o, ckk) = (s.l(), s.o, s.ckk());
    let plan = BatchPlan::new(s.n, s.l(), TARGET_COLUMNS, threads);
    let wt = want_dx.then(|| Mat::row_major(w, o, ckk).t());
    let mut dx = if want_dx {
        output_vec(s.n * s.plane())
    } else {
        Vec::new()
    };
    let work = |first: usize, count: usize, dx: &mut [f32]| {
        let mut cols = ColsBuffer::new();
        let (mut dy_wide, mut dcols) = (Scratch::take(0), Scratch::take(0));
        let mut dw = vec![0f32; o * ckk];
        let mut db = vec![0f32; if with_bias { o } else { 0 }];
        for (i, (c0, g)) in plan.chunks(count).enumerate() {
            let (a, width) = (first + c0, g * l);
            // dY of the chunk as [O, g·L].
            let dyc = &dy[a * s.out_plane()..(a + g) * s.out_plane()];
            let dymat = if g == 1 {
                Mat::row_major(dyc, o, l)
            } else {
                if dy_wide.len() != o * width {
                    dy_wide = Scratch::take(o * width);
                }
                for (si, sample) in dyc.chunks_exact(s.out_plane()).enumerate() {
                    for (oc, row) in sample.chunks_exact(l).enumerate() {
                        dy_wide[oc * width + si * l..][..l].copy_from_slice(row);
                    }
                }
                Mat::row_major(&dy_wide, o, width)
            };
            if with_bias {
                add_bias_grads(&mut db, dyc, l);
            }
            let xc = &x[a * s.plane()..(a + g) * s.plane()];
            let xcols = cols.unfold(s, xc, g);
            gemm(&mut dw, ckk, i > 0, dymat, xcols.t(), plan.gemm_threads);
            if let Some(wt) = wt {
                let dxc = &mut dx[c0 * s.plane()..(c0 + g) * s.plane()];
                if s.unfold.is_pointwise() && g == 1 {
                    gemm(dxc, l, false, wt, dymat, plan.gemm_threads);
                } else {
                    if dcols.len() != ckk * width {
                        dcols = Scratch::take(ckk * width);
                    }
                    gemm(&mut dcols, width, false, wt, dymat, plan.gemm_threads);
                    dxc.fill(0.0);
                    s.unfold.col2im(&mut dcols, g, (s.c, s.h, s.w), dxc);
                }
            }
        }
        (dw, db)
    };
    let partials = if want_dx {
        map_pieces(&mut dx, s.plane(), plan.per_task, |first, piece| {
            work(first, piece.len() / s.plane(), piece)
        })
    } else {
        map_range(s.n.div_ceil(plan.per_task), threads, |t| {
            let first = t * plan.per_task;
            work(first, plan.per_task.min(s.n - first), &mut [])
        })
    };
    let mut parts = partials.into_iter();
    let (mut dw, mut db) = parts.next().expect("at least one range");
    for (pw, pb) in parts {
        for (a, b) in dw.iter_mut().zip(&pw) {
            *a += b;
        }
        for (a, b) in db.iter_mut().zip(&pb) {
            *a += b;
        }
    }
    (want_dx.then_some(dx), dw, with_bias.then_some(db))
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::unfold::Unfold;
    use super::*;

    /// Small integers (-5..=5) that make every sum of the kernels' tests exact.
    pub(in super::super) fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 + seed * 13) % 11) as f32 - 5.0)
            .collect()
    }

    /// Direct definition of the convolution, in f64.
    fn naive_forward(s: &ConvShape, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
        let (k, st, p) = (s.unfold.k, s.unfold.stride, s.unfold.padding as isize);
        let mut y = vec![0f32; s.n * s.o * s.l()];
        for n in 0..s.n {
            for oc in 0..s.o {
                for oy in 0..s.oh {
                    for ox in 0..s.ow {
                        let mut acc = b[oc] as f64;
                        for c in 0..s.c {
                            for ky in 0..k {
                                for kx in 0..k {
                                    let iy = (oy * st + ky) as isize - p;
                                    let ix = (ox * st + kx) as isize - p;
                                    if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize
                                    {
                                        continue;
                                    }
                                    acc += x
                                        [((n * s.c + c) * s.h + iy as usize) * s.w + ix as usize]
                                        as f64
                                        * w[((oc * s.c + c) * k + ky) * k + kx] as f64;
                                }
                            }
                        }
                        y[((n * s.o + oc) * s.oh + oy) * s.ow + ox] = acc as f32;
                    }
                }
            }
        }
        y
    }

    /// Forward against the definition, backward against the definition's adjoint
    /// (`<dy, conv(x, w)>` is linear in x and in w), for chunked and per-sample plans, one and
    /// three threads. Small integers make every sum exact.
    #[test]
    fn forward_and_backward_match_the_definition() {
        let cases = [
            // (n, c, h, w, o, k, stride, padding)
            (5, 3, 6, 7, 4, 3, 1, 1),
            (4, 2, 9, 9, 3, 3, 2, 1),
            (3, 4, 5, 5, 6, 1, 1, 0),
            (3, 4, 6, 6, 2, 1, 2, 0),
            (70, 2, 3, 3, 3, 3, 1, 0),
            // Through Winograd (outputs 16 wide, so on every CPU).
            (2, 64, 5, 16, 64, 3, 1, 1),
            (1, 64, 6, 18, 65, 3, 1, 0),
        ];
        for (n, c, h, w, o, k, stride, padding) in cases {
            let s = ConvShape::new((n, c, h, w), o, Unfold { k, stride, padding }).unwrap();
            let x = values(n * c * h * w, 1);
            let wt = values(o * s.ckk(), 2);
            let b = values(o, 3);
            let want = naive_forward(&s, &x, &wt, &b);
            let dy = values(want.len(), 4);
            let zero = vec![0f32; o];
            for threads in [1, 3] {
                let what = format!("{s:?} threads {threads}");
                assert_eq!(forward(&s, &x, &wt, Some(&b), threads), want, "{what}");
                let (dx, dw, db) = backward(&s, &x, &wt, &dy, true, true, threads);
                let (dx, db) = (dx.unwrap(), db.unwrap());
                // <dy, conv(e_i, w)> = dx_i, checked through linearity on whole vectors:
                // <dy, conv(x', w) - conv(0, w)> = <dx, x'> for any x'.
                let dot = |a: &[f32], b: &[f32]| -> f64 {
                    a.iter()
                        .zip(b)
                        .map(|(p, q)| (*p as f64) * (*q as f64))
                        .sum()
                };
                let x2 = values(x.len(), 5);
                assert_eq!(
                    dot(&dy, &naive_forward(&s, &x2, &wt, &zero)),
                    dot(&dx, &x2),
                    "dx {what}"
                );
                let w2 = values(wt.len(), 6);
                assert_eq!(
                    dot(&dy, &naive_forward(&s, &x, &w2, &zero)),
                    dot(&dw, &w2),
                    "dw {what}"
                );
                let sums: Vec<f32> = (0..o)
                    .map(|oc| {
                        (0..n)
                            .map(|i| dy[(i * o + oc) * s.l()..][..s.l()].iter().sum::<f32>())
                            .sum()
                    })
                    .collect();
                assert_eq!(db, sums, "db {what}");
                let (no_dx, dw2, no_db) = backward(&s, &x, &wt, &dy, false, false, threads);
                assert!(no_dx.is_none() && no_db.is_none());
                assert_eq!(dw2, dw, "dw without dx {what}");
            }
        }
    }
}
