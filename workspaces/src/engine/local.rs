//! This machine: the run's supervisor (`crate::supervisor`, a detached process) launches the
//! replicas here, on the devices the plan gives them.

use std::path::Path;
use std::process::Child;

use ddp_trainer::spec::Spec;

use super::{Engine, SpecSummary, Started, StopRequest};
use crate::run::{Run, RunStatus};
use crate::supervisor::spawn_supervisor;
use crate::{Error, Result};

pub(super) struct Local;

impl Engine for Local {
    fn check(&self, spec: &Spec, spec_path: &Path) -> Result<()> {
        check_devices(spec, spec_path)?;
        // Last: the costliest check (a text or a table is read as a replica reads it).
        ddp_trainer::preflight::check(spec)?;
        Ok(())
    }

    fn start(&self, run: Run, spec: &Spec, resume: bool) -> Result<Started> {
        start_supervised(run, spec, resume)
    }

    fn stop(&self, run: Run) -> Result<StopRequest> {
        signal_supervisor(run)
    }
}

/// Spawns the run's supervisor ([`spawn_supervisor_or_fail`]): a run here, or a Spark run's
/// driver under it.
pub(super) fn start_supervised(mut run: Run, spec: &Spec, resume: bool) -> Result<Started> {
    let supervisor = spawn_supervisor_or_fail(&mut run, resume)?;
    Ok(Started {
        run,
        spec: SpecSummary::of(spec),
        supervisor: Some(supervisor),
    })
}

/// SIGTERM to the run's supervisor. A live run without a supervisor yet (it is being started)
/// is [`Error::Refused`]: try again in a moment.
pub(super) fn signal_supervisor(run: Run) -> Result<StopRequest> {
    let Some(sup) = run.record.supervisor.clone() else {
        return Err(Error::Refused(format!(
            "run {} has no supervisor yet (status {}); try again in a moment",
            run.record.id, run.record.status
        )));
    };
    // SAFETY: kill(2) with a pid we recorded and checked alive (Run::load_checked).
    if unsafe { libc::kill(sup.pid as i32, libc::SIGTERM) } != 0 {
        return Err(Error::Supervisor(format!(
            "cannot signal the supervisor (pid {}): {}",
            sup.pid,
            std::io::Error::last_os_error()
        )));
    }
    Ok(StopRequest::Signalled { run, pid: sup.pid })
}

/// Spawns the supervisor of a created (queued) run; if that fails, marks the run failed with the
/// message and returns it as [`Error::Supervisor`] (`could not start the supervisor: ...`).
pub fn spawn_supervisor_or_fail(run: &mut Run, resume: bool) -> Result<Child> {
    match spawn_supervisor(&run.dir, resume) {
        Ok(c) => Ok(c),
        Err(e) => {
            let msg = format!("could not start the supervisor: {e}");
            run.update(|r| {
                r.status = RunStatus::Failed;
                r.error = Some(msg.clone());
            })?;
            Err(Error::Supervisor(msg))
        }
    }
}

/// Refuses a spec whose devices can never be satisfied (more GPUs asked than exist, a list that
/// does not match the replicas). GPUs held by other runs are not a reason to refuse: the run
/// waits for them.
fn check_devices(spec: &Spec, spec_path: &Path) -> Result<()> {
    use crate::devices;
    let discovery = devices::discover()?;
    let request = devices::DeviceRequest::from_spec(&spec.ddp);
    devices::plan(
        &request,
        &discovery,
        &Default::default(),
        devices::available_cores(),
    )
    .map_err(|e| Error::Invalid(format!("{}: {e}", spec_path.display())))?;
    Ok(())
}
