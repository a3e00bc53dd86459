//! `ddp`: the headless batch front end. `ddp run SPEC` trains (supervised, restartable) and shows
//! progress; `ls`, `show`, `logs`, `stop`, `resume`, `rm` manage the workspace's runs; `sweep`
//! runs a grid of overrides, `compare`, `plot` and `export` look at several runs.

mod cli;

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The hidden sub-commands run by the supervisor and the replicas, before clap sees anything.
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = ddp_workspaces::supervisor::run_hidden_command(&args) {
        return code;
    }
    cli::main()
}
