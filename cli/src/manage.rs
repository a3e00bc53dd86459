//! `ddp stop`, `ddp rm` and `ddp tag`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::actions;

pub fn stop(root: &Path, address: &str) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    actions::stop_and_wait(&run, |line| println!("{line}"))?;
    Ok(ExitCode::SUCCESS)
}

pub fn scale(root: &Path, address: &str, replicas: usize) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    println!("{}", actions::scale_run(&run, replicas)?);
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
