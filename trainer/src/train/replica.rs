//! A replica joined to its group: the device, the data, the model, the DDP step, the optimizer
//! and the schedule it trains with, set up from the spec or restored from a checkpoint.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;

use crate::checkpoint;
use crate::data::{self, DistributedSampler, OpenContext, SharedDataset};
use crate::dist::group::{GroupConfig, ProcessGroup};
use crate::env::DistEnv;
use crate::lm::LmData;
use crate::models::gpt::GptConfig;
use crate::models::{BnMode, Network};
use crate::optim::Optimizer;
use crate::report::Evaluation;
use crate::schedule::Schedule;
use crate::spec::{ModelName, Spec};
use crate::step::comm::{Route, SharedCollective, with_comm};
use crate::step::ddp::Ddp;
use crate::step::device::{self as device_step, Reducer};
use crate::step::placement::{backend_for, collectives, device_for};
use crate::{Error, Result};

use super::host_step;
use super::position::{self, Position};
use super::samples::{Splits, build_network, evaluate, load_data};
use super::tokens::Tokens;

/// The data a replica loads, before its sampler or windows are set up.
enum Data {
    Samples(Splits),
    Tokens(LmData),
}

/// A replica joined to its group, with its data, model, DDP step, optimizer and schedule.
pub(super) struct Replica {
    pub(super) spec: Spec,
    pub(super) out: PathBuf,
    /// This replica's identity: its rank when the group first formed (an elastic run's rank
    /// changes when replicas leave).
    pub(super) id: usize,
    /// It joins an elastic group under way ([`crate::env::JOIN_VARIABLE`]): set up alone, a
    /// world of one, until the group takes it in.
    pub(super) joining: bool,
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) device: Device,
    pub(super) task: Task,
    pub(super) net: Network,
    pub(super) comm: SharedCollective,
    /// SyncBatchNorm's route to the communication thread (a re-formed group's new DDP step
    /// takes it too).
    pub(super) route: Arc<Route>,
    pub(super) ddp: Ddp,
    pub(super) opt: Optimizer,
    /// True when the step runs on the host (flat buffers shared with the other ranks); false
    /// for the device step.
    pub(super) host_step: bool,
    /// Optimizer steps per epoch (a language model's whole step budget is one epoch).
    pub(super) steps_per_epoch: u64,
    pub(super) schedule: Schedule,
    /// Threads that fill batches ahead for costly data sets.
    pub(super) workers: usize,
}

/// What a replica trains on: samples with targets (classification, regression) in epochs, or
/// a language model's token stream for a step budget.
pub(super) enum Task {
    Samples {
        splits: Splits,
        sampler: DistributedSampler,
    },
    Tokens(Tokens),
}

impl Replica {
    /// Opens the device, loads the data, joins the process group and builds the model, its DDP
    /// step, optimizer, sampler and schedule. Also returns the device step's reducer.
    pub(super) fn set_up(
        spec: Spec,
        out: PathBuf,
        env: &DistEnv,
        token: Option<String>,
    ) -> Result<(Replica, Reducer)> {
        let (id, world) = (env.rank, env.world_size);
        let rank = id;
        // A replica joining an elastic group under way stands alone until the group takes it
        // in (`Training`'s first regroup), which also brings it the group's state.
        let joining = spec.ddp.elastic.is_some() && crate::env::joining();
        let device = device_for(&spec, env)?;
        let backend = backend_for(&spec, &device)?;
        let workers = spec.data.workers.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            data::loader::default_workers(cores, env.local_world_size, rayon::current_num_threads())
        });
        let data = if spec.data.name.is_text() {
            Data::Tokens(LmData::load(&spec, &out, rank == 0)?)
        } else {
            let splits = load_data(&spec, &OpenContext { workers })?;

            if splits.train.is_empty() {
                return Err(Error::data(
                    spec.data.path.clone().unwrap_or_default(),
                    "the training split is empty",
                ));
            }
            Data::Samples(splits)
        };
        let timeout = Duration::from_secs(spec.ddp.timeout_s);
        let group = ProcessGroup::init(&GroupConfig {
            rank,
            world_size: world,
            master_addr: env.master_addr.clone(),
            master_port: env.master_port,
            timeout,
            token,
            // An elastic group sets shared memory up again with each generation.
            shared_memory: spec.ddp.shared_memory,
            store_elsewhere: crate::env::store_elsewhere(),
            joining,
        })?;
        // A replica started again after its elastic group formed joins it too.
        let joining = joining || group.is_standing_by();
        if joining && !crate::env::joining() {
            println!(
                "replica {id}: its elastic group formed before it started; it joins the group"
            );
        }
        let (rank, world) = (group.rank(), group.world_size());
        let (comm, reducer) = collectives(backend, &device, group, timeout)?;
        let route = Route::new();
        let mut net = match &data {
            Data::Samples(splits) => build_network(&spec, &splits.train, &device, &comm, &route)?,
            Data::Tokens(d) if spec.model.name == ModelName::Custom => {
                let net = Network::new(
                    ModelName::Custom,
                    [1, 1, d.block],
                    d.vocab,
                    &device,
                    BnMode::Local,
                    spec.train.seed,
                )?;
                crate::lm::check_logits(&net, d.vocab, d.block)?;
                net
            }
            Data::Tokens(d) => Network::gpt(
                &GptConfig::from_spec(&spec, d.vocab),
                &device,
                spec.train.seed,
            )?,
        };
        // Mixed precision rounds the CPU's matrix products; a GPU's would stay f32 unasked.
        if !spec.train.precision.is_f32() && !device.is_cpu() {
            return Err(spec.error(
                "train.precision",
                format!(
                    "\"{}\" runs on CPU replicas; rank {rank} is on {device:?}, where this \
                     build's matrix products stay f32: set train.precision = \"f32\" or \
                     ddp.devices = \"cpu\"",
                    spec.train.precision.name()
                ),
            ));
        }
        net.set_precision(spec.train.precision);
        // The data's record, once the model is known to fit it (nothing is written before).
        if let Data::Samples(Splits {
            record: Some(record),
            ..
        }) = &data
            && rank == 0
            && !joining
        {
            record.write(&out)?;
        }
        // The host step shares its flat buffers with the other ranks; the device step keeps its own.
        let host_step = !device_step::wanted(&device);
        let ddp =
            host_step::ddp_step(&spec, &net, &comm, route.clone(), host_step, rank, world, 0)?;
        // Clipping (`train.grad_clip`) and AdamW's decay of matrices only come with the shapes.
        let opt = Optimizer::from_spec(&spec, net.params.iter().map(|(_, v)| v.dims()));

        let (task, steps_per_epoch) = match data {
            Data::Samples(splits) => {
                let sampler = DistributedSampler::new(
                    splits.train.len(),
                    world,
                    rank,
                    true,
                    spec.train.seed,
                    false,
                )?;
                let micro_per_epoch = sampler.num_samples().div_ceil(spec.train.batch_size);
                let steps = micro_per_epoch.div_ceil(spec.train.grad_accum) as u64;
                (Task::Samples { splits, sampler }, steps)
            }
            Data::Tokens(d) => {
                let steps = spec.train.steps.unwrap_or(1);
                (Task::Tokens(Tokens::new(d, &spec, world, rank)), steps)
            }
        };
        let schedule = Schedule::new(&spec, world, steps_per_epoch);
        let replica = Replica {
            spec,
            out,
            id,
            joining,
            rank,
            world,
            device,
            task,
            net,
            comm,
            route,
            ddp,
            opt,
            host_step,
            steps_per_epoch,
            schedule,
            workers,
        };
        Ok((replica, reducer))
    }

    /// Rank 0 reads the newest complete checkpoint; every rank receives its weights, buffers,
    /// optimizer state and position.
    pub(super) fn restore(&mut self) -> Result<Position> {
        let mut header = String::new();
        let mut model_file = String::new();
        if self.rank == 0 {
            match checkpoint::latest_complete(&self.out, |w| eprintln!("{w}"))? {
                Some(l) if l.state.spec_hash != self.spec.hash() => {
                    // Weights of another shape are named by the key that changed them.
                    self.net
                        .load_state(&l.tensors, &l.path.display().to_string())?;
                    return Err(Error::Checkpoint {
                        path: l.path.clone(),
                        msg: "was written for a different spec (spec hash differs); resume with the same spec, or start a new run folder".into(),
                    });
                }
                Some(l) => {
                    position::check_world(&l.state, &l.path, self.world)?;
                    self.net
                        .load_state(&l.tensors, &l.path.display().to_string())?;
                    self.ddp.read_params(&self.net)?;
                    self.opt.restore(l.optimizer_steps, l.slots, &l.path)?;
                    header = position::header(&l.state, l.optimizer_steps, l.scaler);
                    model_file = l.path.display().to_string();
                    println!(
                        "resuming from {} ({})",
                        l.path.display(),
                        position::describe(&l.state)
                    );
                }
                None => println!(
                    "no checkpoint in {}: starting from scratch",
                    checkpoint::checkpoint_dir(&self.out).display()
                ),
            }
        }
        let all = with_comm(&self.comm, |c| c.all_gather_bytes(header.as_bytes()))?;
        let header = String::from_utf8_lossy(&all[0]).into_owned();
        if header.is_empty() {
            return Ok(Position::default());
        }
        let Some((start, opt_steps, scaler)) = position::parse_header(&header, self.rank) else {
            return Err(Error::Model(format!(
                "resume header from rank 0 is malformed: {header:?}"
            )));
        };
        with_comm(&self.comm, |c| {
            c.broadcast(self.ddp.params_mut(), 0)?;
            for slot in self.opt.slots.iter_mut() {
                c.broadcast(slot, 0)?;
            }
            Ok(())
        })?;
        self.opt.steps = opt_steps;
        if scaler.is_some() {
            self.opt.scaler = scaler;
        }
        self.ddp.write_params(&self.net)?;
        self.ddp.broadcast_buffers(&self.net)?;
        if self.ddp.local().is_some() {
            let all = with_comm(&self.comm, |c| c.all_gather_bytes(model_file.as_bytes()))?;
            self.restore_local(&String::from_utf8_lossy(&all[0]))?;
        }
        Ok(start)
    }

    /// `f` of this replica with the weights the replicas last agreed on in its model (local
    /// steps: the global weights, then its own put back; every step: its weights, the same).
    /// Every rank calls it together.
    pub(super) fn on_global<T>(&mut self, f: impl FnOnce(&Replica) -> Result<T>) -> Result<T> {
        if self.ddp.local().is_none() {
            return f(self);
        }
        self.ddp.show_global(&self.net)?;
        let out = f(self);
        self.ddp.write_params(&self.net)?;
        out
    }

    /// Local steps: this rank's own part of the checkpoint of `state` (every rank), written on
    /// every rank before any goes on (rank 0 then writes the model and state files).
    pub(super) fn save_local(&mut self, state: &checkpoint::TrainState) -> Result<()> {
        if let Some(local) = self.ddp.export_local()? {
            checkpoint::save_replica(&self.out, state, self.rank, &local, &self.opt)?;
            with_comm(&self.comm, |c| c.barrier())?;
        }
        Ok(())
    }

    /// Local steps: every rank goes on from its own part of the checkpoint whose model file
    /// rank 0 names in `model_file` (the same on every rank).
    /// An elastic run resumed by more replicas than wrote the checkpoint: a rank without a file
    /// of its own starts from the global weights, with rank 0's syncs and optimizer state (as a
    /// joiner does).
    fn restore_local(&mut self, model_file: &str) -> Result<()> {
        let path = std::path::Path::new(model_file);
        let names = self.opt.config.slot_names();
        let own = checkpoint::replica_path(path, self.rank);
        if self.spec.ddp.elastic.is_some() && !own.exists() {
            let (mut first, _, _) = checkpoint::load_replica(path, 0, names)?;
            println!(
                "replica {}: no local steps of its own in {}: it starts from the global weights",
                self.id,
                path.display()
            );
            first.local = first.global.clone();
            first.residual.iter_mut().for_each(|e| *e = 0.0);
            return self.ddp.import_local(&self.net, first);
        }
        let (local, slots, steps) = checkpoint::load_replica(path, self.rank, names)?;
        self.opt.restore(steps, slots, &own)?;
        self.ddp.import_local(&self.net, local)
    }

    /// The loss (and accuracy) of the model on `ds`, over all ranks (see [`evaluate`]).
    pub(super) fn evaluate(&self, ds: &SharedDataset) -> Result<Evaluation> {
        evaluate(
            &self.net,
            ds,
            self.rank,
            self.world,
            self.spec.train.batch_size,
            self.workers,
            &self.comm,
        )
    }

    /// The validation figures, when there is a validation part.
    pub(super) fn evaluate_val(&self) -> Result<Option<Evaluation>> {
        match &self.task {
            Task::Samples { splits, .. } if splits.val.is_empty() => Ok(None),
            Task::Samples { splits, .. } => self.evaluate(&splits.val).map(Some),
            Task::Tokens(t) if t.data.val.is_empty() => Ok(None),
            Task::Tokens(t) => t
                .evaluate(
                    &self.net,
                    self.rank,
                    self.world,
                    self.spec.train.batch_size,
                    &self.comm,
                )
                .map(Some),
        }
    }
}
