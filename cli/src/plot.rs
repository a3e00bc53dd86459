//! `ddp plot RUN... [--sweep ID] -o FILE.svg|FILE.png [--x step|epoch|time]`, and `ddp plot
//! --sweep ID --parallel -o FILE`: a sweep's parallel coordinates.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::present::plot::{Series, XAxis, plot_runs};

use crate::compare::select_runs;

pub fn parallel(root: &Path, sweep: &str, out: &Path) -> Result<ExitCode> {
    let record = ddp_workspaces::actions::search::find(root, sweep)?;
    let ws = Workspace::open(root)?;
    let (all, _) = ws.runs()?;
    let runs = ddp_workspaces::sweep::members(&ws.root, &all, &record.id);
    let p = ddp_workspaces::present::search::parallel(&record, &runs);
    ddp_workspaces::present::plot::parallel::plot_parallel(&p, out)?;
    println!(
        "wrote {} (sweep {}: {} lines, {} axes)",
        out.display(),
        record.id,
        p.lines.len(),
        p.axes.len()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn plot(
    root: &Path,
    addresses: &[String],
    sweep: Option<&str>,
    out: &Path,
    x: XAxis,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let runs = select_runs(&ws, addresses, sweep)?;
    let series = Series::of_runs(&runs)?;
    plot_runs(&series, x, out)?;
    println!(
        "wrote {} ({} run{}, x = {x})",
        out.display(),
        series.len(),
        if series.len() == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
