//! CPU kernels behind the layers' custom ops: plain functions over `f32` slices, no candle types,
//! unit-tested against naive loops.
//!
//! Layout:
//! - `gemm`: row-major (or strided) matrix views over the `gemm` crate, the GEMM candle's own
//!   matmul uses.
//! - `gemm_bf16`: bf16 × bf16 → f32 GEMM (bf16 autocast): operands packed once into bf16
//!   k-pair panels (reusable, e.g. a weight per step), an AVX512_BF16 microkernel picked at run
//!   time, the f32 GEMM on rounded inputs elsewhere; `gemm_bf16_tests` checks it.
//! - `tasks`: splitting a batch into contiguous per-thread ranges on rayon's pool (the pool the
//!   launcher sizes with `RAYON_NUM_THREADS`), with a fixed order for summing partial results.
//! - `unfold`: the im2col geometry (runs of in-bounds positions), im2col and col2im.
//! - `conv_shape`: [`ConvShape`](conv_shape::ConvShape), a convolution's shapes, and the bias
//!   gradient, shared by `conv` and `winograd`.
//! - `conv`: convolution forward and backward, a batch chunk at a time, nothing kept between
//!   the two passes but the input; wide 3×3 stride-1 ones go to `winograd`, the others to
//!   im2col + GEMM.
//! - `winograd`: F(2×2, 3×3) forward, input gradient and filter gradient (16 GEMMs per chunk
//!   in the transformed domain).
//! - `batchnorm`: per-channel statistics and the fused normalise(+ReLU) forward and backward.
//! - `pool`: max-pooling that records each window's winner, so that backward is a scatter.
//! - `math`: branch-free `exp`, `erf` and GELU that vectorise (PyTorch's erf approximation).
//! - `linear`: `x·Wᵀ + b` with the bias as the GEMM's start, and its backward.
//! - `layer_norm`: LayerNorm over rows, forward and the closed-form backward.
//! - `gelu`: the exact GELU over a slice and its gradient.
//! - `attention`: causal self-attention read from the fused q|k|v rows, written in merged-head
//!   layout, and its backward (probabilities recomputed).
//! - `cross_entropy`: the mean cross-entropy of logit rows and its gradient, fused with the
//!   log-softmax.
//! - `simd`: `widest_simd!`, a kernel's body compiled for AVX-512 and AVX2 too and picked at run
//!   time (the winograd transforms, the batchnorm passes, ReLU and the GPT's kernels).
//! - `mod.rs`: ReLU's value and gradient, one definition for every kernel that applies it, and
//!   [`Rounding`], what mixed precision does to a matrix product's inputs.

pub mod attention;
pub mod batchnorm;
pub mod conv;
pub mod conv_shape;
pub mod cross_entropy;
pub mod gelu;
pub mod gemm;
pub mod gemm_bf16;
#[cfg(test)]
mod gemm_bf16_tests;
pub mod layer_norm;
pub mod linear;
pub mod math;
pub mod pool;
pub mod simd;
pub mod tasks;
pub mod unfold;
pub mod winograd;

/// `max(v, 0)` with a definite zero: `+0.0` for every `v` that is not positive (`−0.0` and NaN
/// included). `f32::max` may return either zero for `max(−0.0, 0.0)`, and which one depends on
/// how the compiler vectorised the loop around it, so two copies of the same ReLU could differ
/// in the sign of their zeros.
#[inline(always)]
pub fn relu_value(v: f32) -> f32 {
    if v > 0.0 { v } else { 0.0 }
}

/// ReLU's input gradient from its output `y` and output gradient `g`: `g · (y > 0)`, PyTorch's
/// mask (`+0.0` where the output is not positive).
#[inline(always)]
pub fn relu_grad_value(y: f32, g: f32) -> f32 {
    if y > 0.0 { g } else { 0.0 }
}

/// What mixed precision does to a matrix product's inputs (`train.precision`, as
/// `torch.autocast`): each value rounded to bf16 or to IEEE half (to nearest, ties to even) and
/// then multiplied and summed in f32, which is exact for the products of two such values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    Bf16,
    F16,
}

impl Rounding {
    /// `x` rounded, as an f32.
    #[inline(always)]
    pub fn round(self, x: f32) -> f32 {
        match self {
            Rounding::Bf16 => gemm_bf16::round_to_bf16_f32(x),
            Rounding::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// Every value of `xs` rounded in place.
    pub fn apply(self, xs: &mut [f32]) {
        match self {
            Rounding::Bf16 => bf16_in_place(xs),
            Rounding::F16 => {
                // Through half's slice conversions: F16C where the CPU has it.
                use half::slice::HalfFloatSliceExt;
                let mut halves = vec![half::f16::ZERO; CHUNK];
                for part in xs.chunks_mut(CHUNK) {
                    let h = &mut halves[..part.len()];
                    h.convert_from_f32_slice(part);
                    h.convert_to_f32_slice(part);
                }
            }
        }
    }

    /// A rounded copy of `xs`, written in one pass.
    pub fn rounded(self, xs: &[f32]) -> Vec<f32> {
        match self {
            Rounding::Bf16 => {
                let mut out = Vec::with_capacity(xs.len());
                bf16_into(xs, &mut out.spare_capacity_mut()[..xs.len()]);
                // SAFETY: `bf16_into` wrote every one of the first `xs.len()` values.
                unsafe { out.set_len(xs.len()) };
                out
            }
            Rounding::F16 => {
                let mut out = xs.to_vec();
                self.apply(&mut out);
                out
            }
        }
    }
}

/// Values converted to half at a time (a buffer that stays in L1).
const CHUNK: usize = 1024;

simd::widest_simd! {
    /// `xs` rounded to bf16 in place ([`gemm_bf16::round_to_bf16_f32`], vectorised).
    fn bf16_in_place(xs: &mut [f32]) {
        for x in xs.iter_mut() {
            *x = gemm_bf16::round_to_bf16_f32(*x);
        }
    }
}

simd::widest_simd! {
    /// `dst[i]` = `src[i]` rounded to bf16, for every `i` of `src` (`dst` as long).
    fn bf16_into(src: &[f32], dst: &mut [std::mem::MaybeUninit<f32>]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            d.write(gemm_bf16::round_to_bf16_f32(x));
        }
    }
}
