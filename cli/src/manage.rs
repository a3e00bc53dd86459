//! `ddp stop`, `ddp rm` and `ddp tag`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::actions::{self, StopRequest};

/// How long `ddp stop` waits for the run to stop.
const STOP_LIMIT: Duration = Duration::from_secs(120);

pub fn stop(root: &Path, address: &str) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    match actions::request_stop(&run)? {
        StopRequest::AlreadyTerminal(run) => {
            println!("run {} is already {}", run.record.id, run.record.status);
            return Ok(ExitCode::SUCCESS);
        }
        StopRequest::Signalled { run, .. } => println!(
            "stopping run {} (replicas finish their step)...",
            run.record.id
        ),
        StopRequest::Cancelled { run, job_id } => println!(
            "stopping run {}: cancelled Slurm job {job_id} (replicas checkpoint and stop)...",
            run.record.id
        ),
    }
    let now = actions::wait_until_terminal(&run.dir, STOP_LIMIT)?;
    println!("run {} {}", now.record.id, now.record.status);
    Ok(ExitCode::SUCCESS)
}

pub fn rm(root: &Path, address: &str) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    actions::remove_run(&run)?;
    println!("removed {}", run.dir.display());
    Ok(ExitCode::SUCCESS)
}

pub fn tag(root: &Path, address: &str, tags: &[String], remove: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    let now = if remove {
        actions::remove_tags(&run, tags)?
    } else {
        actions::add_tags(&run, tags)?
    };
    println!("{}", now.join("\n"));
    Ok(ExitCode::SUCCESS)
}
