//! A tensor's values as host f32: read in place where they are contiguous f32 in host memory,
//! through a copy otherwise.

use candle_core::{CpuStorage, Storage, Tensor};

use crate::{Error, Result};

/// Copies (or adds, with `add`) a tensor's f32 values into `dst` without allocating on CPU.
pub fn read_tensor(t: &Tensor, dst: &mut [f32], add: bool) -> Result<()> {
    if t.elem_count() != dst.len() {
        return Err(Error::Model(format!(
            "tensor of {} elements read into a slot of {}",
            t.elem_count(),
            dst.len()
        )));
    }
    if host_f32(t, |v| copy_or_add(v, &mut *dst, add)).is_some() {
        return Ok(());
    }
    let host: Vec<f32> = t
        .to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1()?;
    copy_or_add(&host, dst, add);
    Ok(())
}

/// `f` of a tensor's values where they are contiguous f32 in host memory, else `None`.
pub(crate) fn host_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Option<R> {
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::F32(data)), Some((a, b))) => Some(f(&data[a..b])),
        _ => None,
    }
}

pub(crate) fn copy_or_add(src: &[f32], dst: &mut [f32], add: bool) {
    if add {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
    } else {
        dst.copy_from_slice(src);
    }
}
