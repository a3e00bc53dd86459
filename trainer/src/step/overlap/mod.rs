//! The DDP step's gradients all-reduced bucket by bucket while backward runs, as PyTorch's DDP
//! does: a bucket's all-reduce starts on the communication thread as soon as its last gradient
//! is final, while backward computes the rest; the optimizer then runs on every parameter on
//! every rank (the same averaged gradients give the same bits everywhere).
//!
//! Buckets follow the order backward finalizes the gradients. The first step learns it: its
//! gradients are reduced after backward in the reverse parameter order, rank 0's observed order
//! is shared, and the buckets are laid out by it from the second step on (PyTorch rebuilds its
//! buckets after the first iteration the same way). Buckets are sent in their order on every
//! rank: one whose gradients are ready waits for those before it. The last bucket (the first
//! layers, final last) carries the control element, so it is sent when backward ends, with the
//! stop request of that moment.
//!
//! Micro-batches before the last accumulate into the buckets without communication; the last
//! one's backward runs a [`Session`], whose hook adds each gradient as it becomes final. Where a
//! batch is trained in parts side by side, a gradient is final when every part's is; the parts
//! are added in part order, the same bits as without the hook.
//!
//! Each bucket is averaged by its communication hook ([`crate::step::hook`]): f32, 16 bits a
//! value, PowerSGD's factors or a hook of the user's own, made afresh when the buckets are laid
//! out by the learned order.
//!
//! Layout: `plan`, the buckets (pure); this file, the buckets' buffers, their hooks and the
//! session.

pub mod plan;

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;
use candle_core::{Tensor, TensorId};

use crate::models::Network;
use crate::step::comm::{Job, Route, SharedCollective, Worker, with_comm};
use crate::step::control::Control;
use crate::step::hook::{BucketLayout, BucketTensor, CommHook, CommHooks};
use crate::step::host::read_tensor;
use crate::{Error, Result};
use plan::{BucketPlan, FIRST_BUCKET_BYTES, complete_order, reverse_order};

/// What the last step's communication cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommFigures {
    /// Time the communication thread spent all-reducing.
    pub busy: Duration,
    /// Time the step waited for it after backward (not hidden behind backward).
    pub exposed: Duration,
    /// Bytes this rank sent, as the buckets' hooks count them (a ring all-reduce sends
    /// 2(W-1)/W of each bucket; 2 bytes a value where compressed).
    pub bytes_sent: u64,
    pub buckets: usize,
}

pub use crate::step::hook::Wire;

/// The gradient buckets of an overlapped DDP step, and their communication thread.
pub struct Overlap {
    worker: Worker,
    route: Arc<Route>,
    comm: SharedCollective,
    world: usize,
    sizes: Vec<usize>,
    ids: HashMap<TensorId, usize>,
    cap_bytes: usize,
    /// What makes the buckets' hooks.
    make: CommHooks,
    /// Every parameter's shape (for the buckets' layouts).
    shapes: Vec<Vec<usize>>,
    /// Per bucket, its hook, away on the thread while the bucket is.
    hooks: Vec<Option<Box<dyn CommHook>>>,
    plan: BucketPlan,
    /// The plan of the next step, once the first step has learned backward's order.
    next_plan: Option<BucketPlan>,
    learned: bool,
    bufs: Vec<Vec<f32>>,
    micro_batches: usize,
    /// Whether the buckets hold this step's averaged gradients.
    reduced: bool,
    /// Set when a session ended without finishing (an error): the buckets are not trusted.
    broken: bool,
    last: CommFigures,
}

impl Overlap {
    /// Buckets of at most `cap_bytes` for the parameters of `net`, each averaged by a hook of
    /// `hooks`; starts the communication thread. `route` is the one SyncBatchNorm's reducer
    /// holds.
    pub fn new(
        net: &Network,
        comm: SharedCollective,
        route: Arc<Route>,
        cap_bytes: usize,
        hooks: CommHooks,
    ) -> Result<Overlap> {
        let sizes: Vec<usize> = net.params.iter().map(|(_, v)| v.elem_count()).collect();
        let shapes: Vec<Vec<usize>> = net.params.iter().map(|(_, v)| v.dims().to_vec()).collect();
        let ids = net
            .params
            .iter()
            .enumerate()
            .map(|(p, (_, v))| (v.as_tensor().id(), p))
            .collect();
        let world = with_comm(&comm, |c| Ok(c.world_size()))?;
        let plan = BucketPlan::new(
            &reverse_order(sizes.len()),
            &sizes,
            cap_bytes,
            FIRST_BUCKET_BYTES.min(cap_bytes),
        );
        let bufs = plan.lens.iter().map(|&n| vec![0.0; n]).collect();
        let first = make_hooks(&plan, &shapes, &hooks, false);
        Ok(Overlap {
            worker: Worker::start(comm.clone())?,
            route,
            comm,
            world,
            sizes,
            ids,
            cap_bytes,
            make: hooks,
            shapes,
            hooks: first,
            plan,
            next_plan: None,
            learned: false,
            bufs,
            micro_batches: 0,
            reduced: false,
            broken: false,
            last: CommFigures::default(),
        })
    }

    /// How many buckets the step sends.
    pub fn buckets(&self) -> usize {
        self.plan.buckets.len()
    }

    /// What the last step's communication cost.
    pub fn figures(&self) -> CommFigures {
        self.last
    }

    fn slot(&mut self, p: usize) -> &mut [f32] {
        let (b, off) = self.plan.place[p];
        &mut self.bufs[b][off..off + self.sizes[p]]
    }

    /// Adds one micro-batch's gradients (scaled by `scale`) into the buckets, without
    /// communication. Parameters that got no gradient count as zero.
    pub fn accumulate(&mut self, net: &Network, grads: &GradStore, scale: f32) -> Result<()> {
        let first = self.micro_batches == 0;
        for (p, (_, var)) in net.params.iter().enumerate() {
            match grads.get(var.as_tensor()) {
                Some(g) => add_scaled(g, scale, self.slot(p), !first)?,
                None if first => self.slot(p).fill(0.0),
                None => {}
            }
        }
        self.micro_batches += 1;
        Ok(())
    }

    /// The last micro-batch's backward: its hook ([`Session::ready`]) adds the gradients and
    /// sends each bucket as it fills; [`Session::finish`] completes the step's reduction.
    pub fn session(&mut self, scale: f32) -> Session<'_> {
        let params = self.sizes.len();
        let left = self.plan.buckets.iter().map(|b| b.len()).collect();
        self.route.open(self.worker.sender());
        Session {
            state: Mutex::new(State {
                first: self.micro_batches == 0,
                scale,
                stash: vec![Vec::new(); params],
                done: vec![false; params],
                left,
                next: 0,
                in_flight: 0,
                seen: Vec::with_capacity(params),
                ov: self,
            }),
            finished: false,
        }
    }

    /// Averages the buckets across the replicas after backward (none was sent during it),
    /// with the control element `control`.
    pub fn reduce_all(&mut self, control: Control) -> Result<()> {
        self.check()?;
        let t0 = Instant::now();
        self.set_control(control);
        let tx = self.worker.sender();
        let n = self.bufs.len();
        for b in 0..n {
            send(&tx, (b, n), &mut self.bufs[b], &mut self.hooks[b])?;
        }
        let (busy, bytes) = self.collect(n)?;
        self.reduced = true;
        self.record(busy, t0.elapsed(), bytes);
        Ok(())
    }

    fn check(&self) -> Result<()> {
        if self.broken {
            return Err(Error::Model(
                "the gradient buckets are incomplete after a failed backward pass".into(),
            ));
        }
        Ok(())
    }

    fn set_control(&mut self, control: Control) {
        let value = control.value(self.world);
        let last = self.bufs.last_mut().expect("a plan has the control bucket");
        *last.last_mut().expect("the control element") = value;
    }

    /// Receives `n` buckets (and their hooks) back into their places; the time the thread
    /// spent on them and the bytes their hooks sent.
    fn collect(&mut self, n: usize) -> Result<(Duration, u64)> {
        let (mut busy, mut bytes) = (Duration::ZERO, 0);
        let mut first_error = None;
        for _ in 0..n {
            let done = self.worker.next_done()?;
            busy += done.busy;
            self.bufs[done.bucket] = done.buf;
            self.hooks[done.bucket] = Some(done.hook);
            match done.result {
                Ok(sent) => bytes += sent,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => {
                self.broken = true;
                Err(e)
            }
            None => Ok((busy, bytes)),
        }
    }

    fn record(&mut self, busy: Duration, exposed: Duration, bytes_sent: u64) {
        self.last = CommFigures {
            busy,
            exposed,
            bytes_sent,
            buckets: self.bufs.len(),
        };
    }

    /// Whether the buckets hold the averaged gradients of this step.
    pub fn reduced(&self) -> bool {
        self.reduced
    }

    /// The averaged gradient of parameter `p` (after the reduction).
    pub fn grad(&self, p: usize) -> &[f32] {
        let (b, off) = self.plan.place[p];
        &self.bufs[b][off..off + self.sizes[p]]
    }

    /// Every averaged gradient, bucket by bucket, the control element left out.
    pub fn grads_mut(&mut self) -> impl Iterator<Item = &mut [f32]> {
        let last = self.bufs.len() - 1;
        self.bufs.iter_mut().enumerate().map(move |(b, buf)| {
            let n = buf.len() - usize::from(b == last);
            &mut buf[..n]
        })
    }

    /// What the replicas agreed on in the averaged control element.
    pub fn control(&self) -> Control {
        Control::read(*self.bufs.last().and_then(|b| b.last()).unwrap_or(&0.0))
    }

    /// Ends the step: the next micro-batch starts the buckets afresh (laid out by backward's
    /// order once the first step has learned it).
    pub fn end_step(&mut self) {
        if let Some(plan) = self.next_plan.take() {
            self.bufs = plan.lens.iter().map(|&n| vec![0.0; n]).collect();
            self.hooks = make_hooks(&plan, &self.shapes, &self.make, true);
            self.plan = plan;
            self.learned = true;
        }
        self.micro_batches = 0;
        self.reduced = false;
    }

    /// Rank 0's order of the parameters as backward finalized them (`seen`), for every rank.
    fn learn_order(&mut self, seen: &[usize]) -> Result<()> {
        let bytes: Vec<u8> = seen
            .iter()
            .flat_map(|&p| (p as u32).to_le_bytes())
            .collect();
        let all = with_comm(&self.comm, |c| c.all_gather_bytes(&bytes))?;
        let rank0: Vec<usize> = all[0]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
            .collect();
        let order = complete_order(&rank0, self.sizes.len());
        self.next_plan = Some(BucketPlan::new(
            &order,
            &self.sizes,
            self.cap_bytes,
            FIRST_BUCKET_BYTES.min(self.cap_bytes),
        ));
        Ok(())
    }
}

/// Adds (or copies, without `add`) `g · scale` into `dst`, as the step without hooks does.
fn add_scaled(g: &Tensor, scale: f32, dst: &mut [f32], add: bool) -> Result<()> {
    if scale == 1.0 {
        return read_tensor(g, dst, add);
    }
    read_tensor(&(g * scale as f64)?, dst, add)
}

/// The hook of each bucket of `plan` (`learned`: laid out by backward's order).
fn make_hooks(
    plan: &BucketPlan,
    shapes: &[Vec<usize>],
    make: &CommHooks,
    learned: bool,
) -> Vec<Option<Box<dyn CommHook>>> {
    let count = plan.buckets.len();
    plan.buckets
        .iter()
        .zip(&plan.lens)
        .enumerate()
        .map(|(index, (params, &len))| {
            let tensors = params
                .iter()
                .map(|&p| BucketTensor {
                    param: p,
                    offset: plan.place[p].1,
                    shape: shapes[p].clone(),
                })
                .collect();
            Some(make.make(&BucketLayout {
                index,
                count,
                len,
                tensors,
                learned,
            }))
        })
        .collect()
}

/// Queues bucket `b` of `n` (`(b, n)`) on the communication thread, with its hook.
fn send(
    tx: &Sender<Job>,
    (bucket, of): (usize, usize),
    buf: &mut Vec<f32>,
    hook: &mut Option<Box<dyn CommHook>>,
) -> Result<()> {
    let gone = || Error::Model("the communication thread ended (it panicked; see above)".into());
    let hook = hook.take().ok_or_else(gone)?;
    tx.send(Job::Bucket {
        bucket,
        of,
        buf: std::mem::take(buf),
        hook,
    })
    .map_err(|_| gone())
}

/// Ends `session` where there is one ([`Session::finish`]) and says how long that took (the
/// wait for the buckets after backward); `None` without a session: the gradients are still to
/// be accumulated.
pub fn finish(
    session: Option<Session<'_>>,
    net: &Network,
    grads: &[GradStore],
    control: impl Into<Control>,
) -> Result<Option<Duration>> {
    let Some(s) = session else {
        return Ok(None);
    };
    let t = Instant::now();
    s.finish(net, grads, control.into())?;
    Ok(Some(t.elapsed()))
}

/// Backward of one part of a batch, with its gradients going to `session` where there is one.
#[derive(Clone, Copy)]
pub struct Hook<'s, 'a> {
    pub session: Option<&'s Session<'a>>,
    /// This part, of `parts`.
    pub part: usize,
    pub parts: usize,
    /// What the loss is multiplied by before backward: fp16's loss scale
    /// ([`crate::scaler`]), 1 otherwise.
    pub loss_scale: f32,
}

impl Hook<'_, '_> {
    /// `loss.backward()` (of the loss times [`Hook::loss_scale`]), each parameter's gradient
    /// handed to the session once final.
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore> {
        let scaled;
        let loss = if self.loss_scale == 1.0 {
            loss
        } else {
            scaled = (loss * self.loss_scale as f64)?;
            &scaled
        };
        let Some(session) = self.session else {
            return Ok(loss.backward()?);
        };
        let mut ready = |var: &Tensor, grad: &Tensor| {
            session
                .ready(self.part, self.parts, var, grad)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))
        };
        Ok(loss.backward_with_hook(&mut ready)?)
    }
}

/// The last micro-batch's backward pass, its gradients going into the buckets as they become
/// final. Shared by the threads of a batch trained in parts.
pub struct Session<'a> {
    state: Mutex<State<'a>>,
    finished: bool,
}

struct State<'a> {
    ov: &'a mut Overlap,
    first: bool,
    scale: f32,
    /// Per parameter, each part's final gradient until every part's is there.
    stash: Vec<Vec<Option<Tensor>>>,
    done: Vec<bool>,
    /// Per bucket, its parameters not final yet.
    left: Vec<usize>,
    /// The next bucket to send.
    next: usize,
    in_flight: usize,
    /// The parameters in the order they became final.
    seen: Vec<usize>,
}

impl<'a> Session<'a> {
    fn lock(&self) -> MutexGuard<'_, State<'a>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Backward's hook: `grad` of `var` is final in part `part` of `parts`. Other tensors than
    /// the model's parameters are ignored.
    pub fn ready(&self, part: usize, parts: usize, var: &Tensor, grad: &Tensor) -> Result<()> {
        let mut s = self.lock();
        let Some(&p) = s.ov.ids.get(&var.id()) else {
            return Ok(());
        };
        if s.done[p] {
            return Ok(());
        }
        let stash = &mut s.stash[p];
        stash.resize(parts.max(stash.len()), None);
        stash[part] = Some(grad.clone());
        if stash.iter().any(Option::is_none) {
            return Ok(());
        }
        let parts: Vec<Tensor> = std::mem::take(stash).into_iter().flatten().collect();
        s.finalize(p, parts.iter())?;
        s.send_ready(false)
    }

    /// After backward: completes the gradients the hook did not see (from `grads`, one store
    /// per part, in part order), sends the rest of the buckets with the control element
    /// `control`, and waits for every bucket's average.
    pub fn finish(
        mut self,
        net: &Network,
        grads: &[GradStore],
        control: impl Into<Control>,
    ) -> Result<()> {
        self.lock().finish(net, grads, control.into())?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        s.ov.route.close();
        if !self.finished {
            s.ov.broken = true;
        }
    }
}

impl State<'_> {
    fn finish(&mut self, net: &Network, grads: &[GradStore], control: Control) -> Result<()> {
        for (p, (_, var)) in net.params.iter().enumerate() {
            if self.done[p] {
                continue;
            }
            let parts: Vec<&Tensor> = grads
                .iter()
                .filter_map(|g| g.get(var.as_tensor()))
                .collect();
            self.stash[p].clear();
            self.finalize(p, parts.into_iter())?;
        }
        if !self.ov.learned {
            let seen = std::mem::take(&mut self.seen);
            self.ov.learn_order(&seen)?;
        }
        self.ov.set_control(control);
        let t0 = Instant::now();
        self.send_ready(true)?;
        let (busy, bytes) = self.ov.collect(self.in_flight)?;
        self.ov.reduced = true;
        self.ov.micro_batches += 1;
        self.ov.route.close();
        self.ov.record(busy, t0.elapsed(), bytes);
        Ok(())
    }

    /// Adds parameter `p`'s final gradients (one per part, in part order) into its bucket.
    fn finalize<'t>(&mut self, p: usize, parts: impl Iterator<Item = &'t Tensor>) -> Result<()> {
        let mut any = false;
        for (i, g) in parts.enumerate() {
            let add = !self.first || i > 0;
            add_scaled(g, self.scale, self.ov.slot(p), add)?;
            any = true;
        }
        if !any && self.first {
            self.ov.slot(p).fill(0.0);
        }
        self.done[p] = true;
        self.seen.push(p);
        let (b, _) = self.ov.plan.place[p];
        self.left[b] -= 1;
        Ok(())
    }

    /// Sends the buckets that are complete, in order; the last (with the control element) only
    /// when `all`.
    fn send_ready(&mut self, all: bool) -> Result<()> {
        let n = self.left.len();
        if !self.ov.learned && !all {
            return Ok(());
        }
        while self.next < n && self.left[self.next] == 0 && (all || self.next + 1 < n) {
            let tx = self.ov.worker.sender();
            let b = self.next;
            send(&tx, (b, n), &mut self.ov.bufs[b], &mut self.ov.hooks[b])?;
            self.next += 1;
            self.in_flight += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
