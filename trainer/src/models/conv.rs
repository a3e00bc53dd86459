//! 2-D convolution on CPU as GEMMs over batch chunks ([`super::kernels::conv`]), forward and
//! backward in one custom op each, so that nothing but the input is kept for the backward pass
//! and the work is split over the replica's threads. Other devices use candle's own conv2d.
//!
//! The layer is a plain struct with a free constructor taking a `VarBuilder`, as in candle-nn,
//! with PyTorch's parameter names (`weight` [O, C, k, k], `bias` [O]).

use candle_core::{CpuStorage, Shape, Tensor};
use candle_nn::{Init, VarBuilder};

use super::cpu_tensor::{autocast, cpu_tensor, gemm_input, storage_f32, with_f32, with_gemm_f32};
use super::kernels::conv as kernel;
use super::kernels::conv_shape::ConvShape;
use super::kernels::conv_shape::add_bias_grads;
use super::kernels::tasks::threads;
use super::kernels::unfold::Unfold;
use super::weight_op::{self, Arg, Grads, Output, WeightOp};

/// `Config: Default` for [`conv2d`] / [`conv2d_no_bias`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvConfig {
    pub padding: usize,
    pub stride: usize,
}

impl Default for ConvConfig {
    fn default() -> Self {
        Self {
            padding: 0,
            stride: 1,
        }
    }
}

pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    cfg: ConvConfig,
}

/// The init hints are placeholders: [`super::init`] sets PyTorch's initialisation afterwards.
pub fn conv2d(
    cin: usize,
    cout: usize,
    k: usize,
    cfg: ConvConfig,
    vb: VarBuilder,
) -> candle_core::Result<Conv2d> {
    let mut c = conv2d_no_bias(cin, cout, k, cfg, vb.clone())?;
    c.bias = Some(vb.get_with_hints(cout, "bias", Init::Const(0.0))?);
    Ok(c)
}

pub fn conv2d_no_bias(
    cin: usize,
    cout: usize,
    k: usize,
    cfg: ConvConfig,
    vb: VarBuilder,
) -> candle_core::Result<Conv2d> {
    let weight = vb.get_with_hints((cout, cin, k, k), "weight", Init::Const(0.0))?;
    Ok(Conv2d {
        weight,
        bias: None,
        cfg,
    })
}

impl candle_core::Module for Conv2d {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let ConvConfig { padding, stride } = self.cfg;
        if !x.device().is_cpu() {
            let o = self.weight.dim(0)?;
            let y = x.conv2d(&self.weight, padding, stride, 1, 1)?;
            return match &self.bias {
                Some(b) => y.broadcast_add(&b.reshape((1, o, 1, 1))?),
                None => Ok(y),
            };
        }
        let (_, c, k, k2) = self.weight.dims4()?;
        let cin = x.dim(1)?;
        if k != k2 || c != cin {
            candle_core::bail!(
                "conv2d: weight {:?} does not fit an input of {cin} channels ({:?})",
                self.weight.dims(),
                x.dims()
            );
        }
        let op = ConvOp(Unfold { k, stride, padding });
        weight_op::apply(op, &x.contiguous()?, &self.weight, self.bias.as_ref())
    }
}

/// The convolution as a custom op: (x, weight) or (x, weight, bias).
#[derive(Clone, Copy)]
struct ConvOp(Unfold);

impl ConvOp {
    fn shape(&self, x: &Shape, w: &Shape) -> candle_core::Result<ConvShape> {
        let o = w.dims4()?.0;
        ConvShape::new(x.dims4()?, o, self.0).map_err(candle_core::Error::Msg)
    }
}

impl WeightOp for ConvOp {
    const NAMES: (&'static str, &'static str) = ("conv2d-gemm", "conv2d-gemm-bias");

    fn fwd(&self, (x, xl): Arg, (w, wl): Arg, bias: Option<Arg>) -> Output {
        let s = self.shape(xl.shape(), wl.shape())?;
        let b = match bias {
            Some((b, bl)) => Some(storage_f32(b, bl, "conv2d bias")?),
            None => None,
        };
        let r = autocast();
        let y = kernel::forward(
            &s,
            &gemm_input(x, xl, "conv2d input", r)?,
            &gemm_input(w, wl, "conv2d weight", r)?,
            b,
            threads(),
        );
        Ok((CpuStorage::F32(y), Shape::from((s.n, s.o, s.oh, s.ow))))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, grad: &Tensor, with_bias: bool) -> Grads {
        let s = self.shape(x.shape(), w.shape())?;
        let want_dx = x.track_op();
        let r = autocast();
        // The bias gradient is a sum, not a product: from the f32 gradient under any precision.
        let kernel_db = with_bias && r.is_none();
        let (dx, dw, db) = with_gemm_f32(x, "conv2d input", r, |xv| {
            with_gemm_f32(w, "conv2d weight", r, |wv| {
                with_gemm_f32(grad, "conv2d output gradient", r, |g| {
                    kernel::backward(&s, xv, wv, g, want_dx, kernel_db, threads())
                })
            })
        })???;
        Ok((
            dx.map(|d| cpu_tensor(d, x.shape())).transpose()?,
            cpu_tensor(dw, w.shape())?,
            match db {
                Some(d) => Some(cpu_tensor(d, s.o)?),
                None if with_bias => {
                    let mut db = vec![0f32; s.o];
                    with_f32(grad, "conv2d output gradient", |g| {
                        add_bias_grads(&mut db, g, s.oh * s.ow)
                    })?;
                    Some(cpu_tensor(db, s.o)?)
                }
                None => None,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testing::assert_same_with_grads;
    use candle_core::{Device, Module, Var};

    /// Forward and every gradient agree with candle's reference conv2d (kernel 3 and 1, stride,
    /// padding, with and without bias).
    #[test]
    fn matches_candle_conv2d_forward_and_backward() {
        let dev = Device::Cpu;
        let cases = [
            (3, 0, 1),
            (3, 2, 1),
            (3, 1, 2),
            (3, 0, 2),
            (3, 3, 3),
            (1, 0, 1),
            (1, 0, 2),
        ];
        for (k, padding, stride) in cases {
            for with_bias in [true, false] {
                let x = Var::from_tensor(&Tensor::randn(0f32, 1., (2, 3, 7, 7), &dev).unwrap())
                    .unwrap();
                let w = Var::from_tensor(&Tensor::randn(0f32, 1., (4, 3, k, k), &dev).unwrap())
                    .unwrap();
                let b = Var::from_tensor(&Tensor::randn(0f32, 1., 4, &dev).unwrap()).unwrap();
                let conv = Conv2d {
                    weight: w.as_tensor().clone(),
                    bias: with_bias.then(|| b.as_tensor().clone()),
                    cfg: ConvConfig { padding, stride },
                };
                let ours = conv.forward(x.as_tensor()).unwrap();
                let mut reference = x.conv2d(w.as_tensor(), padding, stride, 1, 1).unwrap();
                let mut inputs = vec![x.as_tensor(), w.as_tensor()];
                if with_bias {
                    reference = reference
                        .broadcast_add(&b.reshape((1, 4, 1, 1)).unwrap())
                        .unwrap();
                    inputs.push(b.as_tensor());
                }
                assert_same_with_grads(
                    &ours,
                    &reference,
                    &inputs,
                    1e-4,
                    &format!("k {k} padding {padding} stride {stride} bias {with_bias}"),
                );
            }
        }
    }

    /// Under bf16 it rounds its inputs as candle's conv2d does (`models::precision_tests`).
    #[test]
    fn the_convolution_rounds_as_candle_does() {
        use crate::models::precision_tests::{rounds_like_candle, var};
        let (x, w, b) = (var(&[2, 3, 9, 9], 6), var(&[8, 3, 3, 3], 7), var(&[8], 8));
        for (padding, stride) in [(1, 1), (0, 2)] {
            let conv = Conv2d {
                weight: w.as_tensor().clone(),
                bias: Some(b.as_tensor().clone()),
                cfg: ConvConfig { padding, stride },
            };
            rounds_like_candle(
                &format!("conv padding {padding} stride {stride}"),
                &[&x, &w, &b],
                || conv.forward(x.as_tensor()).unwrap(),
                || {
                    x.conv2d(w.as_tensor(), padding, stride, 1, 1)
                        .unwrap()
                        .broadcast_add(&b.reshape((1, 8, 1, 1)).unwrap())
                        .unwrap()
                },
            );
        }
    }

    /// An input that is data, not a result of other ops, gets no gradient computed.
    #[test]
    fn a_data_input_gets_no_gradient() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1., (2, 3, 5, 5), &dev).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1., (4, 3, 3, 3), &dev).unwrap()).unwrap();
        let conv = Conv2d {
            weight: w.as_tensor().clone(),
            bias: None,
            cfg: ConvConfig::default(),
        };
        let grads = conv
            .forward(&x)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(grads.get(&x).is_none());
        assert!(grads.get(w.as_tensor()).is_some());
    }
}
