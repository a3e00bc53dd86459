//! A layer with a weight and an optional bias as one candle custom op: [`WeightOp`] is its
//! forward over (input, weight, bias?) storages and its backward; [`apply`] runs it as a
//! `CustomOp2` (no bias) or `CustomOp3`, which only forward to it.

use candle_core::{CpuStorage, Layout, Shape, Tensor};

/// A storage and its layout.
pub type Arg<'a> = (&'a CpuStorage, &'a Layout);
/// The output of a forward pass, and its shape.
pub type Output = candle_core::Result<(CpuStorage, Shape)>;
/// `(dx if x needs one, dw, db if there is a bias)`.
pub type Grads = candle_core::Result<(Option<Tensor>, Tensor, Option<Tensor>)>;

/// The forward and backward of a layer over an input `x`, a weight `w` and maybe a bias.
pub trait WeightOp: Clone + Send + Sync + 'static {
    /// The op's name without and with a bias.
    const NAMES: (&'static str, &'static str);

    fn fwd(&self, x: Arg, w: Arg, bias: Option<Arg>) -> Output;

    /// The gradients for the output gradient `grad`.
    fn bwd(&self, x: &Tensor, w: &Tensor, grad: &Tensor, with_bias: bool) -> Grads;
}

/// `op` over `x`, `w` and `b` (if any), with its backward.
pub fn apply<T: WeightOp>(
    op: T,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    match b {
        Some(b) => x.apply_op3(w, b, Biased(op)),
        None => x.apply_op2(w, Biased(op)),
    }
}

/// The candle side of a [`WeightOp`].
#[derive(Clone)]
struct Biased<T>(T);

impl<T: WeightOp> candle_core::CustomOp2 for Biased<T> {
    fn name(&self) -> &'static str {
        T::NAMES.0
    }

    fn cpu_fwd(&self, x: &CpuStorage, xl: &Layout, w: &CpuStorage, wl: &Layout) -> Output {
        self.0.fwd((x, xl), (w, wl), None)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.0.bwd(x, w, grad, false)?;
        Ok((dx, Some(dw)))
    }
}

impl<T: WeightOp> candle_core::CustomOp3 for Biased<T> {
    fn name(&self) -> &'static str {
        T::NAMES.1
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> Output {
        self.0.fwd((x, xl), (w, wl), Some((b, bl)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = self.0.bwd(x, w, grad, true)?;
        Ok((dx, Some(dw), db))
    }
}
