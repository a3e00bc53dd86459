//! Borrowing the f32 values of CPU tensors and storages, for the layers' custom ops.

use candle_core::{CpuStorage, Layout, Storage, Tensor};

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
