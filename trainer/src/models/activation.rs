//! ReLU with a one-pass backward on CPU: candle's own ReLU backward builds a zeros tensor, a
//! byte mask, a float mask and two products. The gradient follows PyTorch (`grad · (y > 0)`).
//! [`add_relu`] is `relu(a + b)` (a residual block's end) in one pass forward.

use candle_core::{CpuStorage, Layout, Shape, Tensor};

use super::cpu_tensor::{cpu_tensor, storage_f32, with_f32};
use super::kernels::simd::widest_simd;
use super::kernels::tasks::{items_per_task, threads, written_pieces};
use super::kernels::{relu_grad_value, relu_value};

/// `max(x, 0)` ([`relu_value`]: `+0.0` for every value that is not positive).
pub fn relu(x: &Tensor) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != candle_core::DType::F32 {
        return x.relu();
    }
    x.contiguous()?.apply_op1(Relu)
}

/// `relu(a + b)` for tensors of one shape: the same values and gradients, bit for bit, as
/// [`relu`] of the sum, without writing the sum and reading it again.
pub fn add_relu(a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    let cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32;
    if !cpu_f32(a) || !cpu_f32(b) || a.shape() != b.shape() {
        return relu(&(a + b)?);
    }
    a.contiguous()?.apply_op2(&b.contiguous()?, AddRelu)
}

/// Elements per parallel piece (small tensors stay on one thread).
const PIECE: usize = 1 << 16;

fn map(out_len: usize, f: impl Fn(usize, &mut [f32]) + Sync) -> Vec<f32> {
    let per = items_per_task(out_len.div_ceil(PIECE), threads()) * PIECE;
    written_pieces(out_len, 1, per, f).0
}

widest_simd! {
    /// `out = max(x, 0)`.
    fn relu_into(x: &[f32], out: &mut [f32]) {
        for (o, v) in out.iter_mut().zip(x) {
            *o = relu_value(*v);
        }
    }
}

widest_simd! {
    /// `out = max(a + b, 0)`.
    fn add_relu_into(a: &[f32], b: &[f32], out: &mut [f32]) {
        for ((o, a), b) in out.iter_mut().zip(a).zip(b) {
            *o = relu_value(a + b);
        }
    }
}

widest_simd! {
    /// `out = g · (y > 0)`: ReLU's input gradient from its output `y` and output gradient `g`.
    fn relu_grad_into(y: &[f32], g: &[f32], out: &mut [f32]) {
        for ((o, y), g) in out.iter_mut().zip(y).zip(g) {
            *o = relu_grad_value(*y, *g);
        }
    }
}

/// ReLU's input gradient (see [`relu_grad_into`]) as a tensor of `shape`.
fn relu_grad(res: &Tensor, grad: &Tensor, shape: &Shape) -> candle_core::Result<Tensor> {
    let dx = with_f32(res, "relu output", |y| {
        with_f32(grad, "relu output gradient", |g| {
            map(y.len(), |first, out| {
                relu_grad_into(&y[first..], &g[first..], out)
            })
        })
    })??;
    cpu_tensor(dx, shape)
}

#[derive(Clone, Copy)]
struct Relu;

impl candle_core::CustomOp1 for Relu {
    fn name(&self) -> &'static str {
        "relu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = storage_f32(s, l, "relu input")?;
        let y = map(x.len(), |first, out| relu_into(&x[first..], out));
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(relu_grad(res, grad, arg.shape())?))
    }
}

#[derive(Clone, Copy)]
struct AddRelu;

impl candle_core::CustomOp2 for AddRelu {
    fn name(&self) -> &'static str {
        "add-relu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let a = storage_f32(s1, l1, "add-relu input")?;
        let b = storage_f32(s2, l2, "add-relu input")?;
        if l1.shape() != l2.shape() {
            candle_core::bail!(
                "add-relu: shapes {:?} and {:?} differ",
                l1.shape(),
                l2.shape()
            );
        }
        let y = map(a.len(), |first, out| {
            add_relu_into(&a[first..], &b[first..], out)
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    /// Both inputs get ReLU's input gradient (the sum passes it on unchanged).
    fn bwd(
        &self,
        a: &Tensor,
        _b: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let dx = relu_grad(res, grad, a.shape())?;
        Ok((Some(dx.clone()), Some(dx)))
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

    #[test]
    fn add_relu_equals_relu_of_the_sum() {
        let a = Var::new(&[-1f32, 0.5, 2., -0.5, 3., 1.25], &Device::Cpu).unwrap();
        let b = Var::new(&[0.5f32, -0.5, 1., 0.25, -4., 0.5], &Device::Cpu).unwrap();
        let k = Tensor::new(&[1f32, 2., 3., 4., 5., 6.], &Device::Cpu).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                add_relu(a.as_tensor(), b.as_tensor()).unwrap()
            } else {
                relu(&(a.as_tensor() + b.as_tensor()).unwrap()).unwrap()
            };
            let grads = (&y * &k).unwrap().sum_all().unwrap().backward().unwrap();
            let get = |v: &Var| grads.get(v.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            (y.to_vec1::<f32>().unwrap(), get(&a), get(&b))
        };
        let fused = run(true);
        assert_eq!(fused, run(false));
        assert_eq!(fused.0, vec![0., 0., 3., 0., 0., 1.75]);
        assert_eq!(fused.1, vec![0., 0., 3., 0., 0., 6.]);
        assert_eq!(fused.1, fused.2);
    }

    /// Every value that is not positive becomes +0.0, whichever copy of the kernel runs.
    #[test]
    fn zeros_are_positive() {
        let x = Tensor::new(&[-0.0f32, f32::NAN, -2., 0., 1.5], &Device::Cpu).unwrap();
        let y = relu(&x).unwrap().to_vec1::<f32>().unwrap();
        let bits: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, [0, 0, 0, 0, 1.5f32.to_bits()]);
        let sum = add_relu(&x, &x.neg().unwrap()).unwrap();
        assert!(
            sum.to_vec1::<f32>()
                .unwrap()
                .iter()
                .all(|v| v.to_bits() == 0)
        );
    }
}
