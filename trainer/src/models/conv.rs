//! 2-D convolution as im2col + matrix multiply, forward and backward, on CPU.
//!
//! candle's CPU conv2d backward runs a direct (non-GEMM) transposed convolution for the input
//! gradient and a convolution with a batch-sized kernel for the weight gradient, which dominated
//! the CNN's step time. Here the whole batch is unfolded once into `[C·k·k (+1), N·L]` (L output
//! positions; the extra row of ones carries the bias), so the forward pass is one GEMM with the
//! `[O, C·k·k (+1)]` weight matrix, and the backward passes are two GEMMs (candle's matmul
//! backward) plus a fold (`col2im`) for the input gradient — no broadcast reductions, which are
//! slow on candle's CPU backend. Other devices use candle's own conv2d.
//!
//! The layer is a plain struct with a free constructor taking a `VarBuilder`, as in candle-nn,
//! with PyTorch's parameter names (`weight` [O, C, k, k], `bias` [O]).

use candle_core::{CpuStorage, Layout, Shape, Tensor};
use candle_nn::{Init, VarBuilder};

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
        let (o, c, k, _) = self.weight.dims4()?;
        let (n, _, h, w) = x.dims4()?;
        let ConvConfig { padding, stride } = self.cfg;
        if !x.device().is_cpu() {
            let y = x.conv2d(&self.weight, padding, stride, 1, 1)?;
            return match &self.bias {
                Some(b) => y.broadcast_add(&b.reshape((1, o, 1, 1))?),
                None => Ok(y),
            };
        }
        let unfold = Im2Col {
            k,
            stride,
            padding,
            ones_row: self.bias.is_some(),
        };
        let (oh, ow) = unfold.out_hw(h, w)?;
        let cols = x.contiguous()?.apply_op1(unfold)?; // [C·k·k (+1), N·L]
        let wmat = self.weight.reshape((o, c * k * k))?;
        let wmat = match &self.bias {
            Some(b) => Tensor::cat(&[wmat, b.reshape((o, 1))?], 1)?,
            None => wmat,
        };
        wmat.matmul(&cols)?
            .reshape((o, n, oh, ow))?
            .transpose(0, 1)?
            .contiguous()
    }
}

/// Unfolds `[N, C, H, W]` into `[C·k·k, N·OH·OW]` (zero padding), plus a row of ones when
/// `ones_row`; its backward folds the gradient back (the ones row has none).
#[derive(Clone, Copy)]
struct Im2Col {
    k: usize,
    stride: usize,
    padding: usize,
    ones_row: bool,
}

impl Im2Col {
    fn out_hw(&self, h: usize, w: usize) -> candle_core::Result<(usize, usize)> {
        let (hp, wp) = (h + 2 * self.padding, w + 2 * self.padding);
        if hp < self.k || wp < self.k {
            candle_core::bail!(
                "conv2d: input {h}x{w} (padding {}) is smaller than the {k}x{k} kernel",
                self.padding,
                k = self.k
            );
        }
        Ok((
            (hp - self.k) / self.stride + 1,
            (wp - self.k) / self.stride + 1,
        ))
    }

    /// Calls `f(col_row, out_pos, input_index, len)` for every run of in-bounds positions of one
    /// sample: `len` consecutive output positions from `out_pos` read the inputs `input_index`,
    /// `input_index + stride`, ... (the bounds are worked out once per run, not per element); rows
    /// are (c, ky, kx) in PyTorch's weight order.
    fn for_each_run(
        &self,
        c: usize,
        h: usize,
        w: usize,
        mut f: impl FnMut(usize, usize, usize, usize),
    ) {
        let (oh, ow) = self.out_hw(h, w).expect("checked by the caller");
        let (k, s, p) = (self.k, self.stride, self.padding);
        // For each kx, the output columns whose input column ox·s + kx − p lies in 0..w.
        let runs: Vec<(usize, usize, usize)> = (0..k)
            .map(|kx| {
                let first = p.saturating_sub(kx).div_ceil(s);
                let end = if w + p > kx {
                    ((w + p - kx - 1) / s + 1).min(ow)
                } else {
                    0
                };
                let ix0 = (first * s + kx).saturating_sub(p);
                (first, end.saturating_sub(first), ix0)
            })
            .collect();
        // The same order as a per-element loop (c, ky, kx, oy, ox), so gradients sum alike.
        for ci in 0..c {
            for ky in 0..k {
                for (kx, &(first, len, ix0)) in runs.iter().enumerate() {
                    if len == 0 {
                        continue;
                    }
                    let row = (ci * k + ky) * k + kx;
                    for oy in 0..oh {
                        let iy = oy * s + ky;
                        if iy < p || iy - p >= h {
                            continue;
                        }
                        f(row, oy * ow + first, (ci * h + iy - p) * w + ix0, len);
                    }
                }
            }
        }
    }
}

impl candle_core::CustomOp1 for Im2Col {
    fn name(&self) -> &'static str {
        "im2col"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, h, w) = layout.shape().dims4()?;
        let src = match (storage, layout.contiguous_offsets()) {
            (CpuStorage::F32(v), Some((a, b))) => &v[a..b],
            _ => candle_core::bail!("im2col: expected a contiguous f32 tensor"),
        };
        let (oh, ow) = self.out_hw(h, w)?;
        let (rows, l) = (c * self.k * self.k, oh * ow);
        let width = n * l;
        let mut out = vec![0f32; (rows + usize::from(self.ones_row)) * width];
        let step = self.stride;
        for s in 0..n {
            let x = &src[s * c * h * w..(s + 1) * c * h * w];
            self.for_each_run(c, h, w, |row, pos, i, len| {
                let dst = &mut out[row * width + s * l + pos..][..len];
                if step == 1 {
                    dst.copy_from_slice(&x[i..i + len]);
                } else {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d = x[i + j * step];
                    }
                }
            });
        }
        if self.ones_row {
            out[rows * width..].fill(1.0);
        }
        Ok((
            CpuStorage::F32(out),
            Shape::from((rows + usize::from(self.ones_row), width)),
        ))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let (n, c, h, w) = arg.dims4()?;
        let (oh, ow) = self.out_hw(h, w)?;
        let l = oh * ow;
        let width = n * l;
        let g = grad_res.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; n * c * h * w];
        let step = self.stride;
        for s in 0..n {
            let d = &mut dx[s * c * h * w..(s + 1) * c * h * w];
            self.for_each_run(c, h, w, |row, pos, i, len| {
                let src = &g[row * width + s * l + pos..][..len];
                if step == 1 {
                    for (d, g) in d[i..i + len].iter_mut().zip(src) {
                        *d += g;
                    }
                } else {
                    for (j, g) in src.iter().enumerate() {
                        d[i + j * step] += g;
                    }
                }
            });
        }
        Ok(Some(Tensor::from_vec(dx, arg.shape(), arg.device())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testing::assert_same_with_grads;
    use candle_core::{Device, Module, Var};

    /// Forward and both gradients agree with candle's reference conv2d (stride, padding, bias).
    #[test]
    fn matches_candle_conv2d_forward_and_backward() {
        let dev = Device::Cpu;
        for (padding, stride) in [(0, 1), (2, 1), (1, 2), (0, 2), (3, 3)] {
            let x =
                Var::from_tensor(&Tensor::randn(0f32, 1., (2, 3, 7, 7), &dev).unwrap()).unwrap();
            let w =
                Var::from_tensor(&Tensor::randn(0f32, 1., (4, 3, 3, 3), &dev).unwrap()).unwrap();
            let b = Var::from_tensor(&Tensor::randn(0f32, 1., 4, &dev).unwrap()).unwrap();
            let conv = Conv2d {
                weight: w.as_tensor().clone(),
                bias: Some(b.as_tensor().clone()),
                cfg: ConvConfig { padding, stride },
            };
            let ours = conv.forward(x.as_tensor()).unwrap();
            let reference = x
                .conv2d(w.as_tensor(), padding, stride, 1, 1)
                .unwrap()
                .broadcast_add(&b.reshape((1, 4, 1, 1)).unwrap())
                .unwrap();
            assert_same_with_grads(
                &ours,
                &reference,
                &[x.as_tensor(), w.as_tensor(), b.as_tensor()],
                1e-4,
                &format!("padding {padding} stride {stride}"),
            );
        }
    }
}
