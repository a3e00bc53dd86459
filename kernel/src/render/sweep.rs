//! The sweep card (`%ddp sweep`): a sweep's status, what it searches, its budget, rungs and
//! leaderboard (a search), or its runs (a sweep without a scheduler), and its parallel
//! coordinates, re-rendered in place while it goes on.

use ddp_workspaces::present::report::runs_table;
use ddp_workspaces::present::search::{self, parallel};
use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::sweep::trials::SearchStatus;
use ddp_workspaces::{Run, present::plot};

use super::table::html_table;
use super::{Output, html_escape, svg_img};
use crate::error::Error;

/// Whether the sweep is over: a search no longer running, or every run of a plain sweep ended.
pub fn is_final(record: &SweepRecord, runs: &[&Run]) -> bool {
    match &record.search {
        Some(state) => state.status != SearchStatus::Running,
        None => runs.iter().all(|r| r.record.status.is_terminal()),
    }
}

/// The card of sweep `record` (its runs: `runs`; a search's driver: `driver`).
pub fn card(record: &SweepRecord, runs: &[&Run], driver: Option<u32>) -> Result<Output, Error> {
    let p = parallel(record, runs);
    let chart = if p.lines.iter().any(|l| l.metric.is_some()) {
        let svg = plot::parallel::parallel_svg(&p, plot::parallel::SIZE)?;
        svg_img(&svg, plot::parallel::SIZE.0, "parallel coordinates")
    } else {
        "<div style=\"color:#6b7280\">parallel coordinates once a trial has a result</div>".into()
    };
    let (plain, body) = match &record.search {
        Some(state) => {
            let text = search::show_text(record, state, driver);
            let head: Vec<&str> = text.lines().take(3).collect();
            let rungs = search::rungs_text(state);
            let html = format!(
                "<pre style=\"margin:0 0 6px 0\">{}\n{}</pre>{}",
                html_escape(&head.join("\n")),
                html_escape(rungs.trim_end()),
                html_table(&search::leaderboard(state))
            );
            (text, html)
        }
        None => {
            let table = runs_table(runs);
            let done = runs
                .iter()
                .filter(|r| r.record.status.is_terminal())
                .count();
            let head = format!(
                "sweep {}: {done} of {} runs ended",
                record.id,
                record.runs.len()
            );
            let plain = format!("{head}\n{}", table.to_text());
            let html = format!(
                "<pre style=\"margin:0 0 6px 0\">{}</pre>{}",
                html_escape(&head),
                html_table(&table)
            );
            (plain, html)
        }
    };
    let html = format!(
        "<div class=\"ddp-sweep-card\" style=\"font-family:sans-serif;font-size:13px\">{body}{chart}</div>"
    );
    Ok(Output::rich(plain, html))
}
