//! `%ddp ls`, `show`, `compare` (text and HTML, or JSON with `--json`) and `plot` (HTML with the
//! image, SVG and PNG).
//! The plain text is exactly what the `ddp` CLI prints.

use ddp_workspaces::index::IndexedRun;
use ddp_workspaces::index::summary::RunOverview;
use ddp_workspaces::present::analysis::Comparison;
use ddp_workspaces::present::plot::{self, Series, XAxis};
use ddp_workspaces::present::report;
use ddp_workspaces::{Error, Run};
use serde_json::Value;

use super::table::{html_table, key_value_table, note, pre, status_badge, wrapping_html_table};
use super::{Output, html_escape, svg_img};

/// The run list (`ddp ls`): the CLI's table as text and as an HTML table.
pub fn ls(runs: &[IndexedRun]) -> Output {
    let rows: Vec<_> = runs.iter().map(|r| (&r.run, r.summary())).collect();
    let table = report::runs_table_of(&rows);
    let mut html = html_table(&table);
    if runs.is_empty() {
        html.push_str(&note("no runs"));
    }
    Output::rich(table.to_text(), html)
}

/// `ddp ls --json`: a JSON array of [`RunOverview`]s; the text is the CLI's (one JSON object
/// per line).
pub fn ls_json(runs: &[IndexedRun]) -> Output {
    let values: Vec<Value> = runs
        .iter()
        .map(|r| serde_json::to_value(r.overview()).unwrap_or(Value::Null))
        .collect();
    let plain: String = values.iter().map(|v| format!("{v}\n")).collect();
    Output::json(plain, Value::Array(values))
}

/// One run (`ddp show`): the CLI's text; as HTML a key/value table (status as a badge), the
/// frozen spec in a `<pre>` and the notes.
pub fn show(run: &Run) -> Output {
    let d = report::run_details(run);
    let mut rows = d.fields.clone();
    if let Some(status) = rows.iter_mut().find(|(k, _)| *k == "status") {
        let error = run.record.error.as_deref().map(html_escape);
        status.1 = match error {
            Some(e) => format!("{} {e}", status_badge(run.record.status)),
            None => status_badge(run.record.status),
        };
    }
    let mut html = String::from("<div class=\"ddp-show\">\n");
    html.push_str(&key_value_table(&rows, &["status"]));
    html.push_str(&format!(
        "\n<details><summary>spec <code>{}</code></summary>\n{}\n</details>\n",
        html_escape(&d.spec_path.display().to_string()),
        pre(&d.spec)
    ));
    if !d.notes.is_empty() {
        html.push_str(&format!(
            "<div><b>notes</b> <code>{}</code></div>\n{}\n",
            html_escape(&d.notes_path.display().to_string()),
            pre(&d.notes)
        ));
    }
    html.push_str("</div>");
    Output::rich(d.to_text(), html)
}

/// `ddp show --json`: the run's [`RunOverview`]; the text is the CLI's (pretty-printed).
pub fn show_json(run: &Run) -> Output {
    let v = overview(run);
    let plain = serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
    Output::json(plain, v)
}

/// A comparison (`ddp compare`): the CLI's table and note, as text and as HTML (cells wrap, so
/// the table fits the output area with any number of differing keys).
pub fn compare(c: &Comparison) -> Output {
    let (table, remark) = report::comparison_table(c);
    let mut html = wrapping_html_table(&table);
    if let Some(r) = &remark {
        html.push_str(&note(r));
    }
    Output::rich(report::comparison_text(c), html)
}

/// `ddp compare --json`: the comparison as one JSON object; the text is the CLI's.
pub fn compare_json(c: &Comparison) -> Output {
    let v = serde_json::to_value(c).unwrap_or(Value::Null);
    let plain = serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
    Output::json(plain, v)
}

/// Size of a `%ddp plot` image, pixels: both panels fit JupyterLab's output area (about 968
/// pixels wide) at the drawn size.
pub const PLOT_SIZE: (u32, u32) = (960, 400);

/// Loss and accuracy (language models: perplexity) of `series` overlaid (as `ddp plot` draws
/// them, at [`PLOT_SIZE`]): HTML
/// with the image ([`svg_img`]: it survives an untrusted notebook's sanitiser and shrinks with
/// the output area), and SVG and PNG for other viewers; fails like [`plot::plot_runs`] when
/// there is nothing to draw.
pub fn plot(series: &[Series], x: XAxis) -> Result<Output, Error> {
    let svg = plot::plot_runs_svg_sized(series, x, PLOT_SIZE)?;
    let png = plot::plot_runs_png_sized(series, x, PLOT_SIZE)?;
    let runs = if series.len() == 1 { "run" } else { "runs" };
    let shows = match plot::panel_captions(series).as_slice() {
        [first @ .., last] if !first.is_empty() => format!("{} and {last}", first.join(", ")),
        all => all.join(""),
    };
    let plain = format!("plot of {} {runs} (x = {x}): {shows}", series.len());
    let html = svg_img(&svg, PLOT_SIZE.0, &plain);
    Ok(Output::image(plain, svg, png).with_html(html))
}

/// A sweep's parallel coordinates, as an image (SVG in HTML, with SVG and PNG beside it).
pub fn parallel(p: &ddp_workspaces::present::plot::parallel::Parallel) -> Result<Output, Error> {
    use ddp_workspaces::present::plot::parallel::{SIZE, parallel_png, parallel_svg};
    let svg = parallel_svg(p, SIZE)?;
    let png = parallel_png(p, SIZE)?;
    let names: Vec<&str> = p.axes.iter().map(|a| a.name.as_str()).collect();
    let plain = format!(
        "parallel coordinates of {} trials: {}",
        p.lines.len(),
        names.join(", ")
    );
    let html = svg_img(&svg, SIZE.0, &plain);
    Ok(Output::image(plain, svg, png).with_html(html))
}

fn overview(run: &Run) -> Value {
    serde_json::to_value(RunOverview::of(run)).unwrap_or(Value::Null)
}
