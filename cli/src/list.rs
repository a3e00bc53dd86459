//! `ddp ls` and `ddp show`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::commands::RunFilter;
use ddp_workspaces::report;
use ddp_workspaces::summary::RunOverview;

pub fn ls(root: &Path, filter: &RunFilter, json: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let (runs, bad) = ws.runs()?;
    // A live Slurm run nobody follows (the watcher died with its machine) gets its watcher back.
    let _ = ddp_workspaces::slurm::watcher::adopt(root, &runs);
    for b in &bad {
        eprintln!("ddp: skipping {}: {}", b.dir.display(), b.error);
    }
    let runs = filter.select(&ws.root, &runs)?;
    if json {
        for r in runs {
            println!("{}", serde_json::to_string(&RunOverview::of(r))?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", report::runs_table(&runs).to_text());
    Ok(ExitCode::SUCCESS)
}

pub fn show(root: &Path, address: &str, json: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&RunOverview::of(&run))?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", report::show_text(&run));
    Ok(ExitCode::SUCCESS)
}
