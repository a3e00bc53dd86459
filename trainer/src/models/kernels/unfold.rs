//! im2col geometry: which input values each row of the unfolded matrix reads.
//!
//! A batch chunk of `g` samples `[g, C, H, W]` unfolds into `[C·k·k, g·L]` (L = OH·OW output
//! positions, sample-major columns); rows are (c, ky, kx), PyTorch's weight order. Out-of-bounds
//! (padding) positions are zeros that [`Unfold::im2col`] never writes, so a buffer zeroed once
//! can be refilled chunk after chunk.

/// Kernel size, stride and zero padding of a square convolution window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unfold {
    pub k: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Unfold {
    /// Output height and width for an `h × w` input, or an error naming the sizes.
    pub fn out_hw(&self, h: usize, w: usize) -> Result<(usize, usize), String> {
        let (hp, wp) = (h + 2 * self.padding, w + 2 * self.padding);
        if hp < self.k || wp < self.k || self.stride == 0 {
            return Err(format!(
                "conv2d: input {h}x{w} (padding {}, stride {}) does not fit the {k}x{k} kernel",
                self.padding,
                self.stride,
                k = self.k
            ));
        }
        Ok((
            (hp - self.k) / self.stride + 1,
            (wp - self.k) / self.stride + 1,
        ))
    }

    /// A 1×1, stride-1, unpadded window: the unfolded sample is the sample itself.
    pub fn is_pointwise(&self) -> bool {
        self.k == 1 && self.stride == 1 && self.padding == 0
    }

    /// Calls `f(col_row, out_pos, input_index, len)` for every run of in-bounds positions of one
    /// sample: `len` consecutive output positions from `out_pos` read the inputs `input_index`,
    /// `input_index + stride`, ... (the bounds are worked out once per run, not per element).
    /// The order (c, ky, kx, oy) is fixed, so gradients sum alike every time.
    pub fn for_each_run(
        &self,
        c: usize,
        h: usize,
        w: usize,
        mut f: impl FnMut(usize, usize, usize, usize),
    ) {
        let (oh, ow) = self.out_hw(h, w).expect("checked by the caller");
        let (k, s, p) = (self.k, self.stride, self.padding);
        // For each kx, the output columns whose input column ox·s + kx − p lies in 0..w.
        let runs: Vec<(usize, usize, usize)> = (0..k)
            .map(|kx| {
                let first = p.saturating_sub(kx).div_ceil(s);
                let end = if w + p > kx {
                    ((w + p - kx - 1) / s + 1).min(ow)
                } else {
                    0
                };
                let ix0 = (first * s + kx).saturating_sub(p);
                (first, end.saturating_sub(first), ix0)
            })
            .collect();
        for ci in 0..c {
            for ky in 0..k {
                for (kx, &(first, len, ix0)) in runs.iter().enumerate() {
                    if len == 0 {
                        continue;
                    }
                    let row = (ci * k + ky) * k + kx;
                    for oy in 0..oh {
                        let iy = oy * s + ky;
                        if iy < p || iy - p >= h {
                            continue;
                        }
                        f(row, oy * ow + first, (ci * h + iy - p) * w + ix0, len);
                    }
                }
            }
        }
    }

    /// A stride-1 window whose padding keeps the size (`2p = k − 1`): every row of the unfolded
    /// sample is the input plane shifted by (ky − p, kx − p), so it moves as one block per row
    /// instead of one run per output row.
    fn keeps_size(&self) -> bool {
        self.stride == 1 && 2 * self.padding + 1 == self.k
    }

    /// For a [`Unfold::keeps_size`] window over an `h × w` plane: calls `f(row, dst, src, len,
    /// shift)` per (c, ky, kx) row: output positions `dst..dst + len` read the inputs `src..src +
    /// len` of the sample, except the `|shift|` edge columns of every output row (first ones for
    /// `shift < 0`, last ones for `shift > 0`), which read a neighbouring row's values instead of
    /// the padding's zeros.
    fn for_each_shifted_row(
        &self,
        c: usize,
        h: usize,
        w: usize,
        mut f: impl FnMut(usize, usize, usize, usize, isize),
    ) {
        let (k, p) = (self.k, self.padding as isize);
        let (hi, wi, plane) = (h as isize, w as isize, (h * w) as isize);
        for ci in 0..c {
            for ky in 0..k {
                let dy = ky as isize - p;
                // Output rows whose input row oy + dy is inside the plane.
                let (oy0, oy1) = ((-dy).max(0), (hi - dy).min(hi));
                for kx in 0..k {
                    let dx = kx as isize - p;
                    // Input offset of output position i is i + dy·w + dx; clip to the plane (the
                    // clipped positions are edge columns).
                    let (mut start, end) = (oy0 * wi, oy1 * wi);
                    let offset = dy * wi + dx;
                    start = start.max(-offset);
                    let end = end.min(plane - offset);
                    if end <= start {
                        continue;
                    }
                    let row = (ci * k + ky) * k + kx;
                    let src = ci as isize * plane + start + offset;
                    f(
                        row,
                        start as usize,
                        src as usize,
                        (end - start) as usize,
                        dx,
                    );
                }
            }
        }
    }

    /// Output positions of the edge columns of a shifted row (see
    /// [`Unfold::for_each_shifted_row`]) inside `dst..dst + len` of a `w`-wide output.
    fn edge_columns(
        w: usize,
        dst: usize,
        len: usize,
        shift: isize,
    ) -> impl Iterator<Item = std::ops::Range<usize>> {
        let cols = shift.unsigned_abs();
        let (first_row, end) = (dst / w, dst + len);
        (first_row..end.div_ceil(w))
            .map(move |r| {
                let edge = if shift < 0 {
                    r * w..r * w + cols
                } else {
                    (r + 1) * w - cols..(r + 1) * w
                };
                edge.start.max(dst)..edge.end.min(end)
            })
            .filter(move |e| cols > 0 && e.start < e.end)
    }

    /// Writes the in-bounds values of the `g` samples in `x` (`[g, c, h, w]`) into `cols`
    /// (`[c·k·k, g·L]`, row stride `g·L`); padding positions are left as they are (or zeroed).
    pub fn im2col(&self, x: &[f32], g: usize, (c, h, w): (usize, usize, usize), cols: &mut [f32]) {
        let (oh, ow) = self.out_hw(h, w).expect("checked by the caller");
        let (l, plane) = (oh * ow, c * h * w);
        let width = g * l;
        let step = self.stride;
        for s in 0..g {
            let x = &x[s * plane..(s + 1) * plane];
            if self.keeps_size() {
                self.for_each_shifted_row(c, h, w, |row, dst, src, len, shift| {
                    let out = &mut cols[row * width + s * l..][..l];
                    out[dst..dst + len].copy_from_slice(&x[src..src + len]);
                    for edge in Self::edge_columns(w, dst, len, shift) {
                        zero(&mut out[edge]);
                    }
                });
                continue;
            }
            self.for_each_run(c, h, w, |row, pos, i, len| {
                let dst = &mut cols[row * width + s * l + pos..][..len];
                if step == 1 {
                    dst.copy_from_slice(&x[i..i + len]);
                } else {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d = x[i + j * step];
                    }
                }
            });
        }
    }

    /// Adds the unfolded gradient `cols` (`[c·k·k, g·L]`) back onto `dx` (`[g, c, h, w]`).
    /// `cols` is used up: its values at padding positions may be zeroed.
    pub fn col2im(
        &self,
        cols: &mut [f32],
        g: usize,
        (c, h, w): (usize, usize, usize),
        dx: &mut [f32],
    ) {
        let (oh, ow) = self.out_hw(h, w).expect("checked by the caller");
        let (l, plane) = (oh * ow, c * h * w);
        let width = g * l;
        let step = self.stride;
        for s in 0..g {
            let d = &mut dx[s * plane..(s + 1) * plane];
            if self.keeps_size() {
                // Padding positions contribute nothing: zeroed, the block adds them as +0.
                self.for_each_shifted_row(c, h, w, |row, dst, src, len, shift| {
                    let grad = &mut cols[row * width + s * l..][..l];
                    for edge in Self::edge_columns(w, dst, len, shift) {
                        zero(&mut grad[edge]);
                    }
                    for (d, g) in d[src..src + len].iter_mut().zip(&grad[dst..dst + len]) {
                        *d += g;
                    }
                });
                continue;
            }
            self.for_each_run(c, h, w, |row, pos, i, len| {
                let src = &cols[row * width + s * l + pos..][..len];
                if step == 1 {
                    for (d, g) in d[i..i + len].iter_mut().zip(src) {
                        *d += g;
                    }
                } else {
                    for (j, g) in src.iter().enumerate() {
                        d[i + j * step] += g;
                    }
                }
            });
        }
    }
}

/// Zeroes a few values (an edge column's one or two) without a `memset` call per row.
#[inline(always)]
fn zero(values: &mut [f32]) {
    match values {
        [v] => *v = 0.0,
        [a, b] => (*a, *b) = (0.0, 0.0),
        _ => values.fill(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unfolded value at (row, column) by definition: 0 outside the input.
    fn naive(u: &Unfold, x: &[f32], g: usize, (c, h, w): (usize, usize, usize)) -> Vec<f32> {
        let (oh, ow) = u.out_hw(h, w).unwrap();
        let (k, l) = (u.k, oh * ow);
        let mut out = vec![0f32; c * k * k * g * l];
        for s in 0..g {
            for ci in 0..c {
                for ky in 0..k {
                    for kx in 0..k {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let iy = (oy * u.stride + ky) as isize - u.padding as isize;
                                let ix = (ox * u.stride + kx) as isize - u.padding as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let row = (ci * k + ky) * k + kx;
                                out[row * g * l + s * l + oy * ow + ox] =
                                    x[((s * c + ci) * h + iy as usize) * w + ix as usize];
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn im2col_and_col2im_match_the_definition() {
        let dims = (2, 5, 6);
        let g = 3;
        let x: Vec<f32> = (0..g * 2 * 5 * 6).map(|v| v as f32 + 1.0).collect();
        for (k, stride, padding) in [
            (3, 1, 1),
            (3, 2, 1),
            (1, 2, 0),
            (1, 1, 0),
            (5, 3, 2),
            (5, 1, 2),
            (3, 1, 0),
        ] {
            let u = Unfold { k, stride, padding };
            let want = naive(&u, &x, g, dims);
            let mut cols = vec![0f32; want.len()];
            u.im2col(&x, g, dims, &mut cols);
            assert_eq!(cols, want, "im2col k{k} s{stride} p{padding}");
            // col2im is im2col's adjoint: <im2col(x), y> = <x, col2im(y)>.
            let y: Vec<f32> = (0..want.len()).map(|i| (i % 7) as f32 - 3.0).collect();
            let mut dx = vec![0f32; x.len()];
            u.col2im(&mut y.clone(), g, dims, &mut dx);
            let lhs: f32 = cols.iter().zip(&y).map(|(a, b)| a * b).sum();
            let rhs: f32 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert_eq!(lhs, rhs, "adjoint k{k} s{stride} p{padding}");
        }
        assert!(
            Unfold {
                k: 5,
                stride: 1,
                padding: 0
            }
            .out_hw(3, 8)
            .is_err()
        );
    }
}
