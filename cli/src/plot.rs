//! `ddp plot RUN... [--sweep ID] -o FILE.svg|FILE.png [--x step|epoch|time]`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::plot::{Series, XAxis, plot_runs};

use crate::compare::select_runs;

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
