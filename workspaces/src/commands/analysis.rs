//! The arguments of the commands over several runs or their records: `compare`, `plot`, `export`
//! (CSV records, or a Kubernetes job).

use std::path::PathBuf;

use crate::kubernetes::{JobKind, JobOptions};
use crate::present::plot::XAxis;

/// `compare RUN... [--sweep SWEEP] [--json]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct CompareArgs {
    /// Runs (ids, unique prefixes, `EXPERIMENT@latest`, `latest`).
    pub runs: Vec<String>,
    /// Add the runs of this sweep.
    #[arg(long, value_name = "SWEEP")]
    pub sweep: Option<String>,
    /// The comparison as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `plot RUN... [--sweep SWEEP] [--x step|epoch|time]`, or `plot --sweep SWEEP --parallel`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct PlotArgs {
    /// Runs (ids, unique prefixes, `EXPERIMENT@latest`, `latest`).
    pub runs: Vec<String>,
    /// Add the runs of this sweep.
    #[arg(long, value_name = "SWEEP")]
    pub sweep: Option<String>,
    /// What the horizontal axis counts: step, epoch or time (seconds since the first record).
    #[arg(long = "x", value_name = "step|epoch|time", default_value = "step")]
    pub x: XAxis,
    /// The sweep's parallel coordinates instead: its parameters against its metric (a
    /// search's at the highest rung each trial reached), one line per trial, the best darkest.
    #[arg(long, requires = "sweep", conflicts_with = "runs")]
    pub parallel: bool,
}

/// `export RUN --csv [-o FILE] [--all-ranks]`, or `export RUN|SPEC --kubeflow|--trainjob --image
/// IMAGE --volume CLAIM [...]`: exactly one of the formats.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
#[command(group(clap::ArgGroup::new("format").required(true).multiple(false)))]
pub struct ExportArgs {
    /// The run (its id, a unique prefix of it, `latest` or `EXPERIMENT@latest`); with
    /// --kubeflow or --trainjob also a spec file.
    #[arg(value_name = "RUN|SPEC")]
    pub target: String,
    /// The run's metric records as CSV with a header line.
    #[arg(long, group = "format")]
    pub csv: bool,
    /// A Kubeflow PyTorchJob (kubeflow.org/v1) that trains the run or spec on Kubernetes.
    #[arg(long, group = "format")]
    pub kubeflow: bool,
    /// A Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1, runtime torch-distributed).
    #[arg(long, group = "format")]
    pub trainjob: bool,
    /// Write FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Every rank's records (rank 0's first), not only rank 0's (with --csv).
    #[arg(long, conflicts_with_all = ["kubeflow", "trainjob"])]
    pub all_ranks: bool,
    #[command(flatten)]
    pub kubernetes: KubernetesOptions,
}

/// Which file `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Csv,
    /// Kubeflow's PyTorchJob (training operator, kubeflow.org/v1).
    PyTorchJob,
    /// Kubeflow Trainer's TrainJob (trainer.kubeflow.org/v1alpha1).
    TrainJob,
}

impl ExportArgs {
    /// The format asked for (clap lets exactly one flag through; `--csv` when none is set, as in
    /// a `Default` value).
    pub fn format(&self) -> ExportFormat {
        if self.kubeflow {
            ExportFormat::PyTorchJob
        } else if self.trainjob {
            ExportFormat::TrainJob
        } else {
            ExportFormat::Csv
        }
    }

    /// The Kubernetes job asked for (`--kubeflow`: a PyTorchJob, `--trainjob`: a TrainJob);
    /// `None` for CSV.
    pub fn job_kind(&self) -> Option<JobKind> {
        match self.format() {
            ExportFormat::Csv => None,
            ExportFormat::PyTorchJob => Some(JobKind::PyTorchJob),
            ExportFormat::TrainJob => Some(JobKind::TrainJob),
        }
    }
}

/// The options of `export --kubeflow` and `export --trainjob` (see `docs/kubernetes.md`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
#[command(next_help_heading = "Kubernetes (--kubeflow, --trainjob)")]
pub struct KubernetesOptions {
    /// Container image with `ddp-trainer` on its PATH (required).
    #[arg(long, value_name = "IMAGE", conflicts_with = "csv")]
    pub image: Option<String>,
    /// PersistentVolumeClaim mounted in every pod: the shared storage the run folder is on
    /// (required).
    #[arg(long, value_name = "CLAIM", conflicts_with = "csv")]
    pub volume: Option<String>,
    /// Where the claim is mounted in the pods [default: the workspace folder, so that the paths
    /// in the pods are the paths here].
    #[arg(long, value_name = "DIR", conflicts_with = "csv")]
    pub mount_path: Option<PathBuf>,
    /// The folder a SPEC's job writes (on the claim) [default: MOUNT_PATH/kubernetes/NAME]; a
    /// RUN's job writes into the run's own folder.
    #[arg(long, value_name = "DIR", conflicts_with = "csv")]
    pub run_dir: Option<PathBuf>,
    /// Nodes (pods) [default: 1].
    #[arg(long, value_name = "N", conflicts_with = "csv")]
    pub nodes: Option<usize>,
    /// Replicas per node [default: --gpus-per-node, else the spec's ddp.replicas spread evenly
    /// over the nodes].
    #[arg(long, value_name = "G", conflicts_with = "csv")]
    pub procs_per_node: Option<usize>,
    /// GPUs per node, as an `nvidia.com/gpu` limit on each pod [default: none, CPU pods].
    #[arg(long, value_name = "G", conflicts_with = "csv")]
    pub gpus_per_node: Option<usize>,
    /// Namespace of the job [default: kubectl's current one].
    #[arg(long, value_name = "NS", conflicts_with = "csv")]
    pub namespace: Option<String>,
    /// Name of the job [default: EXPERIMENT-RUN_ID for a run, the spec's name for a spec].
    #[arg(long, value_name = "NAME", conflicts_with = "csv")]
    pub name: Option<String>,
}

impl KubernetesOptions {
    /// The job's options as the planner takes them.
    pub fn job_options(&self) -> JobOptions {
        let KubernetesOptions {
            image,
            volume,
            mount_path,
            run_dir,
            nodes,
            procs_per_node,
            gpus_per_node,
            namespace,
            name,
        } = self.clone();
        JobOptions {
            image,
            volume,
            mount_path,
            run_dir,
            nodes,
            procs_per_node,
            gpus_per_node,
            namespace,
            name,
        }
    }
}
