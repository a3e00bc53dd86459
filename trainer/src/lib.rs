//! `ddp-trainer`: data-parallel training of candle models across processes, with PyTorch DDP
//! semantics (one process per replica, parameters broadcast from rank 0, gradients averaged by
//! all-reduce), started by torchrun-style launchers, by itself (`--standalone`), or by a Kubeflow
//! pod (one process per node that starts the node's replicas).
//!
//! Layout:
//! - `spec`: the experiment spec (TOML) and `--set` overrides (`load`: reading and overrides),
//!   the words of its keys; it imports nothing of its siblings.
//! - `env`: the launcher environment contract (torchrun, Slurm, Open MPI; `kubeflow`: a Kubeflow
//!   pod's node; `nodelist`: Slurm's host lists; `vars`: the variable lookup).
//! - `launcher`: `--standalone --nproc N` and a Kubeflow pod's node, the local launcher
//!   (`options`, `ports`, `spawn`, `output`, `exit`: which failure is reported, `signals`); an
//!   elastic run's store is served there.
//! - `dist`: process groups and collectives: `group` (rendezvous, then the ring and shared
//!   memory), `store` (the rendezvous key-value store: `server`, `client`), `wire` (its frames
//!   and messages), `handshake` (Hello and the HMAC challenge of every store connection and ring
//!   link), `ring` (the `tcp` backend: `connect`, `head`, `pump`), `shm` (the all-reduces and
//!   the DDP step's buffers in shared memory when all ranks share a host), `segment` (how a
//!   buffer is cut between the ranks), `codec` (16-bit floats on the wire), `powersgd` (low-rank
//!   compressed averages), `quant` (block-scaled 8- and 4-bit integers), `ledger` (each rank's
//!   collectives, and the message naming the rank behind), `probe` (the link timed at start,
//!   `ddp.bucket_mb = "auto"`), `elastic` (an elastic group's next generation, decided by the
//!   store), `nccl` (behind the `cuda` feature), `bench` (the all-reduce benchmark).
//! - `data`: the [`data::Dataset`] trait the engine trains on and the loader that fills batches
//!   ahead; MNIST/Fashion-MNIST IDX, CIFAR-10, synthetic data, users' own files (`images`:
//!   image folders, `table`: CSV and Parquet, `tensors`: safetensors/npz/npy, `custom`: a data
//!   set in Rust), the distributed sampler, the train/validation split, CIFAR augmentation;
//!   `text`: language-modelling data (tokenizers, text and memory-mapped token files, training
//!   and evaluation windows).
//! - `models`: the reference models with PyTorch names (`params`: what they are built with),
//!   BatchNorm/SyncBatchNorm, the layers' custom ops and their CPU `kernels`, the `gpt`
//!   language model (`config`, `layers`, `ops`: its fused CPU ops, `init`, `state`: the tied
//!   `lm_head` in checkpoints), `weight_op`: a layer with a weight and a bias as one custom op.
//! - `step`: one DDP step of a replica: `ddp` (the flat parameters and their broadcast, and the
//!   host step's strategies: `sharded`, flat gradient buckets reduce-scattered, the optimizer on
//!   this rank's shard, parameters all-gathered; `shared`, the same in shared memory;
//!   `overlapped`, after `overlap`'s buckets all-reduced while backward runs, each by its `hook`;
//!   `local`, local steps synced every few: model averaging, DiLoCo, Streaming DiLoCo),
//!   `device` (the same step kept on a GPU: NCCL or host all-reduce, tensor-op optimizer),
//!   `engine` (which of the two a replica runs), `batch_parts` (a batch trained in parts side by
//!   side, one per thread), `placement` (a replica's device, backend and collectives).
//! - `optim`, `schedule`, `scaler`: SGD/Adam/AdamW, learning-rate schedules, and fp16's dynamic
//!   loss scale (`GradScaler`'s policy; the DDP steps decide a step's finiteness across ranks).
//! - `checkpoint`: atomic checkpoints, resume, retention (`replica`: each replica's own part
//!   under local steps); `fsutil`: [`fsutil::write_atomic`],
//!   the one atomic file write (also the workspaces').
//! - `metrics`, `tensorboard`: JSONL metrics and TensorBoard event files; `report` writes both.
//! - `generate`: text from a trained GPT (KV cache, temperature, top-k, seeded).
//! - `lm`: a language model's token data (text tokenized, token files mapped), the loss of a
//!   batch of windows and the world-size-invariant validation loss.
//! - `train`: one replica's training run (set up, restore, epochs, finish); `cli`: the
//!   `ddp-trainer` command line ([`cli::ReplicaArgs`], the one contract a replica is started
//!   with).
//! - `preflight`: the checks a front end runs before it creates a run (the data the replicas
//!   read whole: text, token files, tables), with the replicas' own reading code.
//! - `objective`: the loss and evaluation figures of sample tasks (built in, or registered).
//! - `builder`: [`Trainer`], an executable with the user's own model, data set, loss, metrics.
//! - `error`: the crate's error type and exit codes.
//! - `candle_core`, `candle_nn`: the candle this crate is built on, re-exported (vendor/: path
//!   dependencies, so crates outside the checkout build the same candle with no `[patch]`).
//! - `test_util` (tests, feature `test-util`): builders for tests, `MetricRecord::sample()`.
//!
//! Binaries: `ddp-trainer` (`main.rs`, one replica: [`cli`]) and `ddp-bench` (`bin/ddp-bench/`,
//! the figures of `docs/performance.md`: training throughput against PyTorch's in rounds, the
//! all-reduce, the cost of lock-step).

pub mod builder;
pub mod checkpoint;
pub mod cli;
pub mod data;
pub mod dist;
pub mod env;
pub mod error;
pub mod fsutil;
pub mod generate;
pub mod launcher;
pub mod lm;
pub mod metrics;
pub mod models;
pub mod objective;
pub mod optim;
pub mod preflight;
pub mod report;
pub mod scaler;
pub mod schedule;
pub mod spec;
pub mod step;
pub mod tensorboard;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod train;

pub use builder::Trainer;
pub use error::{Error, Result};

/// The candle-core this crate is built on: ddp's own (vendor/candle-core, a path dependency, with
/// the backward pass's hook the overlapped DDP step needs). A crate of one's own names it by the
/// same path, or through this re-export, so that its tensors are the engine's.
pub use candle_core;
/// The candle-nn this crate is built on (vendor/candle-nn: crates.io's 0.11.1 on ddp's
/// candle-core).
pub use candle_nn;

/// Runs this executable as a `ddp-trainer` whose `[model] name = "custom"` is built by `model`
/// from a candle `VarBuilder` (parameter names are its paths): `Trainer::new().model(model).main()`
/// (see [`Trainer`] for a data set, a loss and metrics of your own). `fn main() {
/// ddp_trainer::main_with(model) }`. Exits the process with the trainer's exit code.
pub fn main_with<F, M>(model: F) -> !
where
    F: Fn(candle_nn::VarBuilder<'static>) -> candle_core::Result<M> + Send + Sync + 'static,
    M: candle_nn::Module + Send + Sync + 'static,
{
    Trainer::new().model(model).main()
}

/// [`main_with`] for a `candle_nn::ModuleT` (dropout, BatchNorm): the model gets the train flag
/// (`true` while training, `false` for validation and test).
pub fn main_with_t<F, M>(model: F) -> !
where
    F: Fn(candle_nn::VarBuilder<'static>) -> candle_core::Result<M> + Send + Sync + 'static,
    M: candle_nn::ModuleT + Send + Sync + 'static,
{
    Trainer::new().model_t(model).main()
}
