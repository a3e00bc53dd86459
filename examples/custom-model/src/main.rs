//! A model that is not one of ddp's built-ins — a strided convolution, GELU, two linear layers —
//! written the candle way and handed to the ddp engine: this executable *is* a `ddp-trainer`
//! (same command line, spec, environment, outputs) whose `[model] name = "custom"` is `Net`.
//!
//! ```sh
//! cargo build --release -p ddp-custom-model
//! cargo run --release --bin ddp -- run examples/custom-model/custom.toml --trainer target/release/custom-model
//! ```

use candle_core::{Result, Tensor};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Module, VarBuilder};

/// Conv(1→8, 5×5, stride 2) → GELU → Linear(8·12·12→64) → GELU → Linear(64→10).
pub struct Net {
    conv: Conv2d,
    fc1: Linear,
    fc2: Linear,
}

/// The model; parameter names are the `VarBuilder` paths (`conv.weight`, `fc1.bias`, ...), so
/// `model.safetensors` loads into a PyTorch module with attributes `conv`, `fc1`, `fc2`.
pub fn model(vb: VarBuilder) -> Result<Net> {
    let cfg = Conv2dConfig {
        stride: 2,
        ..Default::default()
    };
    Ok(Net {
        conv: candle_nn::conv2d(1, 8, 5, cfg, vb.pp("conv"))?,
        fc1: candle_nn::linear(8 * 12 * 12, 64, vb.pp("fc1"))?,
        fc2: candle_nn::linear(64, 10, vb.pp("fc2"))?,
    })
}

impl Module for Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.apply(&self.conv)?
            .gelu()?
            .flatten_from(1)?
            .apply(&self.fc1)?
            .gelu()?
            .apply(&self.fc2)
    }
}

fn main() {
    ddp_trainer::main_with(model)
}
