//! `ddp`: the headless batch front end. `ddp run SPEC` trains (supervised, restartable) and shows
//! progress; `ls`, `show`, `logs`, `stop`, `resume`, `rm` manage the workspace's runs; `sweep`
//! runs a grid of overrides, `compare`, `plot` and `export` look at several runs.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let _exe = args.next();
    // Hidden sub-commands used by the supervisor, before clap sees anything.
    match args.next().as_deref().and_then(|a| a.to_str()) {
        Some(ddp_workspaces::supervisor::REPLICA_COMMAND) => {
            return ddp_trainer::cli::main_from(std::iter::once("ddp-trainer".into()).chain(args));
        }
        Some("__supervise") => return cli::supervise_main(args.collect()),
        _ => {}
    }
    cli::main()
}
