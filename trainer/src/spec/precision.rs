//! `train.precision` (mixed precision, as `torch.autocast`) and the keys of fp16's loss scaler
//! (`train.loss_scale`, `train.loss_scale_growth_every`), and their rules.

use serde::{Deserialize, Serialize};

use super::{Devices, Spec};
use crate::Result;

/// `train.precision`: what the matrix products and convolutions take, as `torch.autocast`.
/// Everything else (softmax, normalisation, losses, reductions, the optimizer, the master weights,
/// checkpoints) stays f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    /// Inputs rounded to bfloat16, products summed in f32.
    Bf16,
    /// Inputs rounded to IEEE half, with dynamic loss scaling.
    Fp16,
}

impl Precision {
    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }

    /// As the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }

    /// The dtype candle's autocast rounds to ([`candle_core::autocast`]); `None` in f32.
    pub fn autocast(&self) -> Option<candle_core::DType> {
        match self {
            Precision::F32 => None,
            Precision::Bf16 => Some(candle_core::DType::BF16),
            Precision::Fp16 => Some(candle_core::DType::F16),
        }
    }
}

impl Spec {
    /// The rules of mixed precision: the loss scaler's keys only with fp16, and within range;
    /// no reduced precision on GPUs, whose matrix products this build keeps f32.
    pub(super) fn check_precision(&self) -> Result<()> {
        let t = &self.train;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        let fp16 = t.precision == Precision::Fp16;
        if let Some(v) = t.loss_scale {
            if !fp16 {
                return bad(
                    "train.loss_scale",
                    "is fp16's loss scale: set train.precision = \"fp16\" with it, or leave it out"
                        .into(),
                );
            }
            if !(v.is_finite() && v > 0.0 && v <= f32::MAX as f64) {
                return bad(
                    "train.loss_scale",
                    format!(
                        "must be a positive number within f32's range, got {v} (65536 is PyTorch's)"
                    ),
                );
            }
        }
        if let Some(n) = t.loss_scale_growth_every {
            if !fp16 {
                return bad(
                    "train.loss_scale_growth_every",
                    "counts fp16's finite steps: set train.precision = \"fp16\" with it, or leave it out"
                        .into(),
                );
            }
            if n == 0 {
                return bad(
                    "train.loss_scale_growth_every",
                    "must be at least 1 (2000 is PyTorch's)".into(),
                );
            }
        }
        if !t.precision.is_f32() && matches!(self.ddp.devices, Devices::Cuda(_)) {
            return bad(
                "train.precision",
                format!(
                    "\"{}\" runs on CPU replicas; on GPUs this build's matrix products stay f32: \
                     set train.precision = \"f32\" or ddp.devices = \"cpu\"",
                    t.precision.name()
                ),
            );
        }
        Ok(())
    }
}
