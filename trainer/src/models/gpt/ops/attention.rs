//! Causal self-attention from the fused `c_attn` output: one custom op on CPU that reads q, k
//! and v in place and writes the heads merged ([`crate::models::kernels::attention`]), so no
//! head split, transpose, mask or merge copy is made; elsewhere candle's ops.

use std::sync::OnceLock;

use candle_core::{CpuStorage, D, Device, Layout, Shape, Tensor};

use crate::models::cpu_tensor::{autocast, cpu_tensor, gemm_input, is_cpu_f32, with_gemm_f32};
use crate::models::kernels::attention::{self as kernel, Dims};
use crate::models::kernels::tasks::threads;

/// `softmax(q·kᵀ/√d + causal mask)·v` per head for `qkv` `[batch·T, 3E]` (each row q | k | v,
/// the heads side by side in each, as `c_attn` writes them): `[batch·T, E]` with the heads side
/// by side, as `c_proj` reads them. PyTorch's `scaled_dot_product_attention(is_causal=True)`.
pub fn causal_attention(qkv: &Tensor, batch: usize, heads: usize) -> candle_core::Result<Tensor> {
    let dims = dims(qkv.shape(), batch, heads)?;
    if is_cpu_f32(qkv) {
        let op = AttentionOp {
            batch,
            heads,
            probs: OnceLock::new(),
        };
        return qkv.contiguous()?.apply_op1(op);
    }
    composed(qkv, dims)
}

/// The additive causal mask of `queries` positions that come last among `keys` positions:
/// `[queries, keys]`, 0 where query i may attend to key j (j ≤ keys − queries + i), −∞ elsewhere.
pub fn causal_mask(queries: usize, keys: usize, device: &Device) -> candle_core::Result<Tensor> {
    let offset = keys - queries;
    let values: Vec<f32> = (0..queries)
        .flat_map(|i| {
            (0..keys).map(move |j| {
                if j <= offset + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_vec(values, (queries, keys), device)
}

/// The shapes of `qkv` `[batch·T, 3E]`, checked.
fn dims(shape: &Shape, batch: usize, heads: usize) -> candle_core::Result<Dims> {
    let (rows, width) = shape.dims2()?;
    if batch == 0 || heads == 0 || !rows.is_multiple_of(batch) || !width.is_multiple_of(3 * heads) {
        candle_core::bail!(
            "causal attention: q|k|v rows {:?} do not split into {batch} sequences of {heads} heads",
            shape.dims()
        );
    }
    Ok(Dims {
        batch,
        seq: rows / batch,
        heads,
        head_dim: width / (3 * heads),
    })
}

/// The same with candle's ops (heads split, masked softmax, heads merged).
fn composed(qkv: &Tensor, d: Dims) -> candle_core::Result<Tensor> {
    let (b, t, h, hd) = (d.batch, d.seq, d.heads, d.head_dim);
    let qkv = qkv.reshape((b, t, 3, h, hd))?;
    let part = |i: usize| {
        qkv.narrow(2, i, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()
    };
    let (q, k, v) = (part(0)?, part(1)?, part(2)?);
    let mask = causal_mask(t, t, qkv.device())?;
    let att = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?.broadcast_add(&mask)?;
    let att = candle_nn::ops::softmax(&att, D::Minus1)?;
    att.matmul(&v)?.transpose(1, 2)?.reshape((b * t, h * hd))
}

/// One application: the probabilities of its forward pass are kept for its backward pass.
struct AttentionOp {
    batch: usize,
    heads: usize,
    probs: OnceLock<Vec<f32>>,
}

impl candle_core::CustomOp1 for AttentionOp {
    fn name(&self) -> &'static str {
        "causal-attention"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = dims(l.shape(), self.batch, self.heads)?;
        let r = autocast();
        let qkv = gemm_input(s, l, "attention q|k|v", r)?;
        let probs = kernel::probabilities(&qkv, d, threads());
        let y = kernel::forward(&qkv, &probs, d, r, threads());
        // A second forward pass of the same op (none is made) would keep the first's.
        let _ = self.probs.set(probs);
        Ok((CpuStorage::F32(y), Shape::from((d.batch * d.seq, d.embd()))))
    }

    fn bwd(
        &self,
        qkv: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let d = dims(qkv.shape(), self.batch, self.heads)?;
        let r = autocast();
        let dqkv = with_gemm_f32(qkv, "attention q|k|v", r, |q| {
            with_gemm_f32(grad, "attention output gradient", r, |g| {
                let probs = self
                    .probs
                    .get_or_init(|| kernel::probabilities(q, d, threads()));
                kernel::backward(q, probs, g, d, r, threads())
            })
        })??;
        Ok(Some(cpu_tensor(dqkv, qkv.shape())?))
    }
}
