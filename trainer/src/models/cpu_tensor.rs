//! Borrowing the f32 values of CPU tensors and storages, for the layers' custom ops; the
//! inputs of their matrix products as mixed precision rounds them.

use std::borrow::Cow;

use candle_core::{CpuStorage, DType, Layout, Storage, Tensor};

use crate::models::kernels::Rounding;

/// The values of a contiguous f32 CPU storage, or an error naming the op.
pub fn storage_f32<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        (CpuStorage::F32(_), None) => candle_core::bail!("{op}: expected a contiguous tensor"),
        (s, _) => candle_core::bail!(
            "{op}: expected f32 values, got {:?}",
            candle_core::backend::BackendStorage::dtype(s)
        ),
    }
}

/// Calls `f` with the values of a CPU f32 tensor (made contiguous first if it is not).
pub fn with_f32<R>(t: &Tensor, op: &str, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => Ok(f(storage_f32(s, layout, op)?)),
        _ => candle_core::bail!("{op}: expected a CPU tensor"),
    }
}

/// A CPU f32 tensor of `shape` owning `values`.
pub fn cpu_tensor(
    values: Vec<f32>,
    shape: impl Into<candle_core::Shape>,
) -> candle_core::Result<Tensor> {
    Tensor::from_vec(values, shape, &candle_core::Device::Cpu)
}

/// Whether a tensor is f32 on the CPU: what the layers' custom ops run on.
pub fn is_cpu_f32(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == candle_core::DType::F32
}

/// What this thread's autocast ([`candle_core::autocast`], set for `train.precision`) does to
/// the inputs of a matrix product: `None` in f32.
pub fn autocast() -> Option<Rounding> {
    match candle_core::autocast::current() {
        Some(DType::BF16) => Some(Rounding::Bf16),
        Some(DType::F16) => Some(Rounding::F16),
        _ => None,
    }
}

/// [`storage_f32`] for a matrix product's input: rounded under `rounding`.
pub fn gemm_input<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
    rounding: Option<Rounding>,
) -> candle_core::Result<Cow<'a, [f32]>> {
    let values = storage_f32(storage, layout, op)?;
    Ok(match rounding {
        None => Cow::Borrowed(values),
        Some(r) => Cow::Owned(r.rounded(values)),
    })
}

/// [`with_f32`] for a matrix product's input: `f` sees the values rounded under `rounding`.
pub fn with_gemm_f32<R>(
    t: &Tensor,
    op: &str,
    rounding: Option<Rounding>,
    f: impl FnOnce(&[f32]) -> R,
) -> candle_core::Result<R> {
    with_f32(t, op, |values| match rounding {
        None => f(values),
        Some(r) => f(&r.rounded(values)),
    })
}
