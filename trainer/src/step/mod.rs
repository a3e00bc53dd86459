//! One DDP step of a replica, from gradients to updated parameters, and where it runs.
//!
//! Layout:
//! - `ddp`: the host step ([`ddp::Ddp`]: the flat parameters, their broadcast, and the step's
//!   strategy, one file each: `sharded`, flat gradient buckets reduce-scattered, the optimizer
//!   on this rank's shard, parameters all-gathered; `shared`, the same in memory the ranks
//!   share; `overlapped`, the whole optimizer after the `overlap` buckets; `local`, local steps
//!   synced every few steps: model averaging, DiLoCo, Streaming DiLoCo).
//! - `device`: the same step kept on a GPU (NCCL or host all-reduce, tensor-op optimizer).
//! - `overlap`: the host step's gradients all-reduced bucket by bucket while backward runs
//!   (private buffers, ranks on several hosts), the whole optimizer on every rank.
//! - `hook`: what averages one of those buckets ([`hook::CommHook`], as PyTorch's
//!   `register_comm_hook`): f32, bf16/fp16 on the wire, PowerSGD, or a trainer executable's own.
//! - `control`: the control element the replicas average with their gradients ([`Control`]:
//!   a stop request, an elastic group's regroup).
//! - `comm`: the shared collective, SyncBatchNorm's reducer, and the communication thread.
//! - `cost`: what a step's reduction and optimizer cost ([`StepCost`]).
//! - `host`: a tensor's values read as host f32.
//! - `engine`: which of the two a replica runs (`Engine`): accumulate, reduce and step.
//! - `batch_parts`: a batch trained in parts side by side, one per thread.
//! - `placement`: a replica's device, backend and collectives.
//!
//! Two levels, because there are two places the master copy of the parameters can live.
//! [`engine::Engine`] says which: `Host`, one flat f32 buffer in name order (with its slots, its
//! broadcast from a root rank, the control element, the gather of sharded optimizer state
//! before a checkpoint), or `Device`, the parameters as tensors on the GPU with the optimizer as
//! tensor ops. The host strategies ([`ddp::Ddp`]'s `sharded`, `shared`, `overlapped`) differ
//! only in how that one flat buffer is reduced and stepped, so they sit under it; the device
//! step shares none of that state and sits beside it. A new way of reducing the flat buffer
//! (as `ddp/local`, local steps with an outer optimizer) is one more strategy in `ddp/`; a new
//! place for the master copy is one more `Engine`.

pub mod batch_parts;
pub mod comm;
pub mod control;
pub mod cost;
pub mod ddp;
pub mod device;
pub mod engine;
pub mod hook;
pub mod host;
pub mod overlap;
pub mod placement;

pub use control::Control;
pub use cost::StepCost;
