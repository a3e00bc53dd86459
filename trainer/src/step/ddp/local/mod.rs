//! Local steps with a sync every `ddp.sync.every` steps (`[ddp.sync]`): each replica runs the
//! whole optimizer on its own gradients (the inner steps), and at a sync the replicas average how
//! far each went from the last synced (global) weights, a pseudo-gradient `global - local`, and
//! step the global weights with it by an outer SGD with Nesterov momentum (DiLoCo; model
//! averaging is the outer step with learning rate 1 and no momentum, so it lands on the average of
//! the replicas' weights). The replicas then go on from the new global weights (mixed with their
//! own, `ddp.sync.mixing`). Streaming DiLoCo syncs one fragment of the model at a time, its values
//! sent slice by slice by a thread while the next `ddp.sync.delay` steps compute. [`plan`] says
//! which step does what; `exchange` encodes and averages a slice.
//!
//! Between syncs a step sends one float, the control element (a stop, summed), together with the
//! replicas' drift at a sync: every replica stops at the same step. What is identical on every
//! rank (the global weights, the outer momentum, a sync in flight's average) is so bit for bit:
//! every rank computes it from the same averaged bits.
//!
//! Layout: this file, [`Local`] (the buffers, the step, a checkpoint's state); `plan`, the
//! schedule and the fragments; `exchange`, the encodings and the average.

mod exchange;
pub(crate) mod plan;

use std::collections::VecDeque;
use std::ops::Range;
use std::thread::JoinHandle;
use std::time::Instant;

use super::sharded::Sharded;
use super::{Slot, Stepped, prepare, whole_norm};
use crate::dist::ReduceOp;
use crate::metrics::SyncFigures;
use crate::optim::{self, Optimizer};
use crate::spec::LocalSync;
use crate::step::comm::{SharedCollective, with_comm};
use crate::step::{Control, StepCost};
use crate::{Error, Result};
use exchange::Payload;
use plan::Plan;

/// What a checkpoint keeps of a replica's local steps: its own weights, and (the same on every
/// rank) the global weights, the outer momentum and a sync in flight's average.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalState {
    pub done: u64,
    pub local: Vec<f32>,
    pub global: Vec<f32>,
    pub momentum: Vec<f32>,
    pub residual: Vec<f32>,
    /// A sync in flight: its fragment, the step it lands at, and its average.
    pub landing: Option<(usize, u64, Vec<f32>)>,
    pub last_sync: u64,
}

/// A slice's average and the bytes this rank sent for it.
type Averaged = (Vec<f32>, u64);

/// A fragment's sync under way.
struct Flight {
    fragment: usize,
    lands: u64,
    /// Slices still to send, in order.
    pending: VecDeque<Payload>,
    /// The averages of the slices sent so far, in order.
    averaged: Vec<f32>,
}

/// The local steps' buffers: the flat parameters and gradients (`buffers`), the global weights,
/// the outer momentum, what the encoding lost (error feedback), a sync in flight.
pub(crate) struct Local {
    pub(super) buffers: Sharded,
    sync: LocalSync,
    plan: Plan,
    fragments: Vec<Range<usize>>,
    /// Steps taken.
    done: u64,
    global: Vec<f32>,
    momentum: Vec<f32>,
    residual: Vec<f32>,
    flight: Option<Flight>,
    sending: Option<JoinHandle<Result<Averaged>>>,
    figures: SyncFigures,
    comm: SharedCollective,
    rank: usize,
    world: usize,
}

impl Local {
    /// Local steps over `buffers` (whose parameters are every rank's same start), cut into the
    /// sync's fragments at the parameters `slots`.
    pub(super) fn new(
        buffers: Sharded,
        slots: &[Slot],
        sync: LocalSync,
        comm: SharedCollective,
    ) -> Result<Local> {
        let n = buffers.params.len() - 1;
        let (rank, world) = with_comm(&comm, |c| Ok((c.rank(), c.world_size())))?;
        let ranges: Vec<Range<usize>> = slots.iter().map(|s| s.range.clone()).collect();
        let fragments = plan::fragments(&ranges, sync.fragments).ok_or_else(|| {
            Error::Model(format!(
                "ddp.sync.fragments = {} but the model has {} parameters: a fragment is one or \
                 more whole parameters",
                sync.fragments,
                ranges.len(),
            ))
        })?;
        Ok(Local {
            global: buffers.params[..n].to_vec(),
            momentum: if sync.outer_momentum > 0.0 {
                vec![0.0; n]
            } else {
                Vec::new()
            },
            residual: if sync.error_feedback {
                vec![0.0; n]
            } else {
                Vec::new()
            },
            plan: Plan {
                every: sync.every,
                warmup: sync.warmup_steps,
                fragments: sync.fragments,
                delay: sync.delay,
            },
            buffers,
            sync,
            fragments,
            done: 0,
            flight: None,
            sending: None,
            figures: SyncFigures {
                method: sync.method.name().into(),
                every: sync.every,
                encoding: sync.encoding.name().into(),
                ..SyncFigures::default()
            },
            comm,
            rank,
            world,
        })
    }

    pub(crate) fn figures(&self) -> &SyncFigures {
        &self.figures
    }

    /// The last synced weights (the model evaluations and the saved files use).
    pub(crate) fn global(&self) -> &[f32] {
        &self.global
    }

    /// The start of a step: the slice of a sync in flight that travels during it goes to the
    /// sending thread.
    pub(super) fn begin_step(&mut self) -> Result<()> {
        let at = self.plan.at(self.done + 1);
        if at.sends.is_none() || self.sending.is_some() {
            return Ok(());
        }
        let Some(payload) = self.flight.as_mut().and_then(|f| f.pending.pop_front()) else {
            // A checkpoint sent it already.
            return Ok(());
        };
        let comm = self.comm.clone();
        let handle = std::thread::Builder::new()
            .name("ddp-sync".into())
            .spawn(move || with_comm(&comm, |c| exchange::exchange(c, payload)))
            .map_err(|e| Error::Model(format!("cannot start the sync's sending thread: {e}")))?;
        self.sending = Some(handle);
        Ok(())
    }

    /// The step after the micro-batches: the optimizer on this replica's own gradients (or, in
    /// the warm-up, on the gradients averaged), then what the plan says this step does besides:
    /// a slice received, a sync landing, a sync beginning; `control` agreed on in the same
    /// message as the drifts.
    pub(super) fn step(
        &mut self,
        opt: &mut Optimizer,
        lr: f64,
        control: Control,
    ) -> Result<Stepped> {
        let t = self.done + 1;
        let at = self.plan.at(t);
        // The sending thread may hold the collective until its slice is through: the
        // optimizer step goes on meanwhile.
        let (w, rank) = (self.world, self.rank);
        let n = self.buffers.params.len() - 1;
        let mut bytes = 0u64;
        let (agreed, norm, optimizer);
        if at.synchronous {
            let grads = &mut self.buffers.grads;
            grads[n] = control.value(w);
            with_comm(&self.comm, |c| c.all_reduce(grads, ReduceOp::Avg))?;
            bytes += exchange::ring_bytes((n + 1) * 4, w);
            let clock = Instant::now();
            norm = self.optimizer_step(opt, lr)?;
            self.global.copy_from_slice(&self.buffers.params[..n]);
            optimizer = clock.elapsed();
            agreed = Control::read(self.buffers.grads[n]);
        } else {
            let clock = Instant::now();
            // The inner step clips to this replica's own norm, as each replica alone would.
            norm = self.optimizer_step(opt, lr)?;
            let mut spent = clock.elapsed();
            if let Some(h) = self.sending.take() {
                let (avg, sent) = h
                    .join()
                    .map_err(|_| Error::Model("the sync's sending thread panicked".into()))??;
                bytes += sent;
                if let Some(f) = &mut self.flight {
                    f.averaged.extend_from_slice(&avg);
                }
            }
            let clock = Instant::now();
            if let Some(p) = at.lands.filter(|_| self.plan.delay > 0) {
                bytes += self.land(p, t)?;
            }
            let mut drift = None;
            if let Some(p) = at.begins {
                drift = Some(self.begin(p, t));
                if self.plan.delay == 0 {
                    bytes += self.land(p, t)?;
                }
            }
            spent += clock.elapsed();
            // The control element, and each replica's drift where a sync began.
            let mut message = vec![control.value(w)];
            if let Some(d) = drift {
                message.resize(1 + w, 0.0);
                message[1 + rank] = d as f32;
            }
            with_comm(&self.comm, |c| c.all_reduce(&mut message, ReduceOp::Sum))?;
            bytes += exchange::ring_bytes(message.len() * 4, w);
            if drift.is_some() {
                self.figures.drift = message[1..].iter().map(|d| (*d as f64).sqrt()).collect();
            }
            optimizer = spent;
            agreed = Control::read(message[0]);
        }
        self.buffers.end_step();
        self.done = t;
        let cost = StepCost {
            optimizer,
            comm_busy: None,
            bytes_sent: Some(bytes),
        };
        Ok((agreed, cost, norm))
    }

    /// The optimizer on the gradients in the buffer (unscaled and clipped with the norm of them
    /// all, which this rank holds); their norm before clipping, where it clips.
    fn optimizer_step(&mut self, opt: &mut Optimizer, lr: f64) -> Result<Option<f64>> {
        let n = self.buffers.params.len() - 1;
        let grads = &mut self.buffers.grads;
        let prepared = prepare(opt, |f| f(&mut grads[..n]), whole_norm)?;
        if prepared.step {
            opt.step(&mut self.buffers.params[..n], &grads[..n], lr);
        }
        Ok(prepared.norm)
    }

    /// Fragment `p`'s sync begins after step `t`: this replica's pseudo-gradient (plus what the
    /// encoding lost last time) encoded slice by slice. Returns the squared drift.
    fn begin(&mut self, p: usize, t: u64) -> f64 {
        let r = self.fragments[p].clone();
        let mut delta: Vec<f32> = self.global[r.clone()]
            .iter()
            .zip(&self.buffers.params[r.clone()])
            .map(|(g, l)| g - l)
            .collect();
        let drift = optim::sum_of_squares(&delta);
        if !self.residual.is_empty() {
            delta
                .iter_mut()
                .zip(&self.residual[r.clone()])
                .for_each(|(d, e)| *d += e);
        }
        let slices = self.plan.delay.max(1) as usize;
        let mut pending = VecDeque::with_capacity(slices);
        for k in 0..slices {
            let part = crate::dist::segment::segment(delta.len(), slices, k);
            let lost = (!self.residual.is_empty())
                .then(|| &mut self.residual[r.start + part.start..r.start + part.end]);
            pending.push_back(exchange::payload(&delta[part], self.sync.encoding, lost));
        }
        self.flight = Some(Flight {
            fragment: p,
            lands: t + self.plan.delay,
            pending,
            averaged: Vec::with_capacity(delta.len()),
        });
        drift
    }

    /// Fragment `p`'s sync lands after step `t`: the slices not sent yet go now, the outer step
    /// moves the fragment's global weights, and this replica goes on from them (mixed with its
    /// own). Returns the bytes sent here.
    fn land(&mut self, p: usize, t: u64) -> Result<u64> {
        let bytes = self.send_pending()?;
        let flight = self.flight.take().ok_or_else(|| {
            Error::Model(format!(
                "step {t}: fragment {p}'s sync lands but none is in flight"
            ))
        })?;
        debug_assert_eq!((flight.fragment, flight.lands), (p, t));
        let r = self.fragments[p].clone();
        let momentum = if self.momentum.is_empty() {
            None
        } else {
            Some(&mut self.momentum[r.clone()])
        };
        outer_step(
            &mut self.global[r.clone()],
            momentum,
            &flight.averaged,
            self.sync.outer_lr as f32,
            self.sync.outer_momentum as f32,
        );
        let keep = self.sync.mixing as f32;
        let local = &mut self.buffers.params[r.clone()];
        if keep == 0.0 {
            local.copy_from_slice(&self.global[r]);
        } else {
            local
                .iter_mut()
                .zip(&self.global[r])
                .for_each(|(l, g)| *l = keep * *l + (1.0 - keep) * g);
        }
        self.figures.last_sync = t;
        Ok(bytes)
    }

    /// Sends the slices of the sync in flight that have not gone yet, here and now.
    fn send_pending(&mut self) -> Result<u64> {
        let Some(f) = &mut self.flight else {
            return Ok(0);
        };
        let mut bytes = 0;
        while let Some(payload) = f.pending.pop_front() {
            let (avg, sent) = with_comm(&self.comm, |c| exchange::exchange(c, payload))?;
            f.averaged.extend_from_slice(&avg);
            bytes += sent;
        }
        Ok(bytes)
    }

    /// What a checkpoint keeps (every rank calls it at the same step: a sync in flight is sent
    /// to the end first, which changes no value, only when its bytes travel).
    pub(super) fn export(&mut self) -> Result<LocalState> {
        self.send_pending()?;
        let n = self.buffers.params.len() - 1;
        Ok(LocalState {
            done: self.done,
            local: self.buffers.params[..n].to_vec(),
            global: self.global.clone(),
            momentum: self.momentum.clone(),
            residual: self.residual.clone(),
            landing: self
                .flight
                .as_ref()
                .map(|f| (f.fragment, f.lands, f.averaged.clone())),
            last_sync: self.figures.last_sync,
        })
    }

    /// What this replica holds of the local steps, without a word to the others (an elastic
    /// group re-forming: the old group may be gone); a sync in flight is dropped with it.
    pub(super) fn kept(&self) -> LocalState {
        let n = self.buffers.params.len() - 1;
        LocalState {
            done: self.done,
            local: self.buffers.params[..n].to_vec(),
            global: self.global.clone(),
            momentum: self.momentum.clone(),
            residual: self.residual.clone(),
            landing: None,
            last_sync: self.figures.last_sync,
        }
    }

    /// Goes on from a checkpoint's state (of this rank, written by [`Local::export`]).
    pub(super) fn import(&mut self, s: LocalState) -> Result<()> {
        let n = self.buffers.params.len() - 1;
        let bad = |what: &str, len: usize, want: usize| {
            Err(Error::Model(format!(
                "the local steps' {what} has {len} values where this model has {want}"
            )))
        };
        for (what, len, want) in [
            ("weights", s.local.len(), n),
            ("global weights", s.global.len(), n),
            ("outer momentum", s.momentum.len(), self.momentum.len()),
            ("error feedback", s.residual.len(), self.residual.len()),
        ] {
            if len != want {
                return bad(what, len, want);
            }
        }
        self.buffers.params[..n].copy_from_slice(&s.local);
        self.global = s.global;
        self.momentum = s.momentum;
        self.residual = s.residual;
        self.done = s.done;
        self.figures.last_sync = s.last_sync;
        self.flight = match s.landing {
            None => None,
            Some((fragment, lands, averaged)) => {
                let want = self.fragments.get(fragment).map_or(0, |r| r.len());
                if averaged.len() != want || lands <= s.done {
                    return bad("sync in flight", averaged.len(), want);
                }
                Some(Flight {
                    fragment,
                    lands,
                    pending: VecDeque::new(),
                    averaged,
                })
            }
        };
        Ok(())
    }
}

/// The outer optimizer: SGD on `global` with the averaged pseudo-gradient `grad`, learning rate
/// `lr` and Nesterov momentum `mu` (PyTorch's `SGD(nesterov=True)`, dampening 0: the buffer
/// starts as the first gradient), the buffer in `momentum` (`None`: no momentum).
fn outer_step(global: &mut [f32], momentum: Option<&mut [f32]>, grad: &[f32], lr: f32, mu: f32) {
    match momentum {
        None => global.iter_mut().zip(grad).for_each(|(w, g)| *w -= lr * g),
        Some(m) => {
            for ((w, g), b) in global.iter_mut().zip(grad).zip(m.iter_mut()) {
                *b = mu * *b + g;
                *w -= lr * (g + mu * *b);
            }
        }
    }
}

#[cfg(test)]
mod tests;
