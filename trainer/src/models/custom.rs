//! Models brought by the user (`[model] name = "custom"`): an executable made with
//! [`crate::main_with`] (or [`crate::main_with_t`]) registers how to build its model from a
//! candle `VarBuilder`; the engine (sampler, all-reduce, checkpoints, metrics) is the same as for
//! the built-in models. Parameter names are the `VarBuilder` paths, so `model.safetensors` loads
//! into a PyTorch module with the same attribute names.

use std::sync::OnceLock;

use candle_core::Tensor;
use candle_nn::{Module, ModuleT, VarBuilder};

use super::params::Forward;
use crate::{Error, Result};

/// Builds the user's model from a `VarBuilder`.
pub type Builder =
    Box<dyn Fn(VarBuilder<'static>) -> candle_core::Result<Box<dyn Forward>> + Send + Sync>;

static BUILDER: OnceLock<Builder> = OnceLock::new();

/// Registers the builder of this executable's custom model (once; later calls are ignored).
pub fn register(builder: Builder) {
    let _ = BUILDER.set(builder);
}

/// Builds the registered model.
pub fn build(vb: VarBuilder<'static>) -> Result<Box<dyn Forward>> {
    let builder = BUILDER.get().ok_or_else(|| {
        Error::Model(
            "model `custom` needs a trainer executable built with `ddp_trainer::main_with(model)`; \
             start it with `ddp run SPEC --trainer PATH` (see docs/custom-models.md)"
                .into(),
        )
    })?;
    Ok(builder(vb)?)
}

/// A `candle_nn::Module` as a [`Forward`] (no train/eval difference).
pub struct ModuleForward<M>(pub M);

impl<M: Module + Send + Sync> Forward for ModuleForward<M> {
    fn forward(&self, x: &Tensor, _train: bool) -> candle_core::Result<Tensor> {
        self.0.forward(x)
    }
}

/// A `candle_nn::ModuleT` as a [`Forward`] (dropout, BatchNorm get the train flag).
pub struct ModuleTForward<M>(pub M);

impl<M: ModuleT + Send + Sync> Forward for ModuleTForward<M> {
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        self.0.forward_t(x, train)
    }
}
