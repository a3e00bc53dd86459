//! The GPT's hyperparameters, their validation and the parameter count they imply.

use crate::spec::Spec;
use crate::{Error, Result};

/// A GPT's shape: `vocab` token ids, contexts of up to `block` positions, `layers` pre-norm
/// blocks of `heads` attention heads over `embd` channels, `dropout` (0 = none) while training.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    pub vocab: usize,
    pub block: usize,
    pub layers: usize,
    pub heads: usize,
    pub embd: usize,
    pub dropout: f32,
}

impl GptConfig {
    /// A shape without dropout.
    pub fn new(vocab: usize, block: usize, layers: usize, heads: usize, embd: usize) -> Self {
        Self {
            vocab,
            block,
            layers,
            heads,
            embd,
            dropout: 0.0,
        }
    }

    /// The "baby GPT" of character-level Shakespeare (layers 4, heads 4, embd 128, block 64).
    pub fn baby(vocab: usize) -> Self {
        Self::new(vocab, 64, 4, 4, 128)
    }

    /// The GPT of `spec` for a vocabulary of `vocab` ids: its `[model]` keys, else the baby
    /// GPT's.
    pub fn from_spec(spec: &Spec, vocab: usize) -> Self {
        let m = &spec.model;
        let mut c = Self::baby(vocab);
        c.layers = m.layers.unwrap_or(c.layers);
        c.heads = m.heads.unwrap_or(c.heads);
        c.embd = m.embd.unwrap_or(c.embd);
        c.block = m.block.unwrap_or(c.block);
        c.dropout = m.dropout.unwrap_or(0.0) as f32;
        c
    }

    /// Channels per attention head.
    pub fn head_dim(&self) -> usize {
        self.embd / self.heads
    }

    /// Checks that the shape is buildable, with an error saying which key to change.
    pub fn validate(&self) -> Result<()> {
        let fail = |msg: String| Err(Error::Model(format!("gpt: {msg}")));
        for (key, v) in [
            ("vocab", self.vocab),
            ("block", self.block),
            ("layers", self.layers),
            ("heads", self.heads),
            ("embd", self.embd),
        ] {
            if v == 0 {
                return fail(format!("`{key}` must be at least 1"));
            }
        }
        if !self.embd.is_multiple_of(self.heads) {
            return fail(format!(
                "`heads` = {} does not divide `embd` = {}; pick heads that divide embd (e.g. {})",
                self.heads,
                self.embd,
                largest_divisor_at_most(self.embd, self.heads)
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return fail(format!("`dropout` = {} must be in [0, 1)", self.dropout));
        }
        Ok(())
    }

    /// Trainable scalars, counting the tied `lm_head`/`wte` matrix once (as PyTorch's
    /// `sum(p.numel() for p in model.parameters())` does).
    pub fn num_params(&self) -> usize {
        let e = self.embd;
        let layer_norm = 2 * e;
        let block = layer_norm
            + (3 * e * e + 3 * e)
            + (e * e + e)
            + layer_norm
            + (4 * e * e + 4 * e)
            + (4 * e * e + e);
        self.vocab * e + self.block * e + self.layers * block + layer_norm
    }
}

fn largest_divisor_at_most(n: usize, k: usize) -> usize {
    (1..=k.min(n))
        .rev()
        .find(|d| n.is_multiple_of(*d))
        .unwrap_or(1)
}
