//! `gpt`: a decoder-only transformer language model with the architecture, parameter names,
//! shapes and initialisation of the PyTorch reference (`torch_gpt.py`): token ids `[B, T]` (u32,
//! T ≤ block) to logits `[B, T, V]`.
//!
//! Layout:
//! - `config`: [`GptConfig`], its validation and parameter count.
//! - `layers`: LayerNorm, causal self-attention, MLP, the pre-norm block and a layer's key/value
//!   cache.
//! - `ops`: the fused operations the layers are made of (linear, LayerNorm, GELU, causal
//!   attention, embedding, cross-entropy): one custom op each on CPU.
//! - `init`: the reference's initialisation, seeded ([`gpt_init`]).
//! - `state`: the tied `lm_head`/`wte` matrix in checkpoints ([`tied_state`], [`untie_state`]).
//!
//! Parameters (`transformer.` prefix): `wte.weight` [V, E], `wpe.weight` [block, E],
//! `h.{i}.ln_1`, `h.{i}.attn.c_attn` [3E, E], `h.{i}.attn.c_proj` [E, E], `h.{i}.ln_2`,
//! `h.{i}.mlp.c_fc` [4E, E], `h.{i}.mlp.c_proj` [E, 4E], `ln_f` (weights and biases). `lm_head`
//! is `wte` itself.

mod config;
mod init;
mod layers;
pub mod ops;
mod state;

pub use config::GptConfig;
pub use init::{INIT_STD, gpt_init};
pub use ops::causal_mask;
pub use state::{LM_HEAD, WPE, WTE, check_positions, tied_state, untie_state};

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::{DType, Tensor};
use candle_nn::{Init, VarBuilder};

use super::params::Forward;
use crate::Result;
use layers::{Block, LayerCache, LayerNorm, block, dropout, layer_norm};

/// The model: embeddings, blocks, final LayerNorm; logits through the tied embedding.
pub struct Gpt {
    cfg: GptConfig,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    /// Causal masks `[T, T]` by T, built once each.
    masks: Mutex<HashMap<usize, Tensor>>,
}

/// Builds a GPT of shape `cfg` from `vb` (names under `transformer.`). The parameters hold
/// placeholders until [`gpt_init`] (or a checkpoint) sets them.
pub fn gpt(cfg: &GptConfig, vb: VarBuilder) -> Result<Gpt> {
    cfg.validate()?;
    let t = vb.pp("transformer");
    let embedding = |rows: usize, name: &str| {
        t.pp(name)
            .get_with_hints((rows, cfg.embd), "weight", Init::Const(0.0))
    };
    Ok(Gpt {
        cfg: *cfg,
        wte: embedding(cfg.vocab, "wte")?,
        wpe: embedding(cfg.block, "wpe")?,
        blocks: (0..cfg.layers)
            .map(|i| block(cfg, t.pp("h").pp(i)))
            .collect::<candle_core::Result<_>>()?,
        ln_f: layer_norm(cfg.embd, t.pp("ln_f"))?,
        masks: Mutex::new(HashMap::new()),
    })
}

/// The positions a [`Gpt`] has seen in generation: every layer's keys and values.
pub struct Cache {
    len: usize,
    batch: usize,
    layers: Vec<LayerCache>,
}

impl Cache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Gpt {
    pub fn config(&self) -> &GptConfig {
        &self.cfg
    }

    /// Logits `[B, T, V]` for token ids `[B, T]`; `train` enables dropout (if configured).
    pub fn forward(&self, ids: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let (b, t) = self.check_ids(ids, 0)?;
        let mask = (t > 1).then(|| self.mask(t)).transpose()?;
        let mut x = dropout(&self.embed(ids, 0)?, self.cfg.dropout, train)?;
        for blk in &self.blocks {
            x = blk.forward(&x, (b, t), mask.as_ref(), None, train)?;
        }
        self.head(&x, b, t)
    }

    /// An empty cache for [`Gpt::forward_cached`].
    pub fn new_cache(&self) -> Cache {
        Cache {
            len: 0,
            batch: 0,
            layers: (0..self.cfg.layers)
                .map(|_| LayerCache::default())
                .collect(),
        }
    }

    /// Logits `[B, n, V]` for `n` new token ids `[B, n]` that follow the positions in `cache`,
    /// which it then holds too: each new position costs attention over the cached keys, not a
    /// forward pass over the whole context. Equal to [`Gpt::forward`]'s last `n` positions over
    /// the whole sequence. No dropout. The cache holds at most `block` positions.
    pub fn forward_cached(&self, ids: &Tensor, cache: &mut Cache) -> candle_core::Result<Tensor> {
        let (b, n) = self.check_ids(ids, cache.len)?;
        if !cache.is_empty() && b != cache.batch {
            candle_core::bail!(
                "gpt: the cache holds {} sequences but {b} were given; use one cache per batch",
                cache.batch
            );
        }
        let total = cache.len + n;
        let mask = if n == 1 {
            None
        } else if cache.is_empty() {
            Some(self.mask(n)?)
        } else {
            Some(causal_mask(n, total, self.wte.device())?)
        };
        let mut x = self.embed(ids, cache.len)?;
        for (blk, layer) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            x = blk.forward(&x, (b, n), mask.as_ref(), Some(layer), false)?;
        }
        cache.len = total;
        cache.batch = b;
        self.head(&x, b, n)
    }

    /// Checks ids `[B, T]` (u32) that start at position `start`; returns (B, T).
    fn check_ids(&self, ids: &Tensor, start: usize) -> candle_core::Result<(usize, usize)> {
        if ids.dtype() != DType::U32 || ids.rank() != 2 {
            candle_core::bail!(
                "gpt: input must be token ids of shape [batch, time] and type u32, got {:?} {:?}",
                ids.dims(),
                ids.dtype()
            );
        }
        let (b, t) = ids.dims2()?;
        let block = self.cfg.block;
        if t == 0 || start + t > block {
            candle_core::bail!(
                "gpt: {} positions do not fit the model's context of block = {block}; \
                 give between 1 and {block} tokens (crop a longer context to its last {block})",
                start + t
            );
        }
        Ok((b, t))
    }

    /// Token plus position embeddings of ids starting at position `start`: `[B·T, E]`.
    fn embed(&self, ids: &Tensor, start: usize) -> candle_core::Result<Tensor> {
        ops::embed(ids, &self.wte, &self.wpe, start)
    }

    /// `ln_f`, then the logits x·wteᵀ: `[B, T, V]`.
    fn head(&self, x: &Tensor, b: usize, t: usize) -> candle_core::Result<Tensor> {
        let x = self.ln_f.forward(x)?;
        ops::linear(&x, &self.wte, None)?.reshape((b, t, self.cfg.vocab))
    }

    fn mask(&self, t: usize) -> candle_core::Result<Tensor> {
        let mut masks = self.masks.lock().expect("mask cache poisoned");
        if let Some(m) = masks.get(&t) {
            return Ok(m.clone());
        }
        let m = causal_mask(t, t, self.wte.device())?;
        masks.insert(t, m.clone());
        Ok(m)
    }
}

impl Forward for Gpt {
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        Gpt::forward(self, x, train)
    }
}

/// The mean next-token cross-entropy of logits `[B, T, V]` against targets `[B, T]` (u32).
pub fn lm_loss(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    let (b, t, v) = logits.dims3()?;
    ops::cross_entropy(&logits.reshape((b * t, v))?, &targets.flatten_all()?)
}

#[cfg(test)]
mod tests;
