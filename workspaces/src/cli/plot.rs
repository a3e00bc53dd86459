//! `ddp plot RUN... [--sweep ID] -o FILE.svg|FILE.png [--x step|epoch|time]`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::plot::{Series, XAxis, plot_runs};

use super::compare::select_runs;

pub fn plot(
    root: &Path,
    addresses: &[String],
    sweep: Option<&str>,
    out: &Path,
    x: XAxis,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let runs = select_runs(&ws, addresses, sweep)?;
    // Legend: the run's name, else its id; a name shared by several runs gets the id too.
    let names: Vec<String> = runs
        .iter()
        .map(|r| r.record.name.clone().unwrap_or_else(|| r.record.id.clone()))
        .collect();
    let series: Vec<Series> = runs
        .iter()
        .zip(&names)
        .map(|(r, name)| {
            let label = if names.iter().filter(|n| *n == name).count() > 1 {
                format!("{name} ({})", r.record.id)
            } else {
                name.clone()
            };
            Ok(Series {
                label,
                records: r.metrics()?,
            })
        })
        .collect::<Result<_>>()?;
    plot_runs(&series, x, out)?;
    println!(
        "wrote {} ({} run{}, x = {x})",
        out.display(),
        series.len(),
        if series.len() == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
