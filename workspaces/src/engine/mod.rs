//! Where a run's replicas run, and everything that keeps them running: one [`Engine`] each for
//! this machine (`local`), a Slurm job (`slurm`) and a Spark application (`spark`). The actions
//! ask the run's engine to check a new run, start or resume it, stop it and scale it, instead of
//! branching on where it runs: a new engine is one more folder here and one more [`RunOn`].
//!
//! Layout:
//! - this file: the trait, what starting and stopping return ([`Started`], [`StopRequest`]),
//!   what a supervised attempt starts from ([`AttemptInputs`]) and which engine a request or a
//!   run has ([`for_request`], [`of_run`]).
//! - `local`: the launcher here; the supervisor process spawned.
//! - `slurm`: runs on Slurm (`--on slurm`): the batch script, submitting, stopping and
//!   resubmitting a job, `squeue --json`, the status policy, and the workspace's watcher process
//!   (`__slurm-watch`) that keeps such runs' `run.json` in step with their jobs.
//! - `spark`: runs on Spark (`--on spark`): the driver program written into the run folder,
//!   `spark-submit` run and followed by the run's supervisor, the application in `run.json`.
//! - `supervisor`: the per-run supervisor process (attempts through the run's engine,
//!   restarts, stop).
//! - `policy`: the restart policy (pure).
//! - `detach`: starting a hidden sub-command of this executable as a detached process (the
//!   supervisor, the Slurm watcher).
//! - `devices`: GPU discovery (NVML / DDP_SIMULATED_GPUS, CUDA_VISIBLE_DEVICES), placement
//!   policy, per-GPU locks, the device queue, device telemetry (GPUs, CPU, memory, the runs'
//!   processes) for a devices view.

pub mod detach;
pub mod devices;
mod local;
pub mod policy;
pub mod slurm;
pub mod spark;
pub mod supervisor;

use std::ffi::OsString;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use ddp_trainer::spec::Spec;
use serde::Serialize;

pub use local::spawn_supervisor_or_fail;

use crate::Result;
use crate::engine::policy::Attempt;
use crate::request::RunOn;
use crate::runs::run::{Run, RunRecord, RunsOn};

/// Where a run's replicas run.
pub trait Engine: Sync {
    /// Checks, before anything is created, that a new run of `spec` (from `spec_path`, for the
    /// messages) can run on this engine: [`Error::Invalid`](crate::Error::Invalid) (exit 2) saying
    /// what to change where it cannot.
    fn check(&self, spec: &Spec, spec_path: &Path) -> Result<()>;

    /// What the engine records in a new (queued) run before it starts it.
    fn created(&self, _run: &mut Run, _spec: &Spec) -> Result<()> {
        Ok(())
    }

    /// Starts the queued run (`resume`: from its newest checkpoint): its supervisor on this
    /// machine, or its job submitted.
    fn start(&self, run: Run, spec: &Spec, resume: bool) -> Result<Started>;

    /// Asks the live run to stop (its replicas finish their step and checkpoint).
    fn stop(&self, run: Run) -> Result<StopRequest>;

    /// One attempt of the run's replicas under its supervisor (`crate::engine::supervisor`), to its end;
    /// never fails itself, it reports how the attempt ended. A run on Slurm has no supervisor
    /// (the workspace's watcher follows its job).
    fn attempt(&self, _inputs: &AttemptInputs) -> Attempt {
        Attempt::LaunchFailed("this run's engine starts no supervised attempts".to_string())
    }

    /// Refuses to scale the run when its engine's allocation is fixed
    /// ([`Error::Refused`](crate::Error::Refused), saying what to do instead).
    fn check_scale(&self, _run: &Run) -> Result<()> {
        Ok(())
    }

    /// Whether the engine's runs have a supervisor process (a run on Slurm has the workspace's
    /// watcher instead): a queued run without one long after its creation was orphaned.
    fn supervised(&self) -> bool {
        true
    }
}

/// What one supervised attempt starts from: the run (shared with the supervisor's hooks), the
/// replica program and its arguments, the spec, the devices' threads and variables, whether it
/// resumes, and the supervisor's stop flag (set on `ddp stop`; an engine sets it too when the
/// stop reached it first).
pub struct AttemptInputs<'a> {
    pub run: &'a Arc<Mutex<Run>>,
    pub program: &'a Path,
    pub args: Vec<OsString>,
    pub spec: &'a Spec,
    pub threads: usize,
    pub replica_env: &'a [(String, String)],
    pub resume: bool,
    pub stop: &'a AtomicBool,
}

/// The engine of a new run asked to run `on`.
pub fn for_request(on: RunOn) -> &'static dyn Engine {
    match on {
        RunOn::Local => &local::Local,
        RunOn::Slurm => &slurm::Slurm,
        RunOn::Spark => &spark::Spark,
    }
}

/// The engine of an existing run, as its record says (a Slurm job, a Spark application, else
/// this machine).
pub fn of_run(record: &RunRecord) -> &'static dyn Engine {
    match record.runs_on() {
        RunsOn::Slurm(_) => &slurm::Slurm,
        RunsOn::Spark(_) => &spark::Spark,
        RunsOn::Here => &local::Local,
    }
}

/// The essentials of a validated spec, for a front end to show (a "new run" dialog, a progress
/// bar's length, the restart budget).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecSummary {
    /// The spec's `name`.
    pub name: String,
    /// The experiment folder the run goes into (`name` made safe for a folder name).
    pub experiment: String,
    /// `model.name`, as written in specs (`mnist-cnn`, `resnet18`, ...).
    pub model: String,
    /// `data.name`, as written in specs (`mnist`, `cifar10`, `synthetic`, ...).
    pub data: String,
    pub replicas: usize,
    pub epochs: usize,
    /// `train.steps` capped by `train.max_steps`: a run counted in steps (a language model).
    pub steps: Option<u64>,
    /// `restart.max_restarts`.
    pub max_restarts: u32,
}

impl SpecSummary {
    pub fn of(spec: &Spec) -> SpecSummary {
        let text = |v: serde_json::Result<serde_json::Value>| match v {
            Ok(serde_json::Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(e) => e.to_string(),
        };
        SpecSummary {
            name: spec.name.clone(),
            experiment: crate::runs::workspace::sanitize(&spec.name),
            model: text(serde_json::to_value(spec.model.name)),
            data: text(serde_json::to_value(spec.data.name)),
            replicas: spec.ddp.replicas,
            epochs: spec.train.epochs,
            steps: spec
                .train
                .steps
                .map(|n| spec.train.max_steps.map_or(n, |m| m.min(n))),
            max_restarts: spec.restart.max_restarts,
        }
    }
}

/// A run just started: its supervisor spawned, or its Slurm job submitted.
#[derive(Debug)]
pub struct Started {
    /// The run as it was when its supervisor was spawned or its job submitted (status queued).
    pub run: Run,
    pub spec: SpecSummary,
    /// The supervisor process of a run on this machine or on Spark (none for a run on Slurm,
    /// which the workspace's Slurm watcher follows). It runs in its own session and outlives the
    /// caller; a caller that stays alive should reap it when it exits
    /// ([`Started::reap_in_background`]) or it lingers as a zombie; dropping it is fine for a
    /// caller about to exit.
    pub supervisor: Option<Child>,
}

impl Started {
    /// Reaps the supervisor from a background thread when it exits, and returns the run.
    pub fn reap_in_background(self) -> Run {
        if let Some(mut child) = self.supervisor {
            std::thread::spawn(move || child.wait());
        }
        self.run
    }
}

/// What asking a run to stop did.
#[derive(Debug, Clone)]
pub enum StopRequest {
    /// The run had already ended: nothing was sent.
    AlreadyTerminal(Run),
    /// SIGTERM was sent to the run's supervisor (process `pid`): its replicas finish their step
    /// and exit, then it marks the run stopped.
    Signalled { run: Run, pid: u32 },
    /// The run's Slurm job was cancelled (`scancel`); the watcher records it stopped.
    Cancelled { run: Run, job_id: String },
}

impl StopRequest {
    /// The run as read when the request was made.
    pub fn run(&self) -> &Run {
        match self {
            StopRequest::AlreadyTerminal(run)
            | StopRequest::Signalled { run, .. }
            | StopRequest::Cancelled { run, .. } => run,
        }
    }

    /// What every front end says of it.
    pub fn message(&self) -> String {
        match self {
            StopRequest::AlreadyTerminal(run) => {
                format!("run {} is already {}", run.record.id, run.record.status)
            }
            StopRequest::Signalled { run, .. } => format!(
                "stopping run {} (replicas finish their step)...",
                run.record.id
            ),
            StopRequest::Cancelled { run, job_id } => format!(
                "stopping run {}: cancelled Slurm job {job_id} (replicas checkpoint and stop)...",
                run.record.id
            ),
        }
    }
}
