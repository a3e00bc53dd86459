//! A Slurm job: the run's batch script submitted with `sbatch` (`crate::slurm`); the workspace's
//! watcher, not a supervisor, keeps its `run.json` in step with the job.

use std::path::Path;

use ddp_trainer::spec::Spec;

use super::{Engine, SpecSummary, Started, StopRequest};
use crate::run::Run;
use crate::{Error, Result};

pub(super) struct Slurm;

impl Engine for Slurm {
    /// The nodes check the run: devices and data are theirs, not this machine's.
    fn check(&self, _spec: &Spec, _spec_path: &Path) -> Result<()> {
        Ok(())
    }

    /// A new job from the run's script; resumed, it goes on from the newest checkpoint.
    fn start(&self, mut run: Run, spec: &Spec, _resume: bool) -> Result<Started> {
        crate::slurm::submit::submit(&mut run, spec)?;
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
        crate::slurm::submit::stop(&run)?;
        Ok(StopRequest::Cancelled { run, job_id })
    }

    fn check_scale(&self, run: &Run) -> Result<()> {
        Err(Error::Refused(format!(
            "run {} runs on Slurm, whose allocation is fixed: stop it and resume it with \
             other --nodes to change its size",
            run.record.id
        )))
    }
}
