//! One replica's training run: join the group, load data, build the model, train with DDP,
//! evaluate, checkpoint, and write progress, metrics and TensorBoard events.
//!
//! Layout:
//! - this file: the run, the epoch loop of sample tasks and the step loop of language models,
//!   a stop request, checkpoints (at epochs' ends, every N steps, and where a stop leaves the
//!   run), and the run's end.
//! - `clock`: where a window's steps spent their time (the train records' `breakdown`).
//! - `elastic`: an elastic run's group re-formed under way (a replica lost, joining or
//!   leaving), the requests each step carries (stop, regroup), and what the run carries over
//!   (the share of the epoch, the most advanced replica's position, the membership event).
//! - `host_step`: the host DDP step as the spec sets it up (bucket size, `"auto"` included,
//!   overlap, compression), and what rank 0's log says of it.
//! - `position`: where a run stands when it starts, the resume header carrying it, and where
//!   a run pauses (`PauseAt`).
//! - `replica`: a replica set up from the spec (device, data, group, model, DDP step,
//!   optimizer, schedule) and restored from a checkpoint.
//! - `samples`: sample tasks' data splits, micro-batch forward/backward and evaluation.
//! - `state`: the training state by what it is for: limits, progress, an elastic run's
//!   state, reporting.
//! - `step`: one training step, the same body for both loops: the micro-batches' forward and
//!   backward, the DDP sync and the optimizer step, timed.
//! - `tokens`: a language model's training windows and micro-batches.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::Result;
use crate::checkpoint::{self, TrainState};
use crate::data::Batch;
use crate::dist::ReduceOp;
use crate::env::DistEnv;
use crate::metrics::MetricKind;
use crate::report::{Reporter, Window, WindowState};
use crate::spec::Spec;
use crate::step::batch_parts;
use crate::step::comm::with_comm;
use crate::step::device::{DeviceStep, Reducer};

mod clock;
mod elastic;
mod host_step;
mod position;
mod replica;
mod samples;
mod state;
mod step;
mod tokens;

use crate::step::engine::Engine;
use clock::StepClock;
use elastic::Share;
use position::Position;
pub use position::{PAUSED_FILE, PauseAt, paused_at};
use replica::{Replica, Task};
use samples::Loop;
use state::{ElasticState, Limits, Progress, Reporting};
use step::{MicroBatch, Stepper};

pub use elastic::LEAVE_REQUESTED;
pub use samples::{Splits, load_data};

/// Set by the SIGTERM/SIGINT/SIGUSR2 handler of the binary: finish the current step on every
/// replica, checkpoint it, then stop.
pub static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

pub struct TrainOptions {
    pub spec: Spec,
    pub out: PathBuf,
    pub resume: bool,
    pub env: DistEnv,
    pub token: Option<String>,
    /// Pause there (validated and checkpointed, not tested) instead of training to the end.
    pub pause_at: Option<PauseAt>,
}

/// What a finished run reports (the test figures are global, identical on every rank).
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub epochs: usize,
    pub global_step: u64,
    /// Test (loss, accuracy); None when the run was stopped before the end.
    pub test: Option<(f64, Option<f64>)>,
    /// The last validation (loss, a language model's perplexity); None without one.
    pub val: Option<(f64, Option<f64>)>,
    /// Training throughput of all replicas (a language model's samples are its windows).
    pub train_samples_per_sec: f64,
    /// A language model's training throughput of all replicas, tokens/s.
    pub train_tokens_per_sec: Option<f64>,
    /// True when the run ended early because a stop was requested.
    pub stopped: bool,
    /// True when the run paused at its `pause_at` (checkpointed there, not tested).
    pub paused: bool,
}

/// Keeps freed memory in the process. candle allocates fresh buffers for every op; with glibc's
/// defaults the large ones go back to the kernel when freed (mmap/munmap, heap trimming) and are
/// faulted in again by the next batch (a 2-epoch mnist-cnn run: 196,000 page faults, mostly in
/// evaluation's large batches; 100,000 with this). With a fixed mmap threshold and no trimming,
/// later batches reuse the heap.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// The training loop of one replica: set up, restore (with `--resume`), train epoch by epoch
/// (each evaluated and checkpointed), then test and save the final model.
pub fn run(opts: TrainOptions) -> Result<RunSummary> {
    keep_freed_memory();
    let TrainOptions {
        spec,
        out,
        resume,
        env,
        token,
        pause_at,
    } = opts;
    let (mut replica, reducer) = Replica::set_up(spec, out, &env, token)?;
    if replica.rank == 0 {
        // A pause of an earlier launch is over once the run goes on.
        let _ = std::fs::remove_file(replica.out.join(PAUSED_FILE));
    }
    // A joining replica takes the group's state, not a checkpoint's.
    let start = if resume && !replica.joining {
        replica.restore()?
    } else {
        Position::default()
    };
    let mut training = Training::start(replica, reducer, start)?;
    training.progress.pause = pause_at;
    training.epochs()?;
    training.finish()
}

/// The epoch loop of a set-up replica: its step engine, the per-step working set, and the
/// run's limits, progress, elastic state and reporting.
struct Training {
    r: Replica,
    engine: Engine,
    work: Loop,
    limits: Limits,
    progress: Progress,
    elastic: ElasticState,
    reporting: Reporting,
}

impl Training {
    /// Builds the step engine and the reporter and announces how batches are trained.
    fn start(r: Replica, reducer: Reducer, start: Position) -> Result<Training> {
        let rank = r.rank;
        let engine = if !r.host_step {
            if rank == 0 {
                println!(
                    "device step: gradients reduced and optimizer run on {:?}",
                    r.device
                );
            }
            Engine::Device(DeviceStep::new(&r.net, &r.opt, reducer)?)
        } else {
            Engine::Host
        };
        let spec = &r.spec;
        // A step budget on sample data ends in the epoch it reaches into.
        let (epochs, budget) = match (&r.task, spec.train.steps) {
            (Task::Samples { .. }, None) => (spec.train.epochs, u64::MAX),
            (Task::Samples { .. }, Some(s)) => (s.div_ceil(r.steps_per_epoch.max(1)) as usize, s),
            (Task::Tokens(_), s) => (1, s.unwrap_or(1)),
        };
        let report = Reporter::create(&r.out, rank, r.world, epochs, r.steps_per_epoch)?;
        let report = report.in_precision(spec.train.precision);
        let report = match &r.task {
            Task::Samples { .. } => report,
            Task::Tokens(t) => report.counting_tokens(t.counting()),
        };
        let log_every = if spec.train.log_every > 0 {
            spec.train.log_every as u64
        } else {
            (r.steps_per_epoch / 10).max(1)
        };
        let work = Loop {
            rank,
            batch: Batch::new(),
            raw: Batch::new(),
            indices: Vec::new(),
            augment: match &r.task {
                Task::Samples { splits, .. } => samples::augmenter(spec, splits),
                Task::Tokens(_) => None,
            },
            parts: batch_parts::for_replica(
                rayon::current_num_threads(),
                spec.model.name,
                r.device.is_cpu(),
            ),
        };
        if rank == 0 && work.parts > 1 {
            println!(
                "each batch trained in {} parts side by side, one per thread (DDP_BATCH_PARTS=0 splits every kernel instead)",
                work.parts
            );
        }
        if rank == 0 && !spec.train.precision.is_f32() {
            println!(
                "precision {p}: matrix products and convolutions take {p} inputs and sum in f32; \
                 everything else, the master weights and the files stay f32",
                p = spec.train.precision.name()
            );
        }
        if let (0, Some(s)) = (rank, r.opt.scaler) {
            println!(
                "loss scaled dynamically from {}: x2 after {} finite steps in a row, x0.5 and \
                 the step skipped where a gradient is infinite or NaN on any replica",
                s.scale, s.growth_every
            );
        }
        let max_steps = spec.train.max_steps.unwrap_or(u64::MAX);
        let elastic_min = spec.ddp.elastic.map(|e| e.min_replicas);
        let joining = r.joining;
        let epoch_position = start.epoch_position.filter(|_| start.step_in_epoch > 0);
        let mut training = Training {
            r,
            engine,
            work,
            limits: Limits {
                max_steps,
                epochs,
                budget,
            },
            progress: Progress {
                epoch: start.epoch,
                global_step: start.global_step,
                resume_in_epoch: start.step_in_epoch,
                in_epoch: start.step_in_epoch,
                val_due: start.val_due,
                epoch_end_due: false,
                stopped: false,
                pause: None,
                paused: false,
            },
            elastic: ElasticState {
                min: elastic_min,
                share: Share::default(),
                regroup_due: false,
                joining,
                looked: Instant::now(),
                last_step_end: Instant::now(),
                last_step: Duration::ZERO,
                settled: WindowState::default(),
            },
            reporting: Reporting {
                report,
                window: Window::resume(start.window),
                clock: StepClock::default(),
                log_every,
                train_time: 0.0,
                train_samples: 0,
            },
        };
        if let Some(pos) = epoch_position {
            training.go_on_from(pos);
        }
        Ok(training)
    }

    /// A resumed elastic run's epoch goes on from position `pos` of the epoch's order, its rest
    /// split over this world (the checkpoint's world may have been another).
    fn go_on_from(&mut self, pos: usize) {
        self.take_share(Share {
            step: self.progress.in_epoch,
            pos,
        });
    }

    /// This world's share of the epoch is `share`: the sampler goes on from its position, and
    /// the epoch's steps are counted from it.
    fn take_share(&mut self, share: Share) {
        self.elastic.share = share;
        let train = &self.r.spec.train;
        if let Task::Samples { sampler, .. } = &mut self.r.task {
            *sampler = sampler.clone().from_position(share.pos);
            self.r.steps_per_epoch =
                share.epoch_steps(sampler.num_samples(), train.batch_size, train.grad_accum);
        }
        self.reporting
            .report
            .set_steps_per_epoch(self.r.steps_per_epoch);
    }

    /// Trains epoch after epoch until the last one, `train.max_steps` or a stop request. A stop
    /// requested before the first step stops every replica before it (nothing new to
    /// checkpoint); a resumed run first validates the step its checkpoint left due.
    fn epochs(&mut self) -> Result<()> {
        if self.elastic.joining {
            // Taken into an elastic group under way, with its state and position.
            self.regroup(None)?;
        } else {
            if self.stop_before_the_first_step()? {
                return Ok(());
            }
            if std::mem::take(&mut self.progress.val_due) {
                self.validate(self.progress.epoch, self.progress.global_step)?;
            }
        }
        if let Task::Tokens(_) = self.r.task {
            // A language model's steps, re-entered after an elastic run re-formed its group.
            loop {
                match self.token_steps() {
                    Ok(()) if self.elastic.regroup_due => self.regroup(None)?,
                    Err(e) if self.recoverable(&e) => self.regroup(Some(e))?,
                    other => return other,
                }
            }
        }
        loop {
            let done = if self.elastic.regroup_due {
                self.regroup(None).map(|()| true)
            } else if self.progress.epoch_end_due {
                self.end_epoch().map(|()| true)
            } else if self.progress.epoch < self.limits.epochs
                && self.progress.global_step < self.limits.max_steps.min(self.limits.budget)
                && !self.progress.stopped
                && !self.progress.paused
            {
                self.train_epoch()
            } else {
                break;
            };
            match done {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if self.recoverable(&e) => self.regroup(Some(e))?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next epoch starts with the whole data set split over the current world.
    fn fresh_epoch(&mut self) {
        if self.elastic.share == Share::default() {
            return;
        }
        self.take_share(Share::default());
    }

    /// Whether any replica was asked to stop before training (one all-reduce of the requests).
    fn stop_before_the_first_step(&mut self) -> Result<bool> {
        let mut asked = [STOP_REQUESTED.load(Ordering::SeqCst) as u8 as f32];
        with_comm(&self.r.comm, |c| c.all_reduce(&mut asked, ReduceOp::Sum))?;
        self.progress.stopped = asked[0] > 0.0;
        if self.progress.stopped && self.r.rank == 0 {
            println!(
                "stop requested before the first step: stopping at step {} (nothing new to checkpoint)",
                self.progress.global_step
            );
        }
        Ok(self.progress.stopped)
    }

    /// The validation after `global_step` steps of 0-based `epoch` (at the learning rate of
    /// its last step), when there is a validation part.
    fn validate(&mut self, epoch: usize, global_step: u64) -> Result<()> {
        let lr = self.r.schedule.lr(epoch, global_step.saturating_sub(1));
        if let Some(e) = self.r.on_global(|r| r.evaluate_val())? {
            self.reporting
                .report
                .eval(MetricKind::Val, epoch + 1, global_step, lr, &e)?;
        }
        Ok(())
    }

    /// Records the training window (every rank's own figures).
    fn record_window(&mut self, epoch: usize, step_in_epoch: u64, lr: f64) -> Result<()> {
        let w = self.reporting.window.take();
        self.reporting.train_time += w.secs;
        self.reporting.train_samples += w.timed as u64;
        let breakdown = self.reporting.clock.take();
        self.reporting.report.train(
            epoch,
            step_in_epoch,
            self.progress.global_step,
            w.loss,
            lr,
            w.samples_per_sec,
            w.samples,
            breakdown,
            self.r.opt.scaler,
            self.r.ddp.local().map(|l| l.figures().clone()),
        )
    }

    /// A language model's steps, from the restored step to `train.steps` (or `train.max_steps`,
    /// or a stop request): each evaluated every `train.eval_every` steps and at the end, and
    /// checkpointed at `checkpoint.every_steps` (default: at each evaluation) and where a stop
    /// leaves it.
    fn token_steps(&mut self) -> Result<()> {
        let spec = self.r.spec.clone();
        let budget = self.limits.budget;
        let eval_every = spec.train.eval_every.unwrap_or((budget / 10).max(1));
        let save_every = spec.checkpoint.every_steps.unwrap_or(eval_every);
        let accum = spec.train.grad_accum as u64;
        let pause = match self.progress.pause {
            Some(PauseAt::Step(n)) if n < budget => n,
            _ => u64::MAX,
        };
        while self.progress.global_step < budget.min(self.limits.max_steps).min(pause)
            && !self.progress.stopped
        {
            let step = self.progress.global_step;
            let lr = self.r.schedule.lr(0, step);
            let control = self.requests()?;
            let Replica {
                task,
                net,
                ddp,
                opt,
                ..
            } = &mut self.r;
            let Task::Tokens(tokens) = task else {
                unreachable!("sample data trains in epochs")
            };
            let stepper = Stepper {
                engine: &mut self.engine,
                window: &mut self.reporting.window,
                clock: &mut self.reporting.clock,
                net,
                ddp,
                opt,
            };
            let agreed = stepper.step(
                lr,
                control,
                accum as usize,
                |net, k, session, loss_scale| {
                    let (loss, grads, rows, data) =
                        tokens.micro_batch(net, step * accum + k as u64, session, loss_scale)?;
                    Ok(MicroBatch {
                        loss,
                        grads: vec![grads],
                        rows,
                        data,
                    })
                },
            )?;
            self.progress.stopped = agreed.stop;
            self.elastic.regroup_due = agreed.regroup;
            self.progress.global_step += 1;
            self.elastic.last_step = self.elastic.last_step_end.elapsed();
            self.elastic.last_step_end = Instant::now();
            let done = self.progress.global_step;
            self.progress.paused = done == pause && !self.progress.stopped;
            let last = done == budget || self.progress.paused;
            if done.is_multiple_of(self.reporting.log_every) || last {
                self.record_window(1, done, lr)?;
            }
            self.elastic.settled = self.reporting.window.state();
            let eval_due = done.is_multiple_of(eval_every) || last;
            if self.progress.stopped {
                // The validation due here is left to the resumed run.
                self.checkpoint(0, eval_due)?;
                if self.r.rank == 0 {
                    println!("stop requested: stopping after step {done}");
                }
                break;
            }
            if eval_due {
                self.validate(0, done)?;
            }
            if done.is_multiple_of(save_every) || last {
                self.checkpoint(0, false)?;
            }
            self.reporting.report.sync()?;
            if self.elastic.regroup_due {
                return Ok(());
            }
        }
        if self.progress.global_step >= budget {
            self.progress.epoch = 1;
        }
        if self.progress.paused && self.r.rank == 0 {
            println!(
                "paused after step {} (--pause-at)",
                self.progress.global_step
            );
        }
        Ok(())
    }

    /// Writes a checkpoint of the current step (rank 0; every rank brings its optimizer state
    /// and its training window), `step_in_epoch` steps into the epoch after the completed ones,
    /// and makes the metrics up to it durable.
    fn checkpoint(&mut self, step_in_epoch: u64, val_due: bool) -> Result<()> {
        let t0 = Instant::now();
        let r = &mut self.r;
        self.engine.export(&mut r.ddp, &mut r.opt, r.rank)?;
        let windows = position::gather_windows(&r.comm, self.reporting.window.state())?;
        // An elastic run says where in the epoch's order it stands, whatever worlds took it there.
        let epoch_position = match (&r.task, self.elastic.min) {
            (Task::Samples { splits, .. }, Some(_)) if step_in_epoch > 0 => {
                let per_step = r.spec.train.batch_size * r.spec.train.grad_accum;
                Some(self.elastic.share.reached(
                    step_in_epoch,
                    per_step,
                    r.world,
                    splits.train.len(),
                ))
            }
            _ => None,
        };
        let state = TrainState {
            epoch: self.progress.epoch,
            global_step: self.progress.global_step,
            step_in_epoch,
            val_due,
            windows,
            spec_hash: r.spec.hash(),
            world_size: r.world,
            epoch_position,
        };
        // Local steps: every rank's own part first.
        r.save_local(&state)?;
        r.on_global(|r| {
            if r.rank == 0 {
                let p =
                    checkpoint::save(&r.out, &r.net, &r.opt, &state, r.spec.checkpoint.keep_last)?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                println!("checkpoint {} ({ms:.0} ms)", p.display());
            }
            Ok(())
        })?;
        self.reporting.report.sync()
    }

    /// The steps of the current epoch (after those a resumed run starts behind), validated
    /// every `train.eval_every` steps and checkpointed every `checkpoint.every_steps` where
    /// these are set, and checkpointed where a stop leaves it. Returns false when the epoch was
    /// left incomplete (stop requested or `train.max_steps` reached); the epoch that
    /// `train.steps` ends in is complete.
    fn train_epoch(&mut self) -> Result<bool> {
        let (epoch, train) = (self.progress.epoch, self.r.spec.train.clone());
        let save_every = self.r.spec.checkpoint.every_steps;
        let Task::Samples { sampler, .. } = &mut self.r.task else {
            unreachable!("token data trains in steps")
        };
        sampler.indices_into(epoch as u64, &mut self.work.indices);
        let steps_per_epoch = self.r.steps_per_epoch;
        let mut step_in_epoch = std::mem::take(&mut self.progress.resume_in_epoch);
        self.progress.in_epoch = step_in_epoch;
        if step_in_epoch == 0 {
            self.reporting.window = Window::start();
            self.reporting.clock = StepClock::default();
        }
        let indices = std::mem::take(&mut self.work.indices);
        let per_step = train.batch_size * train.grad_accum;
        // This world's share of the epoch began at `share.step`.
        let taken = step_in_epoch.saturating_sub(self.elastic.share.step) as usize * per_step;
        let rest = &indices[taken.min(indices.len())..];
        let Task::Samples { splits, .. } = &self.r.task else {
            unreachable!("token data trains in steps")
        };
        let mut loader = samples::loader(
            &splits.train,
            rest.to_vec(),
            train.batch_size,
            self.r.workers,
        );
        for group in rest.chunks(per_step) {
            if self.progress.global_step >= self.limits.max_steps.min(self.limits.budget) {
                break;
            }
            let control = self.requests()?;
            let Replica {
                spec,
                world,
                net,
                ddp,
                opt,
                schedule,
                ..
            } = &mut self.r;
            let lr = schedule.lr(epoch, self.progress.global_step);
            let every_step = ddp.local().is_none();
            if spec.ddp.broadcast_buffers && !spec.ddp.sync_batchnorm && *world > 1 && every_step {
                ddp.broadcast_buffers(net)?;
            }
            let micro_batches = group.len().div_ceil(train.batch_size);
            let global_step = self.progress.global_step;
            let work = &mut self.work;
            let stepper = Stepper {
                engine: &mut self.engine,
                window: &mut self.reporting.window,
                clock: &mut self.reporting.clock,
                net,
                ddp,
                opt,
            };
            let agreed =
                stepper.step(lr, control, micro_batches, |net, k, session, loss_scale| {
                    let micro_step = global_step * train.grad_accum as u64 + k as u64;
                    let t0 = Instant::now();
                    let rows = work.next_batch(&mut loader, epoch, micro_step)?;
                    let data = t0.elapsed();
                    let (loss, grads) = work.forward_backward(net, session, loss_scale)?;
                    Ok(MicroBatch {
                        loss,
                        grads,
                        rows,
                        data,
                    })
                })?;
            self.progress.stopped = agreed.stop;
            self.elastic.regroup_due = agreed.regroup;
            self.progress.global_step += 1;
            step_in_epoch += 1;
            self.progress.in_epoch = step_in_epoch;
            self.elastic.last_step = self.elastic.last_step_end.elapsed();
            self.elastic.last_step_end = Instant::now();
            let epoch_ends =
                step_in_epoch == steps_per_epoch || self.progress.global_step == self.limits.budget;
            let pause_here = !epoch_ends
                && self.progress.pause == Some(PauseAt::Step(self.progress.global_step));
            if step_in_epoch.is_multiple_of(self.reporting.log_every) || epoch_ends || pause_here {
                self.record_window(epoch + 1, step_in_epoch, lr)?;
            }
            self.elastic.settled = self.reporting.window.state();
            if pause_here && !self.progress.stopped {
                self.validate(epoch, self.progress.global_step)?;
                self.checkpoint(step_in_epoch, false)?;
                self.progress.paused = true;
                break;
            }
            // The end of the epoch is validated and checkpointed by `end_epoch`.
            if epoch_ends {
                break;
            }
            let eval_due = train
                .eval_every
                .is_some_and(|every| self.progress.global_step.is_multiple_of(every));
            if self.progress.stopped {
                // The validation due here is left to the resumed run.
                self.checkpoint(step_in_epoch, eval_due)?;
                break;
            }
            if eval_due {
                self.validate(epoch, self.progress.global_step)?;
            }
            if save_every.is_some_and(|every| self.progress.global_step.is_multiple_of(every)) {
                self.checkpoint(step_in_epoch, false)?;
            }
            if self.elastic.regroup_due {
                break;
            }
        }
        self.work.indices = indices;
        if step_in_epoch < steps_per_epoch && self.progress.global_step < self.limits.budget {
            if self.elastic.regroup_due {
                // The epoch goes on in the group re-formed at this step boundary.
                return Ok(true);
            }
            // Stopped mid-epoch: on request, checkpointed above, so a resume continues after
            // this step; at `train.max_steps`, neither validated nor checkpointed (the run ends).
            if self.r.rank == 0 {
                let why = if self.progress.stopped {
                    "stop requested"
                } else if self.progress.paused {
                    "paused (--pause-at)"
                } else {
                    "train.max_steps reached"
                };
                println!(
                    "{why}: stopping after step {} (epoch {} incomplete)",
                    self.progress.global_step,
                    epoch + 1
                );
            }
            return Ok(false);
        }
        // The epoch is counted; its end (validation, checkpoint) is due.
        self.progress.epoch += 1;
        self.progress.epoch_end_due = true;
        Ok(true)
    }

    /// Evaluates the epoch just trained on the validation split and writes a checkpoint when
    /// `checkpoint.every_epochs` asks for one, or a stop was requested in its last step, or
    /// `checkpoint.every_steps` falls on it; the next epoch starts fresh.
    fn end_epoch(&mut self) -> Result<()> {
        let epoch = self.progress.epoch;
        self.validate(epoch - 1, self.progress.global_step)?;
        let checkpoint = &self.r.spec.checkpoint;
        let every = checkpoint.every_epochs;
        let on_steps = checkpoint
            .every_steps
            .is_some_and(|n| self.progress.global_step.is_multiple_of(n));
        self.progress.paused = !self.progress.stopped
            && epoch < self.limits.epochs
            && self.progress.global_step < self.limits.budget
            && match self.progress.pause {
                Some(PauseAt::Epoch(n)) => epoch == n,
                Some(PauseAt::Step(n)) => self.progress.global_step == n,
                None => false,
            };
        if every > 0 && (epoch.is_multiple_of(every) || epoch == self.limits.epochs)
            || self.progress.stopped
            || self.progress.paused
            || on_steps
        {
            self.checkpoint(0, false)?;
        }
        self.progress.epoch_end_due = false;
        self.fresh_epoch();
        if self.progress.paused && self.r.rank == 0 {
            println!("paused after epoch {epoch} (--pause-at)");
        }
        self.reporting.report.sync()
    }

    /// Tests and saves the final model (unless stopped), waits for every rank and sums up.
    fn finish(mut self) -> Result<RunSummary> {
        if self.elastic.min.is_some() {
            // Every member ends with the same weights, joiners included: each says which.
            let digest = elastic::digest(self.r.ddp.agreed_params());
            println!("replica {}: final weights {digest:016x}", self.r.id);
        }
        if !(self.progress.stopped || self.progress.paused) {
            // The result is the weights the replicas agreed on (local steps: the global ones).
            self.r.ddp.show_global(&self.r.net)?;
        }
        let r = &self.r;
        // A stopped or paused run is not finished: no test figures, no final model; `--resume`
        // continues it.
        let test = if self.progress.stopped || self.progress.paused {
            if self.progress.paused && r.rank == 0 {
                let at = serde_json::json!({"epoch": self.progress.epoch, "global_step": self.progress.global_step});
                crate::fsutil::write_atomic(&r.out.join(PAUSED_FILE), at.to_string().as_bytes())
                    .map_err(|e| crate::Error::io(r.out.join(PAUSED_FILE), e))?;
            }
            None
        } else if let Task::Tokens(_) = &r.task {
            // A language model has no test part: its last validation is its final figure.
            if r.rank == 0 {
                let p = checkpoint::save_final(&r.out, &r.net)?;
                println!("model {}", p.display());
            }
            None
        } else {
            let Task::Samples { splits, .. } = &r.task else {
                unreachable!("token data is handled above")
            };
            let test = r.evaluate(&splits.test)?;
            let lr = r.schedule.lr(
                self.progress.epoch.saturating_sub(1),
                self.progress.global_step.saturating_sub(1),
            );
            self.reporting.report.eval(
                MetricKind::Test,
                self.progress.epoch.max(1),
                self.progress.global_step,
                lr,
                &test,
            )?;
            if r.rank == 0 {
                let p = checkpoint::save_final(&r.out, &r.net)?;
                println!("model {}", p.display());
            }
            Some(test)
        };
        self.reporting.report.sync()?;
        with_comm(&r.comm, |c| c.barrier())?;
        let train_sps = if self.reporting.train_time > 0.0 {
            self.reporting.train_samples as f64 / self.reporting.train_time * r.world as f64
        } else {
            0.0
        };
        let block = match &r.task {
            Task::Tokens(t) => Some(t.block()),
            Task::Samples { .. } => None,
        };
        Ok(RunSummary {
            epochs: self.progress.epoch,
            global_step: self.progress.global_step,
            test: test.map(|t| (t.loss, t.accuracy)),
            train_samples_per_sec: train_sps,
            train_tokens_per_sec: block.map(|b| train_sps * b as f64),
            val: self.reporting.report.last_val(),
            stopped: self.progress.stopped,
            paused: self.progress.paused,
        })
    }
}
