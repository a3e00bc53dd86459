//! What a front end asks for when it starts runs: [`NewRun`] (`ddp run`), with [`RunOn`], and
//! [`NewSweep`] (`ddp sweep`). The command lines build these (`crate::commands`), the actions
//! carry them out (`crate::actions`); this module imports nothing of its siblings.

use std::path::PathBuf;

/// A request for a new run (what `ddp run` takes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewRun {
    /// The spec file; with `spec_text`, the name the spec goes by in messages, and relative data
    /// paths resolve against its folder (the file itself need not exist).
    pub spec: PathBuf,
    /// The spec itself (TOML), instead of reading `spec`: a spec written in a notebook cell.
    pub spec_text: Option<String>,
    /// The executable the replicas run instead of the built-in trainer (`--trainer PATH`: a
    /// program made with `ddp_trainer::main_with`); checked before anything is created.
    pub trainer: Option<PathBuf>,
    /// A folder moved into the new run as `code/` (the crate a notebook cell was built from,
    /// with its build); a `trainer` inside it is recorded at its new place. Before the trainer
    /// is built, a request with `code` and no `trainer` passes `actions::check_new_run` for a custom
    /// model; `actions::start_run` needs both.
    pub code: Option<PathBuf>,
    /// `KEY=VALUE` spec overrides (`--set`), applied in order.
    pub overrides: Vec<String>,
    /// The number of replicas (`ddp.replicas`), applied after `overrides`.
    pub replicas: Option<usize>,
    /// A name for the run (shown by `ddp ls` / `ddp show`).
    pub name: Option<String>,
    /// The command line recorded in `run.json` (`ddp run ...`, or what the front end did).
    pub command: Vec<String>,
    /// Where the replicas run: on this machine under a supervisor, or in a Slurm job.
    pub on: RunOn,
    /// The options given on the command line that belong to one engine (`--nodes`, ... are
    /// Slurm's; `--master`, ... Spark's), with it: refused for a run on another
    /// ([`NewRun::foreign_options`]).
    pub engine_options: Vec<(RunOn, String)>,
}

/// Where a run's replicas run (`--on`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RunOn {
    /// On this machine, under a supervisor process.
    #[default]
    Local,
    /// In a Slurm job submitted with `sbatch` (docs/slurm.md).
    Slurm,
    /// In a barrier stage of a Spark application, submitted with `spark-submit` by the run's
    /// supervisor (docs/spark.md).
    Spark,
}

impl RunOn {
    /// The engine's name, as `--on` takes it.
    pub fn name(self) -> &'static str {
        match self {
            RunOn::Local => "local",
            RunOn::Slurm => "slurm",
            RunOn::Spark => "spark",
        }
    }

    /// The engine's name in a sentence.
    pub fn title(self) -> &'static str {
        match self {
            RunOn::Local => "this machine",
            RunOn::Slurm => "Slurm",
            RunOn::Spark => "Spark",
        }
    }
}

impl NewRun {
    /// The first engine other than [`NewRun::on`] whose options were given, and those options,
    /// in the order given; none when every option given is the run's engine's.
    pub fn foreign_options(&self) -> Option<(RunOn, Vec<&str>)> {
        let (other, _) = self.engine_options.iter().find(|(e, _)| *e != self.on)?;
        let flags = self
            .engine_options
            .iter()
            .filter(|(e, _)| e == other)
            .map(|(_, f)| f.as_str())
            .collect();
        Some((*other, flags))
    }

    /// A request for `spec` with no overrides, name or command.
    pub fn new(spec: impl Into<PathBuf>) -> NewRun {
        NewRun {
            spec: spec.into(),
            ..NewRun::default()
        }
    }

    /// `overrides` with `replicas` appended as `ddp.replicas=N`.
    pub fn all_overrides(&self) -> Vec<String> {
        let mut all = self.overrides.clone();
        if let Some(n) = self.replicas {
            all.push(format!("ddp.replicas={n}"));
        }
        all
    }
}

/// A request for a sweep (what `ddp sweep` takes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSweep {
    pub spec: PathBuf,
    /// `KEY=V1,V2,...` axes (`--grid`): one run per combination.
    pub grid: Vec<String>,
    /// `KEY=VALUE` overrides of every run (`--set`).
    pub overrides: Vec<String>,
    /// The number of replicas of every run (`ddp.replicas`), applied after `overrides`.
    pub replicas: Option<usize>,
    /// At most this many runs of the sweep at a time (at least 1; `None`: as devices allow).
    pub max_parallel: Option<usize>,
    /// A name for the sweep (its runs are named `NAME/<combination>`).
    pub name: Option<String>,
    /// The command line recorded in the sweep's manifest and its runs.
    pub command: Vec<String>,
    /// The executable every run's replicas run (`--trainer`), as for [`NewRun::trainer`].
    pub trainer: Option<PathBuf>,
    /// `KEY=KIND:ARGS` parameters (`--param`) drawn for each of `trials` (a random search).
    pub params: Vec<String>,
    /// How many trials a random search draws (`--trials`).
    pub trials: Option<u32>,
    /// The seed of a random search's draws (`--seed`; default 0).
    pub seed: Option<u64>,
    /// A sweep file (TOML): the space, how it is searched, the scheduler (`--file`).
    pub file: Option<PathBuf>,
    /// A scheduler that stops bad trials early (`--scheduler asha` and its settings).
    pub scheduler: Option<SchedulerRequest>,
}

/// `--scheduler NAME` and its settings, as given (checked by the sweep's planning).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerRequest {
    pub name: String,
    /// `val_loss`, `val_accuracy` or `perplexity` (default `val_loss`).
    pub metric: Option<String>,
    /// `min` or `max` (default: the metric's).
    pub mode: Option<String>,
    /// `epochs` or `steps` (default `epochs`).
    pub unit: Option<String>,
    /// The first rung's budget (default 1).
    pub min: Option<u64>,
    /// The last rung's budget (default: the spec's `train.epochs`, or `train.steps`).
    pub max: Option<u64>,
    /// The reduction factor (default 3).
    pub eta: Option<u64>,
}
