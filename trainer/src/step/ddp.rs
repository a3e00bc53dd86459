//! The DDP step: parameters broadcast from rank 0 at start (after checking every rank has the same
//! names and shapes), gradients copied into one flat buffer, then, bucket by bucket, a
//! reduce-scatter (average), the optimizer on this rank's shard of every bucket only, and an
//! all-gather of the updated parameters, which are written back into the model.
//!
//! That is an all-reduce of the gradients split in its two halves with the optimizer in between
//! (as PyTorch's ZeroRedundancyOptimizer does): every rank moves the same bytes as with an
//! all-reduce, ends with the same bits, and runs 1/W of the optimizer's work. The optimizer state
//! of the other shards is stale on each rank until [`Ddp::gather_optimizer_state`] before a
//! checkpoint.
//!
//! Where the ranks share memory, the two flat buffers live in a segment they all map
//! ([`Collective::step_buffers`]): the step is then one bucket whose reduce-scatter reads the
//! other ranks' gradients in place and hands each summed block straight to the optimizer, and
//! whose all-gather is a barrier: [`Ddp::write_params`] then reads each shard of the parameters
//! from the rank that updated it. This rank's own shard of the gradients is not even copied into
//! its buffer (nobody else reads it): the reduce-scatter reads it from the gradient tensors.
//!
//! The flat buffers are allocated once; on the collective path a training step allocates
//! nothing but, in shared buffers, two short lists naming the held gradient tensors.
//! Both buffers carry one extra element, a control flag summed across ranks, so that a stop
//! request seen by any replica (SIGTERM, SIGINT, SIGUSR2) stops every replica at the same step.
//!
//! With gradient clipping ([`Optimizer::grad_clip`]) the optimizer waits for the global norm:
//! after the reduce-scatter each rank sums the squares of its shard, one scalar all-reduce adds
//! them up, and every rank scales its shard by the same factor before updating it. In shared
//! buffers the reduced blocks are then kept aside instead of going straight to the optimizer.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Layout, Storage, Tensor, Var};

use crate::dist::capability;
use crate::dist::shm::{HeldGrads, StepBuffers};
use crate::dist::{Collective, ReduceOp};
use crate::models::Network;
use crate::optim::{self, Optimizer};
use crate::step::comm::{Route, SharedCollective, with_comm};
use crate::step::hook::CommHooks;
use crate::step::host::{host_f32, read_tensor};
use crate::step::overlap::{CommFigures, Overlap, Session};
use crate::step::{Control, StepCost};
use crate::{Error, Result};

struct Slot {
    name: String,
    range: Range<usize>,
}

/// The flat buffers: the master copy of all parameters, in name order, which the optimizer
/// updates in place, and the gradients of the current step; each with 1 control element at the
/// end.
enum Flat {
    /// This process's own memory, reduced with [`Collective::reduce_scatter`] and
    /// [`Collective::all_gather_shards`] bucket by bucket; `why` not shared, in a world of
    /// several that asked for shared buffers.
    Private {
        params: Vec<f32>,
        grads: Vec<f32>,
        why: Option<String>,
    },
    /// Memory the other ranks read in place ([`Collective::step_buffers`]): one bucket. `whole`
    /// says whether this rank's parameter buffer holds every shard's current values; after a
    /// step, each shard is current in the buffer of the rank that updated it only.
    Shared { step: StepBuffers, whole: bool },
}

impl Flat {
    /// Floats per buffer (the parameters and the control element).
    fn len(&self) -> usize {
        match self {
            Flat::Private { params, .. } => params.len(),
            Flat::Shared { step, .. } => step.len(),
        }
    }

    /// All current parameters in this rank's buffer.
    fn params(&mut self) -> &[f32] {
        self.params_mut()
    }

    fn params_mut(&mut self) -> &mut [f32] {
        match self {
            Flat::Private { params, .. } => params,
            Flat::Shared { step, whole } => {
                if !*whole {
                    step.gather_params();
                    *whole = true;
                }
                step.params_mut()
            }
        }
    }

    /// Copies the current parameters at `at` into `dst`, wherever they are.
    fn read_params(&self, at: Range<usize>, dst: &mut [f32]) {
        match self {
            Flat::Private { params, .. } => dst.copy_from_slice(&params[at]),
            Flat::Shared { step, whole: true } => dst.copy_from_slice(&step.params()[at]),
            Flat::Shared { step, whole: false } => step.read_params(at, dst),
        }
    }

    fn grads_mut(&mut self) -> &mut [f32] {
        match self {
            Flat::Private { grads, .. } => grads,
            Flat::Shared { step, .. } => step.grads_mut(),
        }
    }
}

pub struct Ddp {
    comm: SharedCollective,
    slots: Vec<Slot>,
    flat: Flat,
    buckets: Vec<Range<usize>>,
    /// This rank's shard of every bucket, clipped to the parameters: what its optimizer updates.
    own: Vec<Range<usize>>,
    /// Whether this rank's shard holds the control element (it reduces the stop flag).
    owns_control: bool,
    buffer_scratch: Vec<f32>,
    micro_batches: usize,
    /// In shared buffers, this rank's shard of the first micro-batch's gradients, left in the
    /// model's gradient tensors until the step reads them ([`HeldGrads`]).
    held: Vec<HeldTensor>,
    /// In shared buffers with clipping, this rank's shard of the reduced gradients.
    clip_scratch: Vec<f32>,
    /// The global L2 norm of the last step's averaged gradients, before clipping (clipping
    /// steps only).
    grad_norm: Option<f64>,
    /// Where the gradients are all-reduced bucket by bucket while backward runs
    /// ([`Ddp::overlap_buckets`]); the optimizer then runs on every parameter.
    overlap: Option<Overlap>,
    /// What the last step's reduction and optimizer cost.
    cost: StepCost,
}

/// Gradients of this rank's shard not copied into its buffer (yet).
struct HeldTensor {
    /// Their range in the flat buffers.
    at: Range<usize>,
    tensor: Tensor,
    /// Where `at` begins among the tensor's values.
    from: usize,
}

impl Ddp {
    /// Checks that all ranks built the same model, then makes every rank start from rank 0's
    /// parameters and buffers. `bucket_bytes` caps one all-reduce message. With `share`, the
    /// flat buffers go where the other ranks read them in place if the collective has such
    /// memory ([`Collective::step_buffers`]); the step then moves them in one bucket.
    pub fn new(
        net: &Network,
        comm: SharedCollective,
        bucket_bytes: usize,
        share: bool,
    ) -> Result<Ddp> {
        Self::from_root(net, comm, bucket_bytes, share, 0)
    }

    /// [`Ddp::new`] with every rank starting from rank `root`'s parameters and buffers: an
    /// elastic group re-formed goes on from its most advanced member's, which need not be the
    /// new rank 0 (a replica joining may be).
    pub fn from_root(
        net: &Network,
        comm: SharedCollective,
        bucket_bytes: usize,
        share: bool,
        root: usize,
    ) -> Result<Ddp> {
        check_same_model(net, &comm)?;
        let mut slots = Vec::with_capacity(net.params.len());
        let mut offset = 0;
        for (name, var) in &net.params {
            let n = var.elem_count();
            slots.push(Slot {
                name: name.clone(),
                range: offset..offset + n,
            });
            offset += n;
        }
        let total = offset + 1;
        let mut flat = with_comm(&comm, |c| {
            if c.world_size() == 1 || !share {
                return Ok(private_flat(total, None));
            }
            Ok(match capability::step_buffers(c, total)? {
                Ok(step) => Flat::Shared { step, whole: true },
                Err(why) => private_flat(total, Some(why)),
            })
        })?;
        let params = flat.params_mut();
        for (slot, (_, var)) in slots.iter().zip(&net.params) {
            read_tensor(var.as_tensor(), &mut params[slot.range.clone()], false)?;
        }
        // Shared buffers need no buckets: nothing is staged or sent.
        let per_bucket = match flat {
            Flat::Shared { .. } => total,
            Flat::Private { .. } => (bucket_bytes / 4).max(1),
        };
        let buckets: Vec<Range<usize>> = (0..total)
            .step_by(per_bucket)
            .map(|s| s..(s + per_bucket).min(total))
            .collect();
        let (own, owns_control) = with_comm(&comm, |c| {
            let rank = c.rank();
            let own = buckets
                .iter()
                .map(|b| {
                    let shard = c.shard(b.len(), rank);
                    (b.start + shard.start).min(offset)..(b.start + shard.end).min(offset)
                })
                .collect();
            let last = buckets.last().map_or(1, |b| b.len());
            Ok((own, c.shard(last, rank).contains(&(last - 1))))
        })?;
        let mut ddp = Ddp {
            comm,
            slots,
            flat,
            own,
            owns_control,
            buckets,
            buffer_scratch: Vec::new(),
            micro_batches: 0,
            held: Vec::new(),
            clip_scratch: Vec::new(),
            grad_norm: None,
            overlap: None,
            cost: StepCost::default(),
        };
        let params = ddp.flat.params_mut();
        with_comm(&ddp.comm, |c| c.broadcast(params, root))?;
        ddp.write_params(net)?;
        ddp.broadcast_buffers_from(net, root)?;
        Ok(ddp)
    }

    pub fn rank(&self) -> usize {
        self.comm.lock().map(|c| c.rank()).unwrap_or(0)
    }

    pub fn num_params(&self) -> usize {
        self.flat.len() - 1
    }

    /// [`Ddp::from_root`] with private flat buffers however the ranks are placed, `why` saying why
    /// (an elastic group keeps the whole optimizer state on every replica, which the shared
    /// step's sharded optimizer does not).
    pub fn new_private(
        net: &Network,
        comm: SharedCollective,
        bucket_bytes: usize,
        why: &str,
        root: usize,
    ) -> Result<Ddp> {
        let mut ddp = Ddp::from_root(net, comm, bucket_bytes, false, root)?;
        if let Flat::Private { why: w, .. } = &mut ddp.flat {
            *w = Some(why.to_string());
        }
        Ok(ddp)
    }

    /// Why the gradients and parameters are not in memory the other ranks read in place
    /// ([`Collective::step_buffers`]); `None` where they are, or in a world of 1.
    pub fn private_because(&self) -> Option<&str> {
        match &self.flat {
            Flat::Private { why, .. } => why.as_deref(),
            Flat::Shared { .. } => None,
        }
    }

    /// From now on, all-reduces the gradients bucket by bucket (of `bucket_bytes`) while
    /// backward runs ([`Ddp::session`]) and runs the whole optimizer on every rank, where the
    /// step is private and the world has more than one rank, each bucket averaged by a hook of
    /// `hooks` (a [`crate::step::hook::Wire`] names the built-in ones); says whether it does.
    /// `route` is the one SyncBatchNorm's reducer of `net` holds. Call it before the first step.
    pub fn overlap_buckets(
        &mut self,
        net: &Network,
        route: Arc<Route>,
        bucket_bytes: usize,
        hooks: impl Into<CommHooks>,
    ) -> Result<bool> {
        let world = with_comm(&self.comm, |c| Ok(c.world_size()))?;
        let Flat::Private { grads, .. } = &mut self.flat else {
            return Ok(false);
        };
        if world == 1 {
            return Ok(false);
        }
        *grads = Vec::new();
        self.overlap = Some(Overlap::new(
            net,
            self.comm.clone(),
            route,
            bucket_bytes,
            hooks.into(),
        )?);
        Ok(true)
    }

    /// How many buckets the overlapped step sends (`None` when it does not overlap).
    pub fn overlap_buckets_count(&self) -> Option<usize> {
        self.overlap.as_ref().map(Overlap::buckets)
    }

    /// What the last step's overlapped communication cost (`None` when it does not overlap).
    pub fn comm_figures(&self) -> Option<CommFigures> {
        self.overlap.as_ref().map(Overlap::figures)
    }

    /// The backward pass of the step's last micro-batch, its gradients scaled by `scale`, when
    /// the step overlaps ([`Ddp::overlap_buckets`]): pass [`Session::ready`] to backward, then
    /// [`Session::finish`] instead of [`Ddp::accumulate`].
    pub fn session(&mut self, scale: f32) -> Option<Session<'_>> {
        self.overlap.as_mut().map(|o| o.session(scale))
    }

    /// The flat parameters, in name order (in shared buffers, first copies the other ranks'
    /// shards of the last step into this rank's buffer).
    pub fn params(&mut self) -> &[f32] {
        let n = self.num_params();
        &self.flat.params()[..n]
    }

    /// The flat parameters, to change (then [`Ddp::write_params`]). Every rank must write the
    /// same values at the same point between steps: in shared buffers the others read this
    /// rank's shard until they begin the next step.
    pub fn params_mut(&mut self) -> &mut [f32] {
        let n = self.num_params();
        &mut self.flat.params_mut()[..n]
    }

    /// Adds one micro-batch's gradients (scaled by `scale`) into the local gradient buffer.
    /// Parameters that got no gradient count as zero. In shared buffers, the first micro-batch's
    /// gradients of this rank's own shard stay in their tensors: only this rank reads them, in
    /// the step (or copied in here if another micro-batch follows).
    pub fn accumulate(&mut self, net: &Network, grads: &GradStore, scale: f32) -> Result<()> {
        if let Some(o) = &mut self.overlap {
            return o.accumulate(net, grads, scale);
        }
        let first = self.micro_batches == 0;
        if !first {
            self.copy_held()?;
        }
        let keep = match self.flat {
            Flat::Shared { .. } if first => self.own.first().cloned(),
            _ => None,
        };
        for (slot, (_, var)) in self.slots.iter().zip(&net.params) {
            let buffer = self.flat.grads_mut();
            let g = match grads.get(var.as_tensor()) {
                Some(g) if scale == 1.0 => g.clone(),
                Some(g) => (g * scale as f64)?,
                None => {
                    if first {
                        buffer[slot.range.clone()].fill(0.0);
                    }
                    continue;
                }
            };
            let range = &slot.range;
            let base = range.start;
            // Where this slot meets the own shard and its values are in host memory: copy the
            // rest, hold that part.
            let held = keep
                .as_ref()
                .map(|k| k.start.max(range.start)..k.end.min(range.end))
                .filter(|cut| !cut.is_empty())
                .and_then(|cut| {
                    host_f32(&g, |v| {
                        buffer[range.start..cut.start].copy_from_slice(&v[..cut.start - base]);
                        buffer[cut.end..range.end].copy_from_slice(&v[cut.end - base..]);
                        cut
                    })
                });
            let Some(cut) = held else {
                read_tensor(&g, &mut buffer[range.clone()], !first)?;
                continue;
            };
            self.held.push(HeldTensor {
                from: cut.start - base,
                at: cut,
                tensor: g,
            });
        }
        self.micro_batches += 1;
        Ok(())
    }

    /// Copies the held gradients into this rank's buffer.
    fn copy_held(&mut self) -> Result<()> {
        let buffer = self.flat.grads_mut();
        for h in self.held.drain(..) {
            let dst = &mut buffer[h.at.clone()];
            host_f32(&h.tensor, |v| {
                dst.copy_from_slice(&v[h.from..h.from + dst.len()])
            })
            .ok_or_else(|| held_not_host_f32(&h))?;
        }
        Ok(())
    }

    /// The step after the micro-batches: averages the accumulated gradients across replicas,
    /// updates the parameters with `opt` at `lr` and brings every replica the new parameters
    /// (then [`Ddp::write_params`]). Per bucket, a reduce-scatter leaves this rank the averaged
    /// gradients of its shard, `opt` updates that shard only, and an all-gather of the
    /// parameters completes them. With [`Optimizer::grad_clip`], the gradients are first scaled
    /// to that global norm (the same factor on every rank; [`Ddp::grad_norm`] is the norm before).
    /// `control` is this replica's requests (a stop, or just `true`/`false`); the result is what
    /// the replicas agreed on ([`Control`]).
    pub fn sync_and_step(
        &mut self,
        opt: &mut Optimizer,
        lr: f64,
        control: impl Into<Control>,
    ) -> Result<Control> {
        let control = control.into();
        if self.overlap.is_some() {
            return self.step_overlapped(opt, lr, control);
        }
        let n = self.num_params();
        let w = with_comm(&self.comm, |c| Ok(c.world_size()))?;
        self.flat.grads_mut()[n] = control.value(w);
        let (buckets, own, owns_control) = (&self.buckets, &self.own, self.owns_control);
        let held = &self.held;
        let scratch = &mut self.clip_scratch;
        let mut optimizer = Duration::ZERO;
        let optimizer = &mut optimizer;
        let bytes_sent = match &self.flat {
            Flat::Private { .. } => {
                let w = with_comm(&self.comm, |c| Ok(c.world_size() as u64))?;
                // A ring reduce-scatter and all-gather each send (W-1)/W of the buffer.
                Some((n as u64 + 1) * 4 * 2 * (w - 1) / w)
            }
            Flat::Shared { .. } => None,
        };
        self.grad_norm = with_comm(&self.comm, |c| match &mut self.flat {
            Flat::Private { params, grads, .. } => {
                for (i, b) in buckets.iter().enumerate() {
                    c.label_bucket(i, buckets.len());
                    c.reduce_scatter(&mut grads[b.clone()], ReduceOp::Avg)?;
                }
                let norm = match opt.grad_clip {
                    Some(max) => Some(clip(c, grads, own, max)?),
                    None => None,
                };
                // The optimizer on this rank's shards; the control element travels with the
                // parameters, from the rank that reduced it.
                let t = Instant::now();
                opt.step_parts(&mut params[..n], &grads[..n], own, lr);
                *optimizer += t.elapsed();
                if owns_control {
                    params[n] = grads[n];
                }
                for (i, b) in buckets.iter().enumerate() {
                    c.label_bucket(i, buckets.len());
                    c.all_gather_shards(&mut params[b.clone()])?;
                }
                Ok(norm)
            }
            Flat::Shared { step, whole } => {
                let guards: Vec<_> = held.iter().map(|h| h.tensor.storage_and_layout()).collect();
                let pieces = guards
                    .iter()
                    .zip(held.iter())
                    .map(|((storage, layout), h)| match &**storage {
                        Storage::Cpu(CpuStorage::F32(v)) => {
                            let a = layout.start_offset() + h.from;
                            Ok(HeldGrads {
                                at: h.at.clone(),
                                values: &v[a..a + h.at.len()],
                            })
                        }
                        _ => Err(held_not_host_f32(h)),
                    })
                    .collect::<Result<Vec<_>>>()?;
                opt.begin_step();
                let norm = match opt.grad_clip {
                    Some(max) => Some(reduce_and_clip(c, step, &pieces, scratch, max)?),
                    None => None,
                };
                // The shard's reduced gradients: kept aside where clipping waits for the
                // norm, else straight from the reduce-scatter.
                let shard = step.shard();
                let mut update = |at: Range<usize>, grads: &[f32], params: &mut [f32]| {
                    let t = Instant::now();
                    let k = n.clamp(at.start, at.end) - at.start;
                    opt.update(&mut params[..k], &grads[..k], at.start..at.start + k, lr);
                    if k < at.len() {
                        params[k] = grads[k];
                    }
                    *optimizer += t.elapsed();
                };
                if norm.is_some() {
                    // This rank's shard of its own parameters: between the reduce-scatter and
                    // the all-gather nobody else reads it, as in the fused update.
                    update(shard.clone(), scratch, &mut step.params_mut()[shard]);
                } else {
                    capability::shared_step(c, "reduce_scatter")?.reduce_scatter_step(
                        step,
                        ReduceOp::Avg,
                        &pieces,
                        &mut update,
                    )?;
                }
                *whole = false;
                capability::shared_step(c, "all_gather_shards")?.all_gather_step(step)?;
                Ok(norm)
            }
        })?;
        self.cost = StepCost {
            optimizer: *optimizer,
            comm_busy: None,
            bytes_sent,
        };
        self.held.clear();
        self.micro_batches = 0;
        let mut control = [0.0];
        self.flat.read_params(n..n + 1, &mut control);
        Ok(Control::read(control[0]))
    }

    /// The overlapped step after backward: the buckets averaged (now, unless a session did),
    /// clipped to the global norm (every rank has every gradient), and the whole optimizer.
    fn step_overlapped(
        &mut self,
        opt: &mut Optimizer,
        lr: f64,
        control: Control,
    ) -> Result<Control> {
        let o = self.overlap.as_mut().expect("checked by the caller");
        if !o.reduced() {
            o.reduce_all(control)?;
        }
        let t = Instant::now();
        self.grad_norm = match opt.grad_clip {
            Some(max) => {
                let squares: f64 = o.grads_mut().map(|g| optim::sum_of_squares(g)).sum();
                // In f32, as the sharded step's all-reduced sum and PyTorch's norm.
                let norm = ((squares as f32) as f64).sqrt();
                if let Some(coef) = optim::clip_coef(norm, max) {
                    o.grads_mut().for_each(|g| optim::scale(g, coef));
                }
                Some(norm)
            }
            None => None,
        };
        let Flat::Private { params, .. } = &mut self.flat else {
            unreachable!("the overlapped step keeps private buffers")
        };
        opt.begin_step();
        for (p, slot) in self.slots.iter().enumerate() {
            let at = slot.range.clone();
            opt.update(&mut params[at.clone()], o.grad(p), at, lr);
        }
        let agreed = o.control();
        let figures = o.figures();
        self.cost = StepCost {
            optimizer: t.elapsed(),
            comm_busy: Some(figures.busy),
            bytes_sent: Some(figures.bytes_sent),
        };
        o.end_step();
        Ok(agreed)
    }

    /// What the last step's reduction and optimizer cost.
    pub fn cost(&self) -> StepCost {
        self.cost
    }

    /// The global L2 norm of the last step's averaged gradients before they were clipped, the
    /// same on every rank; `None` where the optimizer does not clip ([`Optimizer::grad_clip`]).
    pub fn grad_norm(&self) -> Option<f64> {
        self.grad_norm
    }

    /// Brings every rank's optimizer state up to date: each rank updates its own shards only
    /// (see [`Ddp::sync_and_step`]), so before a checkpoint all ranks call this together.
    pub fn gather_optimizer_state(&mut self, opt: &mut Optimizer) -> Result<()> {
        if self.overlap.is_some() {
            // Every rank ran the whole optimizer: its state is current everywhere.
            return Ok(());
        }
        let n = self.num_params();
        let scratch = &mut self.buffer_scratch;
        let buckets = &self.buckets;
        with_comm(&self.comm, |c| {
            if c.world_size() == 1 {
                return Ok(());
            }
            scratch.resize(n + 1, 0.0);
            for slot in opt.slots.iter_mut() {
                scratch[..n].copy_from_slice(slot);
                for b in buckets {
                    c.all_gather_shards(&mut scratch[b.clone()])?;
                }
                slot.copy_from_slice(&scratch[..n]);
            }
            Ok(())
        })
    }

    /// Writes the flat parameters back into the model's variables (in shared buffers, each
    /// shard straight from the rank that updated it).
    pub fn write_params(&self, net: &Network) -> Result<()> {
        for (slot, (_, var)) in self.slots.iter().zip(&net.params) {
            write_var(var, &|dst| self.flat.read_params(slot.range.clone(), dst))?;
        }
        Ok(())
    }

    /// Reads the model's variables into the flat parameters (after loading a checkpoint).
    pub fn read_params(&mut self, net: &Network) -> Result<()> {
        let params = self.flat.params_mut();
        for (slot, (_, var)) in self.slots.iter().zip(&net.params) {
            read_tensor(var.as_tensor(), &mut params[slot.range.clone()], false)?;
        }
        Ok(())
    }

    /// Copies rank 0's buffers (BatchNorm running statistics) to every rank, as PyTorch DDP does
    /// before each forward pass with `broadcast_buffers=True`.
    pub fn broadcast_buffers(&mut self, net: &Network) -> Result<()> {
        self.broadcast_buffers_from(net, 0)
    }

    /// Copies rank `root`'s buffers to every rank (an elastic group takes them from the replica
    /// whose state it goes on with).
    pub fn broadcast_buffers_from(&mut self, net: &Network, root: usize) -> Result<()> {
        let buffers = net.buffers.snapshot();
        if buffers.is_empty() {
            return Ok(());
        }
        let total: usize = buffers.iter().map(|(_, t)| t.elem_count()).sum();
        self.buffer_scratch.resize(total, 0.0);
        let mut off = 0;
        for (_, t) in &buffers {
            let n = t.elem_count();
            let as_f32 = t.to_dtype(candle_core::DType::F32)?;
            read_tensor(&as_f32, &mut self.buffer_scratch[off..off + n], false)?;
            off += n;
        }
        let scratch = &mut self.buffer_scratch;
        with_comm(&self.comm, |c| c.broadcast(scratch, root))?;
        let mut off = 0;
        for (name, t) in buffers {
            let n = t.elem_count();
            let v = Tensor::from_slice(&self.buffer_scratch[off..off + n], t.shape(), t.device())?
                .to_dtype(t.dtype())?;
            net.buffers.insert(name, v);
            off += n;
        }
        Ok(())
    }

    /// The name of the parameter holding flat index `i` (for diagnostics).
    pub fn param_at(&self, i: usize) -> Option<&str> {
        self.slots
            .iter()
            .find(|s| s.range.contains(&i))
            .map(|s| s.name.as_str())
    }
}

/// Clips this rank's shards `own` of the averaged gradients `grads` to the global norm `max`;
/// returns the norm before.
fn clip(c: &mut dyn Collective, grads: &mut [f32], own: &[Range<usize>], max: f64) -> Result<f64> {
    let mine = own
        .iter()
        .map(|r| optim::sum_of_squares(&grads[r.clone()]))
        .sum();
    let norm = global_norm(c, mine)?;
    if let Some(coef) = optim::clip_coef(norm, max) {
        own.iter()
            .for_each(|r| optim::scale(&mut grads[r.clone()], coef));
    }
    Ok(norm)
}

/// In shared buffers: the reduce-scatter of the step's gradients into `scratch` (this rank's
/// shard, control element included), clipped there to the global norm `max`; returns the norm
/// before. The parameters are not touched: the optimizer runs after.
fn reduce_and_clip(
    c: &mut dyn Collective,
    step: &mut StepBuffers,
    held: &[HeldGrads<'_>],
    scratch: &mut Vec<f32>,
    max: f64,
) -> Result<f64> {
    let shard = step.shard();
    scratch.resize(shard.len(), 0.0);
    let mut keep = |at: Range<usize>, grads: &[f32], _: &mut [f32]| {
        scratch[at.start - shard.start..at.end - shard.start].copy_from_slice(grads)
    };
    capability::shared_step(c, "reduce_scatter")?.reduce_scatter_step(
        step,
        ReduceOp::Avg,
        held,
        &mut keep,
    )?;
    // The control element, last in the buffers, is no gradient.
    let k = (step.len() - 1).clamp(shard.start, shard.end) - shard.start;
    let norm = global_norm(c, optim::sum_of_squares(&scratch[..k]))?;
    if let Some(coef) = optim::clip_coef(norm, max) {
        optim::scale(&mut scratch[..k], coef);
    }
    Ok(norm)
}

/// The global L2 norm from each rank's sum of squares `mine` (one scalar all-reduce; in f32,
/// the precision of PyTorch's norm).
fn global_norm(c: &mut dyn Collective, mine: f64) -> Result<f64> {
    let mut total = [mine as f32];
    c.all_reduce(&mut total, ReduceOp::Sum)?;
    Ok((total[0] as f64).sqrt())
}

fn private_flat(len: usize, why: Option<String>) -> Flat {
    Flat::Private {
        params: vec![0.0; len],
        grads: vec![0.0; len],
        why,
    }
}

/// Every rank must have the same parameter and buffer names and shapes.
fn check_same_model(net: &Network, comm: &SharedCollective) -> Result<()> {
    let desc: String = net
        .state()
        .iter()
        .map(|(n, t)| format!("{n}:{:?}\n", t.dims()))
        .collect();
    let all = with_comm(comm, |c| c.all_gather_bytes(desc.as_bytes()))?;
    let reference = String::from_utf8_lossy(&all[0]).into_owned();
    for (rank, other) in all.iter().enumerate().skip(1) {
        let other = String::from_utf8_lossy(other);
        if other != reference {
            let diff = first_difference(&reference, &other);
            return Err(Error::Model(format!(
                "rank {rank} built a different model than rank 0: {diff}"
            )));
        }
    }
    Ok(())
}

fn first_difference(a: &str, b: &str) -> String {
    let (mut la, mut lb) = (a.lines(), b.lines());
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (Some(x), Some(y)) => return format!("rank 0 has `{x}` where it has `{y}`"),
            (Some(x), None) => return format!("it lacks `{x}`"),
            (None, Some(y)) => return format!("it has an extra `{y}`"),
            (None, None) => return "same entries in a different order".into(),
        }
    }
}

fn held_not_host_f32(h: &HeldTensor) -> Error {
    Error::Model(format!(
        "held gradients of flat elements {:?} are no longer contiguous f32 in host memory",
        h.at
    ))
}

/// Overwrites a variable's values with what `fill` writes into a slice of its length: in place
/// (CPU) or through a host copy (other devices).
fn write_var(var: &Var, fill: &dyn Fn(&mut [f32])) -> Result<()> {
    if var.device().is_cpu() {
        var.as_tensor().inplace_op1(&WriteF32 {
            len: var.elem_count(),
            fill,
        })?;
    } else {
        let mut host = vec![0.0; var.elem_count()];
        fill(&mut host);
        var.set(&Tensor::from_slice(&host, var.shape(), var.device())?)?;
    }
    Ok(())
}

struct WriteF32<'a> {
    len: usize,
    fill: &'a dyn Fn(&mut [f32]),
}

impl candle_core::InplaceOp1 for WriteF32<'_> {
    fn name(&self) -> &'static str {
        "write-f32"
    }
    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        match (storage, layout.contiguous_offsets()) {
            (CpuStorage::F32(data), Some((a, b))) if b - a == self.len => {
                (self.fill)(&mut data[a..b]);
                Ok(())
            }
            _ => candle_core::bail!(
                "write-f32: variable is not a contiguous f32 tensor of {} elements",
                self.len
            ),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
