//! Runs on Spark (`ddp run SPEC --on spark`), as Spark's TorchDistributor runs PyTorch: the run
//! folder is created as for a local run and its supervisor, instead of launching the replicas
//! itself, writes a small driver program into the folder (`spark/driver.py`, with what it runs
//! in `spark/job.json`) and runs `spark-submit` on it. The driver waits until the cluster offers
//! a slot for every task at once, then starts one barrier stage of `spark.tasks` tasks; each
//! runs its replica (or, with GPUs per task, the trainer's launcher of several) with torchrun's
//! variables (task 0's host and a port agreed through the barrier as the rendezvous). The
//! replicas write into the run folder, so every front end follows the run as it follows a local
//! one. The supervisor follows the application (`spark/state.json`: its id, web UI, phase and
//! stage attempt, into `run.json`), asks it to stop (`spark/stop`: the replicas checkpoint),
//! and reads how it ended (`spark/failure.json`: the failing rank, or why the cluster could not
//! run it). Spark itself runs a failed stage again: those are the run's restarts.
//!
//! Layout:
//! - [`SparkApp`], the application as `run.json` records it, is the run record's.
//! - this file: the Spark `Engine` (checking a new run, recording its application, the
//!   supervisor's attempts: one `spark-submit` each, its state followed into `run.json`).
//! - `submit`: [`Installation`] (finding `spark-submit`, its Python and Java),
//!   [`check_master`] (what can be known of the master before a run), [`Job`] (what the driver
//!   runs), [`AppState`] (what it reports) and [`submit_once`] (one `spark-submit`, followed to
//!   its end).
//! - `driver.py`: the driver program.

pub mod submit;

pub use crate::runs::run::SparkApp;

use std::path::Path;
use std::sync::atomic::Ordering;

use ddp_trainer::spec::Spec;

use super::local::{signal_supervisor, start_supervised};
use super::{AttemptInputs, Engine, Started, StopRequest};
use crate::engine::policy::Attempt;
use crate::runs::run::{Run, RunStatus, SupervisorEvent, locked};
use crate::{Error, Result};

pub(super) struct Spark;

impl Engine for Spark {
    /// Spark's client (PySpark, Java) is there, and the master can run the stage.
    fn check(&self, spec: &Spec, spec_path: &Path) -> Result<()> {
        submit::Installation::find()?;
        let master = submit::master_of(spec);
        submit::check_master(&master, spec.spark.task_count(spec.ddp.replicas))
            .map_err(|e| Error::Invalid(format!("{}: {e}", spec_path.display())))
    }

    fn created(&self, run: &mut Run, spec: &Spec) -> Result<()> {
        run.update(|r| {
            r.spark = Some(SparkApp {
                master: submit::master_of(spec),
                tasks: spec.spark.task_count(spec.ddp.replicas),
                ..Default::default()
            })
        })
    }

    fn start(&self, run: Run, spec: &Spec, resume: bool) -> Result<Started> {
        start_supervised(run, spec, resume)
    }

    fn stop(&self, run: Run) -> Result<StopRequest> {
        signal_supervisor(run)
    }

    /// `spark-submit` of the run's driver, whose barrier stage runs the replica command in
    /// every task; the application followed into `run.json` ([`spark_state`]).
    fn attempt(&self, inputs: &AttemptInputs) -> Attempt {
        let dir = locked(inputs.run).dir.clone();
        // A pause of an earlier launch is over.
        let _ = std::fs::remove_file(dir.join(ddp_trainer::train::PAUSED_FILE));
        let mut command = vec![inputs.program.display().to_string()];
        command.extend(inputs.args.iter().map(|a| a.to_string_lossy().into_owned()));
        match submit(inputs, command) {
            Attempt::Completed => match ddp_trainer::train::paused_at(&dir) {
                Some((epoch, step)) => Attempt::Paused { epoch, step },
                None => Attempt::Completed,
            },
            other => other,
        }
    }

    /// A barrier stage has its tasks from the start to the end.
    fn check_scale(&self, run: &Run) -> Result<()> {
        Err(Error::Refused(format!(
            "run {} runs on Spark, whose barrier stage has a fixed number of tasks: its replicas \
             are the stage's (a run of another size is a new run, `ddp run SPEC --on spark \
             --tasks N`)",
            run.record.id
        )))
    }
}

/// One launch of a run on Spark: `spark-submit` of the run's driver, its application recorded
/// in `run.json` as the driver reports it ([`crate::engine::spark`]).
fn submit(inputs: &AttemptInputs, command: Vec<String>) -> Attempt {
    let AttemptInputs {
        run,
        spec,
        threads,
        replica_env,
        resume,
        stop,
        ..
    } = *inputs;
    let (dir, id) = {
        let r = locked(run);
        (r.dir.clone(), r.record.id.clone())
    };
    // The driver and the executors are given whole paths (they start elsewhere).
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let mut env: std::collections::BTreeMap<String, String> = replica_env.iter().cloned().collect();
    for key in ["RAYON_NUM_THREADS", "DDP_THREADS"] {
        env.insert(key.to_string(), threads.to_string());
    }
    let folder = dir.join(submit::SPARK_DIR);
    let job = submit::Job {
        name: format!("ddp-{id}"),
        tasks: spec.spark.task_count(spec.ddp.replicas),
        replicas_per_task: spec.spark.replicas_per_task(),
        command,
        resume,
        env,
        out: dir.clone(),
        logs: dir.join("logs"),
        // The replicas start where a local launch's would (relative data paths).
        cwd: std::env::current_dir().unwrap_or_else(|_| dir.clone()),
        state: folder.join("state.json"),
        failure: folder.join("failure.json"),
        stop: folder.join("stop"),
        wait_s: spec.spark.wait_secs(),
        // Spark's attempts of the stage are the restarts left (and the first attempt).
        stage_attempts: spec
            .restart
            .max_restarts
            .saturating_sub(locked(run).record.restarts)
            .saturating_add(1),
    };
    // Queued until the application's stage runs (the driver says so).
    {
        let mut r = locked(run);
        let master = submit::master_of(spec);
        let _ = r.transition(
            SupervisorEvent::Queued {
                waiting_for: format!("Spark application: submitted to {master}"),
            },
            |r| {
                r.status = RunStatus::Queued;
                if let Some(app) = r.spark.as_mut() {
                    *app = SparkApp {
                        master: master.clone(),
                        tasks: app.tasks,
                        ..Default::default()
                    };
                }
            },
        );
    }
    // Where this launch's lines start in each rank's log, for the failing one's error.
    let logs = crate::runs::logs::AttemptLogs::mark(&dir, spec.ddp.replicas);
    let hook_run = run.clone();
    let mut on_state = move |state: &submit::AppState| {
        // Best effort: the run goes on if its record cannot say so.
        let _ = spark_state(&mut locked(&hook_run), state);
    };
    let ended = submit::submit_once(
        &dir,
        spec,
        &job,
        &|| stop.load(Ordering::SeqCst),
        &mut on_state,
    );
    if ended.refused {
        let _ = locked(run).update(|r| {
            if let Some(app) = r.spark.as_mut() {
                app.refused = true;
                app.waiting = None;
            }
        });
    }
    match ended.outcome {
        Attempt::ReplicaFailed { rank, exit, .. } => Attempt::ReplicaFailed {
            rank,
            exit,
            error: logs.error_of(rank),
        },
        other => other,
    }
}

/// The run's record follows its Spark application: queued while it waits for executors (an
/// event per reason), running once its stage runs, restarting when Spark runs the stage again.
fn spark_state(run: &mut Run, state: &submit::AppState) -> Result<()> {
    let before = run.record.spark.clone().unwrap_or_default();
    let waiting = state.is_waiting().then(|| state.waiting.clone()).flatten();
    let status = run.record.status;
    run.update(|r| {
        if let Some(app) = r.spark.as_mut() {
            app.app_id = state.app_id.clone();
            app.ui = state.ui.clone();
            app.waiting = waiting.clone();
            app.stage_retries = app.stage_retries.max(state.attempt);
        }
    })?;
    if let Some(why) = &waiting
        && before.waiting.as_ref() != Some(why)
    {
        run.transition(
            SupervisorEvent::Queued {
                waiting_for: format!("Spark application: {why}"),
            },
            |r| r.status = RunStatus::Queued,
        )?;
    } else if state.attempt > before.stage_retries {
        let attempt = run.record.restarts + (state.attempt - before.stage_retries);
        run.transition(
            SupervisorEvent::Restarting {
                attempt,
                after_s: 0.0,
                reason: format!(
                    "Spark ran the barrier stage again (attempt {})",
                    state.attempt + 1
                ),
            },
            |r| {
                r.restarts = attempt;
                r.status = RunStatus::Running;
            },
        )?;
    } else if waiting.is_none() && status == RunStatus::Queued {
        run.update(|r| r.status = RunStatus::Running)?;
    }
    Ok(())
}
