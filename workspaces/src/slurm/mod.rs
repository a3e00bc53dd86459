//! Runs on Slurm (`ddp run SPEC --on slurm`): the run folder is created as for a local run,
//! then a batch script (`job.sbatch`) is written into it and submitted; the job's replicas
//! write into the same folder (on storage every node sees), so every front end follows the run
//! as it follows a local one. Instead of a supervisor process per run, one watcher per
//! workspace keeps the `run.json` of every live Slurm run in step with its job.
//!
//! Layout:
//! - [`SlurmJob`], the job as `run.json` records it, is the run record's (`crate::run`).
//! - `script`: [`JobPlan`] and the batch script it writes (pure).
//! - `squeue`: [`JobInfo`], parsed from `squeue --json` (Slurm 22.05 and later forms) and
//!   `scontrol show job`.
//! - `policy`: a run's status from its job's state and its folder (pure).
//! - `client`: the Slurm commands (`sbatch`, `scancel`, `squeue`, `sacct`, `scontrol`), each
//!   with a time limit.
//! - `submit`: submitting a run, stopping its job, submitting it again.
//! - `watcher`: the workspace's watcher process and how front ends start and wake it.

pub mod client;
pub mod policy;
pub mod script;
pub mod squeue;
pub mod submit;
pub mod watcher;

pub use crate::run::SlurmJob;
pub use script::JobPlan;
pub use squeue::JobInfo;
pub use watcher::ensure_watcher;
