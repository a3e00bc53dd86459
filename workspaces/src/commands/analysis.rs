//! The arguments of the commands over several runs or their records: `compare`, `plot`, `export`.

use std::path::PathBuf;

use super::runs::RunAddress;
use crate::plot::XAxis;

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

/// `plot RUN... [--sweep SWEEP] [--x step|epoch|time]`.
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
}

/// `export RUN --csv [-o FILE] [--all-ranks]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportArgs {
    #[command(flatten)]
    pub run: RunAddress,
    /// CSV with a header line (the only format).
    #[arg(long, required = true)]
    pub csv: bool,
    /// Write FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Every rank's records (rank 0's first), not only rank 0's.
    #[arg(long)]
    pub all_ranks: bool,
}
