//! LayerNorm over the last dimension and the exact GELU: one custom op each on CPU, forward and
//! backward one pass ([`crate::models::kernels::layer_norm`], [`crate::models::kernels::gelu`]);
//! elsewhere composed of candle ops.

use candle_core::{CpuStorage, D, Layout, Shape, Tensor};

use crate::models::cpu_tensor::{cpu_tensor, is_cpu_f32, storage_f32, with_f32};
use crate::models::kernels::tasks::threads;
use crate::models::kernels::{gelu as gelu_kernel, layer_norm as ln_kernel};
use crate::models::weight_op::{self, Arg, Grads, Output, WeightOp};

/// `nn.LayerNorm` over the last dimension of `x`: `(x − mean)/√(var + eps)·w + b` (biased
/// variance).
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    if [x, w, b].iter().all(|t| is_cpu_f32(t)) {
        let (w, b) = (w.contiguous()?, b.contiguous()?);
        return weight_op::apply(LayerNormOp(eps as f32), &x.contiguous()?, &w, Some(&b));
    }
    let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let inv_std = (var + eps)?.sqrt()?.recip()?;
    centred
        .broadcast_mul(&inv_std)?
        .broadcast_mul(w)?
        .broadcast_add(b)
}

/// GELU with the exact erf (PyTorch's `F.gelu` default).
pub fn gelu(x: &Tensor) -> candle_core::Result<Tensor> {
    if is_cpu_f32(x) {
        return x.contiguous()?.apply_op1(GeluOp);
    }
    x.gelu_erf()
}

/// The epsilon.
#[derive(Clone, Copy)]
struct LayerNormOp(f32);

impl WeightOp for LayerNormOp {
    const NAMES: (&'static str, &'static str) = ("layer-norm-no-bias", "layer-norm");

    fn fwd(&self, (x, xl): Arg, (w, wl): Arg, b: Option<Arg>) -> Output {
        let Some((b, bl)) = b else {
            candle_core::bail!("layer-norm: no bias");
        };
        let cols = xl.shape().dims().last().copied().unwrap_or(0);
        let w = storage_f32(w, wl, "layer-norm weight")?;
        let b = storage_f32(b, bl, "layer-norm bias")?;
        if cols == 0 || w.len() != cols || b.len() != cols {
            candle_core::bail!(
                "layer-norm: input {:?}, {} weights, {} biases",
                xl.shape().dims(),
                w.len(),
                b.len()
            );
        }
        let x = storage_f32(x, xl, "layer-norm input")?;
        let y = ln_kernel::forward(x, w, b, self.0, threads());
        Ok((CpuStorage::F32(y), xl.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, grad: &Tensor, _with_bias: bool) -> Grads {
        let (dx, dw, db) = with_f32(x, "layer-norm input", |xv| {
            with_f32(w, "layer-norm weight", |wv| {
                with_f32(grad, "layer-norm output gradient", |g| {
                    ln_kernel::backward(xv, wv, g, self.0, threads())
                })
            })
        })???;
        let cols = w.elem_count();
        Ok((
            Some(cpu_tensor(dx, x.shape())?),
            cpu_tensor(dw, cols)?,
            Some(cpu_tensor(db, cols)?),
        ))
    }
}

#[derive(Clone, Copy)]
struct GeluOp;

impl candle_core::CustomOp1 for GeluOp {
    fn name(&self) -> &'static str {
        "gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = storage_f32(s, l, "gelu input")?;
        Ok((
            CpuStorage::F32(gelu_kernel::forward(x, threads())),
            l.shape().clone(),
        ))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dx = with_f32(x, "gelu input", |xv| {
            with_f32(grad, "gelu output gradient", |g| {
                gelu_kernel::backward(xv, g, threads())
            })
        })??;
        Ok(Some(cpu_tensor(dx, x.shape())?))
    }
}
