//! `ddp compare RUN... [--sweep ID] [--json]`, and choosing runs by address or sweep (shared
//! with `plot`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::analysis::{self, Comparison, comparison};
use ddp_workspaces::format::{self, opt_duration, percent};
use ddp_workspaces::{Run, Workspace};

use super::table;

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
    let named = c.runs.iter().any(|r| r.name.is_some());
    let mut header: Vec<&str> = vec!["RUN"];
    if named {
        header.push("NAME");
    }
    header.push("STATUS");
    header.extend(c.differing_keys.iter().map(String::as_str));
    header.extend([
        "BEST VAL ACC",
        "FINAL VAL ACC",
        "TEST LOSS",
        "TEST ACC",
        "DURATION",
    ]);
    let rows: Vec<Vec<String>> = c
        .runs
        .iter()
        .map(|r| {
            let s = &r.summary;
            let mut row = vec![r.id.clone()];
            if named {
                row.push(r.name.clone().unwrap_or_else(|| "-".into()));
            }
            row.push(r.status.to_string());
            row.extend(r.cells.iter().cloned());
            row.extend([
                percent(s.best_val_accuracy),
                percent(s.final_val_accuracy),
                format::loss(s.test_loss),
                percent(s.test_accuracy),
                opt_duration(s.duration_s),
            ]);
            row
        })
        .collect();
    print!("{}", table::render(&header, &rows));
    if c.differing_keys.is_empty() && c.runs.len() > 1 {
        println!("(no spec key differs between these runs)");
    }
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
