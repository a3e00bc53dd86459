//! The [`Dataset`] trait: what the engine trains on. A data set is a number of samples, each an
//! input of one shape and a target, that fills batches from sample indices. The engine brings
//! the rest: the train/validation/test split, the distributed sampler, batching, prefetching on
//! worker threads and DDP. Every built-in format implements it, and so can a user's own type
//! (see `docs/data.md`, "A data set written in Rust").

use std::sync::Arc;

use super::Batch;
use crate::{Error, Result};

/// What a sample's target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A class index below this count (cross-entropy; accuracy is reported).
    Classes(usize),
    /// This many `f32` values (mean squared error).
    Values(usize),
}

impl TargetKind {
    /// The number of classes (0 for values).
    pub fn classes(self) -> usize {
        match self {
            TargetKind::Classes(n) => n,
            TargetKind::Values(_) => 0,
        }
    }

    /// The model's outputs per sample: the classes' logits, or the values.
    pub fn outputs(self) -> usize {
        match self {
            TargetKind::Classes(n) | TargetKind::Values(n) => n,
        }
    }
}

/// Samples addressed by index `0..len()`, each an input of [`shape`](Dataset::shape) and a
/// target of [`target`](Dataset::target).
///
/// Implementations must be deterministic (the same index gives the same sample on every rank
/// and every call) and may be called from several threads at once.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per-sample input shape `[C, H, W]` (a feature vector of length d is `[1, 1, d]`).
    fn shape(&self) -> [usize; 3];

    /// What each sample's target is.
    fn target(&self) -> TargetKind;

    /// Appends the samples at `indices`, in that order (an index may repeat), to `batch`: each
    /// sample's `C·H·W` input values to `batch.x` (channel, then row, then column), and its class
    /// to `batch.classes` or its values to `batch.values`. The batch arrives empty; the engine
    /// checks what was appended.
    fn fill(&self, indices: &[usize], batch: &mut Batch) -> Result<()>;

    /// True when filling a batch costs enough (decoding images, reading a mapped file) to be done
    /// ahead of the training step on worker threads (`data.workers`).
    fn costly(&self) -> bool {
        false
    }

    /// What the data set is called in messages (a file or folder, a format).
    fn describe(&self) -> String {
        "the data set".into()
    }
}

/// A data set shared by the splits, the engine and its worker threads.
pub type SharedDataset = Arc<dyn Dataset>;

/// Empties `batch`, has `ds` fill it with `indices`, and checks what it appended: the number of
/// input values and targets, and every class below the class count. A data set written by a user
/// that breaks its contract gets an error naming the sample, not a wrong model.
pub fn fill_checked(ds: &dyn Dataset, indices: &[usize], batch: &mut Batch) -> Result<()> {
    batch.x.clear();
    batch.classes.clear();
    batch.values.clear();
    batch.len = indices.len();
    batch.shape = ds.shape();
    if let Some(&i) = indices.iter().find(|&&i| i >= ds.len()) {
        return Err(Error::Model(format!(
            "{}: sample index {i} asked for, but it has {} samples",
            ds.describe(),
            ds.len()
        )));
    }
    ds.fill(indices, batch)?;
    let n = indices.len();
    let d: usize = batch.shape.iter().product();
    let broken = |what: String| {
        Err(Error::Model(format!(
            "{}: filling {n} samples {what} (see docs/data.md, \"A data set written in Rust\")",
            ds.describe()
        )))
    };
    if batch.x.len() != n * d {
        let [c, h, w] = batch.shape;
        return broken(format!(
            "appended {} input values, not {n} × {c}×{h}×{w} = {}",
            batch.x.len(),
            n * d
        ));
    }
    match ds.target() {
        TargetKind::Classes(classes) => {
            if batch.classes.len() != n || !batch.values.is_empty() {
                return broken(format!(
                    "appended {} classes and {} values, not {n} classes",
                    batch.classes.len(),
                    batch.values.len()
                ));
            }
            if let Some(pos) = batch.classes.iter().position(|&c| c as usize >= classes) {
                return broken(format!(
                    "gave sample {} the class {}, but target() says {classes} classes",
                    indices[pos], batch.classes[pos]
                ));
            }
        }
        TargetKind::Values(k) => {
            if batch.values.len() != n * k || !batch.classes.is_empty() {
                return broken(format!(
                    "appended {} values and {} classes, not {n} × {k} values",
                    batch.values.len(),
                    batch.classes.len()
                ));
            }
        }
    }
    if let Some(pos) = batch.x.iter().position(|v| !v.is_finite()) {
        return broken(format!(
            "gave sample {} the input value {} (at {}): inputs must be finite",
            indices[pos / d.max(1)],
            batch.x[pos],
            pos % d.max(1)
        ));
    }
    Ok(())
}

/// The samples of `inner` at `indices`, in that order: a split, a limit, a held-out part.
pub struct Subset {
    inner: SharedDataset,
    indices: Vec<usize>,
}

impl Subset {
    /// Panics on an index ≥ `inner.len()`.
    pub fn new(inner: SharedDataset, indices: Vec<usize>) -> Subset {
        assert!(
            indices.iter().all(|&i| i < inner.len()),
            "subset index out of range"
        );
        Subset { inner, indices }
    }

    /// The first `n` samples of `inner` (all of them when it has fewer).
    pub fn first(inner: SharedDataset, n: usize) -> Subset {
        let n = n.min(inner.len());
        Subset::new(inner, (0..n).collect())
    }

    /// The indices into the whole data set.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

impl Dataset for Subset {
    fn len(&self) -> usize {
        self.indices.len()
    }

    fn shape(&self) -> [usize; 3] {
        self.inner.shape()
    }

    fn target(&self) -> TargetKind {
        self.inner.target()
    }

    fn fill(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        let mapped: Vec<usize> = indices.iter().map(|&i| self.indices[i]).collect();
        self.inner.fill(&mapped, batch)
    }

    fn costly(&self) -> bool {
        self.inner.costly()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> SharedDataset {
        Arc::new(crate::data::memory::tests::tiny())
    }

    #[test]
    fn subsets_map_indices_and_nest() {
        let s: SharedDataset = Arc::new(Subset::new(tiny(), vec![3, 1, 2]));
        let s2 = Subset::new(s.clone(), vec![2, 0]);
        let mut b = Batch::new();
        fill_checked(&s2, &[1, 0, 1], &mut b).unwrap();
        assert_eq!(b.x, vec![3.0, 3.5, 2.0, 2.5, 3.0, 3.5]);
        assert_eq!(b.classes, vec![3, 9, 3]);
        assert_eq!((b.len, b.shape), (3, [1, 1, 2]));
        assert_eq!(Subset::first(tiny(), 9).len(), 4);
        assert_eq!(Subset::first(tiny(), 2).indices(), &[0, 1]);
    }

    /// A data set that breaks the contract in the way it is told to.
    struct Broken(u8);

    impl Dataset for Broken {
        fn len(&self) -> usize {
            5
        }
        fn shape(&self) -> [usize; 3] {
            [1, 2, 2]
        }
        fn target(&self) -> TargetKind {
            if self.0 == 3 {
                TargetKind::Values(2)
            } else {
                TargetKind::Classes(4)
            }
        }
        fn fill(&self, indices: &[usize], b: &mut Batch) -> Result<()> {
            for &i in indices {
                let v = if self.0 == 4 && i == 2 { f32::NAN } else { 0.5 };
                b.x.extend([v; 4]);
                match self.0 {
                    1 => b.classes.push(i as u32 + 2),
                    3 => b.values.push(1.0),
                    _ => b.classes.push(1),
                }
            }
            if self.0 == 2 {
                b.x.pop();
            }
            Ok(())
        }
        fn describe(&self) -> String {
            "my data".into()
        }
    }

    #[test]
    fn a_broken_contract_names_the_sample() {
        let mut b = Batch::new();
        let err = |k: u8, idx: &[usize], b: &mut Batch| {
            fill_checked(&Broken(k), idx, b).unwrap_err().to_string()
        };
        fill_checked(&Broken(0), &[0, 4], &mut b).unwrap();
        assert_eq!(b.classes, vec![1, 1]);
        let e = err(1, &[0, 2, 1], &mut b);
        assert!(
            e.contains(
                "my data: filling 3 samples gave sample 2 the class 4, but target() says 4 classes"
            ),
            "{e}"
        );
        let e = err(2, &[0], &mut b);
        assert!(
            e.contains("appended 3 input values, not 1 × 1×2×2 = 4"),
            "{e}"
        );
        let e = err(3, &[0, 1], &mut b);
        assert!(
            e.contains("appended 2 values and 0 classes, not 2 × 2 values"),
            "{e}"
        );
        let e = err(4, &[0, 2], &mut b);
        assert!(
            e.contains("gave sample 2 the input value NaN (at 0)"),
            "{e}"
        );
        let e = err(0, &[5], &mut b);
        assert!(
            e.contains("my data: sample index 5 asked for, but it has 5 samples"),
            "{e}"
        );
    }
}
