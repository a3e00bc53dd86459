//! `y = x·Wᵀ + b` for `x` `[rows, in]`: one custom op on CPU (the bias as the GEMM's start, the
//! output contiguous, backward three GEMM-shaped passes, see [`kernel`]); elsewhere candle's
//! `(W·xᵀ)ᵀ + b`.

use candle_core::{CpuStorage, Shape, Tensor};

use crate::models::cpu_tensor::{
    autocast, cpu_tensor, gemm_input, is_cpu_f32, storage_f32, with_f32, with_gemm_f32,
};
use crate::models::kernels::linear::{self as kernel, Dims};
use crate::models::kernels::tasks::threads;
use crate::models::weight_op::{self, Arg, Grads, Output, WeightOp};

/// `x·wᵀ (+ b)` for `x` `[rows, in]`, `w` `[out, in]`, `b` `[out]`: `[rows, out]`.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    if !is_cpu_f32(x) || !is_cpu_f32(w) || b.is_some_and(|b| !is_cpu_f32(b)) {
        let y = w.matmul(&x.t()?)?.t()?;
        return match b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        };
    }
    let b = b.map(|b| b.contiguous()).transpose()?;
    weight_op::apply(LinearOp, &x.contiguous()?, &w.contiguous()?, b.as_ref())
}

#[derive(Clone, Copy)]
struct LinearOp;

/// The shapes of `x` and `w`, checked.
fn dims(x: &Shape, w: &Shape) -> candle_core::Result<Dims> {
    let (rows, inputs) = x.dims2()?;
    let (outputs, w_in) = w.dims2()?;
    if w_in != inputs {
        candle_core::bail!("linear: input {x:?} and weight {w:?} do not fit");
    }
    Ok(Dims {
        rows,
        inputs,
        outputs,
    })
}

impl WeightOp for LinearOp {
    const NAMES: (&'static str, &'static str) = ("linear", "linear-bias");

    fn fwd(&self, (x, xl): Arg, (w, wl): Arg, b: Option<Arg>) -> Output {
        let d = dims(xl.shape(), wl.shape())?;
        let bias = match b {
            Some((b, bl)) => {
                let b = storage_f32(b, bl, "linear bias")?;
                if b.len() != d.outputs {
                    candle_core::bail!("linear: {} biases for {} outputs", b.len(), d.outputs);
                }
                Some(b)
            }
            None => None,
        };
        let r = autocast();
        let x = gemm_input(x, xl, "linear input", r)?;
        let w = gemm_input(w, wl, "linear weight", r)?;
        let y = kernel::forward(&x, &w, bias, d, threads());
        Ok((CpuStorage::F32(y), Shape::from((d.rows, d.outputs))))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, grad: &Tensor, bias: bool) -> Grads {
        let d = dims(x.shape(), w.shape())?;
        let r = autocast();
        // The bias gradient is a sum, not a product: from the f32 gradient under any precision.
        let want = (x.track_op(), bias && r.is_none());
        let (dx, dw, db) = with_gemm_f32(x, "linear input", r, |xv| {
            with_gemm_f32(w, "linear weight", r, |wv| {
                with_gemm_f32(grad, "linear output gradient", r, |g| {
                    kernel::backward(xv, wv, g, d, want, threads())
                })
            })
        })???;
        Ok((
            dx.map(|v| cpu_tensor(v, (d.rows, d.inputs))).transpose()?,
            cpu_tensor(dw, (d.outputs, d.inputs))?,
            match db {
                Some(v) => Some(cpu_tensor(v, d.outputs)?),
                None if bias => {
                    let db = with_f32(grad, "linear output gradient", |g| {
                        kernel::bias_grad(g, d.outputs)
                    })?;
                    Some(cpu_tensor(db, d.outputs)?)
                }
                None => None,
            },
        ))
    }
}
