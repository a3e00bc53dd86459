//! This machine: the run's supervisor (`crate::engine::supervisor`, a detached process, spawned here)
//! launches the replicas here, on the devices the plan gives them.

use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ddp_trainer::launcher::{
    Ended, LaunchOptions, ReplicaFailure, SpawnHook, StopCause, launch_ended,
};
use ddp_trainer::spec::Spec;

use super::{AttemptInputs, Engine, SpecSummary, Started, StopRequest};
use crate::engine::policy::{Attempt, Exit};
use crate::invocation::HiddenCommand;
use crate::runs::logs::AttemptLogs;
use crate::runs::run::{Run, RunStatus, locked};
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

    /// The replicas launched here ([`LaunchOptions::for_spec`], with the devices' threads and
    /// variables), their pids recorded as they start; a typed launch outcome becomes the
    /// attempt's.
    fn attempt(&self, inputs: &AttemptInputs) -> Attempt {
        let (run, spec) = (inputs.run, inputs.spec);
        let dir = locked(run).dir.clone();
        let mut opts = LaunchOptions::for_spec(spec, spec.ddp.replicas, inputs.program, &dir);
        opts.args = inputs.args.clone();
        // The device plan's threads (`ddp.threads`, else the cores the run was given).
        opts.threads_per_replica = Some(inputs.threads);
        opts.echo = false;
        opts.env.extend(inputs.replica_env.iter().cloned());
        opts.env.push((
            "TORCHELASTIC_RESTART_COUNT".into(),
            locked(run).record.restarts.to_string(),
        ));
        // Where this attempt's lines start in each rank's log.
        let logs = AttemptLogs::mark(&dir, spec.ddp.replicas);
        let hook_run = run.clone();
        opts.on_spawn = Some(SpawnHook(Arc::new(move |rank, pid| {
            let mut r = locked(&hook_run);
            // Best effort: a failure to record a pid must not kill the launch.
            let _ = r.update(|r| {
                r.replica_pids.insert(rank, pid);
            });
        })));
        let failed = |failure: &ReplicaFailure| {
            let exit = failure.exit.clone();
            // A replica that stopped on our request is a stop, not a failure.
            if inputs.stop.load(Ordering::SeqCst) && exit == Exit::Exited(143) {
                return Attempt::Stopped;
            }
            // A replica that exited (not killed) said why on its last error line.
            let error = match exit {
                Exit::Exited(_) => logs.error_of(failure.rank),
                Exit::Signaled { .. } | Exit::Lost(_) => None,
            };
            Attempt::ReplicaFailed {
                rank: failure.rank,
                exit,
                error,
            }
        };
        match launch_ended(&opts) {
            Ok(Ended::Completed) => Attempt::Completed,
            Ok(Ended::Paused { epoch, step }) => Attempt::Paused { epoch, step },
            // `ddp stop` (SIGTERM to this process, passed on to the replicas).
            Ok(Ended::Stopped(StopCause::Signal { .. }) | Ended::Interrupted { .. }) => {
                inputs.stop.store(true, Ordering::SeqCst);
                Attempt::Stopped
            }
            // Replicas that stopped on a request of their own, not ours, go on from their
            // checkpoint (restartable, exit 143).
            Ok(Ended::Stopped(StopCause::Replica(failure)) | Ended::Failed(failure)) => {
                failed(&failure)
            }
            Err(e) => Attempt::LaunchFailed(e.to_string()),
        }
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
    use crate::engine::devices;
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

/// Starts `EXE __supervise RUN_DIR` (`EXE`: this executable, see [`crate::run_hidden_command`])
/// as a detached process (its own session, so it survives the terminal and the caller), with its
/// output in `logs/supervisor.log`. The caller should reap the child if it outlives it (`wait` on
/// it from a thread), or simply drop it.
fn spawn_supervisor(run_dir: &Path, resume: bool) -> Result<std::process::Child> {
    let cmd = HiddenCommand::Supervise {
        run_dir: run_dir.to_path_buf(),
        resume,
    };
    crate::engine::detach::spawn_detached(
        cmd.to_args(),
        &run_dir.join("logs").join("supervisor.log"),
    )
}
