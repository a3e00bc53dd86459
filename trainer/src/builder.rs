//! [`Trainer`]: a `ddp-trainer` executable with the user's own parts: a model
//! (`[model] name = "custom"`), a data set (`[data] name = "custom"`), a loss and metrics, and
//! the communication hook that averages the overlapped step's gradient buckets.
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
use crate::step::hook::{self, BucketLayout, CommHook, CommHooks};
use crate::{Error, cli, objective};

/// The parts of a trainer executable; [`Trainer::main`] runs it as `ddp-trainer` (the same
/// command line, environment contract, spec, exit codes and outputs).
#[derive(Default)]
pub struct Trainer {
    model: Option<custom::Builder>,
    dataset: Option<crate::data::custom::DatasetMaker>,
    loss: Option<objective::LossFn>,
    metrics: Option<objective::MetricsFn>,
    comm_hook: Option<CommHooks>,
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

    /// The communication hook of the overlapped step (`ddp.overlap = true`, as PyTorch's
    /// `register_comm_hook`): `comm_hook(layout)` makes the hook of each gradient bucket, once
    /// for the first step's buckets and once more when they are laid out by the order backward
    /// finalizes the gradients (`layout.learned`); each hook then averages its bucket every step
    /// ([`CommHook::reduce`]). It replaces `ddp.compression`, which must be `"none"`.
    ///
    /// ```no_run
    /// use ddp_trainer::dist::{Collective, ReduceOp};
    /// use ddp_trainer::step::hook::CommHook;
    ///
    /// /// The f32 average, as `ddp.compression = "none"` does it.
    /// struct Average;
    ///
    /// impl CommHook for Average {
    ///     fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn Collective) -> ddp_trainer::Result<u64> {
    ///         comm.all_reduce(grads, ReduceOp::Avg)?;
    ///         let w = comm.world_size() as u64;
    ///         Ok(grads.len() as u64 * 4 * 2 * (w - 1) / w)
    ///     }
    /// }
    ///
    /// fn main() {
    ///     ddp_trainer::Trainer::new().comm_hook(|_| Average).main()
    /// }
    /// ```
    pub fn comm_hook<F, H>(self, comm_hook: F) -> Trainer
    where
        F: Fn(&BucketLayout) -> H + Send + Sync + 'static,
        H: CommHook + 'static,
    {
        self.comm_hooks(CommHooks::new("custom", comm_hook))
    }

    /// [`Trainer::comm_hook`] with a factory of one's own naming ([`CommHooks::new`]), or a
    /// built-in one ([`crate::step::hook::Wire`]).
    pub fn comm_hooks(mut self, hooks: impl Into<CommHooks>) -> Trainer {
        self.comm_hook = Some(hooks.into());
        self
    }

    /// The communication hooks given to [`Trainer::comm_hook`], if any ([`Trainer::main`]
    /// registers them).
    pub fn comm_hook_factory(&self) -> Option<&CommHooks> {
        self.comm_hook.as_ref()
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
        if let Some(h) = self.comm_hook {
            hook::register(h);
        }
        std::process::exit(i32::from(cli::main_status()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dist::ring::tests::with_ring;
    use crate::step::hook::{Plain, Wire};

    fn layout() -> BucketLayout {
        BucketLayout {
            index: 0,
            count: 1,
            len: 3,
            tensors: Vec::new(),
            learned: true,
        }
    }

    #[test]
    fn a_comm_hook_given_to_the_trainer_makes_each_buckets_hook() {
        let trainer = Trainer::new().comm_hook(|_: &BucketLayout| Plain);
        let hooks = trainer.comm_hook_factory().expect("a factory").clone();
        assert_eq!(hooks.name(), "custom");
        let out = with_ring(2, Duration::from_secs(10), |rank, ring| {
            let mut grads = vec![rank as f32, 2.0, 4.0 * rank as f32];
            let sent = hooks.make(&layout()).reduce(&mut grads, ring).unwrap();
            (grads, sent)
        });
        for (grads, sent) in out {
            assert_eq!(grads, [0.5, 2.0, 2.0]);
            assert_eq!(sent, 3 * 4);
        }
        let built_in = Trainer::new().comm_hooks(Wire::Half(crate::dist::codec::Codec::Bf16));
        assert_eq!(built_in.comm_hook_factory().unwrap().name(), "bf16");
        assert!(Trainer::new().comm_hook_factory().is_none());
    }
}
