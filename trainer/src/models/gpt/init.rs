//! The GPT's initialisation, as `torch_gpt.py` does it: weights and embeddings N(0, 0.02), the
//! residual projections (`attn.c_proj.weight`, `mlp.c_proj.weight`) N(0, 0.02/√(2·layers)),
//! biases 0, LayerNorm weights 1. Seeded per parameter name like the other models
//! ([`crate::models::init`]), so every rank and world size builds the same weights.

use candle_core::Var;

use super::config::GptConfig;
use crate::Result;
use crate::models::init::normal;

/// The standard deviation of embeddings and weight matrices.
pub const INIT_STD: f64 = 0.02;

/// Initialises every parameter of a GPT of shape `cfg` (named as [`super::gpt`] names them).
pub fn gpt_init(params: &[(String, Var)], cfg: &GptConfig, seed: u64) -> Result<()> {
    let proj_std = INIT_STD / ((2 * cfg.layers) as f64).sqrt();
    for (name, var) in params {
        if name.ends_with("c_proj.weight") {
            normal(name, var, proj_std, seed)?;
        } else if var.rank() >= 2 {
            normal(name, var, INIT_STD, seed)?;
        } else {
            let layer_norm_weight = name.contains("ln_") && name.ends_with(".weight");
            let value = if layer_norm_weight { 1.0 } else { 0.0 };
            var.set(&var.ones_like()?.affine(value, 0.0)?)?;
        }
    }
    Ok(())
}
