//! The DDP step kept on the model's device, for replicas that train on GPUs.
//!
//! The host step ([`crate::step::ddp::Ddp`] + [`crate::optim::Optimizer`]) copies gradients into host
//! memory, all-reduces them there and runs the optimizer on the CPU: right for CPU replicas,
//! wasteful for GPU ones. This step keeps everything on the device instead: the gradients are
//! concatenated into one flat device tensor (plus the stop flag, as in the host step), that
//! tensor is all-reduced in place — by NCCL with `ddp.backend = "nccl"`, or through host memory
//! and the group's `tcp` collective otherwise — and the optimizer runs as tensor operations on
//! flat device tensors with the same update rules as the host optimizer, before the variables are
//! overwritten in place.
//!
//! Gradient clipping ([`Optimizer::grad_clip`]) needs no extra collective here: every rank holds
//! all the averaged gradients, so each computes the same global norm (in f64, as the host step
//! sums its squares) and scales them on the device. AdamW's weight decay follows the host
//! optimizer's mask ([`Optimizer::decaying`]) through a mask tensor.
//!
//! The same code runs on the CPU when `DDP_DEVICE_STEP=1` is set; that is how its equivalence
//! with the host step (and with single-process training) is tested on machines without a GPU.
//! Only the NCCL branch of [`AllReduceInPlace::cuda_fwd`] needs a GPU.

use std::ops::Range;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Layout, Tensor, Var};

use crate::dist::ReduceOp;
use crate::models::Network;
use crate::optim::{Optimizer, OptimizerConfig};
use crate::step::comm::{SharedCollective, with_comm};
use crate::step::control::Control;
use crate::{Error, Result};

/// Environment variable that makes CPU replicas use the device step (for tests).
pub const DEVICE_STEP_ENV: &str = "DDP_DEVICE_STEP";

/// Whether a replica on `device` uses the device step.
pub fn wanted(device: &candle_core::Device) -> bool {
    !device.is_cpu() || std::env::var(DEVICE_STEP_ENV).is_ok_and(|v| v == "1")
}

/// What all-reduces the flat gradient tensor.
pub enum Reducer {
    /// The group's host collective (`tcp` ring or shared memory); device tensors go through a
    /// host copy.
    Host(SharedCollective),
    /// NCCL on the replica's GPU.
    #[cfg(feature = "cuda")]
    Nccl(crate::dist::nccl::Nccl),
}

impl Reducer {
    /// Replicas the reducer averages over.
    fn world_size(&self) -> Result<usize> {
        match self {
            Reducer::Host(comm) => with_comm(comm, |c| Ok(c.world_size())),
            #[cfg(feature = "cuda")]
            Reducer::Nccl(n) => Ok(n.world_size()),
        }
    }
}

/// In-place all-reduce of a contiguous f32 tensor, as a candle op so that it reaches the
/// tensor's storage on whatever device it lives.
struct AllReduceInPlace<'a> {
    reducer: &'a Reducer,
    op: ReduceOp,
    /// The op's number, for NCCL's errors.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    seq: u64,
}

fn whole(layout: &Layout) -> candle_core::Result<Range<usize>> {
    match layout.contiguous_offsets() {
        Some((a, b)) => Ok(a..b),
        None => candle_core::bail!("all-reduce needs a contiguous tensor"),
    }
}

fn host_reduce(comm: &SharedCollective, buf: &mut [f32], op: ReduceOp) -> candle_core::Result<()> {
    with_comm(comm, |c| c.all_reduce(buf, op)).map_err(|e| candle_core::Error::Msg(e.to_string()))
}

impl candle_core::InplaceOp1 for AllReduceInPlace<'_> {
    fn name(&self) -> &'static str {
        "ddp-all-reduce"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let range = whole(layout)?;
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("all-reduce needs an f32 tensor");
        };
        match self.reducer {
            Reducer::Host(comm) => host_reduce(comm, &mut data[range], self.op),
            #[cfg(feature = "cuda")]
            Reducer::Nccl(_) => candle_core::bail!("the nccl backend needs CUDA tensors"),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &mut candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<()> {
        let range = whole(layout)?;
        let stream = storage.device.cuda_stream();
        let slice = storage.as_cuda_slice_mut::<f32>()?;
        if range != (0..slice.len()) {
            candle_core::bail!("all-reduce needs a tensor that owns its whole buffer");
        }
        let cuda = |e: cudarc::driver::DriverError| candle_core::Error::Msg(format!("{e:?}"));
        match self.reducer {
            Reducer::Nccl(nccl) => nccl
                .all_reduce(self.seq, slice, self.op)
                .map_err(|e| candle_core::Error::Msg(e.to_string())),
            Reducer::Host(comm) => {
                let mut host = stream.clone_dtoh(&*slice).map_err(cuda)?;
                host_reduce(comm, &mut host, self.op)?;
                stream.memcpy_htod(&host, slice).map_err(cuda)
            }
        }
    }
}

/// The DDP step on the model's device; see the module docs.
pub struct DeviceStep {
    vars: Vec<(Range<usize>, Var)>,
    /// Flat master copy of the parameters, in name order (the host step's order).
    params: Tensor,
    /// Gradients accumulated since the last sync (micro-batches of one step).
    pending: Option<Tensor>,
    /// Averaged gradients of the last sync.
    reduced: Option<Tensor>,
    config: OptimizerConfig,
    steps: u64,
    /// Optimizer state, one flat tensor per slot of [`OptimizerConfig::slot_names`].
    state: Vec<Tensor>,
    /// The global norm the averaged gradients are clipped to ([`Optimizer::grad_clip`]).
    grad_clip: Option<f64>,
    /// The last step's global gradient norm before clipping (f64 scalar, on the device).
    grad_norm: Option<Tensor>,
    /// AdamW: 1 where the weight decay applies, 0 elsewhere (u8); `None`: everywhere.
    decay_mask: Option<Tensor>,
    reducer: Reducer,
    ops: u64,
}

impl DeviceStep {
    /// Starts from the model's current parameters (already broadcast from rank 0) and the
    /// optimizer's current state (zero, or restored from a checkpoint).
    pub fn new(net: &Network, opt: &Optimizer, reducer: Reducer) -> Result<DeviceStep> {
        let mut vars = Vec::with_capacity(net.params.len());
        let mut offset = 0;
        for (_, var) in &net.params {
            let n = var.elem_count();
            vars.push((offset..offset + n, var.clone()));
            offset += n;
        }
        let mut step = DeviceStep {
            vars,
            params: Tensor::zeros(0, DType::F32, &net.device)?,
            pending: None,
            reduced: None,
            config: opt.config,
            steps: 0,
            state: Vec::new(),
            grad_clip: opt.grad_clip,
            grad_norm: None,
            decay_mask: decay_mask(opt, offset, &net.device)?,
            reducer,
            ops: 0,
        };
        step.reload(net, opt)?;
        Ok(step)
    }

    /// Re-reads the parameters from the model and the state from `opt` (after a restore).
    pub fn reload(&mut self, net: &Network, opt: &Optimizer) -> Result<()> {
        self.params = flatten(self.vars.iter().map(|(_, v)| v.as_tensor().clone()))?;
        self.state = opt
            .slots
            .iter()
            .map(|s| Tensor::from_slice(s, s.len(), &net.device))
            .collect::<candle_core::Result<_>>()?;
        self.steps = opt.steps;
        Ok(())
    }

    /// Copies the optimizer state to the host optimizer (before a checkpoint is written).
    pub fn export(&self, opt: &mut Optimizer) -> Result<()> {
        opt.steps = self.steps;
        opt.slots = self
            .state
            .iter()
            .map(|t| t.to_vec1::<f32>())
            .collect::<candle_core::Result<_>>()?;
        Ok(())
    }

    /// Adds one micro-batch's gradients (scaled by `scale`); missing gradients count as zero.
    pub fn accumulate(&mut self, grads: &GradStore, scale: f32) -> Result<()> {
        let per_var: Vec<Tensor> = self
            .vars
            .iter()
            .map(|(_, v)| match grads.get(v.as_tensor()) {
                Some(g) => Ok(g.clone()),
                None => v.zeros_like(),
            })
            .collect::<candle_core::Result<_>>()?;
        let flat = flatten(per_var.into_iter())?;
        let flat = if scale == 1.0 {
            flat
        } else {
            (flat * scale as f64)?
        };
        self.pending = Some(match self.pending.take() {
            Some(p) => (p + flat)?,
            None => flat,
        });
        Ok(())
    }

    /// All-reduces (averages) the accumulated gradients and this replica's requests
    /// (`control`); returns what the replicas agreed on.
    pub fn sync(&mut self, control: impl Into<Control>) -> Result<Control> {
        let device = self.params.device().clone();
        let n = self.params.elem_count();
        let grads = match self.pending.take() {
            Some(g) => g,
            None => Tensor::zeros(n, DType::F32, &device)?,
        };
        let world = self.reducer.world_size()?;
        let flag = Tensor::new(&[control.into().value(world)], &device)?;
        // A fresh contiguous tensor that owns its buffer: safe to reduce in place.
        let buf = Tensor::cat(&[&grads, &flag], 0)?;
        self.ops += 1;
        buf.inplace_op1(&AllReduceInPlace {
            reducer: &self.reducer,
            op: ReduceOp::Avg,
            seq: self.ops,
        })?;
        let agreed = Control::read(buf.narrow(0, n, 1)?.to_vec1::<f32>()?[0]);
        self.reduced = Some(buf.narrow(0, 0, n)?);
        Ok(agreed)
    }

    /// One optimizer update with the averaged gradients, written into the model's variables.
    pub fn step(&mut self, lr: f64) -> Result<()> {
        let g = self
            .reduced
            .take()
            .ok_or_else(|| Error::Model("optimizer step without synchronised gradients".into()))?;
        self.steps += 1;
        let g = match self.grad_clip {
            Some(max) => self.clip(g, max)?,
            None => g,
        };
        let p = &self.params;
        let (params, state) = match self.config {
            OptimizerConfig::Sgd {
                momentum,
                nesterov,
                weight_decay,
            } => {
                let d = if weight_decay != 0.0 {
                    (&g + (p * weight_decay)?)?
                } else {
                    g
                };
                if self.state.is_empty() {
                    ((p - (d * lr)?)?, Vec::new())
                } else {
                    let b = if self.steps == 1 {
                        d.clone()
                    } else {
                        ((&self.state[0] * momentum)? + &d)?
                    };
                    let update = if nesterov {
                        (&d + (&b * momentum)?)?
                    } else {
                        b.clone()
                    };
                    ((p - (update * lr)?)?, vec![b])
                }
            }
            OptimizerConfig::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => self.adam(g, lr, [beta1, beta2, eps, weight_decay], false)?,
            OptimizerConfig::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => self.adam(g, lr, [beta1, beta2, eps, weight_decay], true)?,
        };
        self.params = params;
        self.state = state;
        for (range, var) in &self.vars {
            let slice = self.params.narrow(0, range.start, range.len())?;
            var.set(&slice.reshape(var.shape())?)?;
        }
        Ok(())
    }

    /// `g` clipped to the global norm `max` as the host step clips (PyTorch's
    /// `clip_grad_norm_`: scaled by `max / (norm + 1e-6)` where that is below 1), the norm kept
    /// for [`DeviceStep::grad_norm`]; without a round trip to the host.
    fn clip(&mut self, g: Tensor, max: f64) -> Result<Tensor> {
        let norm = g.to_dtype(DType::F64)?.sqr()?.sum_all()?.sqrt()?;
        let coef =
            ((norm.affine(1.0, 1e-6)?.recip()? * max)?.minimum(1.0)?).to_dtype(DType::F32)?;
        self.grad_norm = Some(norm);
        Ok(g.broadcast_mul(&coef)?)
    }

    /// The last step's global L2 norm of the averaged gradients before clipping; `None` where
    /// the optimizer does not clip. Reads it from the device.
    pub fn grad_norm(&self) -> Result<Option<f64>> {
        Ok(match &self.grad_norm {
            Some(n) => Some(n.to_scalar::<f64>()?),
            None => None,
        })
    }

    /// Adam / AdamW with PyTorch's update, in the host optimizer's f32 arithmetic (the same
    /// constants, the same order of operations), so both steps agree to rounding.
    fn adam(
        &self,
        g: Tensor,
        lr: f64,
        [b1, b2, eps, wd]: [f64; 4],
        decoupled: bool,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let t = self.steps as i32;
        let step_size = (lr / (1.0 - b1.powi(t))) as f32;
        let bc2_sqrt = (1.0 - b2.powi(t)).sqrt() as f32;
        let (b1, b2, eps, wd) = (b1 as f32, b2 as f32, eps as f32, wd as f32);
        let c = |x: f32| x as f64;
        let p = &self.params;
        let g = if !decoupled && wd != 0.0 {
            (&g + (p * c(wd))?)?
        } else {
            g
        };
        let p = if decoupled && wd != 0.0 {
            let decayed = (p * c(1.0 - lr as f32 * wd))?;
            match &self.decay_mask {
                Some(mask) => mask.where_cond(&decayed, p)?,
                None => decayed,
            }
        } else {
            p.clone()
        };
        let m = ((&self.state[0] * c(b1))? + (&g * c(1.0 - b1))?)?;
        let v = ((&self.state[1] * c(b2))? + ((&g * c(1.0 - b2))? * &g)?)?;
        let bc2 = Tensor::new(bc2_sqrt, p.device())?;
        let denom = (v.sqrt()?.broadcast_div(&bc2)? + c(eps))?;
        let p = (p - ((&m * c(step_size))? / &denom)?)?;
        Ok((p, vec![m, v]))
    }
}

/// AdamW's decay mask for `len` parameters from the host optimizer's ranges; `None` where the
/// decay (if any) applies everywhere.
fn decay_mask(opt: &Optimizer, len: usize, device: &candle_core::Device) -> Result<Option<Tensor>> {
    let (OptimizerConfig::AdamW { .. }, Some(ranges)) = (opt.config, opt.decaying()) else {
        return Ok(None);
    };
    let mut mask = vec![0u8; len];
    for r in ranges {
        mask[r.clone()].fill(1);
    }
    Ok(Some(Tensor::from_vec(mask, len, device)?))
}

/// The tensors flattened and concatenated, on their device.
fn flatten(ts: impl Iterator<Item = Tensor>) -> Result<Tensor> {
    let flat: Vec<Tensor> = ts
        .map(|t| t.flatten_all())
        .collect::<candle_core::Result<_>>()?;
    Ok(Tensor::cat(&flat, 0)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::BnMode;
    use crate::spec::ModelName;
    use crate::step::ddp::Ddp;
    use crate::step::ddp::tests::solo;
    use candle_core::Device;

    fn mlp(seed: u64) -> Network {
        Network::new(
            ModelName::Mlp,
            [1, 28, 28],
            10,
            &Device::Cpu,
            BnMode::Local,
            seed,
        )
        .unwrap()
    }

    /// Gradients of a fixed batch through `net`.
    fn grads_of(net: &Network, k: u64) -> GradStore {
        // Deterministic inputs that differ per batch k.
        let x = Tensor::arange(0f32, 4.0 * 784.0, &Device::Cpu).unwrap();
        let x = ((x * (0.37 + 0.01 * k as f64)).unwrap().sin().unwrap())
            .reshape((4, 1, 28, 28))
            .unwrap();
        let y = Tensor::new(&[1u32, 3, 5, (k % 10) as u32], &Device::Cpu).unwrap();
        let out = net.forward(&x, true).unwrap();
        candle_nn::loss::cross_entropy(&out, &y)
            .unwrap()
            .backward()
            .unwrap()
    }

    fn params_of(net: &Network) -> Vec<f32> {
        flatten(net.params.iter().map(|(_, v)| v.as_tensor().clone()))
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    /// The device step and the host step take the same path from the same start.
    fn same_as_host(config: OptimizerConfig) {
        same_as_host_with(config, &|opt| opt);
    }

    /// [`same_as_host`] with both optimizers made by `recipe` from a plain one.
    fn same_as_host_with(config: OptimizerConfig, recipe: &dyn Fn(Optimizer) -> Optimizer) {
        let (a, b) = (mlp(3), mlp(3));
        let mut ddp = Ddp::new(&a, solo(), 1 << 20, false).unwrap();
        let mut host_opt = recipe(Optimizer::new(config, ddp.num_params()));
        let mut dev = DeviceStep::new(
            &b,
            &recipe(Optimizer::new(config, ddp.num_params())),
            Reducer::Host(solo()),
        )
        .unwrap();
        for k in 0..4 {
            let lr = 0.05 / (k as f64 + 1.0);
            // Two micro-batches per step, as with grad_accum = 2.
            for m in 0..2 {
                ddp.accumulate(&a, &grads_of(&a, 2 * k + m), 0.5).unwrap();
                dev.accumulate(&grads_of(&b, 2 * k + m), 0.5).unwrap();
            }
            assert!(!ddp.sync_and_step(&mut host_opt, lr, false).unwrap().stop);
            assert!(!dev.sync(false).unwrap().stop);
            ddp.write_params(&a).unwrap();
            dev.step(lr).unwrap();
            match (ddp.grad_norm(), dev.grad_norm().unwrap()) {
                (Some(host), Some(device)) => {
                    assert!((host - device).abs() < 1e-6 * host, "{host} vs {device}");
                    assert!(host > 2.0 * host_opt.grad_clip.unwrap(), "nothing clipped");
                }
                (None, None) => assert_eq!(host_opt.grad_clip, None),
                other => panic!("norms {other:?}"),
            }
        }
        let (pa, pb) = (params_of(&a), params_of(&b));
        let worst = pa
            .iter()
            .zip(&pb)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 1e-6,
            "{config:?}: device and host steps differ by {worst}"
        );
        assert!(
            pa.iter()
                .zip(params_of(&mlp(3)).iter())
                .any(|(x, y)| x != y),
            "nothing moved"
        );
        // The exported state is the host optimizer's.
        let mut exported = Optimizer::new(config, ddp.num_params());
        dev.export(&mut exported).unwrap();
        assert_eq!(exported.steps, host_opt.steps);
        for (x, y) in exported.slots.iter().zip(&host_opt.slots) {
            let worst = x
                .iter()
                .zip(y)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-6,
                "{config:?}: optimizer state differs by {worst}"
            );
        }
    }

    #[test]
    fn sgd_matches_the_host_step() {
        same_as_host(OptimizerConfig::Sgd {
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        });
        same_as_host(OptimizerConfig::Sgd {
            momentum: 0.9,
            nesterov: false,
            weight_decay: 1e-3,
        });
        same_as_host(OptimizerConfig::Sgd {
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.0,
        });
    }

    #[test]
    fn adam_and_adamw_match_the_host_step() {
        for weight_decay in [0.0, 0.01] {
            same_as_host(OptimizerConfig::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay,
            });
            same_as_host(OptimizerConfig::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay,
            });
        }
    }

    #[test]
    fn clipping_and_the_adamw_mask_match_the_host_step() {
        let shapes: Vec<Vec<usize>> = mlp(3)
            .params
            .iter()
            .map(|(_, v)| v.dims().to_vec())
            .collect();
        let ranges = crate::optim::matrix_ranges(shapes.iter().map(Vec::as_slice));
        let recipe = |opt: Optimizer| {
            let mut opt = opt.decaying_only(ranges.clone());
            opt.grad_clip = Some(0.05);
            opt
        };
        same_as_host_with(
            OptimizerConfig::Sgd {
                momentum: 0.9,
                nesterov: false,
                weight_decay: 1e-3,
            },
            &recipe,
        );
        same_as_host_with(
            OptimizerConfig::AdamW {
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay: 0.5,
            },
            &recipe,
        );
    }

    #[test]
    fn a_stop_request_travels_with_the_gradients() {
        let net = mlp(1);
        let config = OptimizerConfig::Sgd {
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        };
        let mut dev =
            DeviceStep::new(&net, &Optimizer::new(config, 1), Reducer::Host(solo())).unwrap();
        dev.accumulate(&grads_of(&net, 0), 1.0).unwrap();
        assert!(dev.sync(true).unwrap().stop);
        assert!(matches!(dev.step(0.1), Ok(())));
        assert!(
            dev.step(0.1).is_err(),
            "a second step without a sync must fail"
        );
    }
}
