//! `ddp`: the headless batch front end. `ddp run SPEC` trains (supervised, restartable) and shows
//! progress; `ls`, `show`, `logs`, `stop`, `resume`, `rm` manage the workspace's runs; `sweep`
//! runs a grid of overrides, `compare`, `plot` and `export` look at several runs.
//!
//! This file parses the command line and dispatches; one file per group of commands.

mod compare;
mod export;
mod follow;
mod list;
mod logs;
mod manage;
mod plot;
mod sweep;
mod table;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ddp_workspaces::actions::NewRun;
use ddp_workspaces::plot::XAxis;
use ddp_workspaces::{RunStatus, Workspace};

#[derive(Parser, Debug)]
#[command(
    name = "ddp",
    version,
    about = "Run and manage data-parallel training experiments"
)]
struct Cli {
    /// Workspace folder (default: $DDP_WORKSPACE, else ./ddp-workspace).
    #[arg(long, global = true)]
    workspace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a run of SPEC: shows progress until it ends (or returns at once with --detach).
    Run {
        spec: PathBuf,
        /// Override a spec key, e.g. --set train.lr=0.01 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Number of replicas (ddp.replicas).
        #[arg(long)]
        replicas: Option<usize>,
        /// Return once the run is started; follow it later with `ddp logs -f` or `ddp show`.
        #[arg(long)]
        detach: bool,
        /// A name for the run (shown by ls/show).
        #[arg(long)]
        name: Option<String>,
        /// Run this executable as the replicas instead of the built-in trainer (a program made
        /// with `main_with` of the trainer library, for `[model] name = "custom"`).
        #[arg(long, value_name = "PATH")]
        trainer: Option<PathBuf>,
    },
    /// List runs (newest first).
    Ls {
        #[arg(long)]
        experiment: Option<String>,
        #[arg(long)]
        status: Option<RunStatus>,
        /// Only the runs of this sweep (id, unique id prefix, --name of the sweep, or `latest`).
        #[arg(long, value_name = "SWEEP")]
        sweep: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one run: spec, status, devices, metrics, restarts, durations.
    Show {
        run: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a run's logs (all ranks, prefixed), optionally following them.
    Logs {
        run: String,
        /// Only this rank.
        #[arg(long)]
        rank: Option<usize>,
        /// Keep printing new lines until the run ends.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines of each log.
        #[arg(long)]
        tail: Option<usize>,
    },
    /// Stop a run: replicas finish their step and exit; the run becomes `stopped`.
    Stop { run: String },
    /// Continue a stopped or failed run from its newest checkpoint, in the same folder.
    Resume {
        run: String,
        #[arg(long)]
        detach: bool,
    },
    /// Delete a run folder (refuses a run that is still live).
    Rm { run: String },
    /// Add tags to a run (or remove them with --remove); without tags, print its tags.
    Tag {
        run: String,
        tags: Vec<String>,
        #[arg(long)]
        remove: bool,
    },
    /// Start one run per combination of a grid of spec overrides (a sweep).
    ///
    /// The runs are grouped under a sweep id (`ddp ls --sweep ID`, `ddp compare --sweep ID`).
    /// Waits for all of them, printing a line as each ends, then the comparison (unless --detach).
    Sweep {
        spec: PathBuf,
        /// A spec key and its values, e.g. --grid train.lr=0.001,0.01 (repeatable: the runs are
        /// the cartesian product; commas inside [...] or quotes do not split).
        #[arg(long = "grid", value_name = "KEY=V1,V2,...", required = true)]
        grid: Vec<String>,
        /// Override a spec key for every run, e.g. --set train.epochs=3 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Number of replicas of every run (ddp.replicas).
        #[arg(long)]
        replicas: Option<usize>,
        /// At most N runs of the sweep at a time, also after --detach (default: all that the
        /// devices allow).
        #[arg(long, value_name = "N")]
        max_parallel: Option<usize>,
        /// Run this executable as every run's replicas (see `ddp run --trainer`).
        #[arg(long, value_name = "PATH")]
        trainer: Option<PathBuf>,
        /// Return once the runs are created and their supervisors started.
        #[arg(long)]
        detach: bool,
        /// A name for the sweep (its runs are named NAME/<combination>).
        #[arg(long)]
        name: Option<String>,
        /// Print JSON: the sweep with --detach, else the comparison at the end.
        #[arg(long)]
        json: bool,
    },
    /// Compare runs: the spec keys that differ between them, and their final figures.
    Compare {
        /// Runs (ids, unique prefixes, <experiment>@latest, latest).
        runs: Vec<String>,
        /// Add the runs of this sweep.
        #[arg(long, value_name = "SWEEP")]
        sweep: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Plot the loss and accuracy of runs into one SVG or PNG file.
    Plot {
        runs: Vec<String>,
        /// Add the runs of this sweep.
        #[arg(long, value_name = "SWEEP")]
        sweep: Option<String>,
        /// The image: FILE.svg or FILE.png.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// What the horizontal axis counts: step, epoch or time (seconds since the first record).
        #[arg(long = "x", value_name = "step|epoch|time", default_value = "step")]
        x: XAxis,
    },
    /// Export a run's metric records (rank 0's, or every rank's) as CSV.
    Export {
        run: String,
        /// CSV with a header line (the only format).
        #[arg(long, required = true)]
        csv: bool,
        /// Write FILE instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Every rank's records (rank 0's first), not only rank 0's.
        #[arg(long)]
        all_ranks: bool,
    },
}

fn main() -> ExitCode {
    // The hidden sub-commands run by the supervisor and the replicas, before clap sees anything.
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = ddp_workspaces::supervisor::run_hidden_command(&args) {
        return code;
    }
    let cli = Cli::parse();
    let root = Workspace::resolve(cli.workspace.as_deref());
    let result = match cli.command {
        Command::Run {
            spec,
            overrides,
            replicas,
            detach,
            name,
            trainer,
        } => follow::run(
            &root,
            NewRun {
                spec,
                overrides,
                replicas,
                name,
                command: std::env::args().collect(),
                spec_text: None,
                trainer,
                code: None,
            },
            detach,
        ),
        Command::Ls {
            experiment,
            status,
            sweep,
            json,
        } => list::ls(&root, experiment.as_deref(), status, sweep.as_deref(), json),
        Command::Show { run, json } => list::show(&root, &run, json),
        Command::Logs {
            run,
            rank,
            follow,
            tail,
        } => logs::logs(&root, &run, rank, follow, tail),
        Command::Stop { run } => manage::stop(&root, &run),
        Command::Resume { run, detach } => follow::resume(&root, &run, detach),
        Command::Rm { run } => manage::rm(&root, &run),
        Command::Tag { run, tags, remove } => manage::tag(&root, &run, &tags, remove),
        Command::Sweep {
            spec,
            grid,
            overrides,
            replicas,
            max_parallel,
            trainer,
            detach,
            name,
            json,
        } => sweep::sweep(
            &root,
            sweep::SweepArgs {
                spec,
                grid,
                overrides,
                replicas,
                max_parallel,
                trainer,
                detach,
                name,
                json,
            },
        ),
        Command::Compare { runs, sweep, json } => {
            compare::compare(&root, &runs, sweep.as_deref(), json)
        }
        Command::Plot {
            runs,
            sweep,
            output,
            x,
        } => plot::plot(&root, &runs, sweep.as_deref(), &output, x),
        Command::Export {
            run,
            csv: _,
            output,
            all_ranks,
        } => export::export(&root, &run, output.as_deref(), all_ranks),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ddp: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The library's exit code for its errors ([`ddp_workspaces::Error::exit_code`]), 1 otherwise.
fn exit_code(e: &anyhow::Error) -> u8 {
    e.downcast_ref::<ddp_workspaces::Error>()
        .map_or(1, |e| e.exit_code().clamp(1, 255) as u8)
}
