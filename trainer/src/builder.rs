//! [`Trainer`]: a `ddp-trainer` executable with the user's own parts: a model
//! (`[model] name = "custom"`), a data set (`[data] name = "custom"`), a loss and metrics.
//!
//! ```no_run
//! use ddp_trainer::data::{Batch, Dataset, Split, TargetKind};
//!
//! /// y = 1 when x₀ + x₁ > 1: 512 training and 128 test points on a grid.
//! struct Points(usize);
//!
//! impl Dataset for Points {
//!     fn len(&self) -> usize {
//!         self.0
//!     }
//!     fn shape(&self) -> [usize; 3] {
//!         [1, 1, 2]
//!     }
//!     fn target(&self) -> TargetKind {
//!         TargetKind::Classes(2)
//!     }
//!     fn fill(&self, indices: &[usize], batch: &mut Batch) -> ddp_trainer::Result<()> {
//!         for &i in indices {
//!             let (a, b) = ((i % 23) as f32 / 23.0, (i % 29) as f32 / 29.0);
//!             batch.x.extend([a, b]);
//!             batch.classes.push((a + b > 1.0) as u32);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! fn dataset(split: Split) -> ddp_trainer::Result<Points> {
//!     Ok(Points(if split == Split::Train { 512 } else { 128 }))
//! }
//!
//! fn main() {
//!     ddp_trainer::Trainer::new().dataset(dataset).main()
//! }
//! ```

use std::fmt::Display;
use std::sync::Arc;

use candle_core::Tensor;
use candle_nn::{Module, ModuleT, VarBuilder};

use crate::data::{Dataset, SharedDataset, Split};
use crate::models::Forward;
use crate::models::custom::{self, ModuleForward, ModuleTForward};
use crate::{Error, cli, objective};

/// The parts of a trainer executable; [`Trainer::main`] runs it as `ddp-trainer` (the same
/// command line, environment contract, spec, exit codes and outputs).
#[derive(Default)]
pub struct Trainer {
    model: Option<custom::Builder>,
    dataset: Option<crate::data::custom::DatasetMaker>,
    loss: Option<objective::LossFn>,
    metrics: Option<objective::MetricsFn>,
}

impl Trainer {
    pub fn new() -> Trainer {
        Trainer::default()
    }

    /// The model of `[model] name = "custom"`, built by `model` from a candle `VarBuilder`
    /// (parameter names are its paths).
    pub fn model<F, M>(mut self, model: F) -> Trainer
    where
        F: Fn(VarBuilder<'static>) -> candle_core::Result<M> + Send + Sync + 'static,
        M: Module + Send + Sync + 'static,
    {
        self.model = Some(Box::new(move |vb| {
            Ok(Box::new(ModuleForward(model(vb)?)) as Box<dyn Forward>)
        }));
        self
    }

    /// [`Trainer::model`] for a `candle_nn::ModuleT` (dropout, BatchNorm): the model gets the
    /// train flag (`true` while training, `false` for validation and test).
    pub fn model_t<F, M>(mut self, model: F) -> Trainer
    where
        F: Fn(VarBuilder<'static>) -> candle_core::Result<M> + Send + Sync + 'static,
        M: ModuleT + Send + Sync + 'static,
    {
        self.model = Some(Box::new(move |vb| {
            Ok(Box::new(ModuleTForward(model(vb)?)) as Box<dyn Forward>)
        }));
        self
    }

    /// The data set of `[data] name = "custom"`: `dataset(Split::Train)` is split into training
    /// and validation (`data.val_fraction`), `dataset(Split::Test)` is the test part. The
    /// engine samples, batches, prefetches and shards them as it does every format.
    pub fn dataset<F, D, E>(mut self, dataset: F) -> Trainer
    where
        F: Fn(Split) -> std::result::Result<D, E> + Send + Sync + 'static,
        D: Dataset + 'static,
        E: Display,
    {
        self.dataset = Some(Box::new(move |split| {
            let ds = dataset(split)
                .map_err(|e| Error::Model(format!("the custom data set's {split} part: {e}")))?;
            Ok(Arc::new(ds) as SharedDataset)
        }));
        self
    }

    /// The loss every batch trains on and is evaluated with, instead of cross-entropy (classes)
    /// or mean squared error (values): `loss(outputs, targets)` with targets `u32 [B]` or
    /// `f32 [B, k]`, giving the mean over the batch as a scalar.
    pub fn loss<F>(mut self, loss: F) -> Trainer
    where
        F: Fn(&Tensor, &Tensor) -> candle_core::Result<Tensor> + Send + Sync + 'static,
    {
        self.loss = Some(Box::new(loss));
        self
    }

    /// Figures reported with every validation and test: `metrics(outputs, targets)` gives named
    /// sums over the batch's samples; each is reported as its mean over the samples (in
    /// metrics.jsonl, TensorBoard and the front ends).
    pub fn metrics<F>(mut self, metrics: F) -> Trainer
    where
        F: Fn(&Tensor, &Tensor) -> candle_core::Result<Vec<(String, f64)>> + Send + Sync + 'static,
    {
        self.metrics = Some(Box::new(metrics));
        self
    }

    /// Registers the parts and runs this executable as `ddp-trainer`; exits the process with
    /// the trainer's exit code.
    pub fn main(self) -> ! {
        if let Some(m) = self.model {
            custom::register(m);
        }
        if let Some(d) = self.dataset {
            crate::data::custom::register(d);
        }
        if let Some(l) = self.loss {
            objective::register_loss(l);
        }
        if let Some(m) = self.metrics {
            objective::register_metrics(m);
        }
        std::process::exit(i32::from(cli::main_status()))
    }
}
