//! `ddp compare RUN... [--sweep ID] [--json]`, and choosing runs by address or sweep (shared
//! with `plot`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::present::analysis::{self, Comparison, comparison};
use ddp_workspaces::present::report;
use ddp_workspaces::{Run, Workspace};

/// The runs named by `addresses` then those of `--sweep` ([`analysis::select_runs`]); run
/// folders that cannot be read are reported on stderr.
pub fn select_runs(ws: &Workspace, addresses: &[String], sweep: Option<&str>) -> Result<Vec<Run>> {
    let (runs, bad) = analysis::select_runs(ws, addresses, sweep)?;
    for b in &bad {
        eprintln!("ddp: skipping {}: {}", b.dir.display(), b.error);
    }
    Ok(runs)
}

/// Prints `c` as a table (one row per run: differing keys, then figures) or as one JSON object.
pub fn print(c: &Comparison, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(c)?);
        return Ok(());
    }
    print!("{}", report::comparison_text(c));
    Ok(())
}

pub fn compare(
    root: &Path,
    addresses: &[String],
    sweep: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let runs = select_runs(&ws, addresses, sweep)?;
    let sweep_id = match sweep {
        Some(_) => runs.last().and_then(|r| r.record.sweep.clone()),
        None => None,
    };
    print(&comparison(&runs, sweep_id)?, json)?;
    Ok(ExitCode::SUCCESS)
}
