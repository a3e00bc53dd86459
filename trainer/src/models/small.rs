//! The small reference models: `mnist-cnn`, `mlp`, `convnet-bn`, `linear`.

use candle_core::Tensor;
use candle_nn::Module;

use super::activation::relu;
use super::batchnorm::{BatchNorm2d, BatchNormConfig, batch_norm2d};
use super::conv::{Conv2d, ConvConfig, conv2d};
use super::linear::{Linear, linear};
use super::params::{Forward, ParamBuilder};
use super::pool::{max_pool2d, relu_max_pool2d};

/// The MNIST CNN of the reference DDP tutorial: conv C→32→64→64 (3×3), 2×2 max-pools after the
/// first two, dense 64·h·w→64→classes, ReLUs (576 inputs to `dense1` for 1×28×28 MNIST).
pub struct MnistCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    conv3: Conv2d,
    dense1: Linear,
    dense2: Linear,
}

/// The side of `mnist-cnn`'s last feature map for an input side `n` (3 for 28), if positive.
pub fn mnist_cnn_side(n: usize) -> Option<usize> {
    // conv 3×3 (−2), pool /2, conv (−2), pool /2, conv (−2).
    let a = n.checked_sub(2)? / 2;
    let b = a.checked_sub(2)? / 2;
    b.checked_sub(2).filter(|&s| s > 0)
}

pub fn mnist_cnn(
    [c, h, w]: [usize; 3],
    classes: usize,
    pb: ParamBuilder,
) -> candle_core::Result<MnistCnn> {
    let cfg = ConvConfig::default();
    let side = |n: usize| {
        mnist_cnn_side(n).ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "mnist-cnn needs images of at least 18×18, not {h}×{w}"
            ))
        })
    };
    let flat = 64 * side(h)? * side(w)?;
    Ok(MnistCnn {
        conv1: conv2d(c, 32, 3, cfg, pb.vb.pp("conv1"))?,
        conv2: conv2d(32, 64, 3, cfg, pb.vb.pp("conv2"))?,
        conv3: conv2d(64, 64, 3, cfg, pb.vb.pp("conv3"))?,
        dense1: linear(flat, 64, pb.vb.pp("dense1"))?,
        dense2: linear(64, classes, pb.vb.pp("dense2"))?,
    })
}

impl Forward for MnistCnn {
    fn forward(&self, x: &Tensor, _train: bool) -> candle_core::Result<Tensor> {
        let x = relu_max_pool2d(&self.conv1.forward(x)?, 2)?;
        let x = relu_max_pool2d(&self.conv2.forward(&x)?, 2)?;
        let x = relu(&self.conv3.forward(&x)?)?.flatten_from(1)?;
        self.dense2.forward(&relu(&self.dense1.forward(&x)?)?)
    }
}

/// The FashionMNIST tutorial MLP: flatten, inputs→512→512→classes with ReLUs, as
/// `linear_relu_stack.{0,2,4}` (PyTorch's `nn.Sequential` of Linear, ReLU, ...). Other hidden
/// widths (`model.hidden`) keep the naming: layer k is `linear_relu_stack.{2k}`.
pub struct Mlp {
    layers: Vec<Linear>,
}

/// The tutorial's hidden layers.
pub const MLP_HIDDEN: [usize; 2] = [512, 512];

pub fn mlp(
    inputs: usize,
    hidden: &[usize],
    outputs: usize,
    pb: ParamBuilder,
) -> candle_core::Result<Mlp> {
    let vb = pb.vb.pp("linear_relu_stack");
    let widths: Vec<usize> = std::iter::once(inputs)
        .chain(hidden.iter().copied())
        .chain(std::iter::once(outputs))
        .collect();
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(k, io)| linear(io[0], io[1], vb.pp(2 * k)))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Ok(Mlp { layers })
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor, _train: bool) -> candle_core::Result<Tensor> {
        let (last, hidden) = self
            .layers
            .split_last()
            .expect("an MLP has an output layer");
        let mut x = x.flatten_from(1)?;
        for layer in hidden {
            x = relu(&layer.forward(&x)?)?;
        }
        last.forward(&x)
    }
}

/// The ConvNet-with-BatchNorm tutorial model: two (conv 5×5 pad 2 → BatchNorm → ReLU → 2×2 pool)
/// layers with 16 and 32 channels as `layer1.{0,1}` / `layer2.{0,1}`, then `fc`
/// 32·⌊H/4⌋·⌊W/4⌋→classes (7·7·32 for 28×28).
pub struct ConvNetBn {
    layers: [(Conv2d, BatchNorm2d); 2],
    fc: Linear,
}

pub fn convnet_bn(
    [c, h, w]: [usize; 3],
    classes: usize,
    pb: ParamBuilder,
) -> candle_core::Result<ConvNetBn> {
    if h < 4 || w < 4 {
        return Err(candle_core::Error::Msg(format!(
            "convnet-bn needs images of at least 4×4, not {h}×{w}"
        )));
    }
    let cfg = ConvConfig {
        padding: 2,
        ..Default::default()
    };
    let layer = |i: usize, cin: usize, cout: usize| -> candle_core::Result<(Conv2d, BatchNorm2d)> {
        let p = pb.pp(format!("layer{i}"));
        Ok((
            conv2d(cin, cout, 5, cfg, p.vb.pp(0))?,
            batch_norm2d(cout, BatchNormConfig::default(), p.pp(1))?,
        ))
    };
    Ok(ConvNetBn {
        layers: [layer(1, c, 16)?, layer(2, 16, 32)?],
        fc: linear((h / 4) * (w / 4) * 32, classes, pb.vb.pp("fc"))?,
    })
}

impl Forward for ConvNetBn {
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let mut x = x.clone();
        for (conv, bn) in &self.layers {
            x = max_pool2d(&bn.forward_relu(&conv.forward(&x)?, train)?, 2)?;
        }
        self.fc.forward(&x.flatten_from(1)?)
    }
}

/// `nn.Linear(inputs, outputs)` for regression (state dict keys `weight`, `bias`; 10 → 1 in the
/// example).
pub struct LinearRegression(Linear);

pub fn linear_model(
    inputs: usize,
    outputs: usize,
    pb: ParamBuilder,
) -> candle_core::Result<LinearRegression> {
    Ok(LinearRegression(linear(inputs, outputs, pb.vb)?))
}

impl Forward for LinearRegression {
    fn forward(&self, x: &Tensor, _train: bool) -> candle_core::Result<Tensor> {
        self.0.forward(&x.flatten_from(1)?)
    }
}
