//! The GPT's operations, each one candle custom op on CPU f32 tensors with its own backward
//! over the kernels of [`crate::models::kernels`], where candle's op-by-op path would make
//! strided copies (the heads' split and merge, transposed outputs), broadcasts and reductions
//! over them, and a scalar `erf` per value. On other devices (or types) each composes candle's
//! ops to the same values.
//!
//! Layout:
//! - `linear`: [`linear`], `x·Wᵀ + b` with a contiguous output and gradients.
//! - `norm`: [`layer_norm`] and the exact [`gelu`].
//! - `attention`: [`causal_attention`] straight from `c_attn`'s q|k|v rows to `c_proj`'s input,
//!   and the [`causal_mask`] of the composed path and the KV cache.
//! - `loss`: the token and position [`embed`]ding, and the [`cross_entropy`] of the logits.
//!
//! Every op is checked against PyTorch's values and gradients in `trainer/tests/gpt_ops_torch.rs`.

mod attention;
mod linear;
mod loss;
mod norm;

pub use attention::{causal_attention, causal_mask};
pub use linear::linear;
pub use loss::{cross_entropy, embed};
pub use norm::{gelu, layer_norm};
