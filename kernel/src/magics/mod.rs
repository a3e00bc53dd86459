//! The `%ddp` magics: their command line (the arguments every front end shares, from
//! [`ddp_workspaces::commands`], so errors, help and suggestions read as the `ddp` CLI's), what
//! they do ([`exec`]), completion of their words ([`complete`]) and their help.
//!
//! Magics are answered in the kernel itself: no compilation, results at once.

pub mod complete;
pub mod exec;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};
use ddp_workspaces::commands::{
    self, LogsArgs, PlotArgs, RunAddress, RunArgs, RunOptions, SharedCommand, SweepArgs,
    SweepCommand,
};

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

/// `--wait`, the one option of the magics that start or resume a run that the CLI has not.
#[derive(clap::Args, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wait {
    /// Keep the cell running until the run ends (an interrupt stops the waiting, not the run).
    #[arg(long)]
    pub wait: bool,
}

/// The subcommands of `%ddp`.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a run of SPEC (as `ddp run --detach`) and show its live run card.
    #[command(display_order = 10)]
    Run {
        #[command(flatten)]
        args: RunArgs,
        #[command(flatten)]
        wait: Wait,
    },
    /// Show a live run card for an existing run.
    #[command(display_order = 11)]
    Watch(RunAddress),
    /// Show a run's card and wait until the run ends (interrupt: stop waiting; the run goes on).
    #[command(display_order = 12)]
    Wait(RunAddress),
    /// ls, show, stop, compare, sample (interrupt: stop drawing): as in every front end.
    #[command(flatten)]
    Shared(SharedCommand),
    /// Print a run's logs (all ranks, prefixed).
    #[command(display_order = 40)]
    Logs(LogsArgs),
    /// Continue a stopped, failed or paused run from its newest checkpoint, with a live card.
    #[command(display_order = 60)]
    Resume {
        #[command(flatten)]
        run: RunAddress,
        #[command(flatten)]
        wait: Wait,
    },
    /// Start a sweep (a grid, a random search: --param with --trials, or --file SWEEP.toml;
    /// --scheduler asha stops bad trials early) and show its live sweep card; `%ddp sweep
    /// show|stop|resume SWEEP`.
    #[command(
        display_order = 70,
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true
    )]
    Sweep {
        #[command(subcommand)]
        action: Option<SweepCommand>,
        #[command(flatten)]
        args: SweepArgs,
    },
    /// Plot the loss and accuracy of runs (SVG and PNG).
    #[command(display_order = 110)]
    Plot(PlotArgs),
    /// The machine's devices: GPUs (and which run holds each), CPU, memory, the runs' processes.
    #[command(display_order = 140)]
    Devices,
    /// Show the workspace, or change it to DIR (relative to the notebook's folder).
    #[command(display_order = 150)]
    Workspace { dir: Option<PathBuf> },
    /// Clear this cell's output (--wait: when the next output arrives).
    #[command(display_order = 160)]
    Clear {
        #[arg(long)]
        wait: bool,
    },
    /// Help on the magics, or on one subcommand.
    #[command(display_order = 170)]
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
        #[command(flatten)]
        wait: Wait,
    },
    /// Build the cell's body (Rust: `use` lines, types and `pub fn model(vb: VarBuilder) ->
    /// Result<impl Module>` and/or `pub fn dataset(split: Split) -> Result<impl Dataset>`, with
    /// optional `pub fn loss` and `pub fn metrics`) into a trainer with cargo, then start a run
    /// of SPEC with it (`model.name`/`data.name = "custom"` for what the cell defines); the
    /// crate and its build are kept in the run folder (`code/`).
    Train {
        /// The experiment spec (TOML) the model is trained on.
        spec: PathBuf,
        #[command(flatten)]
        options: RunOptions,
        #[command(flatten)]
        wait: Wait,
        /// Features of ddp-trainer to build with (e.g. `cuda`), comma-separated.
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
    },
}

/// Splits a magic's arguments as a shell would (quotes, escapes).
pub fn words(args: &str) -> Result<Vec<String>> {
    commands::split(args).map_err(usage)
}

/// Parses `%ddp ARGS`.
pub fn parse_line(args: &str) -> Result<LineMagic> {
    commands::parse_line("%ddp", args).map_err(usage)
}

/// Parses the first line of a `%%ddp ARGS` cell.
pub fn parse_cell(args: &str) -> Result<CellMagic> {
    let magic: CellMagic = commands::parse_line("%%ddp", args).map_err(usage)?;
    if let CellCommand::Train { options, .. } = &magic.command
        && let Some(t) = &options.spec.trainer
    {
        return Err(Error::Usage(format!(
            "`%%ddp train` builds its own trainer from the cell: drop `--trainer {}` (or use \
             `%ddp run SPEC --trainer {}` to run that executable)",
            t.display(),
            t.display()
        )));
    }
    Ok(magic)
}

/// A magic's words that cannot be parsed are a usage error, with clap's text.
fn usage(e: ddp_workspaces::Error) -> Error {
    Error::Usage(e.to_string())
}

/// The help of `%ddp` (no subcommand) or of one of its subcommands; `None` for an unknown one.
pub fn help(subcommand: Option<&str>) -> Option<String> {
    let mut cmd = LineMagic::command();
    match subcommand {
        None => {
            let mut text = cmd.render_long_help().to_string();
            // The cell magics' arguments come from their definitions, as everything above.
            let cells = CellMagic::command();
            let usage = |name: &str| {
                let sub = cells.find_subcommand(name).expect("a cell magic");
                format!("%%ddp {name} {}", commands::synopsis_of(sub))
            };
            text.push_str(&format!(
                "\nCell magics:\n  {}\n      the rest of the cell is the spec (TOML)\n  {}\n      \
                 the rest of the cell is Rust defining `pub fn model(vb: VarBuilder) -> Result<impl Module>`\n      \
                 and/or `pub fn dataset(split: Split) -> Result<impl Dataset>` (optional `pub fn loss`, `pub fn metrics`):\n      \
                 built with cargo (release) and trained on SPEC (docs/custom-models.md, docs/data.md)\n\nRUN is any address `ddp` accepts: a run id, a unique prefix, \
                 `latest`, `EXPERIMENT@latest`.\n",
                usage("run"),
                usage("train"),
            ));
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

/// Whether the long option `option` (`--set`) of a subcommand (of the cell magic with `cell`)
/// takes a value, so that the next word is that value rather than a positional word.
pub fn takes_value(cell: bool, subcommand: &str, option: &str) -> bool {
    let cmd = if cell {
        CellMagic::command()
    } else {
        LineMagic::command()
    };
    let long = option.trim_start_matches("--");
    cmd.find_subcommand(subcommand)
        .and_then(|c| c.get_arguments().find(|a| a.get_long() == Some(long)))
        .is_some_and(|a| a.get_action().takes_values())
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
            Command::Run { args, wait } => {
                assert_eq!(args.spec, PathBuf::from("examples/mnist.toml"));
                assert_eq!(args.options.spec.overrides, vec!["train.epochs=1"]);
                assert_eq!(args.options.name.as_deref(), Some("a b"));
                assert!(wait.wait);
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
        assert!(
            all.contains(
                "%%ddp train SPEC [--set KEY=VALUE]... [--replicas N] [--precision P] \
                 [--trainer PATH] [--name NAME] [--on WHERE] [--nodes N] [--gpus-per-node G] [--partition PARTITION] [--time LIMIT] \
                 [--account ACCOUNT] [--qos QOS] [--constraint CONSTRAINT] [--sbatch-arg ARG]... \
                 [--master URL] [--tasks N] [--gpus-per-task G] [--spark-conf KEY=VALUE]... \
                 [--wait] [--features FEATURES]..."
            ),
            "{all}"
        );
        assert!(all.contains("%%ddp run [--set KEY=VALUE]..."), "{all}");
    }

    #[test]
    fn cell_magic_takes_run_options() {
        let m = parse_cell("run --set train.lr=0.1 --wait").unwrap();
        let CellCommand::Run { options, wait } = m.command else {
            panic!("{:?}", m.command)
        };
        assert_eq!(options.spec.overrides, vec!["train.lr=0.1"]);
        assert!(wait.wait);
    }

    #[test]
    fn train_cell_takes_a_spec_and_features() {
        let m = parse_cell("train mnist.toml --set train.epochs=1 --features cuda --wait").unwrap();
        let CellCommand::Train {
            spec,
            options,
            wait,
            features,
        } = m.command
        else {
            panic!("{:?}", m.command)
        };
        assert_eq!(spec, PathBuf::from("mnist.toml"));
        assert_eq!(options.spec.overrides, vec!["train.epochs=1"]);
        assert_eq!(features, vec!["cuda"]);
        assert!(wait.wait);
        let e = parse_cell("train").unwrap_err().to_string();
        assert!(e.contains("<SPEC>"), "{e}");
        let e = parse_cell("train mnist.toml --trainer bin/t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("builds its own trainer") && e.contains("--trainer bin/t"),
            "{e}"
        );
    }
}
