//! `ddp ls` and `ddp show`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::report;
use ddp_workspaces::summary::RunOverview;
use ddp_workspaces::{Run, RunStatus, Workspace};

pub fn ls(
    root: &Path,
    experiment: Option<&str>,
    status: Option<RunStatus>,
    sweep: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let (runs, bad) = ws.runs()?;
    for b in &bad {
        eprintln!("ddp: skipping {}: {}", b.dir.display(), b.error);
    }
    let sweep = sweep
        .map(|s| ddp_workspaces::sweep::resolve(&ws.root, &runs, s))
        .transpose()?;
    let runs: Vec<&Run> = runs
        .iter()
        .filter(|r| sweep.is_none() || r.record.sweep == sweep)
        .filter(|r| experiment.is_none_or(|e| r.record.experiment == e))
        .filter(|r| status.is_none_or(|s| r.record.status == s))
        .collect();
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
