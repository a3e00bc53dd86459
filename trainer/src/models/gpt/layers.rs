//! The GPT's layers, as PyTorch's `torch_gpt.py` defines them: LayerNorm, causal self-attention
//! with one fused `c_attn` projection, the 4× MLP with exact GELU, and the pre-norm block.
//! Activations are `[B·T, E]` matrices between layers, and each layer is a few of the fused
//! [`super::ops`]; attention over a KV cache (generation), or with dropout while training, views
//! q, k, v as `[B, H, T, E/H]` and composes candle's ops.

use candle_core::{D, Tensor};
use candle_nn::{Init, VarBuilder};

use super::config::GptConfig;
use super::ops;
use crate::models::linear::{Linear, linear};

/// PyTorch's `nn.LayerNorm` epsilon.
const LN_EPS: f64 = 1e-5;

/// `nn.LayerNorm(e)`: normalised over the last dimension (biased variance), then `weight`, `bias`.
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

pub fn layer_norm(size: usize, vb: VarBuilder) -> candle_core::Result<LayerNorm> {
    Ok(LayerNorm {
        weight: vb.get_with_hints(size, "weight", Init::Const(1.0))?,
        bias: vb.get_with_hints(size, "bias", Init::Const(0.0))?,
    })
}

impl LayerNorm {
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        ops::layer_norm(x, &self.weight, &self.bias, LN_EPS)
    }
}

/// A [`Linear`] layer through [`ops::linear`].
fn dense(layer: &Linear, x: &Tensor) -> candle_core::Result<Tensor> {
    let (w, b) = layer.parts();
    ops::linear(x, w, b)
}

/// One layer's keys and values of the positions seen so far, `[B, H, T, E/H]` each.
#[derive(Default)]
pub struct LayerCache {
    kv: Option<(Tensor, Tensor)>,
}

/// `attn`: `c_attn` [3E, E] makes q, k, v; heads split as `view(b, t, h, e/h).transpose(1, 2)`;
/// softmax(q·kᵀ/√d + mask)·v; heads merged back; `c_proj` [E, E].
pub struct CausalSelfAttention {
    c_attn: Linear,
    c_proj: Linear,
    heads: usize,
    dropout: f32,
}

pub fn attention(cfg: &GptConfig, vb: VarBuilder) -> candle_core::Result<CausalSelfAttention> {
    Ok(CausalSelfAttention {
        c_attn: linear(cfg.embd, 3 * cfg.embd, vb.pp("c_attn"))?,
        c_proj: linear(cfg.embd, cfg.embd, vb.pp("c_proj"))?,
        heads: cfg.heads,
        dropout: cfg.dropout,
    })
}

impl CausalSelfAttention {
    /// `x` is `[b·t, E]` for `b` sequences of `t` new positions. With a `cache`, the new positions
    /// follow the cached ones (whose keys and values it holds; the new ones are appended) and
    /// `mask` is `[t, cached + t]`; `None` for a single new position, which sees every key.
    /// Without a cache `mask` is the causal `[t, t]` one (used only with dropout).
    pub fn forward(
        &self,
        x: &Tensor,
        (b, t): (usize, usize),
        mask: Option<&Tensor>,
        cache: Option<&mut LayerCache>,
        train: bool,
    ) -> candle_core::Result<Tensor> {
        let qkv = dense(&self.c_attn, x)?;
        let y = if cache.is_none() && !(train && self.dropout > 0.0) {
            ops::causal_attention(&qkv, b, self.heads)?
        } else {
            self.composed(&qkv, (b, t), mask, cache, train)?
        };
        dropout(&dense(&self.c_proj, &y)?, self.dropout, train)
    }

    /// Attention of candle's ops: over a cache, or with dropout on the probabilities.
    fn composed(
        &self,
        qkv: &Tensor,
        (b, t): (usize, usize),
        mask: Option<&Tensor>,
        cache: Option<&mut LayerCache>,
        train: bool,
    ) -> candle_core::Result<Tensor> {
        let e = qkv.dim(1)? / 3;
        let (h, d) = (self.heads, e / self.heads);
        let qkv = qkv.reshape((b, t, 3, h, d))?;
        let part = |i: usize| -> candle_core::Result<Tensor> {
            qkv.narrow(2, i, 1)?
                .squeeze(2)?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, mut k, mut v) = (part(0)?, part(1)?, part(2)?);
        if let Some(cache) = cache {
            if let Some((pk, pv)) = &cache.kv {
                k = Tensor::cat(&[pk, &k], 2)?;
                v = Tensor::cat(&[pv, &v], 2)?;
            }
            cache.kv = Some((k.clone(), v.clone()));
        }
        let mut att = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?;
        if let Some(mask) = mask {
            att = att.broadcast_add(mask)?;
        }
        let att = dropout(
            &candle_nn::ops::softmax(&att, D::Minus1)?,
            self.dropout,
            train,
        )?;
        att.matmul(&v)?.transpose(1, 2)?.reshape((b * t, e))
    }
}

/// `mlp`: `c_fc` [4E, E], exact (erf) GELU, `c_proj` [E, 4E].
pub struct Mlp {
    c_fc: Linear,
    c_proj: Linear,
    dropout: f32,
}

pub fn mlp(cfg: &GptConfig, vb: VarBuilder) -> candle_core::Result<Mlp> {
    Ok(Mlp {
        c_fc: linear(cfg.embd, 4 * cfg.embd, vb.pp("c_fc"))?,
        c_proj: linear(4 * cfg.embd, cfg.embd, vb.pp("c_proj"))?,
        dropout: cfg.dropout,
    })
}

impl Mlp {
    pub fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let hidden = ops::gelu(&dense(&self.c_fc, x)?)?;
        dropout(&dense(&self.c_proj, &hidden)?, self.dropout, train)
    }
}

/// `transformer.h.{i}`: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
pub struct Block {
    ln_1: LayerNorm,
    attn: CausalSelfAttention,
    ln_2: LayerNorm,
    mlp: Mlp,
}

pub fn block(cfg: &GptConfig, vb: VarBuilder) -> candle_core::Result<Block> {
    Ok(Block {
        ln_1: layer_norm(cfg.embd, vb.pp("ln_1"))?,
        attn: attention(cfg, vb.pp("attn"))?,
        ln_2: layer_norm(cfg.embd, vb.pp("ln_2"))?,
        mlp: mlp(cfg, vb.pp("mlp"))?,
    })
}

impl Block {
    /// `x` is `[b·t, E]`; `mask` and `cache` as in [`CausalSelfAttention::forward`].
    pub fn forward(
        &self,
        x: &Tensor,
        bt: (usize, usize),
        mask: Option<&Tensor>,
        cache: Option<&mut LayerCache>,
        train: bool,
    ) -> candle_core::Result<Tensor> {
        let x = (x + self
            .attn
            .forward(&self.ln_1.forward(x)?, bt, mask, cache, train)?)?;
        &x + self.mlp.forward(&self.ln_2.forward(&x)?, train)?
    }
}

/// Dropout with probability `p` while training; the identity otherwise.
pub fn dropout(x: &Tensor, p: f32, train: bool) -> candle_core::Result<Tensor> {
    if train && p > 0.0 {
        candle_nn::ops::dropout(x, p)
    } else {
        Ok(x.clone())
    }
}
