//! A language model of your own: token and position embeddings, one causal mixing step (each
//! position averages the embeddings up to itself), an MLP and a head over the vocabulary. The
//! engine sees token ids `[B, T]` (u32) going in and logits `[B, T, V]` coming out; windows,
//! loss, evaluation and DDP are the engine's.
//!
//! ```sh
//! cargo build --release -p ddp-custom-model
//! cargo run --release --bin ddp -- run examples/custom-model/custom-lm.toml --trainer target/release/custom-lm
//! ```

use candle_core::{D, DType, Device, Result, Tensor};
use candle_nn::{Embedding, Linear, Module, VarBuilder};

/// Distinct characters of `examples/data/shakespeare/input.txt` (the `char` tokenizer's
/// vocabulary); the trainer says so clearly if the data's vocabulary differs.
const VOCAB: usize = 79;
/// Context length: the spec's `model.block`.
const BLOCK: usize = 32;
const WIDTH: usize = 64;

pub struct Lm {
    wte: Embedding,
    wpe: Embedding,
    fc: Linear,
    head: Linear,
}

/// Parameter names are the `VarBuilder` paths: `wte.weight`, `wpe.weight`, `fc.weight`, ...
pub fn model(vb: VarBuilder) -> Result<Lm> {
    Ok(Lm {
        wte: candle_nn::embedding(VOCAB, WIDTH, vb.pp("wte"))?,
        wpe: candle_nn::embedding(BLOCK, WIDTH, vb.pp("wpe"))?,
        fc: candle_nn::linear(2 * WIDTH, 4 * WIDTH, vb.pp("fc"))?,
        head: candle_nn::linear(4 * WIDTH, VOCAB, vb.pp("head"))?,
    })
}

/// `[T, T]` weights averaging positions `0..=t` for row `t`.
fn causal_mean(t: usize, device: &Device) -> Result<Tensor> {
    let w: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 1.0 / (i + 1) as f32 } else { 0.0 }))
        .collect();
    Tensor::from_vec(w, (t, t), device)
}

impl Module for Lm {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let pos = Tensor::arange(0u32, t as u32, ids.device())?;
        let x = self
            .wte
            .forward(ids)?
            .broadcast_add(&self.wpe.forward(&pos)?)?;
        let mix = causal_mean(t, ids.device())?
            .to_dtype(DType::F32)?
            .broadcast_left(b)?
            .matmul(&x)?;
        let h = Tensor::cat(&[&x, &mix], D::Minus1)?;
        self.head.forward(&self.fc.forward(&h)?.gelu_erf()?)
    }
}

fn main() {
    ddp_trainer::main_with(model)
}
