//! The hidden sub-commands of a front end's own executable, parsed once into [`HiddenCommand`]
//! and written by [`HiddenCommand::to_args`], which round-trip. A run's supervisor, its replicas
//! and the workspace's Slurm watcher are started from the front end's binary (`ddp`, `ddp-tui`,
//! `ddp-kernel`) with one of these; [`crate::hidden::run_hidden_command`] runs them.
//!
//! This module imports nothing of its siblings: the supervisor, the Slurm job script and the
//! detached spawns all build their command lines here.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
use ddp_trainer::cli::ReplicaArgs;

/// `EXE __replica ...`: one replica, with the trainer's command line.
pub const REPLICA: &str = "__replica";
/// `EXE __supervise RUN_DIR [--resume]`: a run's supervisor.
pub const SUPERVISE: &str = "__supervise";
/// `EXE __slurm-watch ROOT`: a workspace's Slurm watcher.
pub const SLURM_WATCH: &str = "__slurm-watch";
pub const SWEEP: &str = "__sweep";

/// A hidden sub-command with its arguments.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(name = "ddp", disable_help_subcommand = true)]
pub enum HiddenCommand {
    /// One replica of a run (the `ddp-trainer` command line).
    #[command(name = REPLICA)]
    Replica(ReplicaArgs),
    /// The supervisor of the run in `run_dir`; `--resume` continues from its newest checkpoint.
    #[command(name = SUPERVISE)]
    Supervise {
        run_dir: PathBuf,
        #[arg(long)]
        resume: bool,
    },
    /// The Slurm watcher of the workspace at `root`.
    #[command(name = SLURM_WATCH)]
    SlurmWatch { root: PathBuf },
    #[command(name = SWEEP)]
    Sweep { root: PathBuf, id: String },
}

impl HiddenCommand {
    /// The sub-command named by `args` (the whole command line, `args[0]` being the executable):
    /// `None` when `args[1]` names no hidden sub-command (a public command line), else the
    /// command or clap's error for its arguments.
    pub fn parse(args: &[OsString]) -> Option<std::result::Result<Self, clap::Error>> {
        let name = args.get(1)?.to_str()?;
        if ![REPLICA, SUPERVISE, SLURM_WATCH, SWEEP].contains(&name) {
            return None;
        }
        Some(Self::try_parse_from(args))
    }

    /// The arguments after the executable (what [`HiddenCommand::parse`] reads back).
    pub fn to_args(&self) -> Vec<OsString> {
        match self {
            HiddenCommand::Replica(a) => {
                let mut args = vec![OsString::from(REPLICA)];
                args.extend(a.to_args());
                args
            }
            HiddenCommand::Supervise { run_dir, resume } => {
                let mut args = vec![OsString::from(SUPERVISE), run_dir.into()];
                if *resume {
                    args.push("--resume".into());
                }
                args
            }
            HiddenCommand::SlurmWatch { root } => vec![SLURM_WATCH.into(), root.into()],
            HiddenCommand::Sweep { root, id } => vec![SWEEP.into(), root.into(), id.into()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn every_hidden_command_round_trips() {
        let mut replica = ReplicaArgs::new("/ws/r/spec.toml", "/ws/r").resuming(true);
        replica.overrides = vec!["train.lr=0.5".into()];
        for cmd in [
            HiddenCommand::Replica(replica),
            HiddenCommand::Replica(ReplicaArgs::new("s.toml", "out dir")),
            HiddenCommand::Supervise {
                run_dir: "/ws/experiments/e/runs/r 1".into(),
                resume: false,
            },
            HiddenCommand::Supervise {
                run_dir: "r".into(),
                resume: true,
            },
            HiddenCommand::SlurmWatch { root: "/ws".into() },
            HiddenCommand::Sweep {
                root: "/ws".into(),
                id: "20261129-073000-abcdef".into(),
            },
        ] {
            let mut args = vec![OsString::from("ddp")];
            args.extend(cmd.to_args());
            assert_eq!(HiddenCommand::parse(&args).unwrap().unwrap(), cmd);
        }
    }

    #[test]
    fn public_command_lines_are_not_hidden_ones() {
        assert!(HiddenCommand::parse(&line(&["ddp", "ls"])).is_none());
        assert!(HiddenCommand::parse(&line(&["ddp"])).is_none());
        assert!(HiddenCommand::parse(&[]).is_none());
        assert!(HiddenCommand::parse(&line(&["ddp", "--help"])).is_none());
    }

    #[test]
    fn a_hidden_command_without_its_arguments_is_an_error() {
        for args in [
            line(&["ddp", SUPERVISE]),
            line(&["ddp", SLURM_WATCH]),
            line(&["ddp", REPLICA, "spec.toml"]),
        ] {
            assert!(HiddenCommand::parse(&args).unwrap().is_err(), "{args:?}");
        }
        let s = HiddenCommand::parse(&line(&["ddp", SUPERVISE, "--resume", "d"])).unwrap();
        assert_eq!(
            s.unwrap(),
            HiddenCommand::Supervise {
                run_dir: "d".into(),
                resume: true
            }
        );
    }
}
