//! Submitting a run to Slurm, stopping its job and submitting it again: the executors behind
//! `ddp run --on slurm`, `ddp stop` and `ddp resume` of such a run.

use ddp_trainer::cli::ReplicaArgs;
use ddp_trainer::spec::{DEFAULT_WARN_S, DeviceKeyword, Devices, Spec};

use super::client;
use super::script::{JobPlan, SCRIPT};
use super::watcher::ensure_watcher;
use crate::invocation::HiddenCommand;
use crate::runs::run::{Run, RunStatus, SlurmJob, SupervisorEvent, workspace_root};
use crate::{Error, Result};

/// The marker `ddp stop` leaves so that the job's script does not requeue it and the watcher
/// calls its cancellation a stop.
pub const STOP_MARKER: &str = "slurm/stop";

/// The batch script's plan for `run` (its frozen `spec`): the replicas run this executable's
/// built-in trainer (`EXE __replica`), or the run's own (`--trainer`).
pub fn job_plan(run: &Run, spec: &Spec) -> Result<JobPlan> {
    // The job runs elsewhere, from another folder: every path it is given is absolute.
    let run_dir = std::path::absolute(&run.dir).map_err(|e| Error::io(&run.dir, e))?;
    let replica_args = ReplicaArgs::new(run_dir.join(crate::runs::run::SPEC), &run_dir);
    let (program, args) = match &run.record.trainer {
        Some(t) => (t.clone(), replica_args.to_args()),
        None => (
            std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", e))?,
            HiddenCommand::Replica(replica_args).to_args(),
        ),
    };
    let replica = std::iter::once(program.into_os_string())
        .chain(args)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let s = &spec.slurm;
    Ok(JobPlan {
        run_dir,
        job_name: format!("ddp-{}-{}", run.record.experiment, run.record.id),
        replica,
        nodes: s.node_count(),
        tasks_per_node: s.replicas_per_node(spec.ddp.replicas),
        // a CPU run's "GPUs per node" are its tasks per node: no GPU is asked for
        gpus_per_node: s.gpus_per_node.filter(|_| !runs_on_cpu(spec)),
        partition: s.partition.clone(),
        time: s.time.clone(),
        account: s.account.clone(),
        qos: s.qos.clone(),
        constraint: s.constraint.clone(),
        sbatch_args: s.sbatch_args.clone(),
        warn_s: s.warn_s.unwrap_or(DEFAULT_WARN_S),
        max_restarts: spec.restart.max_restarts,
        elastic: spec.ddp.elastic.is_some(),
    })
}

/// Whether the spec asks for CPUs only (`ddp.devices = "cpu"`).
fn runs_on_cpu(spec: &Spec) -> bool {
    spec.ddp.devices == Devices::Named(DeviceKeyword::Cpu)
}

/// Writes `job.sbatch` into the (queued) run's folder, submits it, records the job in
/// `run.json` and makes sure the workspace's watcher follows it. A failed submission marks the
/// run failed with sbatch's message, which is returned.
pub fn submit(run: &mut Run, spec: &Spec) -> Result<()> {
    let plan = job_plan(run, spec)?;
    let script = run.dir.join(SCRIPT);
    crate::files::fsutil::write_atomic(&script, plan.script().as_bytes())?;
    let _ = std::fs::remove_file(run.dir.join(STOP_MARKER));
    let _ = std::fs::remove_file(run.dir.join("slurm").join("exit"));
    let job_id = match client::sbatch(&script) {
        Ok(id) => id,
        Err(e) => {
            let msg = e.to_string();
            run.transition(
                SupervisorEvent::Failed {
                    reason: msg.clone(),
                },
                |r| {
                    r.status = RunStatus::Failed;
                    r.error = Some(msg.clone());
                    r.ended = Some(crate::runs::run::now());
                },
            )?;
            return Err(e);
        }
    };
    let job = SlurmJob {
        job_id: job_id.clone(),
        state: "SUBMITTED".into(),
        reason: None,
        nodes: plan.nodes,
        node_list: None,
        requeues: 0,
    };
    run.transition(
        SupervisorEvent::Queued {
            waiting_for: format!("Slurm job {job_id} (submitted)"),
        },
        |r| {
            r.status = RunStatus::Queued;
            r.slurm = Some(job);
            r.supervisor = None;
            r.devices = format!(
                "Slurm: {} node{} × {} replica{}",
                plan.nodes,
                if plan.nodes == 1 { "" } else { "s" },
                plan.tasks_per_node,
                if plan.tasks_per_node == 1 { "" } else { "s" }
            );
        },
    )?;
    ensure_watcher(&workspace_root(&run.dir))
}

/// Cancels the run's job (`scancel`) after leaving the stop marker; the watcher then records
/// the run as stopped once Slurm says CANCELLED.
pub fn stop(run: &Run) -> Result<()> {
    let job = run
        .record
        .slurm
        .as_ref()
        .ok_or_else(|| Error::Invalid(format!("run {} is not on Slurm", run.record.id)))?;
    let marker = run.dir.join(STOP_MARKER);
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    crate::files::fsutil::write_atomic(&marker, b"stop requested by ddp stop\n")?;
    client::scancel(&job.job_id)?;
    ensure_watcher(&workspace_root(&run.dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::run::RunRecord;

    fn plan(devices: &str) -> JobPlan {
        let tmp = tempfile::tempdir().unwrap();
        let text = format!(
            "name = 'gpus'\n[model]\nname = 'mlp'\n[data]\nname = 'synthetic'\n[ddp]\nreplicas = 4\n\
             devices = {devices}\n[slurm]\nnodes = 2\ngpus_per_node = 2\n"
        );
        let spec = Spec::parse(&text, std::path::Path::new("spec.toml"), &[]).unwrap();
        job_plan(&RunRecord::sample().in_dir(tmp.path()), &spec).unwrap()
    }

    #[test]
    fn gpus_per_node_asks_for_gpus_unless_the_run_is_on_cpus() {
        let gpus = plan("'auto'");
        assert_eq!((gpus.tasks_per_node, gpus.gpus_per_node), (2, Some(2)));
        assert!(gpus.script().contains("#SBATCH --gpus-per-node=2\n"));
        let cpus = plan("'cpu'");
        assert_eq!((cpus.tasks_per_node, cpus.gpus_per_node), (2, None));
        assert!(!cpus.script().contains("--gpus-per-node"));
        assert!(cpus.script().contains("#SBATCH --ntasks-per-node=2\n"));
    }
}
