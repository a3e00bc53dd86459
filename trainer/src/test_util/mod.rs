//! Builders of the trainer's types for tests, here and in the crates built on the trainer: compiled
//! for the trainer's own tests and, elsewhere, with the `test-util` feature
//! (`ddp-trainer = { workspace = true, features = ["test-util"] }` in `[dev-dependencies]`).
//!
//! [`tensor_diff`] compares two tensors (outputs, gradients), [`max_abs_diff`] and
//! [`worst_tensor`] two models' weights; [`uniform_values`] makes a kernel test's inputs.
//! [`write_gpt`] puts a GPT's weights into a run folder (its final model or a step's
//! checkpoint), as training would.
//!
//! [`fixtures`]: the sample data, specs written from their keys ([`fixtures::TestSpec`]) and
//! waits with a deadline that every crate's tests share.
//!
//! [`MetricRecord::sample`] is a complete record with plain values; chain the setters (one per
//! field, named after it; [`MetricRecord::at`] sets kind, epoch and step at once) or use struct
//! update syntax to change what a test is about:
//!
//! ```
//! use ddp_trainer::metrics::{MetricKind, MetricRecord};
//!
//! let val = MetricRecord::sample()
//!     .at(MetricKind::Val, 2, 40)
//!     .loss(0.5)
//!     .accuracy(Some(0.9));
//! assert_eq!((val.kind, val.epoch, val.step), (MetricKind::Val, 2, 40));
//! let other_rank = MetricRecord {
//!     rank: 1,
//!     ..val.clone()
//! };
//! assert_eq!(other_rank.loss, 0.5);
//! ```

pub mod fixtures;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use crate::checkpoint::{self, TrainState};
use crate::metrics::{MetricKind, MetricRecord};
use crate::models::Network;
use crate::models::gpt::GptConfig;
use crate::optim::{Optimizer, OptimizerConfig};

/// `n` deterministic pseudo-random values spread evenly over `[lo, hi)`, a different sequence for
/// each `seed` (a linear congruential generator's top 24 bits).
pub fn uniform_values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// The largest absolute difference between two tensors of the same shape, element by element
/// (`|a - b|.max()`), as f32: how the tests compare outputs and gradients.
pub fn tensor_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs())
        .and_then(|d| d.max_all())
        .and_then(|d| d.to_dtype(DType::F32))
        .and_then(|d| d.to_scalar::<f32>())
        .expect("two tensors of the same shape")
}

/// The largest absolute difference over two sets of named tensors (a model's weights), which
/// must have the same names and shapes.
pub fn max_abs_diff(a: &HashMap<String, Tensor>, b: &HashMap<String, Tensor>) -> f32 {
    worst_tensor(a, b).0
}

/// The largest absolute difference over two sets of named tensors, and the tensor where it is.
pub fn worst_tensor(a: &HashMap<String, Tensor>, b: &HashMap<String, Tensor>) -> (f32, String) {
    let names: BTreeSet<&String> = a.keys().collect();
    assert_eq!(names, b.keys().collect(), "different tensor names");
    let mut worst = (0f32, String::new());
    for n in names {
        let values = |t: &Tensor| -> Vec<f32> {
            t.to_dtype(DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .expect("a tensor of numbers")
        };
        let (x, y) = (values(&a[n]), values(&b[n]));
        assert_eq!(x.len(), y.len(), "{n}");
        for (p, q) in x.iter().zip(&y) {
            if (p - q).abs() > worst.0 {
                worst = ((p - q).abs(), n.clone());
            }
        }
    }
    worst
}

/// A setter per field: `fn field(self, value) -> Self`. Fields listed after `; into` take anything
/// that converts into their type (`.id("r1")` for a `String`). Exported (hidden) for the test
/// builders of the crates built on the trainer (`ddp_workspaces::test_util`).
#[doc(hidden)]
#[macro_export]
macro_rules! test_setters {
    ($($field:ident: $ty:ty),* $(,)? $(; into $($into:ident: $into_ty:ty),* $(,)?)?) => {
        $(
            #[doc = concat!("The record with `", stringify!($field), "` set.")]
            pub fn $field(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
        $($(
            #[doc = concat!("The record with `", stringify!($into), "` set.")]
            pub fn $into(mut self, $into: impl Into<$into_ty>) -> Self {
                self.$into = $into.into();
                self
            }
        )*)?
    };
}

/// Writes the weights of a GPT of shape `cfg` initialised from `seed` into the run folder `out`:
/// the final `model.safetensors` (`step` `None`), or the checkpoint of `step` (with a plain
/// SGD optimizer's state), as training writes them. Returns the model file.
pub fn write_gpt(out: &Path, cfg: &GptConfig, seed: u64, step: Option<u64>) -> PathBuf {
    let net = Network::gpt(cfg, &Device::Cpu, seed).expect("a valid gpt shape");
    match step {
        None => checkpoint::save_final(out, &net).expect("a writable folder"),
        Some(step) => {
            let sgd = OptimizerConfig::Sgd {
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.0,
            };
            let state = TrainState {
                global_step: step,
                world_size: 1,
                ..TrainState::default()
            };
            let opt = Optimizer::new(sgd, net.num_params());
            checkpoint::save(out, &net, &opt, &state, 0).expect("a writable folder")
        }
    }
}

impl MetricRecord {
    /// A train record of rank 0 of a world of 2: epoch 1, step 0, time 0, loss 1, no accuracy,
    /// lr 0.01, 100 samples per second, no sample count, none of a language model's figures
    /// (perplexity, bits, tokens).
    pub fn sample() -> MetricRecord {
        MetricRecord {
            time: 0.0,
            rank: 0,
            kind: MetricKind::Train,
            epoch: 1,
            step: 0,
            loss: 1.0,
            accuracy: None,
            perplexity: None,
            bits_per_char: None,
            bits_per_byte: None,
            lr: 0.01,
            samples_per_sec: 100.0,
            samples: None,
            tokens_per_sec: None,
            tokens: None,
            world_size: 2,
            metrics: Default::default(),
            breakdown: None,
            precision: None,
            sync: None,
        }
    }

    /// The record with `kind`, `epoch` and `step` (what most tests vary together).
    pub fn at(self, kind: MetricKind, epoch: usize, step: u64) -> Self {
        self.kind(kind).epoch(epoch).step(step)
    }

    crate::test_setters! {
        time: f64, rank: usize, kind: MetricKind, epoch: usize, step: u64, loss: f64,
        accuracy: Option<f64>, perplexity: Option<f64>, bits_per_char: Option<f64>,
        bits_per_byte: Option<f64>, lr: f64, samples_per_sec: f64, samples: Option<u64>,
        tokens_per_sec: Option<f64>, tokens: Option<u64>, world_size: usize,
        breakdown: Option<crate::metrics::StepBreakdown>,
        precision: Option<crate::metrics::PrecisionFigures>,
        sync: Option<crate::metrics::SyncFigures>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_difference_of_any_element() {
        let dev = candle_core::Device::Cpu;
        let a = Tensor::new(&[[1f32, 2.], [3., 4.]], &dev).unwrap();
        let b = Tensor::new(&[[1f32, 2.5], [1., 4.]], &dev).unwrap();
        assert_eq!(tensor_diff(&a, &b), 2.0);
        assert_eq!(tensor_diff(&a, &a), 0.0);
        let model =
            |t: &Tensor| HashMap::from([("w".to_string(), t.clone()), ("v".into(), a.clone())]);
        assert_eq!(worst_tensor(&model(&a), &model(&b)), (2.0, "w".to_string()));
        assert_eq!(max_abs_diff(&model(&a), &model(&a)), 0.0);
    }

    #[test]
    fn setters_change_one_field_each() {
        let r = MetricRecord::sample()
            .time(5.0)
            .rank(3)
            .at(MetricKind::Test, 4, 9)
            .loss(0.25)
            .accuracy(Some(0.5))
            .lr(0.1)
            .samples_per_sec(7.0)
            .samples(Some(64))
            .perplexity(Some(1.5))
            .bits_per_char(Some(0.6))
            .bits_per_byte(Some(0.7))
            .tokens_per_sec(Some(8.0))
            .tokens(Some(9))
            .world_size(8)
            .breakdown(Some(crate::metrics::StepBreakdown::default()));
        assert_eq!(
            r,
            MetricRecord {
                time: 5.0,
                rank: 3,
                kind: MetricKind::Test,
                epoch: 4,
                step: 9,
                loss: 0.25,
                accuracy: Some(0.5),
                perplexity: Some(1.5),
                bits_per_char: Some(0.6),
                bits_per_byte: Some(0.7),
                lr: 0.1,
                samples_per_sec: 7.0,
                samples: Some(64),
                tokens_per_sec: Some(8.0),
                tokens: Some(9),
                world_size: 8,
                metrics: Default::default(),
                breakdown: Some(crate::metrics::StepBreakdown::default()),
                precision: None,
                sync: None,
            }
        );
    }
}
