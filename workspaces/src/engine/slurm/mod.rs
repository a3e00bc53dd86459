//! Runs on Slurm (`ddp run SPEC --on slurm`): the run folder is created as for a local run,
//! then a batch script (`job.sbatch`) is written into it and submitted; the job's replicas
//! write into the same folder (on storage every node sees), so every front end follows the run
//! as it follows a local one. Instead of a supervisor process per run, one watcher per
//! workspace keeps the `run.json` of every live Slurm run in step with its job.
//!
//! Layout:
//! - [`SlurmJob`], the job as `run.json` records it, is the run record's (`crate::runs::run`).
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

pub use crate::runs::run::SlurmJob;
pub use script::JobPlan;
pub use squeue::JobInfo;
pub use watcher::ensure_watcher;

use std::path::Path;

use ddp_trainer::spec::Spec;

use super::{Engine, SpecSummary, Started, StopRequest};
use crate::runs::run::Run;
use crate::{Error, Result};

pub(super) struct Slurm;

impl Engine for Slurm {
    /// The nodes check the run: devices and data are theirs, not this machine's.
    fn check(&self, _spec: &Spec, _spec_path: &Path) -> Result<()> {
        Ok(())
    }

    /// A new job from the run's script; resumed, it goes on from the newest checkpoint.
    fn start(&self, mut run: Run, spec: &Spec, _resume: bool) -> Result<Started> {
        crate::engine::slurm::submit::submit(&mut run, spec)?;
        Ok(Started {
            run,
            spec: SpecSummary::of(spec),
            supervisor: None,
        })
    }

    fn stop(&self, run: Run) -> Result<StopRequest> {
        let job_id = run
            .record
            .slurm
            .as_ref()
            .map(|job| job.job_id.clone())
            .unwrap_or_default();
        crate::engine::slurm::submit::stop(&run)?;
        Ok(StopRequest::Cancelled { run, job_id })
    }

    fn check_scale(&self, run: &Run) -> Result<()> {
        Err(Error::Refused(format!(
            "run {} runs on Slurm, whose allocation is fixed: its replicas are the job's (a run \
             of another size is a new run, `ddp run SPEC --on slurm --nodes N`)",
            run.record.id
        )))
    }

    /// The workspace's watcher follows the job.
    fn supervised(&self) -> bool {
        false
    }
}
