//! BatchNorm2d with PyTorch semantics (biased variance to normalise, unbiased for the running
//! estimate, momentum 0.1, eps 1e-5, `num_batches_tracked`) and its synchronised variant.
//!
//! SyncBatchNorm computes the batch statistics over the global batch: the per-channel sums
//! `[Σx, Σx²]` go through a differentiable all-reduce ([`AllReduceSum`]: forward sums over ranks,
//! backward sums the incoming gradients over ranks), so the gradient of every replica's input is
//! exactly the gradient of the combined batch, as in PyTorch's SyncBatchNorm.
//!
//! On CPU (local statistics, or evaluation) the layer is one custom op over
//! [`super::kernels::batchnorm`], optionally fused with the ReLU that follows it
//! ([`BatchNorm2d::forward_relu`]); SyncBatchNorm and other devices compose candle ops.

use std::sync::Arc;

use candle_core::{CpuStorage, DType, Layout, Shape, Tensor};
use candle_nn::Init;

use super::activation::relu as relu_op;
use super::cpu_tensor::{cpu_tensor, storage_f32, with_f32};
use super::kernels::batchnorm as kernel;
use super::kernels::tasks::threads;
use super::params::{BnMode, BufferStore, ParamBuilder, StatsReducer};

/// `Config: Default` for [`batch_norm2d`], PyTorch's defaults.
#[derive(Debug, Clone, Copy)]
pub struct BatchNormConfig {
    pub eps: f64,
    pub momentum: f64,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        Self {
            eps: 1e-5,
            momentum: 0.1,
        }
    }
}

pub struct BatchNorm2d {
    weight: Tensor,
    bias: Tensor,
    prefix: String,
    buffers: Arc<BufferStore>,
    cfg: BatchNormConfig,
    mode: BnMode,
}

/// Creates `PREFIX.weight` (ones), `PREFIX.bias` (zeros) and the buffers `PREFIX.running_mean`,
/// `PREFIX.running_var`, `PREFIX.num_batches_tracked`, PREFIX being the builder's prefix.
pub fn batch_norm2d(
    channels: usize,
    cfg: BatchNormConfig,
    pb: ParamBuilder,
) -> candle_core::Result<BatchNorm2d> {
    let weight = pb.vb.get_with_hints(channels, "weight", Init::Const(1.0))?;
    let bias = pb.vb.get_with_hints(channels, "bias", Init::Const(0.0))?;
    let prefix = pb.vb.prefix();
    let dev = pb.vb.device();
    let buffers = pb.buffers.clone();
    buffers.insert(
        format!("{prefix}.running_mean"),
        Tensor::zeros(channels, DType::F32, dev)?,
    );
    buffers.insert(
        format!("{prefix}.running_var"),
        Tensor::ones(channels, DType::F32, dev)?,
    );
    buffers.insert(
        format!("{prefix}.num_batches_tracked"),
        Tensor::zeros((), DType::I64, dev)?,
    );
    Ok(BatchNorm2d {
        weight,
        bias,
        prefix,
        buffers,
        cfg,
        mode: pb.bn,
    })
}

impl BatchNorm2d {
    pub fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        self.forward_with(x, train, false)
    }

    /// `relu(self.forward(x, train))` in one pass forward and one backward.
    pub fn forward_relu(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        self.forward_with(x, train, true)
    }

    fn forward_with(&self, x: &Tensor, train: bool, relu: bool) -> candle_core::Result<Tensor> {
        let synced = train && matches!(self.mode, BnMode::Sync(_));
        if x.device().is_cpu() && x.dtype() == DType::F32 && !synced {
            return self.forward_fused(x, train, relu);
        }
        let y = self.forward_composed(x, train)?;
        if relu { relu_op(&y) } else { Ok(y) }
    }

    /// CPU: statistics in one parallel pass, then one custom op for normalise(+ReLU) whose
    /// backward is the closed-form BatchNorm gradient; only the output is kept for backward.
    fn forward_fused(&self, x: &Tensor, train: bool, relu: bool) -> candle_core::Result<Tensor> {
        let (n, c, h, w) = x.dims4()?;
        let dims = (n, c, h * w);
        let x = x.contiguous()?;
        let eps = self.cfg.eps;
        let (mean, inv_std) = if train {
            let stats = with_f32(&x, "batch-norm input", |v| {
                kernel::channel_stats(v, dims, threads())
            })?;
            let mean: Vec<f32> = stats.iter().map(|s| s.0 as f32).collect();
            let var: Vec<f32> = stats.iter().map(|s| s.1 as f32).collect();
            self.update_running(
                &cpu_tensor(mean.clone(), c)?,
                &cpu_tensor(var, c)?,
                n * h * w,
            )?;
            let inv_std = stats
                .iter()
                .map(|s| (1.0 / (s.1 + eps).sqrt()) as f32)
                .collect();
            (mean, inv_std)
        } else {
            let mean: Vec<f32> = self.buffer("running_mean")?.to_vec1()?;
            let var: Vec<f32> = self.buffer("running_var")?.to_vec1()?;
            let inv_std = var
                .iter()
                .map(|v| (1.0 / (*v as f64 + eps).sqrt()) as f32)
                .collect();
            (mean, inv_std)
        };
        let op = NormalizeOp {
            mean: Arc::new(mean),
            inv_std: Arc::new(inv_std),
            relu,
            batch_stats: train,
        };
        x.apply_op3(&self.weight, &self.bias, op)
    }

    /// Composed of candle ops: other devices, and SyncBatchNorm.
    fn forward_composed(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let c = x.dim(1)?;
        let (mean, var) = if train {
            let (mean, var, count) = self.batch_stats(x)?;
            self.update_running(&mean, &var, count)?;
            (mean, var)
        } else {
            (self.buffer("running_mean")?, self.buffer("running_var")?)
        };
        let shape = (1, c, 1, 1);
        let inv_std = (var + self.cfg.eps)?.sqrt()?.recip()?;
        let scale = (inv_std * &self.weight)?.reshape(shape)?;
        let shift = self.bias.reshape(shape)?;
        x.broadcast_sub(&mean.reshape(shape)?)?
            .broadcast_mul(&scale)?
            .broadcast_add(&shift)
    }

    /// Per-channel (mean, biased variance, element count) of the (local or global) batch.
    fn batch_stats(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor, usize)> {
        let (n, c, h, w) = x.dims4()?;
        match &self.mode {
            BnMode::Local => {
                let count = n * h * w;
                let mean = (x.sum((0, 2, 3))? / count as f64)?;
                let centered = x.broadcast_sub(&mean.reshape((1, c, 1, 1))?)?;
                let var = (centered.sqr()?.sum((0, 2, 3))? / count as f64)?;
                Ok((mean, var, count))
            }
            BnMode::Sync(reducer) => {
                let mut count = [(n * h * w) as f32];
                reducer.all_reduce_sum(&mut count)?;
                let count = count[0] as f64;
                // Sums in f64: the statistics must not depend on how the global batch is split
                // across replicas (f32 accumulation over N·H·W values drifts by ~1e-5).
                let x64 = x.to_dtype(DType::F64)?;
                let sums = Tensor::cat(&[x64.sum((0, 2, 3))?, x64.sqr()?.sum((0, 2, 3))?], 0)?
                    .to_dtype(DType::F32)?;
                let sums = sums
                    .apply_op1(AllReduceSum(reducer.clone()))?
                    .to_dtype(DType::F64)?;
                let mean = (sums.narrow(0, 0, c)? / count)?;
                let var = ((sums.narrow(0, c, c)? / count)? - mean.sqr()?)?;
                Ok((
                    mean.to_dtype(DType::F32)?,
                    var.to_dtype(DType::F32)?,
                    count as usize,
                ))
            }
        }
    }

    fn update_running(&self, mean: &Tensor, var: &Tensor, count: usize) -> candle_core::Result<()> {
        let m = self.cfg.momentum;
        let unbiased = (var.detach() * (count as f64 / (count.max(2) - 1) as f64))?;
        let rm = ((self.buffer("running_mean")? * (1.0 - m))? + (mean.detach() * m)?)?;
        let rv = ((self.buffer("running_var")? * (1.0 - m))? + (unbiased * m)?)?;
        let nb = (self.buffer("num_batches_tracked")? + 1.0)?;
        self.buffers
            .insert(format!("{}.running_mean", self.prefix), rm);
        self.buffers
            .insert(format!("{}.running_var", self.prefix), rv);
        self.buffers
            .insert(format!("{}.num_batches_tracked", self.prefix), nb);
        Ok(())
    }

    fn buffer(&self, name: &str) -> candle_core::Result<Tensor> {
        let key = format!("{}.{name}", self.prefix);
        self.buffers
            .get(&key)
            .ok_or_else(|| candle_core::Error::Msg(format!("missing buffer {key}")))
    }
}

/// `y = (x − mean)·inv_std·γ + β` (then ReLU) over (x, γ, β), the statistics fixed at
/// construction; with `batch_stats` the backward also flows through mean and variance.
#[derive(Clone)]
struct NormalizeOp {
    mean: Arc<Vec<f32>>,
    inv_std: Arc<Vec<f32>>,
    relu: bool,
    batch_stats: bool,
}

impl candle_core::CustomOp3 for NormalizeOp {
    fn name(&self) -> &'static str {
        "batch-norm"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        g: &CpuStorage,
        gl: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, h, w) = xl.shape().dims4()?;
        let gamma = storage_f32(g, gl, "batch-norm weight")?;
        let beta = storage_f32(b, bl, "batch-norm bias")?;
        if gamma.len() != c || beta.len() != c || self.mean.len() != c {
            candle_core::bail!(
                "batch-norm: {c} channels in the input {:?}, {} weights, {} biases",
                xl.shape().dims(),
                gamma.len(),
                beta.len()
            );
        }
        let scale: Vec<f32> = (0..c).map(|i| gamma[i] * self.inv_std[i]).collect();
        let shift: Vec<f32> = (0..c).map(|i| beta[i] - self.mean[i] * scale[i]).collect();
        let x = storage_f32(x, xl, "batch-norm input")?;
        let y = kernel::normalize(x, (n, c, h * w), &scale, &shift, self.relu, threads());
        Ok((CpuStorage::F32(y), xl.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (n, c, h, w) = x.dims4()?;
        let gamma_v: Vec<f32> = gamma.to_vec1()?;
        let (dx, dg, db) = with_f32(x, "batch-norm input", |xv| {
            with_f32(res, "batch-norm output", |y| {
                with_f32(grad, "batch-norm output gradient", |g| {
                    let saved = kernel::Saved {
                        x: xv,
                        relu_out: self.relu.then_some(y),
                        mean: &self.mean,
                        inv_std: &self.inv_std,
                        gamma: &gamma_v,
                        batch_stats: self.batch_stats,
                    };
                    kernel::backward(&saved, g, (n, c, h * w), threads())
                })
            })
        })???;
        Ok((
            x.track_op()
                .then(|| cpu_tensor(dx, x.shape()))
                .transpose()?,
            Some(cpu_tensor(dg, c)?),
            Some(cpu_tensor(db, c)?),
        ))
    }
}

/// Differentiable all-reduce (sum) of a small f32 vector: gradients are summed over ranks too.
#[derive(Clone)]
struct AllReduceSum(Arc<dyn StatsReducer>);

impl candle_core::CustomOp1 for AllReduceSum {
    fn name(&self) -> &'static str {
        "all-reduce-sum"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = storage.as_slice::<f32>()?;
        let mut buf: Vec<f32> = match layout.contiguous_offsets() {
            Some((a, b)) => src[a..b].to_vec(),
            None => candle_core::bail!("all-reduce-sum needs a contiguous tensor"),
        };
        self.0.all_reduce_sum(&mut buf)?;
        Ok((CpuStorage::F32(buf), layout.shape().clone()))
    }

    /// GPU tensors: the statistics (a few floats per channel) go through a host copy.
    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let Some((a, b)) = layout.contiguous_offsets() else {
            candle_core::bail!("all-reduce-sum needs a contiguous tensor");
        };
        let cuda = |e: cudarc::driver::DriverError| candle_core::Error::Msg(format!("{e:?}"));
        let stream = storage.device.cuda_stream();
        let src = storage.as_cuda_slice::<f32>()?;
        let mut host = stream.clone_dtoh(&src.slice(a..b)).map_err(cuda)?;
        self.0.all_reduce_sum(&mut host)?;
        let dst = stream.clone_htod(&host).map_err(cuda)?;
        let out = candle_core::CudaStorage::wrap_cuda_slice(dst, storage.device.clone());
        Ok((out, layout.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let grad = grad_res.contiguous()?;
        let device = grad.device().clone();
        let mut host = grad
            .to_device(&candle_core::Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        self.0.all_reduce_sum(&mut host)?;
        Ok(Some(Tensor::from_vec(host, grad.shape(), &device)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn bn(mode: BnMode) -> (BatchNorm2d, Arc<BufferStore>) {
        let varmap = candle_nn::VarMap::new();
        let pb = ParamBuilder::new(&varmap, &Device::Cpu, mode);
        let buffers = pb.buffers.clone();
        (
            batch_norm2d(2, BatchNormConfig::default(), pb.pp("bn")).unwrap(),
            buffers,
        )
    }

    #[test]
    fn normalises_and_tracks_running_stats_like_pytorch() {
        let (bn, buffers) = bn(BnMode::Local);
        // channel 0: values 1..4, channel 1: constant 5.
        let x = Tensor::new(
            &[[[[1f32, 2.]], [[5., 5.]]], [[[3., 4.]], [[5., 5.]]]],
            &Device::Cpu,
        )
        .unwrap();
        let y = bn.forward(&x, true).unwrap();
        let y0: Vec<f32> = y
            .narrow(1, 0, 1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        // mean 2.5, biased var 1.25
        let s = (1.25f32 + 1e-5).sqrt();
        let want = [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s];
        for (a, b) in y0.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{y0:?}");
        }
        let rm: Vec<f32> = buffers.get("bn.running_mean").unwrap().to_vec1().unwrap();
        let rv: Vec<f32> = buffers.get("bn.running_var").unwrap().to_vec1().unwrap();
        assert!(
            (rm[0] - 0.25).abs() < 1e-6 && (rm[1] - 0.5).abs() < 1e-6,
            "{rm:?}"
        );
        // unbiased var of 1..4 = 5/3 → 0.9 * 1 + 0.1 * 5/3
        assert!((rv[0] - (0.9 + 0.1 * 5.0 / 3.0)).abs() < 1e-6, "{rv:?}");
        assert!((rv[1] - 0.9).abs() < 1e-6, "{rv:?}");
        let nb: i64 = buffers
            .get("bn.num_batches_tracked")
            .unwrap()
            .to_scalar()
            .unwrap();
        assert_eq!(nb, 1);
    }

    /// The fused CPU op (local statistics and running statistics, with and without ReLU) gives
    /// the outputs, input gradients and parameter gradients of the composed candle ops, and the
    /// same running statistics.
    #[test]
    fn fused_op_matches_the_composed_ops() {
        use crate::models::testing::assert_same_with_grads;
        let dev = Device::Cpu;
        for (train, relu) in [(true, false), (true, true), (false, false), (false, true)] {
            let (fused, fused_buf) = bn(BnMode::Local);
            let (composed, composed_buf) = bn(BnMode::Local);
            let gamma = Tensor::new(&[1.5f32, -0.5], &dev).unwrap();
            let beta = Tensor::new(&[0.1f32, 0.3], &dev).unwrap();
            let vars: Vec<Var> = [gamma, beta]
                .iter()
                .map(|t| Var::from_tensor(t).unwrap())
                .collect();
            let with_params = |b: BatchNorm2d| BatchNorm2d {
                weight: vars[0].as_tensor().clone(),
                bias: vars[1].as_tensor().clone(),
                ..b
            };
            let (fused, composed) = (with_params(fused), with_params(composed));
            if !train {
                for buf in [&fused_buf, &composed_buf] {
                    buf.insert(
                        "bn.running_mean".into(),
                        Tensor::new(&[0.2f32, -0.1], &dev).unwrap(),
                    );
                    buf.insert(
                        "bn.running_var".into(),
                        Tensor::new(&[0.7f32, 1.3], &dev).unwrap(),
                    );
                }
            }
            let x = Var::from_tensor(
                &(Tensor::randn(0f32, 2., (3, 2, 4, 5), &dev).unwrap() + 0.5).unwrap(),
            )
            .unwrap();
            let ours = fused.forward_fused(x.as_tensor(), train, relu).unwrap();
            let mut reference = composed.forward_composed(x.as_tensor(), train).unwrap();
            if relu {
                reference = reference.relu().unwrap();
            }
            assert_same_with_grads(
                &ours,
                &reference,
                &[x.as_tensor(), vars[0].as_tensor(), vars[1].as_tensor()],
                1e-4,
                &format!("train {train} relu {relu}"),
            );
            for name in ["bn.running_mean", "bn.running_var"] {
                let a: Vec<f32> = fused_buf.get(name).unwrap().to_vec1().unwrap();
                let b: Vec<f32> = composed_buf.get(name).unwrap().to_vec1().unwrap();
                for (p, q) in a.iter().zip(&b) {
                    assert!((p - q).abs() < 1e-5, "{name}: {a:?} vs {b:?}");
                }
            }
        }
    }

    struct Identity;
    impl StatsReducer for Identity {
        fn all_reduce_sum(&self, _buf: &mut [f32]) -> candle_core::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn sync_mode_with_one_replica_matches_local() {
        let x = Tensor::new(
            &[[[[1f32, 7.]], [[0.5, 2.]]], [[[3., 4.]], [[5., -1.]]]],
            &Device::Cpu,
        )
        .unwrap();
        let (local, _) = bn(BnMode::Local);
        let (sync, _) = bn(BnMode::Sync(Arc::new(Identity)));
        let a: Vec<f32> = local
            .forward(&x, true)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let b: Vec<f32> = sync
            .forward(&x, true)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }
}
