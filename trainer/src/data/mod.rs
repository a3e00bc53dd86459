//! Data sets: the [`Dataset`] trait the engine trains on, the readers of every format, the
//! loader that fills batches ahead on worker threads, and the sampling that splits them across
//! replicas exactly as PyTorch does.
//!
//! Layout:
//! - this file: [`Split`] and the re-exports.
//! - [`dataset`]: the [`Dataset`] trait, [`TargetKind`], [`Subset`], [`fill_checked`].
//! - [`batch`]: the reusable [`Batch`] that data sets fill.
//! - [`memory`]: [`InMemory`], a data set held whole as normalised `f32` samples.
//! - [`loader`]: an epoch's batches, in order, filled ahead by worker threads when costly.
//! - [`parts`]: what opening a user's files gives ([`Parts`]), the run folder's record of it, and the
//!   folder listing its error messages quote.
//! - [`images`]: image folders (torchvision's `ImageFolder` layout).
//! - [`table`]: CSV and Parquet tables.
//! - [`tensors`]: `.safetensors`, `.npz` and `.npy` arrays, memory-mapped.
//! - [`mapped`]: a read-only mapped file whose pages are handed back after each read (token and
//!   tensor files).
//! - [`custom`]: the data set a trainer executable registers (`data.name = "custom"`).
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
pub mod batch;
pub mod cifar;
pub mod custom;
pub mod dataset;
pub mod idx;
pub mod images;
pub mod loader;
pub mod mapped;
pub mod memory;
pub mod parts;
pub mod rng;
pub mod sampler;
pub mod split;
pub mod synthetic;
pub mod table;
pub mod tensors;
pub mod text;

pub use augment::Augment;
pub use batch::{Batch, BatchRows};
pub use cifar::load_cifar10;
pub use dataset::{Dataset, SharedDataset, Subset, TargetKind, fill_checked};
pub use idx::{load_fashion_mnist, load_mnist};
pub use loader::Loader;
pub use memory::{InMemory, Targets};
pub use parts::{DataRecord, OpenContext, Parts};
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
