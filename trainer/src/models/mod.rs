//! The reference models, with PyTorch's parameter names and layouts so that a checkpoint written
//! here loads with `model.load_state_dict(safetensors.torch.load_file(...))` in PyTorch.
//!
//! Layout:
//! - `small`: `mnist-cnn`, `mlp`, `convnet-bn`, `linear`.
//! - `custom`: the user's model (`custom`), registered by `ddp_trainer::main_with`.
//! - `resnet`: `resnet18`, `resnet50` for 32×32 CIFAR-10 (torchvision names, 3×3 stem, no max-pool).
//! - `gpt`: the GPT language model of the PyTorch reference (token ids to logits, KV-cached
//!   generation, the tied `lm_head` in checkpoints).
//! - `params`: what models are built with ([`ParamBuilder`], [`BufferStore`], [`BnMode`]) and
//!   the [`Forward`] pass they implement.
//! - `batchnorm`: BatchNorm2d / SyncBatchNorm.
//! - `conv`: Conv2d as chunked im2col + GEMM, forward and backward in one custom op each.
//! - `kernels`: the CPU kernels behind the custom ops (GEMM views, im2col, conv, BatchNorm),
//!   plain functions over slices, public for the benchmarks (`ddp-bench --what gemm`);
//!   `cpu_tensor` borrows tensors' values for them, rounded where mixed precision asks
//!   (`train.precision`, [`candle_core::autocast`]); `precision_tests` checks the ops under it.
//! - `linear`: Linear with a contiguous weight gradient.
//! - `init`: PyTorch's default initialisation, seeded (and seeded normals).
//! - `pool`: max-pooling with PyTorch's gradient (first maximum of a window).
//! - `activation`: ReLU with a one-pass backward.
//! - `weight_op`: a layer with a weight and an optional bias as one custom op (conv, the GPT's
//!   linear).
//!
//! Parameters live in a candle `VarMap` (trainable), buffers (BatchNorm running statistics) in a
//! [`BufferStore`]. Both are listed in name order, the order every rank uses for buckets,
//! broadcasts and checkpoints.

mod activation;
mod batchnorm;
mod conv;
mod cpu_tensor;
pub mod custom;
pub mod gpt;
mod init;
pub mod kernels;
mod linear;
mod params;
mod pool;
#[cfg(test)]
mod precision_tests;
mod resnet;
mod small;
mod weight_op;

pub use activation::{add_relu, relu};
pub use batchnorm::{BatchNorm2d, BatchNormConfig, batch_norm2d};
pub use conv::{Conv2d, ConvConfig, conv2d, conv2d_no_bias};
pub use kernels::tasks::serially;
pub use linear::{Linear, linear};
pub use params::{BnMode, BufferStore, Forward, ParamBuilder, StatsReducer};
pub use pool::{max_pool2d, relu_max_pool2d};

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;

use crate::spec::{ModelName, Precision};
use crate::{Error, Result};

/// A model ready to train: forward pass, named parameters and buffers.
pub struct Network {
    pub name: ModelName,
    forward: Box<dyn Forward>,
    _varmap: VarMap,
    /// Trainable parameters in name order.
    pub params: Vec<(String, Var)>,
    pub buffers: Arc<BufferStore>,
    pub device: Device,
    /// The dtype matrix products and convolutions round their inputs to (`train.precision`):
    /// set on the thread for each forward pass, and by the training loop for backward.
    autocast: Option<DType>,
}

/// What a built-in model is built for: the data's input shape and outputs (classes, or values
/// of a regression), and the MLP's hidden widths (`model.hidden`).
#[derive(Debug, Clone, PartialEq)]
pub struct Arch {
    pub name: ModelName,
    /// Per-sample `[C, H, W]`.
    pub input: [usize; 3],
    pub outputs: usize,
    pub hidden: Option<Vec<usize>>,
}

impl Arch {
    /// Refuses data the model cannot take: a language model on samples, images too small for the
    /// convolutions and pools, no outputs.
    pub fn check(&self) -> Result<()> {
        let [c, h, w] = self.input;
        let label = model_label(self.name);
        let too_small = |min: usize| {
            Err(Error::Model(format!(
                "model `{label}` needs images of at least {min}×{min} but the data gives {c}×{h}×{w}; resize them (data.size = [H, W] for an image folder) or pick a model that takes this shape, e.g. \"mlp\" (see docs/spec.md)"
            )))
        };
        match self.name {
            ModelName::Gpt => {
                return Err(Error::Model(
                    "model `gpt` is a language model: it trains on data.name = \"text\" or \"tokens\""
                        .into(),
                ));
            }
            ModelName::MnistCnn
                if small::mnist_cnn_side(h).is_none() || small::mnist_cnn_side(w).is_none() =>
            {
                return too_small(18);
            }
            ModelName::ConvnetBn if h < 4 || w < 4 => return too_small(4),
            _ => {}
        }
        if c * h * w == 0 || (self.outputs == 0 && self.name != ModelName::Custom) {
            return Err(Error::Model(format!(
                "model `{label}` cannot be built for inputs {c}×{h}×{w} with {} outputs: the data has no input values or no classes",
                self.outputs
            )));
        }
        Ok(())
    }
}

/// The input shape (C, H, W) a model was designed for: synthetic data's default shape.
pub fn expected_input(name: ModelName) -> [usize; 3] {
    match name {
        ModelName::MnistCnn | ModelName::Mlp | ModelName::ConvnetBn => [1, 28, 28],
        ModelName::Resnet18 | ModelName::Resnet50 => [3, 32, 32],
        ModelName::Linear => [1, 1, 10],
        // The user's model takes what the data gives; synthetic data defaults to MNIST's shape.
        ModelName::Custom => [1, 28, 28],
        // Token ids, not images (see [`Network::gpt`]).
        ModelName::Gpt => [1, 1, 1],
    }
}

/// Whether the model is trained with MSE on one output (regression) rather than cross-entropy.
pub fn is_regression(name: ModelName) -> bool {
    name == ModelName::Linear
}

/// Whether each sample's loss and gradient in training depend on that sample alone (no
/// BatchNorm, whose batch statistics couple them), so that a batch may be trained in parts whose
/// gradients add up to the whole batch's. Unknown for a custom model: no.
pub fn samples_independent(name: ModelName) -> bool {
    matches!(
        name,
        ModelName::MnistCnn | ModelName::Mlp | ModelName::Linear
    )
}

impl Network {
    /// Builds `name` for inputs of `input` shape and `classes` outputs, initialised like PyTorch
    /// from `seed` (every rank builds the same weights; rank 0's are broadcast anyway).
    pub fn new(
        name: ModelName,
        input: [usize; 3],
        classes: usize,
        device: &Device,
        bn: BnMode,
        seed: u64,
    ) -> Result<Network> {
        let arch = Arch {
            name,
            input,
            outputs: classes,
            hidden: None,
        };
        Network::build(&arch, device, bn, seed)
    }

    /// Builds the model of `arch`, initialised like PyTorch from `seed`.
    pub fn build(arch: &Arch, device: &Device, bn: BnMode, seed: u64) -> Result<Network> {
        arch.check()?;
        let &Arch {
            name,
            input,
            outputs: classes,
            ..
        } = arch;
        let varmap = VarMap::new();
        let pb = ParamBuilder::new(&varmap, device, bn);
        let buffers = pb.buffers.clone();
        let forward: Box<dyn Forward> = match name {
            ModelName::MnistCnn => Box::new(small::mnist_cnn(input, classes, pb)?),
            ModelName::Mlp => Box::new(small::mlp(
                input.iter().product(),
                arch.hidden.as_deref().unwrap_or(&small::MLP_HIDDEN),
                classes,
                pb,
            )?),
            ModelName::ConvnetBn => Box::new(small::convnet_bn(input, classes, pb)?),
            ModelName::Linear => {
                Box::new(small::linear_model(input.iter().product(), classes, pb)?)
            }
            ModelName::Custom => custom::build(pb.vb.clone())?,
            ModelName::Resnet18 => Box::new(resnet::resnet(
                resnet::ResNetConfig {
                    channels: input[0],
                    ..resnet::ResNetConfig::resnet18(classes)
                },
                pb,
            )?),
            ModelName::Resnet50 => Box::new(resnet::resnet(
                resnet::ResNetConfig {
                    channels: input[0],
                    ..resnet::ResNetConfig::resnet50(classes)
                },
                pb,
            )?),
            ModelName::Gpt => unreachable!("refused above"),
        };
        let params = sorted_params(&varmap);
        init::pytorch_default(&params, seed)?;
        Ok(Network {
            name,
            forward,
            _varmap: varmap,
            params,
            buffers,
            device: device.clone(),
            autocast: None,
        })
    }

    /// The GPT of `cfg`, initialised like the PyTorch reference from `seed`.
    pub fn gpt(cfg: &gpt::GptConfig, device: &Device, seed: u64) -> Result<Network> {
        cfg.validate()?;
        let varmap = VarMap::new();
        let pb = ParamBuilder::new(&varmap, device, BnMode::Local);
        let buffers = pb.buffers.clone();
        let model = gpt::gpt(cfg, pb.vb.clone())?;
        let params = sorted_params(&varmap);
        gpt::gpt_init(&params, cfg, seed)?;
        Ok(Network {
            name: ModelName::Gpt,
            forward: Box::new(model),
            _varmap: varmap,
            params,
            buffers,
            device: device.clone(),
            autocast: None,
        })
    }

    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let _precision = self.autocast()?;
        Ok(self.forward.forward(x, train)?)
    }

    /// Trains and evaluates with `precision`'s matrix products (`train.precision`).
    pub fn set_precision(&mut self, precision: Precision) {
        self.autocast = precision.autocast();
    }

    /// This model's precision set on the calling thread until the guard is dropped: a backward
    /// pass runs in it (as its forward pass did, [`Network::forward`]).
    pub fn autocast(&self) -> Result<candle_core::autocast::Scope> {
        Ok(candle_core::autocast::scope(self.autocast)?)
    }

    /// Number of trainable scalars.
    pub fn num_params(&self) -> usize {
        self.params.iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Parameters then buffers, each in name order: the model's state dict.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut all: Vec<(String, Tensor)> = self
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        all.extend(self.buffers.snapshot());
        all.sort_by(|a, b| a.0.cmp(&b.0));
        if self.name == ModelName::Gpt {
            // PyTorch's module lists the tied matrix under both names.
            return gpt::tied_state(all);
        }
        all
    }

    /// Loads a state dict strictly: every parameter and buffer must be present with its shape.
    pub fn load_state(&self, tensors: &HashMap<String, Tensor>, source: &str) -> Result<()> {
        if self.name == ModelName::Gpt {
            let untied = gpt::untie_state(tensors.clone(), source)?;
            let expected: Vec<(String, Tensor)> = self
                .state()
                .into_iter()
                .filter(|(k, _)| k != gpt::LM_HEAD)
                .collect();
            if let Some((_, wpe)) = expected.iter().find(|(k, _)| k == gpt::WPE) {
                gpt::check_positions(&untied, wpe.dims()[0], source)?;
            }
            return self.load_expected(expected, &untied, source);
        }
        self.load_expected(self.state(), tensors, source)
    }

    fn load_expected(
        &self,
        expected: Vec<(String, Tensor)>,
        tensors: &HashMap<String, Tensor>,
        source: &str,
    ) -> Result<()> {
        for (name, current) in &expected {
            let t = tensors
                .get(name)
                .ok_or_else(|| Error::Model(format!("{source}: missing tensor `{name}`")))?;
            if t.dims() != current.dims() {
                return Err(Error::Model(format!(
                    "{source}: tensor `{name}` has shape {:?}, the model needs {:?}",
                    t.dims(),
                    current.dims()
                )));
            }
            let t = t.to_device(&self.device)?.to_dtype(current.dtype())?;
            match self.params.iter().find(|(k, _)| k == name) {
                Some((_, var)) => var.set(&t)?,
                None => self.buffers.insert(name.clone(), t),
            }
        }
        if let Some(extra) = tensors
            .keys()
            .find(|k| !expected.iter().any(|(n, _)| n == *k))
        {
            return Err(Error::Model(format!(
                "{source}: unexpected tensor `{extra}` (not in model {})",
                model_label(self.name)
            )));
        }
        Ok(())
    }
}

/// The trainable parameters of `varmap` in name order (the order every rank uses).
fn sorted_params(varmap: &VarMap) -> Vec<(String, Var)> {
    let mut params: Vec<(String, Var)> = varmap
        .data()
        .lock()
        .expect("varmap poisoned")
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    params
}

pub fn model_label(name: ModelName) -> &'static str {
    match name {
        ModelName::MnistCnn => "mnist-cnn",
        ModelName::Mlp => "mlp",
        ModelName::ConvnetBn => "convnet-bn",
        ModelName::Resnet18 => "resnet18",
        ModelName::Resnet50 => "resnet50",
        ModelName::Linear => "linear",
        ModelName::Custom => "custom",
        ModelName::Gpt => "gpt",
    }
}

/// Test support shared by the layer tests.
#[cfg(test)]
pub(crate) mod testing {
    use candle_core::Tensor;

    /// `ours` and `reference` (the same function computed two ways) agree within `tol`, and so do
    /// the gradients of a random weighting of them with respect to every tensor in `inputs`.
    pub fn assert_same_with_grads(
        ours: &Tensor,
        reference: &Tensor,
        inputs: &[&Tensor],
        tol: f32,
        what: &str,
    ) {
        assert_eq!(ours.dims(), reference.dims(), "{what}: shapes");
        let k = Tensor::randn(0f32, 1., ours.shape(), ours.device()).unwrap();
        let grads = |t: &Tensor| (t * &k).unwrap().sum_all().unwrap().backward().unwrap();
        let (g1, g2) = (grads(ours), grads(reference));
        let close = |a: &Tensor, b: &Tensor, which: &str| {
            let d = crate::test_util::tensor_diff(a, b);
            assert!(d < tol, "{what}: {which} differs by {d}");
        };
        close(ours, reference, "output");
        for (i, v) in inputs.iter().enumerate() {
            close(
                g1.get(v).unwrap(),
                g2.get(v).unwrap(),
                &format!("gradient of input {i}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::DType;

    use super::*;

    fn names(name: ModelName) -> Vec<(String, Vec<usize>)> {
        let net = Network::new(
            name,
            expected_input(name),
            if is_regression(name) { 1 } else { 10 },
            &Device::Cpu,
            BnMode::Local,
            1,
        )
        .unwrap();
        net.state()
            .into_iter()
            .map(|(k, t)| (k, t.dims().to_vec()))
            .collect()
    }

    #[test]
    fn mnist_cnn_has_pytorch_names_and_shapes() {
        let got = names(ModelName::MnistCnn);
        let want: Vec<(String, Vec<usize>)> = [
            ("conv1.bias", vec![32]),
            ("conv1.weight", vec![32, 1, 3, 3]),
            ("conv2.bias", vec![64]),
            ("conv2.weight", vec![64, 32, 3, 3]),
            ("conv3.bias", vec![64]),
            ("conv3.weight", vec![64, 64, 3, 3]),
            ("dense1.bias", vec![64]),
            ("dense1.weight", vec![64, 576]),
            ("dense2.bias", vec![10]),
            ("dense2.weight", vec![10, 64]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn mlp_and_convnet_bn_names() {
        let mlp: Vec<String> = names(ModelName::Mlp).into_iter().map(|x| x.0).collect();
        assert_eq!(
            mlp,
            [
                "linear_relu_stack.0.bias",
                "linear_relu_stack.0.weight",
                "linear_relu_stack.2.bias",
                "linear_relu_stack.2.weight",
                "linear_relu_stack.4.bias",
                "linear_relu_stack.4.weight"
            ]
        );
        let bn = names(ModelName::ConvnetBn);
        let keys: Vec<&str> = bn.iter().map(|x| x.0.as_str()).collect();
        assert!(
            keys.contains(&"layer1.1.running_var")
                && keys.contains(&"layer2.1.num_batches_tracked")
        );
        assert!(bn.contains(&("fc.weight".to_string(), vec![10, 7 * 7 * 32])));
        assert!(bn.contains(&("layer1.0.weight".to_string(), vec![16, 1, 5, 5])));
    }

    fn shapes(arch: Arch) -> Vec<(String, Vec<usize>)> {
        Network::build(&arch, &Device::Cpu, BnMode::Local, 1)
            .unwrap()
            .state()
            .into_iter()
            .map(|(k, t)| (k, t.dims().to_vec()))
            .collect()
    }

    fn arch(name: ModelName, input: [usize; 3], outputs: usize) -> Arch {
        Arch {
            name,
            input,
            outputs,
            hidden: None,
        }
    }

    #[test]
    fn models_take_their_sizes_from_the_data_with_pytorch_names() {
        let has = |got: &[(String, Vec<usize>)], k: &str, dims: &[usize]| {
            assert!(
                got.contains(&(k.to_string(), dims.to_vec())),
                "{k} {dims:?} not in {got:?}"
            )
        };
        let cnn = shapes(arch(ModelName::MnistCnn, [3, 32, 32], 7));
        has(&cnn, "conv1.weight", &[32, 3, 3, 3]);
        has(&cnn, "dense1.weight", &[64, 64 * 4 * 4]);
        has(&cnn, "dense2.weight", &[7, 64]);
        let mlp = shapes(Arch {
            hidden: Some(vec![64, 32, 16]),
            ..arch(ModelName::Mlp, [1, 1, 7], 3)
        });
        let want: Vec<(String, Vec<usize>)> = [
            ("linear_relu_stack.0.bias", vec![64]),
            ("linear_relu_stack.0.weight", vec![64, 7]),
            ("linear_relu_stack.2.bias", vec![32]),
            ("linear_relu_stack.2.weight", vec![32, 64]),
            ("linear_relu_stack.4.bias", vec![16]),
            ("linear_relu_stack.4.weight", vec![16, 32]),
            ("linear_relu_stack.6.bias", vec![3]),
            ("linear_relu_stack.6.weight", vec![3, 16]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(mlp, want);
        let none = shapes(Arch {
            hidden: Some(vec![]),
            ..arch(ModelName::Mlp, [1, 1, 7], 2)
        });
        assert_eq!(none.len(), 2);
        has(&none, "linear_relu_stack.0.weight", &[2, 7]);
        let bn = shapes(arch(ModelName::ConvnetBn, [3, 30, 34], 5));
        has(&bn, "layer1.0.weight", &[16, 3, 5, 5]);
        has(&bn, "fc.weight", &[5, 7 * 8 * 32]);
        let r = shapes(arch(ModelName::Resnet18, [1, 20, 20], 4));
        has(&r, "conv1.weight", &[64, 1, 3, 3]);
        has(&r, "fc.weight", &[4, 512]);
        let lin = shapes(arch(ModelName::Linear, [1, 1, 12], 3));
        has(&lin, "weight", &[3, 12]);
        // Forward passes take those shapes.
        for (a, n) in [
            (arch(ModelName::MnistCnn, [3, 32, 32], 7), 7),
            (arch(ModelName::ConvnetBn, [3, 30, 34], 5), 5),
            (arch(ModelName::Resnet18, [1, 20, 20], 4), 4),
        ] {
            let net = Network::build(&a, &Device::Cpu, BnMode::Local, 0).unwrap();
            let [c, h, w] = a.input;
            let x = Tensor::zeros((2, c, h, w), DType::F32, &Device::Cpu).unwrap();
            assert_eq!(net.forward(&x, false).unwrap().dims(), &[2, n]);
        }
    }

    #[test]
    fn data_a_model_cannot_take_is_refused_before_building() {
        let err = |a: Arch| a.check().unwrap_err().to_string();
        let e = err(arch(ModelName::MnistCnn, [1, 1, 10], 2));
        assert!(
            e.contains("model `mnist-cnn` needs images of at least 18×18 but the data gives 1×1×10; resize them (data.size = [H, W] for an image folder) or pick a model that takes this shape, e.g. \"mlp\""),
            "{e}"
        );
        assert!(err(arch(ModelName::ConvnetBn, [1, 3, 8], 2)).contains("at least 4×4"));
        assert!(err(arch(ModelName::Mlp, [1, 1, 5], 0)).contains("no classes"));
        assert!(err(arch(ModelName::Gpt, [1, 1, 5], 2)).contains("language model"));
        arch(ModelName::MnistCnn, [1, 18, 18], 2).check().unwrap();
        assert!(arch(ModelName::MnistCnn, [1, 17, 18], 2).check().is_err());
    }

    #[test]
    fn resnet_parameter_counts_match_torchvision_cifar_variant() {
        // torchvision resnet18(num_classes=10) with a 3x3 stem: 11,173,962 params; resnet50: 23,520,842.
        let r18 = Network::new(
            ModelName::Resnet18,
            [3, 32, 32],
            10,
            &Device::Cpu,
            BnMode::Local,
            0,
        )
        .unwrap();
        assert_eq!(r18.num_params(), 11_173_962);
        let r50 = Network::new(
            ModelName::Resnet50,
            [3, 32, 32],
            10,
            &Device::Cpu,
            BnMode::Local,
            0,
        )
        .unwrap();
        assert_eq!(r50.num_params(), 23_520_842);
        let keys: Vec<String> = r18.state().into_iter().map(|x| x.0).collect();
        assert!(keys.contains(&"layer2.0.downsample.0.weight".to_string()));
        assert!(keys.contains(&"fc.weight".to_string()));
    }

    #[test]
    fn forward_shapes() {
        for name in [
            ModelName::MnistCnn,
            ModelName::Mlp,
            ModelName::ConvnetBn,
            ModelName::Resnet18,
            ModelName::Linear,
        ] {
            let [c, h, w] = expected_input(name);
            let out = if is_regression(name) { 1 } else { 10 };
            let net = Network::new(name, [c, h, w], out, &Device::Cpu, BnMode::Local, 0).unwrap();
            let x = Tensor::zeros((2, c, h, w), DType::F32, &Device::Cpu).unwrap();
            assert_eq!(net.forward(&x, true).unwrap().dims(), &[2, out], "{name:?}");
        }
    }

    #[test]
    fn load_state_is_strict() {
        let net = Network::new(
            ModelName::Mlp,
            [1, 28, 28],
            10,
            &Device::Cpu,
            BnMode::Local,
            0,
        )
        .unwrap();
        let mut state: HashMap<String, Tensor> = net
            .state()
            .into_iter()
            .map(|(k, t)| (k, t.copy().unwrap()))
            .collect();
        net.load_state(&state, "ckpt").unwrap();
        state.remove("linear_relu_stack.0.bias");
        let e = net.load_state(&state, "ckpt").unwrap_err();
        assert_eq!(
            e.to_string(),
            "model: ckpt: missing tensor `linear_relu_stack.0.bias`"
        );
    }
}
