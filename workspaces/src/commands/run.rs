//! The arguments of the commands that start runs: `run` and `sweep`.

use std::path::PathBuf;

use clap::Parser;

use crate::actions::{NewRun, NewSweep};

/// How a spec is changed and run: overrides, replicas, the trainer executable.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecOptions {
    /// Override a spec key, e.g. --set train.lr=0.01 (repeatable; a sweep applies it to every run).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
    pub overrides: Vec<String>,
    /// Number of replicas (ddp.replicas).
    #[arg(long, value_name = "N")]
    pub replicas: Option<usize>,
    /// Run this executable as the replicas instead of the built-in trainer (a program made with
    /// `main_with` of the trainer library, for `[model] name = "custom"`).
    #[arg(long, value_name = "PATH")]
    pub trainer: Option<PathBuf>,
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
}

impl RunOptions {
    /// The request for a run of `spec` with these options, recording `command`.
    pub fn new_run(self, spec: PathBuf, command: Vec<String>) -> NewRun {
        NewRun {
            spec,
            overrides: self.spec.overrides,
            replicas: self.spec.replicas,
            trainer: self.spec.trainer,
            name: self.name,
            command,
            ..NewRun::default()
        }
    }
}

/// `run SPEC [--set KEY=VALUE]... [--replicas N] [--trainer PATH] [--name NAME]`.
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
    /// The experiment spec (TOML) every run starts from.
    pub spec: PathBuf,
    /// A spec key and its values, e.g. --grid train.lr=0.001,0.01 (repeatable: the runs are
    /// the cartesian product; commas inside [...] or quotes do not split).
    #[arg(long = "grid", value_name = "KEY=V1,V2,...", required = true)]
    pub grid: Vec<String>,
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

impl SweepArgs {
    /// The request for this sweep, recording `command`.
    pub fn new_sweep(&self, command: Vec<String>) -> NewSweep {
        NewSweep {
            spec: self.spec.clone(),
            grid: self.grid.clone(),
            overrides: self.options.overrides.clone(),
            replicas: self.options.replicas,
            max_parallel: self.max_parallel,
            trainer: self.options.trainer.clone(),
            name: self.name.clone(),
            command,
        }
    }
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
