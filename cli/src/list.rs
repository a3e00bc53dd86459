//! `ddp ls` and `ddp show`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::commands::RunFilter;
use ddp_workspaces::index::Index;
use ddp_workspaces::index::summary::RunOverview;
use ddp_workspaces::present::report;

pub fn ls(root: &Path, filter: &RunFilter, json: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    // The run index, brought up to date with the folders that changed since.
    let mut index = Index::open_or_memory(&ws.root);
    let refreshed = index.refresh(&ws)?;
    for b in &refreshed.unreadable {
        eprintln!("ddp: skipping {}: {}", b.dir.display(), b.error);
    }
    // A live Slurm run nobody follows (the watcher died with its machine) gets its watcher back.
    let live = index.live()?;
    let _ = ddp_workspaces::engine::slurm::watcher::adopt(root, live.iter().map(|r| &r.run));
    let runs = index.select(&ws.root, &filter.selection())?;
    if json {
        for r in &runs {
            println!("{}", serde_json::to_string(&r.overview())?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<_> = runs.iter().map(|r| (&r.run, r.summary())).collect();
    print!("{}", report::runs_table_of(&rows).to_text());
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
