//! `ddp compare RUN... [--sweep ID] [--json]`, and choosing runs by address or sweep (shared
//! with `plot`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::analysis::{self, FlatSpec};
use ddp_workspaces::workspace::resolve_address;
use ddp_workspaces::{Error, Run, RunStatus, Workspace, sweep};
use serde::Serialize;

use super::list::{Summary, summarize};
use super::table;

/// The runs named by `addresses` (ids, prefixes, `latest`, ...) then those of `--sweep`, each
/// once, in that order. An address that is a sweep id (not a run) says so. At least one run.
pub fn select_runs(ws: &Workspace, addresses: &[String], sweep: Option<&str>) -> Result<Vec<Run>> {
    let (all, bad) = ws.runs()?;
    for b in &bad {
        eprintln!("ddp: skipping {}: {}", b.dir.display(), b.error);
    }
    let mut out: Vec<Run> = Vec::new();
    let mut push = |r: &Run| {
        if !out.iter().any(|o| o.record.id == r.record.id) {
            out.push(r.clone());
        }
    };
    for a in addresses {
        match resolve_address(&all, a) {
            Ok(r) => push(r),
            Err(Error::NotFound(msg)) => {
                // `ddp compare <sweep id>` is an easy slip: point at --sweep.
                if sweep::resolve(&ws.root, &all, a).is_ok_and(|id| id == *a) {
                    return Err(Error::NotFound(format!(
                        "no run `{a}`: that is a sweep; use --sweep {a}"
                    ))
                    .into());
                }
                return Err(Error::NotFound(msg).into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(s) = sweep {
        let id = sweep::resolve(&ws.root, &all, s)?;
        let members = sweep::members(&ws.root, &all, &id);
        if members.is_empty() {
            return Err(Error::NotFound(format!("sweep {id} has no runs left")).into());
        }
        for r in members {
            push(r);
        }
    }
    if out.is_empty() {
        return Err(Error::Invalid("name at least one run (or --sweep ID)".into()).into());
    }
    Ok(out)
}

/// What `compare --json` prints (and `sweep --json` at the end).
#[derive(Serialize)]
pub struct Comparison {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    /// The spec keys whose values differ between the runs, sorted.
    pub differing_keys: Vec<String>,
    pub runs: Vec<ComparedRun>,
}

#[derive(Serialize)]
pub struct ComparedRun {
    pub id: String,
    pub experiment: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub dir: PathBuf,
    /// This run's value of each differing key (absent: the run's spec does not set it).
    pub keys: BTreeMap<String, serde_json::Value>,
    pub summary: Summary,
    /// Internal: the differing keys as table cells.
    #[serde(skip)]
    cells: Vec<String>,
}

/// Reads each run's frozen spec and figures.
pub fn comparison(runs: &[Run], sweep: Option<String>) -> Result<Comparison> {
    let specs: Vec<FlatSpec> = runs
        .iter()
        .map(|r| analysis::read_flat_spec(&r.spec_path()))
        .collect::<Result<_, _>>()?;
    let differing_keys = analysis::differing_keys(&specs);
    let runs = runs
        .iter()
        .zip(&specs)
        .map(|(r, spec)| {
            let rec = &r.record;
            ComparedRun {
                id: rec.id.clone(),
                experiment: rec.experiment.clone(),
                name: rec.name.clone(),
                sweep: rec.sweep.clone(),
                status: rec.status,
                error: rec.error.clone(),
                dir: r.dir.clone(),
                keys: differing_keys
                    .iter()
                    .filter_map(|k| Some((k.clone(), analysis::json_value(spec.get(k)?))))
                    .collect(),
                cells: differing_keys
                    .iter()
                    .map(|k| {
                        spec.get(k)
                            .map(analysis::display_value)
                            .unwrap_or_else(|| "-".into())
                    })
                    .collect(),
                summary: summarize(r, &r.metrics().unwrap_or_default()),
            }
        })
        .collect();
    Ok(Comparison {
        sweep,
        differing_keys,
        runs,
    })
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
                table::percent(s.best_val_accuracy),
                table::percent(s.final_val_accuracy),
                s.test_loss
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_else(|| "-".into()),
                table::percent(s.test_accuracy),
                s.duration_s
                    .map(table::duration)
                    .unwrap_or_else(|| "-".into()),
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
