//! What the two convolution paths (im2col + GEMM in `conv`, F(2×2, 3×3) in `winograd`) share:
//! a convolution's shapes and the bias gradient.

use super::unfold::Unfold;

/// Everything about one convolution's shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub unfold: Unfold,
    pub oh: usize,
    pub ow: usize,
}

impl ConvShape {
    pub fn new(
        (n, c, h, w): (usize, usize, usize, usize),
        o: usize,
        unfold: Unfold,
    ) -> Result<Self, String> {
        let (oh, ow) = unfold.out_hw(h, w)?;
        Ok(ConvShape {
            n,
            c,
            h,
            w,
            o,
            unfold,
            oh,
            ow,
        })
    }

    /// Output positions per sample.
    pub fn l(&self) -> usize {
        self.oh * self.ow
    }

    /// Rows of the unfolded matrix (= columns of the weight matrix).
    pub fn ckk(&self) -> usize {
        self.c * self.unfold.k * self.unfold.k
    }

    pub(super) fn plane(&self) -> usize {
        self.c * self.h * self.w
    }

    pub(super) fn out_plane(&self) -> usize {
        self.o * self.l()
    }
}

/// Adds to each channel's bias gradient in `db` the sums of its `plane` values in every sample
/// of `dys` (`[g, O, plane]`, O = `db.len()`), samples in order.
pub(crate) fn add_bias_grads(db: &mut [f32], dys: &[f32], plane: usize) {
    let o = db.len();
    for (oc, d) in db.iter_mut().enumerate() {
        for sample in dys.chunks_exact(o * plane) {
            *d += lane_sum(&sample[oc * plane..][..plane]);
        }
    }
}

/// The sum of `xs` in 16 interleaved partial sums, then those in order and the tail: a single
/// running sum is one dependent add per value, which the compiler cannot vectorize.
fn lane_sum(xs: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut partial = [0f32; LANES];
    let blocks = xs.chunks_exact(LANES);
    let tail = blocks.remainder();
    for block in blocks {
        partial.iter_mut().zip(block).for_each(|(p, x)| *p += x);
    }
    tail.iter().fold(partial.iter().sum::<f32>(), |s, x| s + x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_sums_add_every_value_once() {
        for n in [0, 1, 15, 16, 17, 576, 677] {
            let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
            let exact: f32 = xs.iter().sum();
            assert_eq!(lane_sum(&xs), exact, "{n} values");
        }
        let rough: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let f64_sum: f64 = rough.iter().map(|&x| x as f64).sum();
        assert!((lane_sum(&rough) as f64 - f64_sum).abs() < 1e-4);
    }
}
