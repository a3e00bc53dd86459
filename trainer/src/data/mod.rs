//! Data sets as plain `f32` buffers, the readers that fill them, and the sampling that splits them
//! across replicas exactly as PyTorch does.
//!
//! Layout:
//! - this file: [`Dataset`], [`Targets`], [`Split`] and the reusable [`Batch`] ([`Dataset::gather`]).
//! - [`idx`]: MNIST / Fashion-MNIST IDX files (gzipped or not).
//! - [`cifar`]: CIFAR-10 binary batches, and their standard augmentation ([`Augment::cifar10`]).
//! - [`synthetic`](mod@synthetic): seeded, learnable classification and linear-regression data.
//! - [`rng`]: PyTorch's MT19937 and `randperm`, plus a counter-based generator.
//! - [`sampler`]: `DistributedSampler` with PyTorch's semantics.
//! - [`split`]: `random_split`-style train/validation split.
//! - [`augment`]: CIFAR random crop + horizontal flip, deterministic from (seed, epoch, rank, step).
//! - [`text`]: language-modelling data: `char`/`byte` tokenizers, text files and memory-mapped token
//!   files as token streams, and the training and evaluation windows.
//!
//! See `docs/data.md` for the formats, the normalisation and the error messages.

pub mod augment;
pub mod cifar;
pub mod idx;
pub mod rng;
pub mod sampler;
pub mod split;
pub mod synthetic;
pub mod text;

pub use augment::Augment;
pub use cifar::load_cifar10;
pub use idx::{load_fashion_mnist, load_mnist};
pub use rng::{Mt19937, randperm};
pub use sampler::DistributedSampler;
pub use split::train_val_split;
pub use synthetic::{SyntheticConfig, Task, synthetic};

/// Which half of a data set to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Test,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One target per sample: a class index or a regression value.
#[derive(Clone, Debug, PartialEq)]
pub enum Targets {
    Classes(Vec<u32>),
    Values(Vec<f32>),
}

impl Targets {
    pub fn len(&self) -> usize {
        match self {
            Targets::Classes(v) => v.len(),
            Targets::Values(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn subset(&self, idx: &[usize]) -> Targets {
        match self {
            Targets::Classes(v) => Targets::Classes(idx.iter().map(|&i| v[i]).collect()),
            Targets::Values(v) => Targets::Values(idx.iter().map(|&i| v[i]).collect()),
        }
    }
}

/// A whole data set in memory: normalised images (or feature vectors) and their targets.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// e.g. `mnist`, `cifar10`, `synthetic-classification`.
    pub name: String,
    /// Per-sample shape `[C, H, W]` (a feature vector of length d is `[1, 1, d]`).
    pub shape: [usize; 3],
    /// Normalised samples, `len() * sample_len()` values, sample-major then C, H, W.
    pub images: Vec<f32>,
    pub targets: Targets,
    /// Number of classes; 0 for regression.
    pub classes: usize,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values per sample: `C * H * W`.
    pub fn sample_len(&self) -> usize {
        self.shape.iter().product()
    }

    /// The samples at `idx`, in that order (an index may repeat). Panics on an index ≥ `len()`.
    pub fn subset(&self, idx: &[usize]) -> Dataset {
        let d = self.sample_len();
        let mut images = Vec::with_capacity(idx.len() * d);
        for &i in idx {
            images.extend_from_slice(&self.images[i * d..(i + 1) * d]);
        }
        Dataset {
            name: self.name.clone(),
            shape: self.shape,
            images,
            targets: self.targets.subset(idx),
            classes: self.classes,
        }
    }

    /// The normalised values of sample `i`.
    pub fn sample(&self, i: usize) -> &[f32] {
        let d = self.sample_len();
        &self.images[i * d..(i + 1) * d]
    }

    /// Copies the samples at `indices` into `batch` (reusing its buffers: no allocation once it has
    /// held a batch this large). With `augment`, each sample is transformed on the way (see
    /// [`Augment`]) and the augmenter's step counter advances by one. Panics on an index ≥ `len()`.
    pub fn gather(&self, indices: &[usize], batch: &mut Batch, augment: Option<&mut Augment>) {
        let d = self.sample_len();
        batch.x.clear();
        batch.classes.clear();
        batch.values.clear();
        batch.len = indices.len();
        batch.shape = self.shape;
        match augment {
            None => {
                for &i in indices {
                    batch.x.extend_from_slice(&self.images[i * d..(i + 1) * d]);
                }
            }
            Some(aug) => {
                batch.x.resize(indices.len() * d, 0.0);
                for (pos, (&i, dst)) in indices.iter().zip(batch.x.chunks_exact_mut(d)).enumerate()
                {
                    aug.apply(pos, self.shape, &self.images[i * d..(i + 1) * d], dst);
                }
                aug.advance();
            }
        }
        match &self.targets {
            Targets::Classes(v) => batch.classes.extend(indices.iter().map(|&i| v[i])),
            Targets::Values(v) => batch.values.extend(indices.iter().map(|&i| v[i])),
        }
    }
}

/// A reusable mini-batch buffer filled by [`Dataset::gather`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// `len * C * H * W` normalised values.
    pub x: Vec<f32>,
    /// Class targets (empty for regression).
    pub classes: Vec<u32>,
    /// Regression targets (empty for classification).
    pub values: Vec<f32>,
    /// Number of samples in the batch.
    pub len: usize,
    /// Per-sample shape `[C, H, W]` of the data set it came from.
    pub shape: [usize; 3],
}

/// Consecutive samples of a [`Batch`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct BatchRows<'a> {
    pub x: &'a [f32],
    pub classes: &'a [u32],
    pub values: &'a [f32],
    pub len: usize,
    pub shape: [usize; 3],
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Samples `rows` of the batch (all of them: `0..len`).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> BatchRows<'_> {
        let d: usize = self.shape.iter().product();
        // One of the two target vectors is empty (classification or regression).
        let classes = if self.classes.is_empty() {
            &[]
        } else {
            &self.classes[rows.clone()]
        };
        let values = if self.values.is_empty() {
            &[]
        } else {
            &self.values[rows.clone()]
        };
        BatchRows {
            x: &self.x[rows.start * d..rows.end * d],
            classes,
            values,
            len: rows.len(),
            shape: self.shape,
        }
    }

    /// A batch whose buffers already hold `batch_size` samples of `ds` (no allocation while training).
    pub fn with_capacity(ds: &Dataset, batch_size: usize) -> Self {
        Batch {
            x: Vec::with_capacity(batch_size * ds.sample_len()),
            classes: Vec::with_capacity(batch_size),
            values: Vec::with_capacity(batch_size),
            len: 0,
            shape: ds.shape,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dataset {
        Dataset {
            name: "tiny".into(),
            shape: [1, 1, 2],
            images: vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
            targets: Targets::Classes(vec![7, 8, 9, 3]),
            classes: 10,
        }
    }

    #[test]
    fn subset_keeps_order_and_repeats() {
        let s = tiny().subset(&[3, 0, 3]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.images, vec![3.0, 3.5, 0.0, 0.5, 3.0, 3.5]);
        assert_eq!(s.targets, Targets::Classes(vec![3, 7, 3]));
        assert_eq!(
            (s.shape, s.classes, s.name.as_str()),
            ([1, 1, 2], 10, "tiny")
        );
    }

    #[test]
    fn gather_fills_and_reuses_buffers() {
        let ds = tiny();
        let mut b = Batch::with_capacity(&ds, 3);
        ds.gather(&[2, 1, 2], &mut b, None);
        assert_eq!(b.x, vec![2.0, 2.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(b.classes, vec![9, 8, 9]);
        assert!(b.values.is_empty());
        assert_eq!((b.len, b.shape), (3, [1, 1, 2]));
        let ptrs = (b.x.as_ptr(), b.classes.as_ptr());
        ds.gather(&[0], &mut b, None);
        ds.gather(&[3, 2, 1], &mut b, None);
        assert_eq!(b.x, vec![3.0, 3.5, 2.0, 2.5, 1.0, 1.5]);
        assert_eq!(b.classes, vec![3, 9, 8]);
        assert_eq!((b.x.as_ptr(), b.classes.as_ptr()), ptrs);

        let reg = Dataset {
            targets: Targets::Values(vec![0.1, 0.2, 0.3, 0.4]),
            classes: 0,
            ..ds
        };
        reg.gather(&[1, 3], &mut b, None);
        assert_eq!(b.values, vec![0.2, 0.4]);
        assert!(b.classes.is_empty());
    }
}
