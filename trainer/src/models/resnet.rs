//! ResNet-18/50 for 32×32 CIFAR-10 with torchvision's parameter names (`conv1`, `bn1`,
//! `layerN.M.{conv,bn}K`, `layerN.M.downsample.{0,1}`, `fc`): the CIFAR variant replaces the 7×7
//! stride-2 stem by a 3×3 stride-1 conv and drops the max-pool, so a checkpoint loads into
//! `torchvision.models.resnet18(num_classes=10)` after `model.conv1 = nn.Conv2d(3, 64, 3, 1, 1,
//! bias=False); model.maxpool = nn.Identity()`. The stem takes the data's channels (1 for
//! grayscale: `nn.Conv2d(1, 64, ...)`), and the global average pool any image size.

use candle_core::Tensor;
use candle_nn::Module;

use super::activation::add_relu;
use super::batchnorm::{BatchNorm2d, BatchNormConfig, batch_norm2d};
use super::conv::{Conv2d, ConvConfig, conv2d_no_bias};
use super::linear::{Linear, linear};
use super::params::{Forward, ParamBuilder};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Basic,
    Bottleneck,
}

#[derive(Debug, Clone)]
pub struct ResNetConfig {
    pub block: BlockKind,
    pub layers: [usize; 4],
    pub classes: usize,
    /// Input channels of the stem (3 for RGB, 1 for grayscale).
    pub channels: usize,
}

impl Default for ResNetConfig {
    fn default() -> Self {
        Self::resnet18(10)
    }
}

impl ResNetConfig {
    pub fn resnet18(classes: usize) -> Self {
        Self {
            block: BlockKind::Basic,
            layers: [2, 2, 2, 2],
            classes,
            channels: 3,
        }
    }
    pub fn resnet50(classes: usize) -> Self {
        Self {
            block: BlockKind::Bottleneck,
            layers: [3, 4, 6, 3],
            classes,
            channels: 3,
        }
    }
    fn expansion(&self) -> usize {
        match self.block {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

struct ConvBn {
    conv: Conv2d,
    bn: BatchNorm2d,
}

impl ConvBn {
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        self.bn.forward(&self.conv.forward(x)?, train)
    }

    /// `relu(forward(x))`, the ReLU fused into the BatchNorm.
    fn forward_relu(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        self.bn.forward_relu(&self.conv.forward(x)?, train)
    }
}

fn conv_bn(
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    conv: ParamBuilder,
    bn: ParamBuilder,
) -> candle_core::Result<ConvBn> {
    let cfg = ConvConfig {
        padding: k / 2,
        stride,
    };
    Ok(ConvBn {
        conv: conv2d_no_bias(cin, cout, k, cfg, conv.vb)?,
        bn: batch_norm2d(cout, BatchNormConfig::default(), bn)?,
    })
}

/// One residual block: a chain of conv+bn (ReLU between), plus the optional downsample path.
struct Block {
    convs: Vec<ConvBn>,
    downsample: Option<ConvBn>,
}

impl Block {
    fn new(
        kind: BlockKind,
        cin: usize,
        width: usize,
        stride: usize,
        expansion: usize,
        pb: ParamBuilder,
    ) -> candle_core::Result<Block> {
        let cout = width * expansion;
        let plan: Vec<(usize, usize, usize, usize)> = match kind {
            BlockKind::Basic => vec![(cin, width, 3, stride), (width, width, 3, 1)],
            BlockKind::Bottleneck => vec![
                (cin, width, 1, 1),
                (width, width, 3, stride),
                (width, cout, 1, 1),
            ],
        };
        let convs = plan
            .into_iter()
            .enumerate()
            .map(|(i, (a, b, k, s))| {
                conv_bn(
                    a,
                    b,
                    k,
                    s,
                    pb.pp(format!("conv{}", i + 1)),
                    pb.pp(format!("bn{}", i + 1)),
                )
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let downsample = if stride != 1 || cin != cout {
            let d = pb.pp("downsample");
            Some(conv_bn(cin, cout, 1, stride, d.pp(0), d.pp(1))?)
        } else {
            None
        };
        Ok(Block { convs, downsample })
    }

    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let mut y = x.clone();
        let last = self.convs.len() - 1;
        for (i, c) in self.convs.iter().enumerate() {
            y = if i != last {
                c.forward_relu(&y, train)?
            } else {
                c.forward(&y, train)?
            };
        }
        let identity = match &self.downsample {
            Some(d) => d.forward(x, train)?,
            None => x.clone(),
        };
        add_relu(&y, &identity)
    }
}

pub struct ResNet {
    stem: ConvBn,
    blocks: Vec<Block>,
    fc: Linear,
}

pub fn resnet(cfg: ResNetConfig, pb: ParamBuilder) -> candle_core::Result<ResNet> {
    let stem = conv_bn(cfg.channels, 64, 3, 1, pb.pp("conv1"), pb.pp("bn1"))?;
    let mut blocks = Vec::new();
    let mut cin = 64;
    for (li, &n) in cfg.layers.iter().enumerate() {
        let width = 64 << li;
        for bi in 0..n {
            let stride = if li > 0 && bi == 0 { 2 } else { 1 };
            blocks.push(Block::new(
                cfg.block,
                cin,
                width,
                stride,
                cfg.expansion(),
                pb.pp(format!("layer{}", li + 1)).pp(bi),
            )?);
            cin = width * cfg.expansion();
        }
    }
    let fc = linear(cin, cfg.classes, pb.vb.pp("fc"))?;
    Ok(ResNet { stem, blocks, fc })
}

impl Forward for ResNet {
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let mut x = self.stem.forward_relu(x, train)?;
        for b in &self.blocks {
            x = b.forward(&x, train)?;
        }
        self.fc.forward(&x.mean((2, 3))?)
    }
}
