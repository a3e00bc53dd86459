//! ReLU with a one-pass backward on CPU: candle's own ReLU backward builds a zeros tensor, a
//! byte mask, a float mask and two products. The gradient follows PyTorch (`grad · (y > 0)`).

use candle_core::{CpuStorage, Layout, Shape, Tensor};

use super::cpu_tensor::{cpu_tensor, storage_f32, with_f32};
use super::kernels::tasks::{items_per_task, threads, written_pieces};

/// `max(x, 0)`.
pub fn relu(x: &Tensor) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != candle_core::DType::F32 {
        return x.relu();
    }
    x.contiguous()?.apply_op1(Relu)
}

/// Elements per parallel piece (small tensors stay on one thread).
const PIECE: usize = 1 << 16;

fn map(out_len: usize, f: impl Fn(usize, &mut [f32]) + Sync) -> Vec<f32> {
    let per = items_per_task(out_len.div_ceil(PIECE), threads()) * PIECE;
    written_pieces(out_len, 1, per, f).0
}

#[derive(Clone, Copy)]
struct Relu;

impl candle_core::CustomOp1 for Relu {
    fn name(&self) -> &'static str {
        "relu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = storage_f32(s, l, "relu input")?;
        let y = map(x.len(), |first, out| {
            for (o, v) in out.iter_mut().zip(&x[first..]) {
                *o = v.max(0.0);
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let dx = with_f32(res, "relu output", |y| {
            with_f32(grad, "relu output gradient", |g| {
                map(y.len(), |first, out| {
                    for ((o, y), g) in out.iter_mut().zip(&y[first..]).zip(&g[first..]) {
                        *o = if *y > 0.0 { *g } else { 0.0 };
                    }
                })
            })
        })??;
        Ok(Some(cpu_tensor(dx, arg.shape())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn forward_and_gradient_follow_pytorch() {
        let x = Var::new(&[-1f32, 0., 2., -0.5, 3.], &Device::Cpu).unwrap();
        let y = relu(x.as_tensor()).unwrap();
        assert_eq!(y.to_vec1::<f32>().unwrap(), vec![0., 0., 2., 0., 3.]);
        let k = Tensor::new(&[1f32, 2., 3., 4., 5.], &Device::Cpu).unwrap();
        let grads = (y * k).unwrap().sum_all().unwrap().backward().unwrap();
        // No gradient at 0 (PyTorch: grad · (y > 0)).
        assert_eq!(
            grads.get(x.as_tensor()).unwrap().to_vec1::<f32>().unwrap(),
            vec![0., 0., 3., 0., 5.]
        );
    }
}
