//! Arrays in `.safetensors`, `.npz` and `.npy` files, memory-mapped (`data.name = "tensors"`).
//!
//! `data.path` names a `.safetensors` or `.npz` file, a folder holding `x.npy` and `y.npy`, or a
//! folder with a training part `train.*` and optionally a test part `test.*` (see [`layout`]);
//! without a test part, `data.test_fraction` (default 0.2) of the samples is held out, seeded.
//! `data.x_key` / `data.y_key` (default `x` / `y`) name the inputs and the targets: integer
//! targets are classes, float ones values (integer ones too with `data.task = "regression"`).
//! The files are
//! mapped, not read: a batch converts only its own samples to `f32` and hands their pages back,
//! so a file larger than the memory trains with constant memory (see [`source`]). See
//! `docs/data.md`, "Tensor files", for the layouts, types, shapes and every error.
//!
//! Layout:
//! - this file: [`open`] (a spec's parts and their record), and the entry points of the fuzz
//!   targets ([`read_safetensors`], [`read_npz`], [`read_npy`]).
//! - [`layout`]: `data.path` resolved into parts, and each part's two arrays opened.
//! - [`safetensors`]: the header of a `.safetensors` file.
//! - [`npz`]: the members of an `.npz` archive, mapped where they lie.
//! - [`npy`]: the header of an `.npy` array (versions 1.0, 2.0, 3.0).
//! - [`array`]: a typed view of one array of a mapped file ([`Array`]), and the file's bytes
//!   ([`Store`]).
//! - [`dtype`]: element types, their names, and their conversion to `f32`.
//! - [`source`]: [`TensorData`], the [`Dataset`](crate::data::Dataset) of an inputs and a
//!   targets array, and the checks made when it is opened.
//! - `write` (tests and the `test-util` feature): writers of small `.npy`, `.npz` and
//!   `.safetensors` files.

pub mod array;
pub mod dtype;
pub mod layout;
pub mod npy;
pub mod npz;
pub mod safetensors;
pub mod source;

#[cfg(any(test, feature = "test-util"))]
pub mod write;

use std::sync::Arc;

pub use array::{Array, Store};
pub use source::TensorData;

use super::parts::{DEFAULT_TEST_FRACTION, DataRecord, OpenContext, Parts};
use crate::Result;
use crate::data::{Batch, Dataset, TargetKind, fill_checked};
use crate::spec::{Spec, SyntheticTask};
use layout::Keys;

/// Opens the tensor files of `spec`: the training part, and the test part or the share held
/// out of the training part.
pub fn open(spec: &Spec, _ctx: &OpenContext) -> Result<Parts> {
    let d = &spec.data;
    let Some(path) = d.path.as_deref() else {
        return Err(spec.error("data.path", "is required for data.name = \"tensors\""));
    };
    let keys = Keys {
        x: d.x_key.as_deref().unwrap_or("x"),
        y: d.y_key.as_deref().unwrap_or("y"),
    };
    if keys.x == keys.y {
        return Err(spec.error(
            "data.y_key",
            format!(
                "names the same array as data.x_key ({:?}): the inputs and the targets are two \
                 arrays",
                keys.x
            ),
        ));
    }
    let values = d.task == SyntheticTask::Regression;
    let found = layout::find(path, keys)?;
    let (x, y) = found.train.open(keys)?;
    let train = TensorData::new(x, y, values)?;
    let mut record = DataRecord {
        format: "tensors".into(),
        source: train.files(),
        classes: match train.target() {
            TargetKind::Classes(n) => Some((0..n).map(|c| c.to_string()).collect()),
            TargetKind::Values(_) => None,
        },
        train_samples: train.len(),
        ..DataRecord::default()
    };
    let Some(part) = found.test else {
        record.test_held_out = true;
        let f = d.test_fraction.unwrap_or(DEFAULT_TEST_FRACTION);
        let mut parts = Parts::held_out(Arc::new(train), f, spec.train.seed, record);
        parts.record.train_samples = parts.train.len();
        parts.record.test_samples = parts.test.len();
        return Ok(parts);
    };
    if d.test_fraction.is_some() {
        return Err(spec.error(
            "data.test_fraction",
            format!(
                "the data has its own test part ({}): remove test_fraction",
                part.path().display()
            ),
        ));
    }
    let (x, y) = part.open(keys)?;
    let test = TensorData::new(x, y, values)?.conform(&train)?;
    record.source.extend(test.files());
    record.test_samples = test.len();
    Ok(Parts {
        train: Arc::new(train),
        test: Arc::new(test),
        record,
    })
}

/// Reads `bytes` as a `.safetensors` file holding `x` and `y` the way [`open`] reads a file,
/// and fills a batch with its first, middle and last samples; returns the values filled. For
/// the fuzz target: any bytes give a result or an error, never a panic.
pub fn read_safetensors(bytes: &[u8]) -> Result<usize> {
    let store = Store::memory(bytes, "fuzz.safetensors");
    let h = safetensors::header(&store)?;
    let x = h.array(&store, "x", "data.x_key")?;
    let y = h.array(&store, "y", "data.y_key")?;
    fill_some(TensorData::new(x, y, false)?)
}

/// [`read_safetensors`] for an `.npz` archive holding `x.npy` and `y.npy`.
pub fn read_npz(bytes: &[u8]) -> Result<usize> {
    let store = Store::memory(bytes, "fuzz.npz");
    let mut m = npz::members(&store)?;
    let x = m.array(&store, "x", "data.x_key")?;
    let y = m.array(&store, "y", "data.y_key")?;
    fill_some(TensorData::new(x, y, false)?)
}

/// Reads `bytes` as an `.npy` file: converts its first rows as inputs, then fills a batch of a
/// data set holding it as both the inputs and the targets. An error when the array cannot be
/// read (the data set may refuse it as targets: that is not this file's error).
pub fn read_npy(bytes: &[u8]) -> Result<usize> {
    let store = Store::memory(bytes, "fuzz.npy");
    let a = npy::array(&store, "x.npy")?;
    let mut v = Vec::new();
    dtype::extend_f32(a.dtype, a.rows_bytes(0..a.rows().min(4)), true, &mut v);
    let filled = TensorData::new(a.clone(), a, false).and_then(fill_some);
    Ok(v.len() + filled.unwrap_or(0))
}

fn fill_some(ds: TensorData) -> Result<usize> {
    let n = ds.len();
    let mut b = Batch::new();
    fill_checked(&ds, &[0, n / 2, n - 1], &mut b)?;
    Ok(b.x.len() + b.classes.len() + b.values.len())
}

#[cfg(test)]
#[path = "open_tests.rs"]
mod tests;
