//! Fully connected layer `y = x·Wᵀ + b` with PyTorch's layout (`weight` [out, in], `bias` [out]).
//!
//! It computes `(W·xᵀ)ᵀ` rather than `x·Wᵀ`: the weight gradient then comes out of candle's matmul
//! backward already contiguous, whereas with `x.matmul(&w.t())` it is a transposed view that
//! candle adds into the gradient store element by element (a quarter of the MLP's step time).

use candle_core::Tensor;
use candle_nn::{Init, VarBuilder};

pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

/// The init hints are placeholders: [`super::init`] sets PyTorch's initialisation afterwards.
pub fn linear(inputs: usize, outputs: usize, vb: VarBuilder) -> candle_core::Result<Linear> {
    Ok(Linear {
        weight: vb.get_with_hints((outputs, inputs), "weight", Init::Const(0.0))?,
        bias: Some(vb.get_with_hints(outputs, "bias", Init::Const(0.0))?),
    })
}

impl Linear {
    /// The weight `[out, in]` and the bias `[out]`, for layers that fuse their own product.
    pub fn parts(&self) -> (&Tensor, Option<&Tensor>) {
        (&self.weight, self.bias.as_ref())
    }
}

impl candle_core::Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.weight.matmul(&x.t()?)?.t()?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testing::assert_same_with_grads;
    use candle_core::{Device, Module, Var};

    #[test]
    fn matches_x_times_w_transposed_with_gradients() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1., (5, 7), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1., (3, 7), &dev).unwrap()).unwrap();
        let b = Var::from_tensor(&Tensor::randn(0f32, 1., 3, &dev).unwrap()).unwrap();
        let ours = Linear {
            weight: w.as_tensor().clone(),
            bias: Some(b.as_tensor().clone()),
        }
        .forward(x.as_tensor())
        .unwrap();
        let reference = candle_nn::Linear::new(w.as_tensor().clone(), Some(b.as_tensor().clone()))
            .forward(x.as_tensor())
            .unwrap();
        assert_same_with_grads(
            &ours,
            &reference,
            &[x.as_tensor(), w.as_tensor(), b.as_tensor()],
            1e-5,
            "linear",
        );
    }
}
