//! The `%ddp` magics: their command line (clap, so errors and suggestions read as the `ddp`
//! CLI's), what they do ([`exec`]), completion of their words ([`complete`]) and their help.
//!
//! Magics are answered in the kernel itself: no compilation, results at once.

pub mod complete;
pub mod exec;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};
use ddp_workspaces::RunStatus;
use ddp_workspaces::actions::NewRun;
use ddp_workspaces::plot::XAxis;

use crate::error::{Error, Result};

/// The one magic name (`%ddp`, `%%ddp`).
pub const MAGIC: &str = "ddp";

/// `%ddp SUBCOMMAND ...`
#[derive(Parser, Debug)]
#[command(
    name = "%ddp",
    about = "Start, watch and compare data-parallel training runs of the workspace",
    disable_help_subcommand = true,
    disable_version_flag = true
)]
pub struct LineMagic {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `%ddp`.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a run of SPEC (as `ddp run --detach`) and show its live run card.
    Run {
        spec: PathBuf,
        #[command(flatten)]
        options: RunOptions,
    },
    /// Show a live run card for an existing run.
    Watch { run: String },
    /// Show a run's card and wait until the run ends (interrupt: stop waiting; the run goes on).
    Wait { run: String },
    /// List runs (newest first).
    Ls {
        #[arg(long)]
        experiment: Option<String>,
        #[arg(long)]
        status: Option<RunStatus>,
        /// Only the runs of this sweep.
        #[arg(long, value_name = "SWEEP")]
        sweep: Option<String>,
        /// The runs as JSON (application/json).
        #[arg(long)]
        json: bool,
    },
    /// Show one run: spec, status, devices, metrics, restarts, durations.
    Show {
        run: String,
        /// The run as JSON (application/json).
        #[arg(long)]
        json: bool,
    },
    /// Print a run's logs (all ranks, prefixed).
    Logs {
        run: String,
        /// Only this rank.
        #[arg(long)]
        rank: Option<usize>,
        /// Only the last N lines of each log.
        #[arg(long)]
        tail: Option<usize>,
    },
    /// Stop a run: replicas finish their step and exit; the run becomes `stopped`.
    Stop { run: String },
    /// Continue a stopped or failed run from its newest checkpoint, with a live card.
    Resume {
        run: String,
        /// Keep the cell running until the run ends.
        #[arg(long)]
        wait: bool,
    },
    /// Compare runs: the spec keys that differ between them, and their final figures.
    Compare {
        runs: Vec<String>,
        /// Add the runs of this sweep.
        #[arg(long, value_name = "SWEEP")]
        sweep: Option<String>,
        /// The comparison as JSON (application/json).
        #[arg(long)]
        json: bool,
    },
    /// Plot the loss and accuracy of runs (SVG and PNG).
    Plot {
        runs: Vec<String>,
        /// Add the runs of this sweep.
        #[arg(long, value_name = "SWEEP")]
        sweep: Option<String>,
        /// What the horizontal axis counts.
        #[arg(long = "x", value_name = "step|epoch|time", default_value = "step")]
        x: XAxis,
    },
    /// The machine's devices: GPUs (and which run holds each), CPU, memory, the runs' processes.
    Devices,
    /// Show the workspace, or change it to DIR (relative to the notebook's folder).
    Workspace { dir: Option<PathBuf> },
    /// Clear this cell's output (--wait: when the next output arrives).
    Clear {
        #[arg(long)]
        wait: bool,
    },
    /// Help on the magics, or on one subcommand.
    Help { subcommand: Option<String> },
}

/// `%%ddp run [--set KEY=VALUE]... [--replicas N] [--name NAME] [--wait]`: the cell body is the
/// spec (TOML). `%%ddp train SPEC [...]`: the cell body is a model (Rust), built and trained.
#[derive(Parser, Debug)]
#[command(
    name = "%%ddp",
    about = "A cell whose body is a run's spec (TOML), or a model (Rust) to train",
    disable_help_subcommand = true,
    disable_version_flag = true
)]
pub struct CellMagic {
    #[command(subcommand)]
    pub command: CellCommand,
}

#[derive(Subcommand, Debug)]
pub enum CellCommand {
    /// Start a run whose spec is the cell's body; relative data paths resolve against the
    /// notebook's folder.
    Run {
        #[command(flatten)]
        options: RunOptions,
    },
    /// Build the cell's body (Rust: `use` lines, types and `pub fn model(vb: VarBuilder) ->
    /// Result<impl Module>`) into a trainer with cargo, then start a run of SPEC with it
    /// (`model.name = "custom"`); the crate and its build are kept in the run folder (`code/`).
    Train {
        spec: PathBuf,
        #[command(flatten)]
        options: RunOptions,
        /// Features of ddp-trainer to build with (e.g. `cuda`), comma-separated.
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
    },
}

/// The options of every magic that starts a run (`%ddp run`, `%%ddp run`, `%%ddp train`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunOptions {
    /// Override a spec key, e.g. --set train.lr=0.01 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Number of replicas (ddp.replicas).
    #[arg(long)]
    pub replicas: Option<usize>,
    /// A name for the run (shown by ls/show).
    #[arg(long)]
    pub name: Option<String>,
    /// Keep the cell running until the run ends (an interrupt stops the waiting, not the run).
    #[arg(long)]
    pub wait: bool,
}

impl RunOptions {
    /// The request for a run of `spec` with these options, recording `command`.
    pub fn new_run(self, spec: PathBuf, command: Vec<String>) -> NewRun {
        NewRun {
            spec,
            overrides: self.overrides,
            replicas: self.replicas,
            name: self.name,
            command,
            ..NewRun::default()
        }
    }
}

/// Splits a magic's arguments as a shell would (quotes, escapes).
pub fn words(args: &str) -> Result<Vec<String>> {
    shlex::split(args).ok_or_else(|| Error::Usage(format!("unbalanced quotes in `{args}`")))
}

/// Parses `%ddp ARGS`.
pub fn parse_line(args: &str) -> Result<LineMagic> {
    let mut argv = vec!["%ddp".to_string()];
    argv.extend(words(args)?);
    LineMagic::try_parse_from(argv).map_err(usage)
}

/// Parses the first line of a `%%ddp ARGS` cell.
pub fn parse_cell(args: &str) -> Result<CellMagic> {
    let mut argv = vec!["%%ddp".to_string()];
    argv.extend(words(args)?);
    CellMagic::try_parse_from(argv).map_err(usage)
}

fn usage(e: clap::Error) -> Error {
    Error::Usage(e.render().to_string().trim_end().to_string())
}

/// The help of `%ddp` (no subcommand) or of one of its subcommands; `None` for an unknown one.
pub fn help(subcommand: Option<&str>) -> Option<String> {
    let mut cmd = LineMagic::command();
    match subcommand {
        None => {
            let mut text = cmd.render_long_help().to_string();
            text.push_str(
                "\nCell magics:\n  %%ddp run [--set KEY=VALUE]... [--name NAME] [--wait]\n      \
                 the rest of the cell is the spec (TOML)\n  \
                 %%ddp train SPEC [--set KEY=VALUE]... [--name NAME] [--features F] [--wait]\n      \
                 the rest of the cell is Rust defining `pub fn model(vb: VarBuilder) -> Result<impl Module>`:\n      \
                 built with cargo (release) and trained on SPEC (docs/custom-models.md)\n\nRUN is any address `ddp` accepts: a run id, a unique prefix, \
                 `latest`, `EXPERIMENT@latest`.\n",
            );
            Some(text)
        }
        Some(name) => {
            let sub = cmd.find_subcommand_mut(name)?;
            let mut sub = sub.clone().bin_name(format!("%ddp {name}"));
            Some(sub.render_long_help().to_string())
        }
    }
}

/// The names of the subcommands, in declaration order.
pub fn subcommands() -> Vec<String> {
    names(LineMagic::command())
}

/// The subcommands of the cell magic (`%%ddp run`, `%%ddp train`).
pub fn cell_subcommands() -> Vec<String> {
    names(CellMagic::command())
}

/// The long options of a subcommand (`--set`, `--wait`, ...).
pub fn options(subcommand: &str) -> Vec<String> {
    long_options(LineMagic::command(), subcommand)
}

/// The long options of a cell magic's subcommand.
pub fn cell_options(subcommand: &str) -> Vec<String> {
    long_options(CellMagic::command(), subcommand)
}

fn names(cmd: clap::Command) -> Vec<String> {
    cmd.get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

fn long_options(cmd: clap::Command, subcommand: &str) -> Vec<String> {
    cmd.find_subcommand(subcommand)
        .map(|c| {
            c.get_arguments()
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .filter(|l| l != "--help")
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_subcommands_with_options() {
        let m =
            parse_line("run examples/mnist.toml --set train.epochs=1 --name 'a b' --wait").unwrap();
        match m.command {
            Command::Run { spec, options } => {
                assert_eq!(spec, PathBuf::from("examples/mnist.toml"));
                assert_eq!(options.overrides, vec!["train.epochs=1"]);
                assert_eq!(options.name.as_deref(), Some("a b"));
                assert!(options.wait);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_subcommands_get_clap_suggestions() {
        let e = parse_line("lss").unwrap_err().to_string();
        assert!(e.contains("unrecognized subcommand 'lss'"), "{e}");
        assert!(
            e.contains("similar subcommand") && e.contains("'ls'"),
            "{e}"
        );
        assert!(!e.contains('\u{1b}'), "no colours: {e:?}");
    }

    #[test]
    fn help_covers_every_subcommand() {
        let all = help(None).unwrap();
        for s in subcommands() {
            assert!(all.contains(&s), "{s} missing from\n{all}");
            assert!(help(Some(&s)).unwrap().contains(&format!("%ddp {s}")));
        }
        assert!(help(Some("nosuch")).is_none());
        assert!(options("run").contains(&"--wait".to_string()));
    }

    #[test]
    fn cell_magic_takes_run_options() {
        let m = parse_cell("run --set train.lr=0.1 --wait").unwrap();
        let CellCommand::Run { options } = m.command else {
            panic!("{:?}", m.command)
        };
        assert_eq!(options.overrides, vec!["train.lr=0.1"]);
        assert!(options.wait);
    }

    #[test]
    fn train_cell_takes_a_spec_and_features() {
        let m = parse_cell("train mnist.toml --set train.epochs=1 --features cuda --wait").unwrap();
        let CellCommand::Train {
            spec,
            options,
            features,
        } = m.command
        else {
            panic!("{:?}", m.command)
        };
        assert_eq!(spec, PathBuf::from("mnist.toml"));
        assert_eq!(options.overrides, vec!["train.epochs=1"]);
        assert_eq!(features, vec!["cuda"]);
        assert!(options.wait);
        let e = parse_cell("train").unwrap_err().to_string();
        assert!(e.contains("<SPEC>"), "{e}");
    }
}
