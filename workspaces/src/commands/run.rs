//! The arguments of the commands that start runs: `run` and `sweep`.

use std::path::PathBuf;

use clap::Parser;

use crate::request::{NewRun, NewSweep, RunOn, SchedulerRequest};

/// How a spec is changed and run: overrides, replicas, the trainer executable.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecOptions {
    /// Override a spec key, e.g. --set train.lr=0.01 (repeatable; a sweep applies it to every run).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
    pub overrides: Vec<String>,
    /// Number of replicas (ddp.replicas).
    #[arg(long, value_name = "N")]
    pub replicas: Option<usize>,
    /// Mixed precision (train.precision): f32, bf16, or fp16 with dynamic loss scaling.
    #[arg(long, value_name = "P", value_parser = ["f32", "bf16", "fp16"])]
    pub precision: Option<String>,
    /// Run this executable as the replicas instead of the built-in trainer (a program made with
    /// `main_with` of the trainer library, for `[model] name = "custom"`).
    #[arg(long, value_name = "PATH")]
    pub trainer: Option<PathBuf>,
}

impl SpecOptions {
    /// The spec overrides these options make: `--precision`'s, then every `--set` (so that a
    /// `--set train.precision=...` has the last word).
    pub fn all_overrides(&self) -> Vec<String> {
        let precision = self
            .precision
            .iter()
            .map(|p| format!("train.precision={p}"));
        precision.chain(self.overrides.iter().cloned()).collect()
    }
}

/// Where a run goes: here, or to Slurm with the job's options (each also a `[slurm]` spec
/// key; given here, it overrides the spec's).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct PlaceOptions {
    /// Where the replicas run: `local` (this machine, the default), `slurm` (a Slurm job,
    /// submitted with sbatch; see docs/slurm.md) or `spark` (a Spark application's barrier
    /// stage; see docs/spark.md).
    #[arg(long, value_enum, value_name = "WHERE")]
    pub on: Option<RunOn>,
    /// Slurm: nodes to run on (slurm.nodes).
    #[arg(long, value_name = "N")]
    pub nodes: Option<usize>,
    /// Slurm: replicas per node, one GPU each (slurm.gpus_per_node); ddp.replicas becomes
    /// nodes × G. Without it the spec's replicas are spread evenly over the nodes.
    #[arg(long, value_name = "G")]
    pub gpus_per_node: Option<usize>,
    /// Slurm: the partition (slurm.partition).
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm: the time limit, e.g. 30 or 2:00:00 (slurm.time).
    #[arg(long, value_name = "LIMIT")]
    pub time: Option<String>,
    /// Slurm: the account to charge (slurm.account).
    #[arg(long)]
    pub account: Option<String>,
    /// Slurm: the quality of service (slurm.qos).
    #[arg(long)]
    pub qos: Option<String>,
    /// Slurm: node features required (slurm.constraint).
    #[arg(long)]
    pub constraint: Option<String>,
    /// Slurm: one more sbatch option, passed through, e.g. --sbatch-arg=--mem=8G (repeatable;
    /// replaces slurm.sbatch_args).
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// Spark: the master URL (spark.master; default $SPARK_MASTER, else local[N]).
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    /// Spark: tasks of the barrier stage (spark.tasks); ddp.replicas becomes tasks × G.
    #[arg(long, value_name = "N")]
    pub tasks: Option<usize>,
    /// Spark: GPUs per task, one replica each (spark.gpus_per_task).
    #[arg(long, value_name = "G")]
    pub gpus_per_task: Option<usize>,
    /// Spark: one more configuration key, e.g. --spark-conf spark.executor.memory=4g
    /// (repeatable; added to spark.conf).
    #[arg(long = "spark-conf", value_name = "KEY=VALUE", value_parser = key_value)]
    pub spark_conf: Vec<String>,
}

impl PlaceOptions {
    /// The `slurm.*` overrides these options stand for, and the options given (for the
    /// message when they come without `--on slurm`).
    fn overrides(&self) -> (Vec<String>, Vec<&'static str>) {
        let text = |v: &str| toml::Value::String(v.to_string()).to_string();
        let mut o = Vec::new();
        let mut given = Vec::new();
        if let Some(n) = self.nodes {
            o.push(format!("slurm.nodes={n}"));
            given.push("--nodes");
        }
        if let Some(g) = self.gpus_per_node {
            o.push(format!("slurm.gpus_per_node={g}"));
            given.push("--gpus-per-node");
        }
        for (key, flag, value) in [
            ("partition", "--partition", &self.partition),
            ("time", "--time", &self.time),
            ("account", "--account", &self.account),
            ("qos", "--qos", &self.qos),
            ("constraint", "--constraint", &self.constraint),
        ] {
            if let Some(v) = value {
                o.push(format!("slurm.{key}={}", text(v)));
                given.push(flag);
            }
        }
        if !self.sbatch_args.is_empty() {
            let items: Vec<String> = self.sbatch_args.iter().map(|a| text(a)).collect();
            o.push(format!("slurm.sbatch_args=[{}]", items.join(", ")));
            given.push("--sbatch-arg");
        }
        (o, given)
    }

    /// The `spark.*` overrides these options stand for, and the options given.
    fn spark_overrides(&self) -> (Vec<String>, Vec<&'static str>) {
        let text = |v: &str| toml::Value::String(v.to_string()).to_string();
        let mut o = Vec::new();
        let mut given = Vec::new();
        if let Some(m) = &self.master {
            o.push(format!("spark.master={}", text(m)));
            given.push("--master");
        }
        if let Some(n) = self.tasks {
            o.push(format!("spark.tasks={n}"));
            given.push("--tasks");
        }
        if let Some(g) = self.gpus_per_task {
            o.push(format!("spark.gpus_per_task={g}"));
            given.push("--gpus-per-task");
        }
        if !self.spark_conf.is_empty() {
            let items: Vec<String> = self
                .spark_conf
                .iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| format!("{} = {}", text(k), text(v)))
                .collect();
            o.push(format!("spark.conf={{{}}}", items.join(", ")));
            given.push("--spark-conf");
        }
        (o, given)
    }
}

/// The options of every command that starts one run (`ddp run`, `%ddp run`, `%%ddp run`,
/// `%%ddp train`, the TUI's new-run dialog).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct RunOptions {
    #[command(flatten)]
    pub spec: SpecOptions,
    /// A name for the run (shown by ls/show).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub place: PlaceOptions,
}

impl RunOptions {
    /// The request for a run of `spec` with these options, recording `command`. Slurm's
    /// options become `slurm.*` overrides; given without `--on slurm` they are refused when
    /// the request is checked.
    pub fn new_run(self, spec: PathBuf, command: Vec<String>) -> NewRun {
        let on = self.place.on.unwrap_or_default();
        let (slurm, given) = self.place.overrides();
        let (spark, spark_given) = self.place.spark_overrides();
        let mut overrides = self.spec.all_overrides();
        overrides.extend(slurm);
        overrides.extend(spark);
        let mut replicas = self.spec.replicas;
        if let (None, Some(g)) = (replicas, self.place.gpus_per_node) {
            replicas = Some(self.place.nodes.unwrap_or(1) * g);
        }
        if let (None, Some(n)) = (replicas, self.place.tasks) {
            replicas = Some(n * self.place.gpus_per_task.unwrap_or(1));
        }
        NewRun {
            spec,
            overrides,
            replicas,
            trainer: self.spec.trainer,
            name: self.name,
            command,
            on,
            engine_options: (given.iter().map(|g| (RunOn::Slurm, g.to_string())))
                .chain(spark_given.iter().map(|g| (RunOn::Spark, g.to_string())))
                .collect(),
            ..NewRun::default()
        }
    }
}

/// `run SPEC [--set KEY=VALUE]... [--replicas N] [--trainer PATH] [--name NAME] [--on slurm ...]`.
#[derive(Parser, Debug, Clone, PartialEq, Eq, Default)]
pub struct RunArgs {
    /// The experiment spec (TOML).
    pub spec: PathBuf,
    #[command(flatten)]
    pub options: RunOptions,
}

impl RunArgs {
    /// The request for this run, recording `command`.
    pub fn new_run(self, command: Vec<String>) -> NewRun {
        self.options.new_run(self.spec, command)
    }
}

/// `sweep SPEC --grid KEY=V1,V2,... [--grid ...] [--set KEY=VALUE]... [--replicas N]
/// [--max-parallel N] [--trainer PATH] [--name NAME] [--json]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct SweepArgs {
    // An `Option` only so that `sweep show ID` and its siblings parse without one.
    /// The experiment spec (TOML) every run starts from.
    #[arg(required = true)]
    pub spec: Option<PathBuf>,
    /// A spec key and its values, e.g. --grid train.lr=0.001,0.01 (repeatable: the runs are
    /// the cartesian product; commas inside [...] or quotes do not split).
    #[arg(long = "grid", value_name = "KEY=V1,V2,...", required_unless_present_any = ["params", "file"])]
    pub grid: Vec<String>,
    /// A parameter drawn for each trial of a random search, e.g. --param
    /// train.lr=loguniform:1e-4:1e-1 (KIND: choice:V1,V2,..., uniform:LOW:HIGH,
    /// loguniform:LOW:HIGH, int:LOW:HIGH; repeatable; needs --trials).
    #[arg(long = "param", value_name = "KEY=KIND:ARGS", conflicts_with = "grid")]
    pub params: Vec<String>,
    /// How many trials a random search draws.
    #[arg(long, value_name = "N", requires = "params")]
    pub trials: Option<u32>,
    /// The seed of a random search (the same seed draws the same trials).
    #[arg(long, value_name = "N", requires = "params")]
    pub seed: Option<u64>,
    /// A sweep file (TOML: [search] method, trials, seed, max_parallel, params; [scheduler]),
    /// instead of --grid/--param.
    #[arg(long, value_name = "SWEEP.toml", conflicts_with_all = ["grid", "params", "scheduler"])]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub scheduler: SchedulerOptions,
    #[command(flatten)]
    pub options: SpecOptions,
    /// At most N runs of the sweep at a time, also after --detach (default: all that the
    /// devices allow).
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<usize>,
    /// A name for the sweep (its runs are named `NAME/COMBINATION`).
    #[arg(long)]
    pub name: Option<String>,
    /// Print JSON: the sweep once started with --detach, else the comparison at the end.
    #[arg(long)]
    pub json: bool,
}

/// `--scheduler asha [--metric M] [--mode min|max] [--unit epochs|steps] [--min-budget N]
/// [--max-budget N] [--eta N]`: stop bad trials early.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct SchedulerOptions {
    /// Stop bad trials early: `asha` (asynchronous successive halving): a trial reaching a
    /// rung goes on only in the top 1/eta of that rung, else it is paused (and maybe resumed).
    #[arg(long, value_name = "asha", value_parser = ["asha"])]
    pub scheduler: Option<String>,
    /// The metric trials are compared by at each rung.
    #[arg(long, requires = "scheduler", value_parser = ["val_loss", "val_accuracy", "perplexity"])]
    pub metric: Option<String>,
    /// Whether smaller or larger is better (default: the metric's).
    #[arg(long, requires = "scheduler", value_parser = ["min", "max"])]
    pub mode: Option<String>,
    /// What the budgets count (default epochs).
    #[arg(long, requires = "scheduler", value_parser = ["epochs", "steps"])]
    pub unit: Option<String>,
    /// The first rung's budget (default 1).
    #[arg(long, value_name = "N", requires = "scheduler")]
    pub min_budget: Option<u64>,
    /// The last rung's budget: every trial's train.epochs (or train.steps) (default: the spec's).
    #[arg(long, value_name = "N", requires = "scheduler")]
    pub max_budget: Option<u64>,
    /// The reduction factor: each rung keeps the best 1/eta (default 3).
    #[arg(long, value_name = "N", requires = "scheduler")]
    pub eta: Option<u64>,
}

impl SchedulerOptions {
    fn request(&self) -> Option<SchedulerRequest> {
        self.scheduler.as_ref().map(|name| SchedulerRequest {
            name: name.clone(),
            metric: self.metric.clone(),
            mode: self.mode.clone(),
            unit: self.unit.clone(),
            min: self.min_budget,
            max: self.max_budget,
            eta: self.eta,
        })
    }
}

impl SweepArgs {
    /// The request for this sweep, recording `command`.
    pub fn new_sweep(&self, command: Vec<String>) -> NewSweep {
        NewSweep {
            spec: self.spec.clone().unwrap_or_default(),
            params: self.params.clone(),
            trials: self.trials,
            seed: self.seed,
            file: self.file.clone(),
            scheduler: self.scheduler.request(),
            grid: self.grid.clone(),
            overrides: self.options.all_overrides(),
            replicas: self.options.replicas,
            max_parallel: self.max_parallel,
            trainer: self.options.trainer.clone(),
            name: self.name.clone(),
            command,
        }
    }
}

/// What `sweep show|stop|resume SWEEP` does to a sweep that exists.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum SweepCommand {
    /// Show a sweep: a search's leaderboard, rungs, promotions and budget used; a sweep
    /// without a scheduler: its runs.
    Show {
        #[command(flatten)]
        sweep: SweepAddress,
        /// Print the sweep's manifest (with the search's state) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a search: its trials in flight checkpoint and stop; `sweep resume` goes on.
    Stop(SweepAddress),
    /// Go on with a stopped search, or one whose process was killed.
    Resume(SweepAddress),
    /// Promote a paused trial by hand: it trains on to the next rung.
    Promote {
        #[command(flatten)]
        sweep: SweepAddress,
        /// The trial: its number, e.g. t03.
        trial: String,
    },
}

/// One sweep, by id, unique id prefix, `--name` or `latest`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct SweepAddress {
    /// The sweep: its id, a unique prefix of it, its name or `latest`.
    pub sweep: String,
}

/// A `KEY=VALUE` word (the value may be empty; the key is checked against the spec later).
fn key_value(s: &str) -> Result<String, String> {
    match s.split_once('=') {
        Some((key, _)) if !key.trim().is_empty() => Ok(s.to_string()),
        _ => Err("expected KEY=VALUE, e.g. train.lr=0.01".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<RunArgs, String> {
        super::super::words::parse_line::<RunArgs>("run", line).map_err(|e| e.to_string())
    }

    #[test]
    fn a_run_line_parses_into_the_request() {
        let r = run("examples/mnist.toml --set train.lr=0.01 --set=train.epochs=1 --name 'quick one' --replicas 2 --trainer bin/t").unwrap();
        let req = r.new_run(vec!["ddp".into()]);
        assert_eq!(req.spec, PathBuf::from("examples/mnist.toml"));
        assert_eq!(req.overrides, ["train.lr=0.01", "train.epochs=1"]);
        assert_eq!(req.name.as_deref(), Some("quick one"));
        assert_eq!(req.replicas, Some(2));
        assert_eq!(req.trainer, Some(PathBuf::from("bin/t")));
        assert_eq!(req.command, ["ddp"]);
        assert_eq!(req.on, RunOn::Local);
    }

    #[test]
    fn precision_is_an_option_and_set_has_the_last_word() {
        let r = run("a.toml --precision bf16 --set train.lr=0.1").unwrap();
        let req = r.new_run(vec![]);
        assert_eq!(req.overrides, ["train.precision=bf16", "train.lr=0.1"]);
        let e = run("a.toml --precision f16").unwrap_err();
        assert!(e.contains("possible values: f32, bf16, fp16"), "{e}");
    }

    #[test]
    fn slurm_options_become_slurm_keys() {
        let r = run("s.toml --on slurm --nodes 2 --gpus-per-node 4 --partition gpu --time 2:00:00 --account lab --qos high --constraint a100 --sbatch-arg=--mem=8G --sbatch-arg --exclusive").unwrap();
        let req = r.new_run(vec![]);
        assert_eq!(req.on, RunOn::Slurm);
        assert_eq!(
            req.overrides,
            [
                "slurm.nodes=2",
                "slurm.gpus_per_node=4",
                "slurm.partition=\"gpu\"",
                "slurm.time=\"2:00:00\"",
                "slurm.account=\"lab\"",
                "slurm.qos=\"high\"",
                "slurm.constraint=\"a100\"",
                "slurm.sbatch_args=[\"--mem=8G\", \"--exclusive\"]",
            ]
        );
        assert_eq!(req.replicas, Some(8));
        assert_eq!(req.engine_options.len(), 8);
        assert!(req.engine_options.iter().all(|(on, _)| *on == RunOn::Slurm));
        let e = run("s.toml --on cloud").unwrap_err();
        assert!(
            e.contains("'cloud'") && e.contains("local") && e.contains("slurm"),
            "{e}"
        );
    }

    #[test]
    fn spark_options_become_spark_keys() {
        let r = run("s.toml --on spark --master spark://h:7077 --tasks 2 --gpus-per-task 4 --spark-conf spark.executor.memory=4g --spark-conf spark.task.cpus=2").unwrap();
        let req = r.new_run(vec![]);
        assert_eq!(req.on, RunOn::Spark);
        assert_eq!(
            req.overrides,
            [
                "spark.master=\"spark://h:7077\"",
                "spark.tasks=2",
                "spark.gpus_per_task=4",
                "spark.conf={\"spark.executor.memory\" = \"4g\", \"spark.task.cpus\" = \"2\"}",
            ]
        );
        assert_eq!(req.replicas, Some(8));
        assert_eq!(req.engine_options.len(), 4);
        assert!(req.engine_options.iter().all(|(on, _)| *on == RunOn::Spark));
    }

    #[test]
    fn bad_run_lines_say_what_is_wrong() {
        let e = run("").unwrap_err();
        assert!(e.contains("<SPEC>"), "{e}");
        let e = run("a.toml --set").unwrap_err();
        assert!(
            e.contains("'--set <KEY=VALUE>'") && e.contains("a value"),
            "{e}"
        );
        let e = run("a.toml --set x").unwrap_err();
        assert!(e.contains("expected KEY=VALUE"), "{e}");
        let e = run("a.toml --replicas two").unwrap_err();
        assert!(e.contains("'two'") && e.contains("--replicas"), "{e}");
        let e = run("a.toml --detach").unwrap_err();
        assert!(e.contains("'--detach'"), "{e}");
        let e = run("a.toml b.toml").unwrap_err();
        assert!(e.contains("'b.toml'"), "{e}");
    }

    #[test]
    fn a_sweep_request_carries_every_option() {
        #[derive(clap::Parser)]
        struct Sweep {
            #[command(flatten)]
            args: SweepArgs,
        }
        let s = super::super::words::parse_line::<Sweep>(
            "sweep",
            "s.toml --grid train.lr=0.1,0.2 --set train.epochs=1 --replicas 2 --max-parallel 1 --name n --json",
        )
        .unwrap()
        .args;
        let req = s.new_sweep(vec!["x".into()]);
        assert_eq!(req.grid, ["train.lr=0.1,0.2"]);
        assert_eq!(req.overrides, ["train.epochs=1"]);
        assert_eq!((req.replicas, req.max_parallel), (Some(2), Some(1)));
        assert_eq!(req.name.as_deref(), Some("n"));
        assert!(s.json);
    }
}
