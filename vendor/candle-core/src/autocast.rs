//! Automatic mixed precision for matrix products and convolutions (ddp's patch, see PATCH.md),
//! as `torch.autocast` does it on CPU: while a dtype is set on the calling thread, every f32
//! matrix product and convolution on the CPU rounds its two inputs to that dtype (bf16 or f16,
//! round to nearest even) and then computes in f32. The products of two bf16 (or f16) values
//! are exact in f32, so that is a bf16 dot product with f32 accumulation; the output stays f32.
//! Everything else (softmax, normalisation, losses, reductions, the optimizer) is untouched.
//!
//! The setting is per thread, as PyTorch's: [`scope`] sets it until the guard is dropped.

use std::cell::Cell;

use crate::{DType, Result};

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The dtype matrix products and convolutions on this thread round their inputs to, if any.
pub fn current() -> Option<DType> {
    AUTOCAST.with(|a| a.get())
}

/// Restores the previous setting when dropped.
#[must_use = "the setting holds only while the guard lives"]
pub struct Scope {
    previous: Option<DType>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        AUTOCAST.with(|a| a.set(self.previous));
    }
}

/// Sets this thread's autocast dtype (`None`: off) until the returned guard is dropped. Only
/// `BF16` and `F16` round; any other dtype is refused.
pub fn scope(dtype: Option<DType>) -> Result<Scope> {
    if let Some(d) = dtype {
        if !matches!(d, DType::BF16 | DType::F16) {
            crate::bail!("autocast: {d:?} is not a reduced precision (bf16 or f16)");
        }
    }
    let previous = AUTOCAST.with(|a| a.replace(dtype));
    Ok(Scope { previous })
}

/// `x` rounded to `dtype` (bf16 or f16, to nearest even) and back to f32; other dtypes leave it.
/// bf16 gives `half::bf16::from_f32`'s bits without a branch, so that [`rounded`] vectorises.
#[inline]
pub fn round(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::BF16 => {
            let bits = x.to_bits();
            // Ties to even: the carry out of the low 16 bits rounds the upper ones.
            let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
            // A NaN stays a NaN, made quiet, its sign and upper payload kept.
            let nan = (bits | 0x0040_0000) & 0xffff_0000;
            f32::from_bits(if bits & 0x7fff_ffff > 0x7f80_0000 {
                nan
            } else {
                rounded
            })
        }
        DType::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Every value of `xs` rounded as [`round`] does.
pub fn rounded(dtype: DType, xs: &[f32]) -> Vec<f32> {
    xs.iter().map(|&x| round(dtype, x)).collect()
}
