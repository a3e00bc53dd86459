//! An elastic run's group re-formed under way (`ddp.elastic`): after a collective lost a peer,
//! at a step boundary the replicas agreed on (a replica waits to join, one was asked to leave),
//! and for a joining replica, its way in. The replica that completed the most steps gives the
//! others its weights, optimizer state and position; the rest of the epoch's samples, the
//! schedule and the reporting are set up for the new world.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Resync, Share};
use crate::data::DistributedSampler;
use crate::dist::capability;
use crate::report::Window;
use crate::schedule::Schedule;
use crate::step::Control;
use crate::step::comm::with_comm;
use crate::step::ddp::local::LocalState;
use crate::train::replica::{Replica, Task};
use crate::train::{STOP_REQUESTED, Training, host_step};
use crate::{Error, Result, fsutil};

/// Set by the binary's SIGUSR1 handler: this replica leaves its elastic group at the next step
/// boundary (`ddp scale` down), and exits with [`crate::error::EXIT_LEFT`].
pub static LEAVE_REQUESTED: AtomicBool = AtomicBool::new(false);

/// How often rank 0 looks at the store for a replica waiting to join, at most.
const LOOK_EVERY: Duration = Duration::from_millis(200);

impl Training {
    /// This replica's requests for the step under way: a stop; in an elastic run, a regroup
    /// when it was asked to leave or (rank 0) a replica waits to join.
    pub(in crate::train) fn requests(&mut self) -> Result<Control> {
        let stop = STOP_REQUESTED.load(Ordering::Relaxed);
        if self.elastic.min.is_none() {
            return Ok(Control::from(stop));
        }
        let leaving = LEAVE_REQUESTED.load(Ordering::Relaxed);
        let mut joiner = false;
        if self.r.rank == 0 && !leaving && self.elastic.looked.elapsed() >= LOOK_EVERY {
            self.elastic.looked = Instant::now();
            joiner = with_comm(&self.r.comm, |c| capability::joiner_waiting(c))?;
        }
        Ok(Control {
            stop,
            regroup: leaving || joiner,
        })
    }

    /// Whether an elastic run goes on after `e`: a collective that lost or waited in vain for
    /// a peer.
    pub(in crate::train) fn recoverable(&self, e: &Error) -> bool {
        self.elastic.min.is_some() && matches!(e, Error::Collective { .. })
    }

    /// Re-forms the group: after `lost` (a collective that lost a peer), at an agreed step
    /// boundary (`None`), or to take this joining replica in. A replica asked to leave leaves
    /// here instead ([`Error::Left`]). Fewer replicas than `ddp.elastic.min_replicas` end the
    /// run with [`Error::Elastic`].
    pub(in crate::train) fn regroup(&mut self, lost: Option<Error>) -> Result<()> {
        if lost.is_none() && !self.elastic.joining && LEAVE_REQUESTED.load(Ordering::Relaxed) {
            return Err(Error::Left(format!(
                "replica {} left the elastic group on request after step {}",
                self.r.id, self.progress.global_step
            )));
        }
        let min = self.elastic.min.unwrap_or(1);
        let world_before = self.r.world;
        let timeout = Duration::from_secs(self.r.spec.ddp.timeout_s);
        // Members still computing their step notice within about a step; a silent one is left
        // out after three steps' time (at least 1.5 s, at most ddp.timeout_s). A joiner decides
        // nothing: the members' asks do.
        let settle = if self.elastic.joining {
            timeout
        } else {
            (self.elastic.last_step * 3).clamp(Duration::from_millis(1500).min(timeout), timeout)
        };
        match &lost {
            Some(e) => eprintln!(
                "replica {}: {e}; re-forming the group (ddp.elastic)",
                self.r.id
            ),
            None if self.elastic.joining => {
                println!("replica {}: joining the elastic group under way", self.r.id)
            }
            None => {}
        }
        let step = self.progress.global_step;
        let d = with_comm(&self.r.comm, |c| {
            capability::membership(c)?.reform(step, settle)
        })?;
        let world = d.generation.members.len();
        if world < min {
            return Err(Error::Elastic(super::below_minimum(
                &d,
                d.world_before(),
                min,
            )));
        }
        let rank = d
            .generation
            .rank_of(self.r.id as u32)
            .ok_or_else(|| Error::Elastic(format!("replica {} is not a member", self.r.id)))?;
        let (_, src) = d.most_advanced();
        let train = self.r.spec.train.clone();
        let per_step = train.batch_size * train.grad_accum;
        // A language model's windows are a function of the step and the global window index:
        // it has no position in an epoch to carry.
        let len = match &self.r.task {
            Task::Samples { splits, .. } => splits.train.len(),
            Task::Tokens(_) => 0,
        };
        let mine = Resync {
            epoch: self.progress.epoch,
            global_step: self.progress.global_step,
            in_epoch: self.progress.in_epoch,
            pos: self
                .elastic
                .share
                .reached(self.progress.in_epoch, per_step, world_before, len),
            opt_steps: self.r.opt.steps,
            epoch_end_due: self.progress.epoch_end_due,
            epochs: self.limits.epochs,
            log_every: self.reporting.log_every,
            scaler: self.r.opt.scaler,
        };
        // Local steps: each member keeps its own weights and inner optimizer state.
        let kept = self
            .r
            .ddp
            .kept_local()
            .map(|mine| (mine, self.r.opt.slots.clone()));
        self.r.rank = rank;
        self.r.world = world;
        self.work.rank = rank;
        // A new step for the new world (its buckets learn backward's order again), every
        // member starting from the most advanced one's weights and buffers.
        self.r.ddp = host_step::ddp_step(
            &self.r.spec,
            &self.r.net,
            &self.r.comm,
            self.r.route.clone(),
            self.r.host_step,
            rank,
            world,
            src,
        )?;
        let all = with_comm(&self.r.comm, |c| {
            c.all_gather_bytes(mine.encode().as_bytes())
        })?;
        let at = Resync::parse(&String::from_utf8_lossy(&all[src]))
            .ok_or_else(|| Error::Elastic(format!("rank {src}'s position is malformed")))?;
        // The step under way when a peer was lost is either lost for all (its samples are
        // trained again) or was applied by the most advanced replicas: then it was trained on
        // this replica's batch too, which its window holds; where that step ended the epoch,
        // the batch is recorded in it.
        let lost_step = lost.is_some() && at.global_step == self.progress.global_step;
        let applied = lost.is_some() && at.global_step == self.progress.global_step + 1;
        let ended = applied
            && at.epoch > self.progress.epoch
            && matches!(self.r.task, Task::Samples { .. });
        let (epoch_before, in_epoch_before) = (self.progress.epoch, self.progress.in_epoch);
        let lr_before = self
            .r
            .schedule
            .lr(self.progress.epoch, self.progress.global_step);
        if lost_step {
            self.reporting.window = Window::resume(self.elastic.settled);
        }
        let Replica { comm, opt, .. } = &mut self.r;
        with_comm(comm, |c| {
            for slot in opt.slots.iter_mut() {
                c.broadcast(slot, src)?;
            }
            Ok(())
        })?;
        opt.steps = at.opt_steps;
        opt.scaler = at.scaler;
        let dropped = match kept {
            Some((mine, own_slots)) => Some(self.regroup_local(mine, own_slots, src)?),
            None => None,
        };
        self.progress.epoch = at.epoch;
        self.progress.global_step = at.global_step;
        self.progress.in_epoch = at.in_epoch;
        self.progress.resume_in_epoch = at.in_epoch;
        self.progress.epoch_end_due = at.epoch_end_due;
        self.limits.epochs = at.epochs;
        self.reporting.log_every = at.log_every;
        if ended {
            self.record_window(epoch_before + 1, in_epoch_before + 1, lr_before)?;
        }
        self.elastic.share = Share {
            step: at.in_epoch,
            pos: at.pos,
        };
        match &mut self.r.task {
            Task::Samples { sampler: s, .. } => {
                let sampler = DistributedSampler::new(len, world, rank, true, train.seed, false)?;
                let whole = Share::default();
                let full =
                    whole.epoch_steps(sampler.num_samples(), train.batch_size, train.grad_accum);
                let sampler = sampler.from_position(at.pos);
                self.r.steps_per_epoch = self.elastic.share.epoch_steps(
                    sampler.num_samples(),
                    train.batch_size,
                    train.grad_accum,
                );
                self.r.schedule = Schedule::new(&self.r.spec, world, full);
                *s = sampler;
            }
            Task::Tokens(tokens) => {
                tokens.regroup(&self.r.spec, world, rank);
                self.r.schedule = Schedule::new(&self.r.spec, world, self.r.steps_per_epoch);
            }
        }
        self.reporting
            .report
            .regroup(&self.r.out, world, self.r.steps_per_epoch, rank == 0)?;
        let lost_s = self.elastic.last_step_end.elapsed().as_secs_f64();
        if rank == 0 {
            let before = d.world_before();
            println!("{}", super::change_line(&d, before, lost_s));
            if let Some(t) = with_comm(&self.r.comm, |c| Ok(c.transport_line()))? {
                println!("all-reduce through {t}");
            }
            if let (Some(n), false) = (dropped, d.left.is_empty()) {
                println!(
                    "local steps: the {n} steps since the last sync of the replicas who left are \
                     dropped; the others keep theirs"
                );
            }
            let line = super::event_line(
                crate::metrics::unix_time(),
                &d,
                before,
                lost_s,
                dropped.filter(|_| !d.left.is_empty()),
            );
            fsutil::append_line(&self.r.out.join("events.jsonl"), &line)?;
        }
        self.elastic.joining = false;
        self.elastic.regroup_due = false;
        self.elastic.last_step_end = Instant::now();
        Ok(())
    }

    /// The re-formed group's local steps: the global weights, the outer momentum and the step
    /// count from the most advanced member `src` (the same on every member that was there at the
    /// last sync); each member goes on from its own weights, inner optimizer state (`own_slots`)
    /// and error feedback, a joiner from the global weights and `src`'s optimizer state. A sync
    /// in flight is dropped. Returns the local steps since the last sync (what left with a lost
    /// replica).
    fn regroup_local(
        &mut self,
        mine: LocalState,
        own_slots: Vec<Vec<f32>>,
        src: usize,
    ) -> Result<u64> {
        let Replica {
            comm,
            ddp,
            net,
            opt,
            ..
        } = &mut self.r;
        let LocalState {
            done,
            local,
            mut global,
            mut momentum,
            residual,
            last_sync,
            ..
        } = mine;
        let counts = format!("{done}:{last_sync}");
        let all = with_comm(comm, |c| {
            c.broadcast(&mut global, src)?;
            c.broadcast(&mut momentum, src)?;
            c.all_gather_bytes(counts.as_bytes())
        })?;
        let theirs = String::from_utf8_lossy(&all[src]).into_owned();
        let (done, last_sync) = theirs
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
            .ok_or_else(|| {
                Error::Elastic(format!(
                    "rank {src}'s local steps are malformed: {theirs:?}"
                ))
            })?;
        let joining = self.elastic.joining;
        if !joining {
            opt.slots = own_slots;
        }
        let state = LocalState {
            done,
            local: if joining { global.clone() } else { local },
            global,
            momentum,
            residual: if joining {
                vec![0.0; residual.len()]
            } else {
                residual
            },
            landing: None,
            last_sync,
        };
        ddp.import_local(net, state)?;
        Ok(done.saturating_sub(last_sync))
    }
}
