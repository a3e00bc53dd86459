//! 2-D max pooling (no padding, floor mode) with PyTorch's gradient: each output's gradient goes
//! to the *first* maximal input of its window. candle's own max-pool backward splits the gradient
//! among tied inputs, and ties are everywhere after a ReLU or on an image's constant background,
//! which changes the gradients of every layer below the pool (and cost 1.5 points of MNIST
//! accuracy). CPU tensors use this op ([`super::kernels::pool`]); other devices fall back to
//! candle's.

use std::sync::{Arc, OnceLock};

use candle_core::{CpuStorage, Layout, Shape, Tensor};

use super::cpu_tensor::{cpu_tensor, storage_f32, with_f32};
use super::kernels::pool as kernel;
use super::kernels::tasks::threads;

/// `max_pool2d(x, kernel)` with stride = kernel.
pub fn max_pool2d(x: &Tensor, kernel: usize) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() {
        return x.max_pool2d(kernel);
    }
    x.contiguous()?.apply_op1(MaxPool2d::new(kernel, false))
}

/// `max_pool2d(relu(x), kernel)`: the same values and gradients, bit for bit, as
/// [`super::relu`] then [`max_pool2d`], in one pass forward and one backward (the ReLU's own
/// passes over the unpooled tensor were a tenth of the MNIST CNN's step).
pub fn relu_max_pool2d(x: &Tensor, kernel: usize) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() {
        return x.relu()?.max_pool2d(kernel);
    }
    x.contiguous()?.apply_op1(MaxPool2d::new(kernel, true))
}

/// The op of one forward pass: it keeps the winners of its windows for its backward pass.
#[derive(Clone)]
struct MaxPool2d {
    kernel: usize,
    /// Pools `relu(x)` ([`relu_max_pool2d`]).
    relu: bool,
    winners: Arc<OnceLock<Vec<u8>>>,
}

impl MaxPool2d {
    fn new(kernel: usize, relu: bool) -> Self {
        MaxPool2d {
            kernel,
            relu,
            winners: Arc::default(),
        }
    }

    /// (n·c, h, w) of a contiguous NCHW input, checked against the window.
    fn planes(&self, shape: &Shape) -> candle_core::Result<kernel::Planes> {
        let (n, c, h, w) = shape.dims4()?;
        let k = self.kernel;
        if k == 0 || k > 16 || h < k || w < k {
            candle_core::bail!(
                "max-pool: a {k}x{k} window does not fit the input {h}x{w} (windows of 1..=16)"
            );
        }
        Ok((n * c, h, w))
    }
}

impl candle_core::CustomOp1 for MaxPool2d {
    fn name(&self) -> &'static str {
        if self.relu {
            "relu-max-pool2d-first-index"
        } else {
            "max-pool2d-first-index"
        }
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = storage_f32(storage, layout, "max-pool input")?;
        let planes = self.planes(layout.shape())?;
        let (y, winners) = kernel::forward(x, planes, self.kernel, self.relu, threads());
        // A second forward of the same op (never done by candle) would keep the first winners.
        let _ = self.winners.set(winners);
        let (n, c, h, w) = layout.shape().dims4()?;
        let k = self.kernel;
        Ok((CpuStorage::F32(y), Shape::from((n, c, h / k, w / k))))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let planes = self.planes(arg.shape())?;
        let Some(winners) = self.winners.get() else {
            candle_core::bail!("max-pool: backward before forward");
        };
        let backward = |g: &[f32], relu_out: Option<&[f32]>| {
            kernel::backward(g, winners, planes, self.kernel, relu_out, threads())
        };
        let dx = with_f32(grad_res, "max-pool output gradient", |g| {
            if self.relu {
                with_f32(res, "relu-max-pool output", |y| backward(g, Some(y)))
            } else {
                Ok(backward(g, None))
            }
        })??;
        Ok(Some(cpu_tensor(dx, arg.shape())?))
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

    /// The fused op against ReLU then the pool through candle's autograd: same outputs and the
    /// same input gradient, bit for bit.
    #[test]
    fn relu_then_pool_fuses_exactly() {
        let values: Vec<f32> = (0..2 * 3 * 6 * 7)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.25)
            .collect();
        let x = Var::from_vec(values, (2, 3, 6, 7), &Device::Cpu).unwrap();
        let k = Tensor::arange(0f32, 2. * 3. * 3. * 3., &Device::Cpu)
            .unwrap()
            .reshape((2, 3, 3, 3))
            .unwrap();
        let run = |fused: bool| {
            let y = if fused {
                relu_max_pool2d(x.as_tensor(), 2).unwrap()
            } else {
                max_pool2d(&crate::models::relu(x.as_tensor()).unwrap(), 2).unwrap()
            };
            let grads = (&y * &k).unwrap().sum_all().unwrap().backward().unwrap();
            let dx = grads.get(x.as_tensor()).unwrap().flatten_all().unwrap();
            let bits = |t: &Tensor| -> Vec<u32> {
                let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                v.iter().map(|v| v.to_bits()).collect()
            };
            (bits(&y), bits(&dx))
        };
        let (fused, composed) = (run(true), run(false));
        assert_eq!(fused, composed);
        assert!(
            fused.1.iter().filter(|b| **b != 0).count() > 10,
            "some gradients pass"
        );
    }
}
