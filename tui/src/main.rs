//! `ddp-tui [--workspace DIR]`: the terminal dashboard. See the crate docs and docs/tui.md.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ddp_workspaces::Workspace;

#[derive(Parser, Debug)]
#[command(
    name = "ddp-tui",
    version,
    about = "Terminal dashboard for ddp runs: live charts, per-replica logs, devices, actions"
)]
struct Cli {
    /// Workspace folder (default: $DDP_WORKSPACE, else ./ddp-workspace).
    #[arg(long)]
    workspace: Option<PathBuf>,
}

fn main() -> ExitCode {
    // Runs started from the dashboard are supervised by this executable (hidden sub-commands).
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = ddp_workspaces::run_hidden_command(&args) {
        return code;
    }
    let cli = Cli::parse();
    let root = Workspace::resolve(cli.workspace.as_deref());
    if let Err(e) = check_workspace(&root) {
        eprintln!("ddp-tui: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ddp-tui: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(ddp_tui::runtime::run(root)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddp-tui: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A missing or empty folder is a workspace to be (its runs appear once created); a folder
/// that holds something else is refused before the terminal is taken over.
fn check_workspace(root: &std::path::Path) -> Result<(), ddp_workspaces::Error> {
    match Workspace::open(root) {
        Ok(_) => Ok(()),
        Err(ddp_workspaces::Error::NotFound(_)) => Ok(()),
        Err(e) => {
            let empty = std::fs::read_dir(root).is_ok_and(|mut entries| entries.next().is_none());
            if empty { Ok(()) } else { Err(e) }
        }
    }
}
