//! The Compare view: the marked runs' curves overlaid (train loss and val/test per run, one
//! colour each) and the spec keys that differ, with final figures.

use ddp_workspaces::curves::curves;
use ddp_workspaces::format;
use ddp_workspaces::run_list::MetricDigest;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Widget};

use super::run::{eval_series, line, render_pair};
use super::text::truncate;
use crate::app::App;
use crate::compare::CompareView;

pub fn render(app: &App, c: &CompareView, area: Rect, buf: &mut Buffer) {
    let t = app.theme;
    let block = Block::default().borders(Borders::TOP).title(Span::styled(
        format!(" Compare {} runs ", c.runs.len()),
        t.title(),
    ));
    let inner = block.inner(area);
    block.render(area, buf);
    let table_rows = match &c.table {
        // The border, the header, 4 figures, and a row a key (or "the specs are identical").
        Some(Ok(tab)) => tab.differing_keys.len().max(1) as u16 + 6,
        _ => 3,
    };
    let [charts, table] = Layout::vertical([
        Constraint::Min(8),
        Constraint::Length(table_rows.min(inner.height / 2)),
    ])
    .areas(inner);
    let empty = Vec::new();
    let mut loss = Vec::new();
    let mut acc = Vec::new();
    for (i, (dir, record)) in c.runs.iter().enumerate() {
        let label = CompareView::label(record);
        let recs = c.metrics.get(dir).unwrap_or(&empty);
        let cv = curves(recs, c.chart.x, None);
        loss.push(line(t, &label, i, cv.train_loss.clone()));
        let (l, a) = eval_series(t, &cv, i, &format!("{label} "));
        // One colour per run: val and test take the run's colour too.
        loss.extend(l.into_iter().map(|mut s| {
            s.color = t.series(i);
            s
        }));
        acc.extend(a.into_iter().map(|mut s| {
            s.color = t.series(i);
            s
        }));
    }
    render_pair(t, &loss, &acc, &c.chart, charts, buf);
    render_table(app, c, table, buf);
}

fn render_table(app: &App, c: &CompareView, area: Rect, buf: &mut Buffer) {
    let t = app.theme;
    let tab = match &c.table {
        None => {
            Paragraph::new(" Reading the specs …")
                .style(t.dim())
                .render(area, buf);
            return;
        }
        Some(Err(e)) => {
            Paragraph::new(format!(" {e}"))
                .style(t.error())
                .render(area, buf);
            return;
        }
        Some(Ok(tab)) => tab,
    };
    let n = c.runs.len();
    let key_w = tab
        .differing_keys
        .iter()
        .map(|k| k.len())
        .max()
        // Without keys the column holds "the specs are identical".
        .unwrap_or(23)
        .clamp(12, 28) as u16;
    let col_w = ((area.width.saturating_sub(key_w + 1)) / n.max(1) as u16).clamp(6, 24);
    let mut header = vec![Cell::from("")];
    for (i, (_, r)) in c.runs.iter().enumerate() {
        header.push(Cell::from(Span::styled(
            truncate(&CompareView::label(r), col_w as usize),
            Style::new().fg(t.series(i)).add_modifier(Modifier::BOLD),
        )));
    }
    let mut rows: Vec<Row> = Vec::new();
    let digests: Vec<MetricDigest> = c
        .runs
        .iter()
        .map(|(d, _)| MetricDigest::of(c.metrics.get(d).map_or(&[][..], |v| v)))
        .collect();
    let figure = |name: &str, f: &dyn Fn(usize) -> String| {
        let mut cells = vec![Cell::from(Span::styled(name.to_string(), t.dim()))];
        cells.extend((0..n).map(|i| Cell::from(f(i))));
        Row::new(cells)
    };
    rows.push(figure("status", &|i| c.runs[i].1.status.to_string()));
    rows.push(figure("best val", &|i| {
        format::percent(digests[i].best_val_accuracy)
    }));
    rows.push(figure("test", &|i| {
        format::percent(digests[i].test_accuracy)
    }));
    rows.push(figure("train loss", &|i| {
        format::loss(digests[i].last_train_loss)
    }));
    if tab.differing_keys.is_empty() {
        rows.push(Row::new(vec![Cell::from(Span::styled(
            "the specs are identical",
            t.dim(),
        ))]));
    }
    for (k, key) in tab.differing_keys.iter().enumerate().skip(c.scroll) {
        let mut cells = vec![Cell::from(Span::styled(
            truncate(key, key_w as usize),
            t.key(),
        ))];
        cells.extend(tab.runs.iter().map(|r| {
            Cell::from(truncate(
                r.cells.get(k).map_or("-", String::as_str),
                col_w as usize,
            ))
        }));
        rows.push(Row::new(cells));
    }
    let mut widths = vec![Constraint::Length(key_w)];
    widths.extend((0..n).map(|_| Constraint::Length(col_w)));
    Table::new(rows, widths)
        .header(Row::new(header))
        .column_spacing(1)
        .block(Block::default().borders(Borders::TOP).title(Span::styled(
            format!(" {} differing spec keys ", tab.differing_keys.len()),
            t.title(),
        )))
        .render(area, buf);
}
