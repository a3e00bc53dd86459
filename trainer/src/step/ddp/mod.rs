//! The host DDP step: parameters broadcast from rank 0 at start (after checking every rank has
//! the same names and shapes), the master copy of the parameters kept flat in name order (the
//! optimizer updates it in place), and the step after backward, one of three strategies.
//!
//! The sharded step (`sharded`, private buffers; `shared`, buffers the ranks share) copies the
//! gradients into one flat buffer, then, bucket by bucket, reduce-scatters (averages) it, runs
//! the optimizer on this rank's shard of every bucket only, and all-gathers the updated
//! parameters, which are written back into the model. That is an all-reduce of the gradients
//! split in its two halves with the optimizer in between (as PyTorch's ZeroRedundancyOptimizer
//! does): every rank moves the same bytes as with an all-reduce, ends with the same bits, and
//! runs 1/W of the optimizer's work. The optimizer state of the other shards is stale on each
//! rank until [`Ddp::gather_optimizer_state`] before a checkpoint. Where the ranks share memory
//! the two flat buffers live in a segment they all map ([`SharedStep::step_buffers`](crate::dist::capability::SharedStep::step_buffers)): the step
//! is one bucket, read in place.
//!
//! The overlapped step (`overlapped`, [`Ddp::overlap_buckets`]) averages the gradients bucket by
//! bucket while backward runs and runs the whole optimizer on every rank.
//!
//! The flat buffers are allocated once; on the collective path a training step allocates
//! nothing but, in shared buffers, two short lists naming the held gradient tensors.
//! Both buffers carry one extra element, a control flag summed across ranks, so that a stop
//! request seen by any replica (SIGTERM, SIGINT, SIGUSR2) stops every replica at the same step.
//!
//! With gradient clipping ([`Optimizer::grad_clip`]) the optimizer waits for the global norm:
//! after the reduce-scatter each rank sums the squares of its shard, one scalar all-reduce adds
//! them up, and every rank scales its shard by the same factor before updating it.
//!
//! The local steps (`local`, [`Ddp::local_steps`]) run the whole optimizer on each replica's own
//! gradients and sync the weights every few steps (`[ddp.sync]`).
//!
//! Layout: this file, [`Ddp`] (the parameters, their broadcast, the strategy it runs); `sharded`,
//! the sharded step over private buffers; `shared`, the sharded step in shared buffers;
//! `overlapped`, the overlapped step's optimizer over private buffers; `local`, local steps with
//! their syncs (`plan`: when; `exchange`: the encodings on the wire).

pub(crate) mod local;
mod overlapped;
mod sharded;
mod shared;

use std::ops::Range;
use std::sync::Arc;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Layout, Tensor, Var};

use crate::dist::capability;
use crate::dist::{Collective, ReduceOp};
use crate::models::Network;
use crate::optim::{self, Optimizer};
use crate::scaler::Verdict;
use crate::spec::LocalSync;
use crate::step::comm::{Route, SharedCollective, with_comm};
use crate::step::hook::CommHooks;
use crate::step::host::read_tensor;
use crate::step::overlap::{CommFigures, Overlap, Session};
use crate::step::{Control, StepCost};
use crate::{Error, Result};
use local::{Local, LocalState};
use overlapped::Overlapped;
use sharded::Sharded;
use shared::SharedStep;

struct Slot {
    name: String,
    range: Range<usize>,
}

/// How the flat buffers are cut for the sharded step: its buckets, and this rank's shard of
/// every bucket, clipped to the parameters (what its optimizer updates).
struct Shards {
    buckets: Vec<Range<usize>>,
    own: Vec<Range<usize>>,
    /// Whether this rank's shard holds the control element (it reduces the stop flag).
    owns_control: bool,
}

/// What a strategy's step leaves: what the replicas agreed on, its cost, and the gradients'
/// norm before clipping (clipping steps only).
type Stepped = (Control, StepCost, Option<f64>);

/// The step a [`Ddp`] runs after backward, with the flat buffers it owns.
enum Strategy {
    /// The sharded step over this process's own memory.
    Sharded(Sharded),
    /// The sharded step in memory the other ranks read in place.
    Shared(SharedStep),
    /// The gradients averaged bucket by bucket while backward runs.
    Overlapped(Box<Overlapped>),
    /// Local steps, the replicas synced every few steps.
    Local(Box<Local>),
}

impl Strategy {
    /// Floats per buffer (the parameters and the control element).
    fn len(&self) -> usize {
        match self {
            Strategy::Sharded(s) => s.params.len(),
            Strategy::Shared(s) => s.len(),
            Strategy::Overlapped(s) => s.params.len(),
            Strategy::Local(s) => s.buffers.params.len(),
        }
    }

    /// All current parameters in this rank's buffer.
    fn params_mut(&mut self) -> &mut [f32] {
        match self {
            Strategy::Sharded(s) => &mut s.params,
            Strategy::Shared(s) => s.params_mut(),
            Strategy::Overlapped(s) => &mut s.params,
            Strategy::Local(s) => &mut s.buffers.params,
        }
    }

    /// Copies the current parameters at `at` into `dst`, wherever they are.
    fn read_params(&self, at: Range<usize>, dst: &mut [f32]) {
        match self {
            Strategy::Sharded(s) => dst.copy_from_slice(&s.params[at]),
            Strategy::Shared(s) => s.read_params(at, dst),
            Strategy::Overlapped(s) => dst.copy_from_slice(&s.params[at]),
            Strategy::Local(s) => dst.copy_from_slice(&s.buffers.params[at]),
        }
    }
}

pub struct Ddp {
    comm: SharedCollective,
    slots: Vec<Slot>,
    strategy: Strategy,
    shards: Shards,
    buffer_scratch: Vec<f32>,
    /// The global L2 norm of the last step's averaged gradients, before clipping (clipping
    /// steps only).
    grad_norm: Option<f64>,
    /// What the last step's reduction and optimizer cost.
    cost: StepCost,
}

impl Ddp {
    /// Checks that all ranks built the same model, then makes every rank start from rank 0's
    /// parameters and buffers. `bucket_bytes` caps one all-reduce message. With `share`, the
    /// flat buffers go where the other ranks read them in place if the collective has such
    /// memory ([`SharedStep::step_buffers`](crate::dist::capability::SharedStep::step_buffers)); the step then moves them in one bucket.
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
        let mut strategy = with_comm(&comm, |c| {
            if c.world_size() == 1 || !share {
                return Ok(Strategy::Sharded(Sharded::new(total, None)));
            }
            Ok(match capability::step_buffers(c, total)? {
                Ok(step) => Strategy::Shared(SharedStep::new(step)),
                Err(why) => Strategy::Sharded(Sharded::new(total, Some(why))),
            })
        })?;
        let params = strategy.params_mut();
        for (slot, (_, var)) in slots.iter().zip(&net.params) {
            read_tensor(var.as_tensor(), &mut params[slot.range.clone()], false)?;
        }
        // Shared buffers need no buckets: nothing is staged or sent.
        let per_bucket = match strategy {
            Strategy::Shared(_) => total,
            _ => (bucket_bytes / 4).max(1),
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
            strategy,
            shards: Shards {
                buckets,
                own,
                owns_control,
            },
            buffer_scratch: Vec::new(),
            grad_norm: None,
            cost: StepCost::default(),
        };
        let params = ddp.strategy.params_mut();
        with_comm(&ddp.comm, |c| c.broadcast(params, root))?;
        ddp.write_params(net)?;
        ddp.broadcast_buffers_from(net, root)?;
        Ok(ddp)
    }

    pub fn rank(&self) -> usize {
        self.comm.lock().map(|c| c.rank()).unwrap_or(0)
    }

    pub fn num_params(&self) -> usize {
        self.strategy.len() - 1
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
        if let Strategy::Sharded(s) = &mut ddp.strategy {
            s.why = Some(why.to_string());
        }
        Ok(ddp)
    }

    /// Why the gradients and parameters are not in memory the other ranks read in place
    /// ([`SharedStep::step_buffers`](crate::dist::capability::SharedStep::step_buffers)); `None` where they are, or in a world of 1.
    pub fn private_because(&self) -> Option<&str> {
        match &self.strategy {
            Strategy::Sharded(s) => s.why.as_deref(),
            Strategy::Overlapped(s) => s.why.as_deref(),
            Strategy::Local(s) => s.buffers.why.as_deref(),
            Strategy::Shared(_) => None,
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
        let Strategy::Sharded(s) = &mut self.strategy else {
            return Ok(false);
        };
        if world == 1 {
            return Ok(false);
        }
        let overlap = Overlap::new(net, self.comm.clone(), route, bucket_bytes, hooks.into())?;
        self.strategy = Strategy::Overlapped(Box::new(Overlapped {
            params: std::mem::take(&mut s.params),
            why: s.why.take(),
            overlap,
        }));
        Ok(true)
    }

    /// How many buckets the overlapped step sends (`None` when it does not overlap).
    pub fn overlap_buckets_count(&self) -> Option<usize> {
        match &self.strategy {
            Strategy::Overlapped(s) => Some(s.overlap.buckets()),
            _ => None,
        }
    }

    /// From now on, takes local steps synced as `sync` says ([`local`]), where the step is
    /// private; says whether it does. Call it before the first step.
    pub fn local_steps(&mut self, sync: LocalSync) -> Result<bool> {
        let Strategy::Sharded(s) = &mut self.strategy else {
            return Ok(false);
        };
        let buffers = std::mem::replace(s, Sharded::new(0, None));
        let local = Local::new(buffers, &self.slots, sync, self.comm.clone())?;
        self.strategy = Strategy::Local(Box::new(local));
        Ok(true)
    }

    /// The local steps, where the replicas take them ([`Ddp::local_steps`]).
    pub(crate) fn local(&self) -> Option<&Local> {
        match &self.strategy {
            Strategy::Local(s) => Some(s),
            _ => None,
        }
    }

    /// The start of a step (before its micro-batches): local steps send a slice of a sync in
    /// flight while it computes.
    pub fn begin_step(&mut self) -> Result<()> {
        match &mut self.strategy {
            Strategy::Local(s) => s.begin_step(),
            _ => Ok(()),
        }
    }

    /// Puts the last synced (global) weights in the model's variables and rank 0's buffers
    /// everywhere, where the replicas take local steps (then [`Ddp::write_params`] puts this
    /// replica's own weights back); does nothing else. Every rank calls it together:
    /// evaluations and saved models see the weights the replicas agreed on.
    pub fn show_global(&mut self, net: &Network) -> Result<()> {
        let Strategy::Local(s) = &self.strategy else {
            return Ok(());
        };
        for (slot, (_, var)) in self.slots.iter().zip(&net.params) {
            write_var(var, &|dst| {
                dst.copy_from_slice(&s.global()[slot.range.clone()])
            })?;
        }
        self.broadcast_buffers(net)
    }

    /// What a checkpoint keeps of the local steps (every rank, at the same step).
    pub fn export_local(&mut self) -> Result<Option<LocalState>> {
        match &mut self.strategy {
            Strategy::Local(s) => s.export().map(Some),
            _ => Ok(None),
        }
    }

    /// What this replica holds of the local steps, without communicating ([`Local::kept`]).
    pub fn kept_local(&self) -> Option<LocalState> {
        match &self.strategy {
            Strategy::Local(s) => Some(s.kept()),
            _ => None,
        }
    }

    /// Goes on from a checkpoint's local steps (this rank's own state), then writes them into
    /// the model.
    pub fn import_local(&mut self, net: &Network, state: LocalState) -> Result<()> {
        let Strategy::Local(s) = &mut self.strategy else {
            return Err(Error::Model(
                "a checkpoint of local steps resumed by a run that syncs every step".into(),
            ));
        };
        s.import(state)?;
        self.write_params(net)
    }

    /// What the last step's overlapped communication cost (`None` when it does not overlap).
    pub fn comm_figures(&self) -> Option<CommFigures> {
        match &self.strategy {
            Strategy::Overlapped(s) => Some(s.overlap.figures()),
            _ => None,
        }
    }

    /// The backward pass of the step's last micro-batch, its gradients scaled by `scale`, when
    /// the step overlaps ([`Ddp::overlap_buckets`]): pass [`Session::ready`] to backward, then
    /// [`Session::finish`] instead of [`Ddp::accumulate`].
    pub fn session(&mut self, scale: f32) -> Option<Session<'_>> {
        match &mut self.strategy {
            Strategy::Overlapped(s) => Some(s.overlap.session(scale)),
            _ => None,
        }
    }

    /// The flat parameters, in name order (in shared buffers, first copies the other ranks'
    /// shards of the last step into this rank's buffer).
    pub fn params(&mut self) -> &[f32] {
        let n = self.num_params();
        &self.strategy.params_mut()[..n]
    }

    /// The weights the replicas agreed on: the global ones under local steps, else
    /// [`Ddp::params`].
    pub fn agreed_params(&mut self) -> &[f32] {
        let n = self.num_params();
        match &mut self.strategy {
            Strategy::Local(s) => s.global(),
            other => &other.params_mut()[..n],
        }
    }

    /// The flat parameters, to change (then [`Ddp::write_params`]). Every rank must write the
    /// same values at the same point between steps: in shared buffers the others read this
    /// rank's shard until they begin the next step.
    pub fn params_mut(&mut self) -> &mut [f32] {
        let n = self.num_params();
        &mut self.strategy.params_mut()[..n]
    }

    /// Adds one micro-batch's gradients (scaled by `scale`) into the local gradient buffer.
    /// Parameters that got no gradient count as zero. In shared buffers, the first micro-batch's
    /// gradients of this rank's own shard stay in their tensors: only this rank reads them, in
    /// the step (or copied in here if another micro-batch follows).
    pub fn accumulate(&mut self, net: &Network, grads: &GradStore, scale: f32) -> Result<()> {
        match &mut self.strategy {
            Strategy::Overlapped(s) => s.overlap.accumulate(net, grads, scale),
            Strategy::Sharded(s) => s.accumulate(&self.slots, net, grads, scale),
            Strategy::Local(s) => s.buffers.accumulate(&self.slots, net, grads, scale),
            Strategy::Shared(s) => {
                let own = self.shards.own.first().cloned();
                s.accumulate(&self.slots, own, net, grads, scale)
            }
        }
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
        let (slots, shards) = (&self.slots, &self.shards);
        let (agreed, cost, norm) = match &mut self.strategy {
            Strategy::Overlapped(s) => s.step(slots, opt, lr, control)?,
            Strategy::Sharded(s) => with_comm(&self.comm, |c| s.step(c, shards, opt, lr, control))?,
            Strategy::Shared(s) => with_comm(&self.comm, |c| s.step(c, opt, lr, control))?,
            Strategy::Local(s) => s.step(opt, lr, control)?,
        };
        self.grad_norm = norm;
        self.cost = cost;
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
        if let Strategy::Overlapped(_) | Strategy::Local(_) = self.strategy {
            // Every rank ran the whole optimizer: its state is current everywhere (its own).
            return Ok(());
        }
        let n = self.num_params();
        let scratch = &mut self.buffer_scratch;
        let buckets = &self.shards.buckets;
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
            write_var(var, &|dst| {
                self.strategy.read_params(slot.range.clone(), dst)
            })?;
        }
        Ok(())
    }

    /// Reads the model's variables into the flat parameters (after loading a checkpoint).
    pub fn read_params(&mut self, net: &Network) -> Result<()> {
        let params = self.strategy.params_mut();
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

/// What the averaged gradients went through before the optimizer ([`prepare`]).
struct Prepared {
    /// Their global L2 norm before clipping (clipping steps only).
    norm: Option<f64>,
    /// Whether the optimizer steps: not where fp16's loss scaler skips the step.
    step: bool,
}

/// This rank's averaged gradients, before the optimizer: divided by fp16's loss scale
/// ([`Optimizer::scaler`]), then clipped to the global norm ([`Optimizer::grad_clip`]).
/// `each(f)` applies `f` to every part of them this rank updates; `global` turns this rank's sum
/// of their squares into the global norm (an all-reduce, or the norm itself where every rank
/// holds every gradient). With a loss scale, a step whose global norm is not finite (a gradient
/// infinite or NaN on any rank, or their squares beyond f32's range) is skipped, on every rank
/// alike since every rank gets the same norm, and the scaler learns of it.
fn prepare(
    opt: &mut Optimizer,
    mut each: impl FnMut(&mut dyn FnMut(&mut [f32])),
    global: impl FnOnce(f64) -> Result<f64>,
) -> Result<Prepared> {
    if opt.grad_clip.is_none() && opt.scaler.is_none() {
        return Ok(Prepared {
            norm: None,
            step: true,
        });
    }
    if let Some(s) = &opt.scaler {
        let inverse = s.inverse();
        each(&mut |g| optim::scale(g, inverse));
    }
    let mut mine = 0.0;
    each(&mut |g| mine += optim::sum_of_squares(g));
    let norm = global(mine)?;
    let step = match &mut opt.scaler {
        Some(s) => s.update(norm.is_finite()) == Verdict::Stepped,
        None => true,
    };
    if let (true, Some(max)) = (step, opt.grad_clip)
        && let Some(coef) = optim::clip_coef(norm, max)
    {
        each(&mut |g| optim::scale(g, coef));
    }
    Ok(Prepared {
        norm: opt.grad_clip.map(|_| norm),
        step,
    })
}

/// The L2 norm from the sum of squares of every gradient, where this rank holds them all (in
/// f32, as the all-reduced sum of [`global_norm`] and PyTorch's norm).
fn whole_norm(squares: f64) -> Result<f64> {
    Ok(((squares as f32) as f64).sqrt())
}

/// The global L2 norm from each rank's sum of squares `mine` (one scalar all-reduce; in f32,
/// the precision of PyTorch's norm).
fn global_norm(c: &mut dyn Collective, mine: f64) -> Result<f64> {
    let mut total = [mine as f32];
    c.all_reduce(&mut total, ReduceOp::Sum)?;
    Ok((total[0] as f64).sqrt())
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
