//! `ddp`: the headless batch front end. `ddp run SPEC` trains (supervised, restartable) and shows
//! progress; `ls`, `show`, `logs`, `stop`, `resume`, `rm` manage the workspace's runs; `sweep`
//! runs a grid of overrides, `compare`, `plot` and `export` look at several runs; `sample`
//! generates text from a language-model run; `new model DIR` writes a crate of one's own.
//!
//! This file dispatches the parsed command line ([`ddp_cli::args`]); one file per group of
//! commands.

mod compare;
mod export;
mod follow;
mod list;
mod logs;
mod manage;
mod new;
mod plot;
mod sample;
mod search;
mod sweep;
mod table;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use ddp_cli::args::{Cli, Command};
use ddp_workspaces::Workspace;
use ddp_workspaces::commands::{
    ExportFormat, LogsArgs, LsArgs, NewCommand, PlotArgs, SharedCommand, ShowArgs, TagArgs,
};

fn main() -> ExitCode {
    // The hidden sub-commands run by the supervisor and the replicas, before clap sees anything.
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = ddp_workspaces::run_hidden_command(&args) {
        return code;
    }
    end_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let root = Workspace::resolve(cli.workspace.as_deref());
    let result = match cli.command {
        Command::Run { args, detach } => {
            follow::run(&root, args.new_run(std::env::args().collect()), detach)
        }
        Command::Shared(SharedCommand::Ls(LsArgs { filter, json })) => {
            list::ls(&root, &filter, json)
        }
        Command::Shared(SharedCommand::Show(ShowArgs { run, json })) => {
            list::show(&root, &run.run, json)
        }
        Command::Logs {
            args: LogsArgs { run, rank, tail },
            follow,
        } => logs::logs(&root, &run.run, rank, follow, tail),
        Command::Shared(SharedCommand::Stop(run)) => manage::stop(&root, &run.run),
        Command::Shared(SharedCommand::Scale(args)) => {
            manage::scale(&root, &args.run, args.replicas)
        }
        Command::Resume { run, detach } => follow::resume(&root, &run.run, detach),
        Command::Rm(run) => manage::rm(&root, &run.run),
        Command::Tag(TagArgs { run, tags, remove }) => manage::tag(&root, &run.run, &tags, remove),
        Command::Sweep {
            action: Some(action),
            ..
        } => search::manage(&root, action),
        Command::Sweep { args, detach, .. } => sweep::sweep(&root, &args, detach),
        Command::Shared(SharedCommand::Compare(c)) => {
            compare::compare(&root, &c.runs, c.sweep.as_deref(), c.json)
        }
        Command::Plot {
            args:
                PlotArgs {
                    sweep: Some(sweep),
                    parallel: true,
                    ..
                },
            output,
        } => plot::parallel(&root, &sweep, &output),
        Command::Plot {
            args: PlotArgs { runs, sweep, x, .. },
            output,
        } => plot::plot(&root, &runs, sweep.as_deref(), &output, x),
        Command::Export(args) => match args.format() {
            ExportFormat::Csv => {
                export::export_csv(&root, &args.target, args.output.as_deref(), args.all_ranks)
            }
            ExportFormat::PyTorchJob | ExportFormat::TrainJob => export::export_job(&root, &args),
        },
        Command::Shared(SharedCommand::Sample(args)) => sample::sample(&root, &args),
        Command::New(NewCommand::Model(args)) => new::model(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ddp: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// A reader that goes away (`ddp ls | head`) ends the command at its next write, silently, as it
/// ends Unix tools: the default action of SIGPIPE, which Rust programs otherwise ignore (their
/// writes then fail and `println!` panics). Only for the public commands: the hidden ones (the
/// supervisor, the replicas) keep Rust's handling, and a run outlives whoever was following it.
fn end_quietly_on_closed_pipe() {
    // SAFETY: setting a signal's disposition to its default, before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The library's exit code for its errors ([`ddp_workspaces::Error::exit_code`]), 1 otherwise.
fn exit_code(e: &anyhow::Error) -> u8 {
    e.downcast_ref::<ddp_workspaces::Error>()
        .map_or(1, |e| e.exit_code().clamp(1, 255) as u8)
}
