//! The [`Dataset`] of an inputs array `x` and a targets array `y`: the checks made when they are
//! opened, and batches filled straight from the mapped files.
//!
//! Sample `i` is row `i` of both arrays. The rest of `x`'s shape is the sample's: `()` → `[1, 1, 1]`,
//! `(d,)` → `[1, 1, d]`, `(H, W)` → `[1, H, W]`, `(C, H, W)` → `[C, H, W]`. Integer targets are
//! class indices (`y` of shape `(N,)` or `(N, 1)`; the class count is the largest label + 1 of
//! the training part); float targets are values (`(N,)` → 1 per sample, `(N, k)` → k), and so
//! are integer ones with `data.task = "regression"`.
//!
//! Opening reads every target once (labels checked and counted, values checked finite) and, when
//! `x` is floating point and at most [`CHECK_BYTES`], every input (checked finite), 16 MiB at a
//! time, each segment's pages handed back once read. A larger `x` is checked as its samples are read: a batch
//! holding a non-finite value is an error naming the sample. A batch is converted from the
//! mapped rows it needs, each input row's pages handed back as soon as it is converted (the
//! targets' after the batch), so memory does not grow with the file.

use std::path::PathBuf;

use rayon::prelude::*;

use super::array::{Array, show_shape};
use super::dtype::{extend_f32, first_non_finite, integer};
use crate::data::{Batch, Dataset, TargetKind};
use crate::error::{Error, Result};

/// Floating-point inputs up to this many bytes are checked for NaN and infinities when opened;
/// larger ones as their batches are read.
pub const CHECK_BYTES: usize = 1 << 30;
/// The most classes read (labels 0..MAX_CLASSES−1).
pub const MAX_CLASSES: u64 = 1_000_000;
/// Bytes read between two hand-backs of pages while checking (at most this much of the file is
/// resident at once).
const SEGMENT: usize = 16 << 20;
/// Bytes one thread checks at a time.
const CHUNK: usize = 256 << 10;

/// Inputs and targets from mapped arrays.
#[derive(Debug)]
pub struct TensorData {
    x: Array,
    y: Array,
    shape: [usize; 3],
    target: TargetKind,
    /// Every input was checked finite when opened.
    x_checked: bool,
}

impl TensorData {
    /// Checks `x` and `y` (shapes, lengths, every target; the inputs when small enough) and
    /// counts the classes of integer targets. With `values`, integer targets are read as values
    /// too (`data.task = "regression"`).
    pub fn new(x: Array, y: Array, values: bool) -> Result<TensorData> {
        let shape = sample_shape(&x)?;
        if x.rows() != y.rows() {
            return Err(Error::data(
                y.path(),
                format!(
                    "{} has {} samples but {} has {}: the leading dimension of both is the \
                     sample; save one target per input",
                    x.label,
                    x.rows(),
                    y.label,
                    y.rows()
                ),
            ));
        }
        let target = if y.dtype.is_float() || values {
            let k = match y.shape[..] {
                [_] => 1,
                [_, k] if k > 0 => k,
                _ => return Err(bad_y_shape(&y, "values: shape (N,) or (N, k)", values)),
            };
            if let Some((row, pos)) = non_finite(&y) {
                return Err(non_finite_error(&y, row, pos, "targets"));
            }
            TargetKind::Values(k)
        } else {
            if !matches!(y.shape[..], [_] | [_, 1]) {
                return Err(bad_y_shape(
                    &y,
                    "class indices, one per sample: shape (N,); for one-hot rows save \
                     y.argmax(1)",
                    values,
                ));
            }
            TargetKind::Classes(largest_label(&y, None)? as usize + 1)
        };
        let x_checked = !x.dtype.is_float() || x.rows() * x.row_bytes() <= CHECK_BYTES;
        if x_checked && let Some((row, pos)) = non_finite(&x) {
            return Err(non_finite_error(&x, row, pos, "inputs"));
        }
        Ok(TensorData {
            x,
            y,
            shape,
            target,
            x_checked,
        })
    }

    /// This test part checked against the training part `train`: the same sample shape, the
    /// same kind of targets, and classes among the training part's (whose count it takes).
    pub fn conform(mut self, train: &TensorData) -> Result<TensorData> {
        let bad = |msg: String| Err(Error::data(self.x.path(), msg));
        if self.shape != train.shape {
            return bad(format!(
                "{} holds samples of shape {} but the training part's ({}) are {}: both parts \
                 need the same sample shape",
                self.x.label,
                show_shape(&self.x.shape[1..]),
                train.x.path().display(),
                show_shape(&train.x.shape[1..])
            ));
        }
        match (self.target, train.target) {
            (TargetKind::Classes(_), TargetKind::Classes(n)) => {
                largest_label(&self.y, Some(n as u64))?;
                self.target = train.target;
            }
            (TargetKind::Values(a), TargetKind::Values(b)) if a == b => {}
            (mine, theirs) => {
                return bad(format!(
                    "{} holds {} but the training part's ({}) holds {}: both parts need the same \
                     kind of targets",
                    self.y.label,
                    describe_target(mine),
                    train.y.path().display(),
                    describe_target(theirs)
                ));
            }
        }
        Ok(self)
    }

    /// The files read, inputs first.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut v = vec![self.x.path().to_path_buf()];
        if self.y.path() != self.x.path() {
            v.push(self.y.path().to_path_buf());
        }
        v
    }
}

impl Dataset for TensorData {
    fn len(&self) -> usize {
        self.x.rows()
    }

    fn shape(&self) -> [usize; 3] {
        self.shape
    }

    fn target(&self) -> TargetKind {
        self.target
    }

    fn fill(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        let filled = self.fill_rows(indices, batch);
        self.y.release_rows(indices);
        filled
    }

    fn costly(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        self.x.path().display().to_string()
    }
}

impl TensorData {
    fn fill_rows(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        batch.x.reserve(indices.len() * self.x.row_len());
        for &i in indices {
            let start = batch.x.len();
            extend_f32(self.x.dtype, self.x.row(i), true, &mut batch.x);
            // At once, not after the batch: a fault may map a whole large folio of the page
            // cache (up to 2 MiB), and a batch of rows in as many folios mapped hundreds of MiB.
            self.x.release(i..i + 1);
            if !self.x_checked
                && let Some(pos) = batch.x[start..].iter().position(|v| !v.is_finite())
            {
                return Err(non_finite_error(&self.x, i, pos, "inputs"));
            }
        }
        match self.target {
            TargetKind::Classes(n) => {
                for &i in indices {
                    let c = integer(self.y.dtype, self.y.row(i)).unwrap_or(-1);
                    if !(0..n as i128).contains(&c) {
                        return Err(Error::data(
                            self.y.path(),
                            format!(
                                "{} holds {c} at index {i}, not a class below {n}: was the file \
                                 changed while training?",
                                self.y.label
                            ),
                        ));
                    }
                    batch.classes.push(c as u32);
                }
            }
            TargetKind::Values(_) => {
                for &i in indices {
                    extend_f32(self.y.dtype, self.y.row(i), false, &mut batch.values);
                }
            }
        }
        Ok(())
    }
}

/// The `[C, H, W]` of `x`'s samples; the error says which shapes are read.
fn sample_shape(x: &Array) -> Result<[usize; 3]> {
    let bad = |msg: String| Err(Error::data(x.path(), format!("{} {msg}", x.label)));
    let shape = match x.shape[1..] {
        [] => [1, 1, 1],
        [d] => [1, 1, d],
        [h, w] => [1, h, w],
        [c, h, w] => [c, h, w],
        _ => {
            return bad(format!(
                "has shape {}: a sample of {} dimensions is not read; each sample must be a \
                 vector (d,), an image (H, W) or (C, H, W): reshape it",
                show_shape(&x.shape),
                x.shape.len() - 1
            ));
        }
    };
    if x.rows() == 0 {
        return bad(format!(
            "has 0 samples (shape {}): there is nothing to train on",
            show_shape(&x.shape)
        ));
    }
    if shape.contains(&0) {
        return bad(format!(
            "has shape {}: its samples hold no values",
            show_shape(&x.shape)
        ));
    }
    Ok(shape)
}

fn bad_y_shape(y: &Array, what: &str, values: bool) -> Error {
    let kind = match (y.dtype.is_float(), values) {
        (true, _) => "float targets",
        (false, true) => "the targets of a regression",
        (false, false) => "integer targets",
    };
    Error::data(
        y.path(),
        format!(
            "{} has shape {} of {}: {kind} are {what}",
            y.label,
            show_shape(&y.shape),
            y.dtype
        ),
    )
}

fn describe_target(t: TargetKind) -> String {
    match t {
        TargetKind::Classes(_) => "class labels (integers)".into(),
        TargetKind::Values(k) => format!("{k} value(s) per sample (floats)"),
    }
}

/// The largest label of the integer targets `y`, checking that each is ≥ 0 and below
/// `below` (the training part's class count; [`MAX_CLASSES`] when `None`).
fn largest_label(y: &Array, below: Option<u64>) -> Result<u64> {
    let limit = below.unwrap_or(MAX_CLASSES);
    let seg_rows = (SEGMENT / y.row_bytes()).max(1);
    let mut largest = 0u64;
    let mut start = 0;
    while start < y.rows() {
        let end = (start + seg_rows).min(y.rows());
        let bytes = y.rows_bytes(start..end);
        let found = bytes
            .chunks_exact(y.row_bytes())
            .enumerate()
            .find_map(|(r, b)| {
                let v = integer(y.dtype, b).expect("integer targets");
                largest = largest.max(v.clamp(0, u64::MAX as i128) as u64);
                (v < 0 || v >= i128::from(limit)).then_some((start + r, v))
            });
        y.release(start..end);
        if let Some((i, v)) = found {
            let msg = if v < 0 {
                "class labels must be 0 or more (the classes are 0..n−1)".to_string()
            } else if let Some(n) = below {
                format!(
                    "the training part's labels are 0..={} ({n} classes): a test label must be \
                     one of them",
                    n - 1
                )
            } else {
                format!(
                    "at most {MAX_CLASSES} classes are read (labels 0..n−1): map the labels to \
                     consecutive indices"
                )
            };
            return Err(Error::data(
                y.path(),
                format!("{} holds {v} at index {i}: {msg}", y.label),
            ));
        }
        start = end;
    }
    Ok(largest)
}

/// The first (row, position in the row) of `a` whose value is not finite, checked a segment at
/// a time in parallel, each segment's pages handed back once checked.
fn non_finite(a: &Array) -> Option<(usize, usize)> {
    let (rb, row_len) = (a.row_bytes(), a.row_len());
    if !a.dtype.is_float() || rb == 0 {
        return None;
    }
    let seg_rows = (SEGMENT / rb).max(1);
    let chunk_rows = (CHUNK / rb).max(1);
    let mut start = 0;
    while start < a.rows() {
        let end = (start + seg_rows).min(a.rows());
        let hit = a
            .rows_bytes(start..end)
            .par_chunks(chunk_rows * rb)
            .enumerate()
            .find_map_first(|(c, chunk)| {
                first_non_finite(a.dtype, chunk).map(|e| c * chunk_rows * row_len + e)
            });
        a.release(start..end);
        if let Some(e) = hit {
            return Some((start + e / row_len, e % row_len));
        }
        start = end;
    }
    None
}

fn non_finite_error(a: &Array, row: usize, pos: usize, what: &str) -> Error {
    let mut v = Vec::new();
    extend_f32(a.dtype, a.row(row), false, &mut v);
    Error::data(
        a.path(),
        format!(
            "{} holds {} at sample {row} (value {pos} of the sample): {what} must be finite; fix \
             or drop that sample",
            a.label, v[pos]
        ),
    )
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
