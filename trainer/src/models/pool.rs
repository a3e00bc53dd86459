//! 2-D max pooling (no padding, floor mode) with PyTorch's gradient: each output's gradient goes
//! to the *first* maximal input of its window. candle's own max-pool backward splits the gradient
//! among tied inputs, and ties are everywhere after a ReLU or on an image's constant background,
//! which changes the gradients of every layer below the pool (and cost 1.5 points of MNIST
//! accuracy). CPU tensors use this op; other devices fall back to candle's.

use candle_core::{CpuStorage, Layout, Shape, Tensor};

/// `max_pool2d(x, kernel)` with stride = kernel.
pub fn max_pool2d(x: &Tensor, kernel: usize) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() {
        return x.max_pool2d(kernel);
    }
    x.contiguous()?.apply_op1(MaxPool2d { kernel })
}

#[derive(Clone, Copy)]
struct MaxPool2d {
    kernel: usize,
}

impl MaxPool2d {
    /// (n·c, h, w, out_h, out_w) of a contiguous NCHW input.
    fn dims(&self, shape: &Shape) -> candle_core::Result<(usize, usize, usize, usize, usize)> {
        let (n, c, h, w) = shape.dims4()?;
        let k = self.kernel;
        if h < k || w < k {
            candle_core::bail!("max-pool: input {h}x{w} is smaller than the {k}x{k} window");
        }
        Ok((n * c, h, w, h / k, w / k))
    }

    /// Index (within its plane) of the first maximum of the window of output (oy, ox).
    fn argmax(&self, plane: &[f32], w: usize, oy: usize, ox: usize) -> usize {
        let k = self.kernel;
        let mut best = (oy * k) * w + ox * k;
        for dy in 0..k {
            for dx in 0..k {
                let i = (oy * k + dy) * w + ox * k + dx;
                if plane[i] > plane[best] || plane[i].is_nan() && !plane[best].is_nan() {
                    best = i;
                }
            }
        }
        best
    }
}

fn contiguous_f32<'a>(storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("max-pool: expected a contiguous f32 tensor"),
    }
}

impl candle_core::CustomOp1 for MaxPool2d {
    fn name(&self) -> &'static str {
        "max-pool2d-first-index"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = contiguous_f32(storage, layout)?;
        let (planes, h, w, oh, ow) = self.dims(layout.shape())?;
        let mut out = Vec::with_capacity(planes * oh * ow);
        for p in 0..planes {
            let plane = &src[p * h * w..(p + 1) * h * w];
            for oy in 0..oh {
                for ox in 0..ow {
                    out.push(plane[self.argmax(plane, w, oy, ox)]);
                }
            }
        }
        let (n, c, _, _) = layout.shape().dims4()?;
        Ok((CpuStorage::F32(out), Shape::from((n, c, oh, ow))))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let (planes, h, w, oh, ow) = self.dims(arg.shape())?;
        let x = arg.flatten_all()?.to_vec1::<f32>()?;
        let g = grad_res.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; x.len()];
        for p in 0..planes {
            let plane = &x[p * h * w..(p + 1) * h * w];
            for oy in 0..oh {
                for ox in 0..ow {
                    dx[p * h * w + self.argmax(plane, w, oy, ox)] += g[(p * oh + oy) * ow + ox];
                }
            }
        }
        Ok(Some(Tensor::from_vec(dx, arg.shape(), arg.device())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn forward_floors_and_backward_picks_the_first_maximum() {
        // 1x1x3x5 → 1x2 outputs (last row and column dropped, as PyTorch's floor mode does).
        let x = Var::new(
            &[[[
                [1f32, 5., 2., 2., 9.],
                [5., 0., 2., 2., 9.],
                [7., 7., 7., 7., 7.],
            ]]],
            &Device::Cpu,
        )
        .unwrap();
        let y = max_pool2d(x.as_tensor(), 2).unwrap();
        assert_eq!(
            y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            vec![5., 2.]
        );
        let grads = (y * Tensor::new(&[[[[10f32, 20.]]]], &Device::Cpu).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let dx = grads
            .get(x.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        // The tie 5/5 goes to the first (row 0, col 1); the tie of four 2s to (row 0, col 2).
        assert_eq!(
            dx,
            vec![0., 10., 20., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0.]
        );
    }
}
