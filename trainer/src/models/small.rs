//! The small reference models: `mnist-cnn`, `mlp`, `convnet-bn`, `linear`.

use candle_core::Tensor;
use candle_nn::Module;

use super::activation::relu;
use super::batchnorm::{BatchNorm2d, BatchNormConfig, batch_norm2d};
use super::conv::{Conv2d, ConvConfig, conv2d};
use super::linear::{Linear, linear};
use super::params::{Forward, ParamBuilder};
use super::pool::{max_pool2d, relu_max_pool2d};

/// The MNIST CNN of the reference DDP tutorial: conv 1→32→64→64 (3×3), 2×2 max-pools after the
/// first two, dense 576→64→classes, ReLUs.
pub struct MnistCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    conv3: Conv2d,
    dense1: Linear,
    dense2: Linear,
}

pub fn mnist_cnn(classes: usize, pb: ParamBuilder) -> candle_core::Result<MnistCnn> {
    let cfg = ConvConfig::default();
    Ok(MnistCnn {
        conv1: conv2d(1, 32, 3, cfg, pb.vb.pp("conv1"))?,
        conv2: conv2d(32, 64, 3, cfg, pb.vb.pp("conv2"))?,
        conv3: conv2d(64, 64, 3, cfg, pb.vb.pp("conv3"))?,
        dense1: linear(576, 64, pb.vb.pp("dense1"))?,
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

/// The FashionMNIST tutorial MLP: flatten, 784→512→512→classes with ReLUs, as
/// `linear_relu_stack.{0,2,4}`.
pub struct Mlp {
    layers: [Linear; 3],
}

pub fn mlp(classes: usize, pb: ParamBuilder) -> candle_core::Result<Mlp> {
    let vb = pb.vb.pp("linear_relu_stack");
    Ok(Mlp {
        layers: [
            linear(784, 512, vb.pp(0))?,
            linear(512, 512, vb.pp(2))?,
            linear(512, classes, vb.pp(4))?,
        ],
    })
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor, _train: bool) -> candle_core::Result<Tensor> {
        let x = relu(&self.layers[0].forward(&x.flatten_from(1)?)?)?;
        let x = relu(&self.layers[1].forward(&x)?)?;
        self.layers[2].forward(&x)
    }
}

/// The ConvNet-with-BatchNorm tutorial model: two (conv 5×5 pad 2 → BatchNorm → ReLU → 2×2 pool)
/// layers with 16 and 32 channels as `layer1.{0,1}` / `layer2.{0,1}`, then `fc` 7·7·32→classes.
pub struct ConvNetBn {
    layers: [(Conv2d, BatchNorm2d); 2],
    fc: Linear,
}

pub fn convnet_bn(classes: usize, pb: ParamBuilder) -> candle_core::Result<ConvNetBn> {
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
        layers: [layer(1, 1, 16)?, layer(2, 16, 32)?],
        fc: linear(7 * 7 * 32, classes, pb.vb.pp("fc"))?,
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

/// `nn.Linear(10, 1)` for the regression example (state dict keys `weight`, `bias`).
pub struct LinearRegression(Linear);

pub fn linear_model(pb: ParamBuilder) -> candle_core::Result<LinearRegression> {
    Ok(LinearRegression(linear(10, 1, pb.vb)?))
}

impl Forward for LinearRegression {
    fn forward(&self, x: &Tensor, _train: bool) -> candle_core::Result<Tensor> {
        self.0.forward(&x.flatten_from(1)?)
    }
}
