//! Where a run's replicas run, and keeping runs of one workspace off each other's GPUs.
//!
//! Before a run's supervisor spawns replicas it calls [`discover()`] (the GPUs this process may
//! use) and [`wait_for`]: that plans from `ddp.devices` / `ddp.replicas` / `ddp.threads`
//! ([`plan()`]) and takes per-GPU locks ([`acquire`]), waiting, with the run queued, while other
//! runs hold the GPUs it needs. The [`Assignment`] it returns says what to tell the replicas and
//! holds the locks until dropped.
//!
//! Numbering: `ddp.devices`, [`Plan`] and [`Waiting`] speak CUDA ordinals as this process sees
//! them (after `CUDA_VISIBLE_DEVICES`); lock files and [`held_by`] use NVML indices (the numbers
//! `nvidia-smi` shows), which do not depend on anyone's `CUDA_VISIBLE_DEVICES`. [`Gpu`] carries
//! both.
//!
//! Layout:
//! - `gpu`: [`Gpu`] (CUDA ordinal and NVML index) and the `CUDA_VISIBLE_DEVICES` name, imported by
//!   `discover`, `visible` and `queue`.
//! - `discover`: NVML (loaded at run time) or `DDP_SIMULATED_GPUS=N`, then `CUDA_VISIBLE_DEVICES`.
//! - `visible`: parsing and applying `CUDA_VISIBLE_DEVICES` (indices, UUID prefixes, empty).
//! - `plan`: the pure placement policy (CPU, these GPUs, or wait).
//! - `locks`: `<workspace>/locks/gpu-N.lock`, `flock(2)` leases, who holds what.
//! - `queue`: [`wait_for`], plan + lock until assigned; the replicas' environment.
//! - `telemetry`: readings for a devices view ([`TelemetrySampler`]): GPUs (NVML or simulated)
//!   with the run holding each, CPU cores, memory, the runs' processes (`/proc`); histories for
//!   sparklines.

pub mod discover;
pub mod gpu;
pub mod locks;
pub mod plan;
pub mod queue;
pub mod telemetry;
pub mod visible;

pub use crate::files::lockfile::{Holder, LOCKS_DIR};
pub use discover::{Discovery, SIMULATED_GPUS_VAR, discover};
pub use gpu::{CUDA_VISIBLE_DEVICES, Gpu};
pub use locks::{DeviceLease, acquire, held_by, holders, lock_path};
pub use plan::{DeviceRequest, Plan, available_cores, plan, threads_per_replica};
pub use queue::{Assignment, WaitOptions, Waited, Waiting, wait_for};
pub use telemetry::{
    Owner, ProcessOwners, Telemetry, TelemetryHistory, TelemetrySampler, process_owners,
};
