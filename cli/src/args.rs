//! The `ddp` command line: its subcommands, each flattening the arguments that every front end
//! shares ([`ddp_workspaces::commands`]), plus the options only a terminal has (`--detach`,
//! `--follow`, `plot --output`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ddp_workspaces::commands::{
    ExportArgs, LogsArgs, NewCommand, PlotArgs, RunAddress, RunArgs, SharedCommand, SweepArgs,
    SweepCommand, TagArgs,
};

#[derive(Parser, Debug)]
#[command(
    name = "ddp",
    version,
    about = "Run and manage data-parallel training experiments"
)]
pub struct Cli {
    /// Workspace folder (default: $DDP_WORKSPACE, else ./ddp-workspace).
    #[arg(long, global = true)]
    pub workspace: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// ls, show, stop, compare, sample: the subcommands every front end has.
    #[command(flatten)]
    Shared(SharedCommand),
    /// Start a run of SPEC: shows progress until it ends (or returns at once with --detach).
    #[command(display_order = 10)]
    Run {
        #[command(flatten)]
        args: RunArgs,
        /// Return once the run is started; follow it later with `ddp logs -f` or `ddp show`.
        #[arg(long)]
        detach: bool,
    },
    /// Print a run's logs (all ranks, prefixed), optionally following them.
    #[command(display_order = 40)]
    Logs {
        #[command(flatten)]
        args: LogsArgs,
        /// Keep printing new lines until the run ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Continue a stopped, failed or paused run from its newest checkpoint, in the same folder.
    #[command(display_order = 60)]
    Resume {
        #[command(flatten)]
        run: RunAddress,
        /// Return once the run is started again.
        #[arg(long)]
        detach: bool,
    },
    /// Delete a run folder (refuses a run that is still live).
    #[command(display_order = 70)]
    Rm(RunAddress),
    /// Add tags to a run (or remove them with --remove); without tags, print its tags.
    #[command(display_order = 80)]
    Tag(TagArgs),
    /// Start a sweep: a grid of spec overrides (--grid), a random search (--param, --trials)
    /// or a sweep file (--file); with --scheduler asha, bad trials stop early.
    ///
    /// The runs are grouped under a sweep id (`ddp ls --sweep ID`, `ddp compare --sweep ID`).
    /// Waits for all of them, printing a line as each ends, then the comparison (unless
    /// --detach). `ddp sweep show|stop|resume|promote SWEEP` looks at and manages a sweep.
    #[command(
        display_order = 90,
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true
    )]
    Sweep {
        #[command(subcommand)]
        action: Option<SweepCommand>,
        #[command(flatten)]
        args: SweepArgs,
        /// Return once the runs are created and their supervisors started.
        #[arg(long)]
        detach: bool,
    },
    /// Plot the loss and accuracy (language models: perplexity) of runs into one SVG or PNG file.
    #[command(display_order = 110)]
    Plot {
        #[command(flatten)]
        args: PlotArgs,
        /// The image: FILE.svg or FILE.png.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Export a run's metric records as CSV, or a Kubernetes job (Kubeflow PyTorchJob or
    /// TrainJob) that trains a run or a spec.
    #[command(display_order = 130)]
    Export(ExportArgs),
    /// Write a starting point: `ddp new model DIR`, a crate of one's own (a candle model, its
    /// spec and a test) that builds against this ddp checkout and trains with `--trainer`.
    #[command(display_order = 140, subcommand)]
    New(NewCommand),
}
