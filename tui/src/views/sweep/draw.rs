//! The Sweep view: the search in words (status, what it searches, budget, rungs), the
//! leaderboard (the selected trial highlighted) and the parallel coordinates as a terminal chart
//! (one line per trial through its parameters and its metric, the best brightest).

use ddp_workspaces::present::plot::parallel::Parallel;
use ddp_workspaces::present::search;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::canvas::{Canvas, Line as CanvasLine};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Widget};

use super::SweepView;
use crate::theme::Theme;

pub fn render(t: Theme, v: &SweepView, area: Rect, buf: &mut Buffer) {
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Span::styled(format!(" Sweep {} ", v.id), t.title()));
    let inner = block.inner(area);
    block.render(area, buf);
    let record = match &v.record {
        None => {
            Paragraph::new("reading the sweep...").render(inner, buf);
            return;
        }
        Some(Err(e)) => {
            Paragraph::new(Span::styled(e.clone(), t.error())).render(inner, buf);
            return;
        }
        Some(Ok(r)) => r,
    };
    let Some(state) = &record.search else {
        let text = format!(
            "sweep {}: {} runs, no scheduler (each trains to its end): see them in the Runs view \
             (`ddp ls --sweep {}`)",
            record.id,
            record.runs.len(),
            record.id
        );
        Paragraph::new(text).render(inner, buf);
        return;
    };
    let words = search::show_text(record, state, None);
    let head: Vec<Line> = words
        .lines()
        .skip(1)
        .take(2)
        .chain(search::rungs_text(state).lines())
        .map(|l| Line::raw(l.to_string()))
        .collect();
    let status = Line::from(vec![
        Span::styled(state.status.as_str(), t.title()),
        Span::raw(format!("  {}", search::states_text(state))),
    ]);
    let head_rows = head.len() as u16 + 1;
    let [top, board, chart] = Layout::vertical([
        Constraint::Length(head_rows),
        Constraint::Min(4),
        Constraint::Percentage(40),
    ])
    .areas(inner);
    let mut lines = vec![status];
    lines.extend(head);
    Paragraph::new(lines).render(top, buf);
    render_board(t, v, board, buf);
    let p = search::parallel(record, &[]);
    render_parallel(t, &p, chart, buf);
}

fn render_board(t: Theme, v: &SweepView, area: Rect, buf: &mut Buffer) {
    let Some(Ok(record)) = &v.record else {
        return;
    };
    let Some(state) = &record.search else {
        return;
    };
    let table = search::leaderboard(state);
    let rows = area.height.saturating_sub(1) as usize;
    let skip = v.selected.saturating_sub(rows.saturating_sub(1));
    let body: Vec<Row> = table
        .rows
        .iter()
        .enumerate()
        .skip(skip)
        .take(rows)
        .map(|(i, r)| {
            let style = if i == v.selected {
                t.selected()
            } else {
                Style::new()
            };
            Row::new(r.iter().map(|c| Cell::from(c.clone()))).style(style)
        })
        .collect();
    let widths = [
        Constraint::Length(3),
        Constraint::Length(5),
        Constraint::Length(22),
        Constraint::Length(9),
        Constraint::Length(4),
        Constraint::Length(12),
        Constraint::Min(10),
    ];
    Table::new(body, widths)
        .header(Row::new(table.header.iter().map(|h| Cell::from(h.clone()))).style(t.key()))
        .render(area, buf);
}

/// The parallel coordinates on a braille canvas: axes as vertical lines named underneath.
fn render_parallel(t: Theme, p: &Parallel, area: Rect, buf: &mut Buffer) {
    if area.height < 4 || p.axes.len() < 2 {
        return;
    }
    let [plot, names] = Layout::vertical([Constraint::Min(2), Constraint::Length(1)]).areas(area);
    let n = p.axes.len();
    let x_of = |k: usize| k as f64 / (n - 1) as f64;
    let mut ranked: Vec<(Option<f64>, Vec<Option<f64>>)> =
        p.lines.iter().map(|l| (l.metric, p.positions(l))).collect();
    let (lo, hi) = ranked
        .iter()
        .filter_map(|(m, _)| *m)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), m| {
            (a.min(m), b.max(m))
        });
    let weight = |m: Option<f64>| -> Option<f64> {
        match m {
            Some(m) if hi > lo => {
                let w = (m - lo) / (hi - lo);
                Some(if p.higher_is_better { w } else { 1.0 - w })
            }
            Some(_) => Some(1.0),
            None => None,
        }
    };
    ranked.sort_by(|a, b| {
        let (x, y) = (weight(a.0).unwrap_or(-1.0), weight(b.0).unwrap_or(-1.0));
        x.total_cmp(&y)
    });
    let axis = t.rank(None);
    Canvas::default()
        .x_bounds([0.0, 1.0])
        .y_bounds([0.0, 1.0])
        .paint(|ctx| {
            for k in 0..n {
                ctx.draw(&CanvasLine::new(x_of(k), 0.0, x_of(k), 1.0, axis));
            }
            for (m, pos) in &ranked {
                let color = t.rank(weight(*m));
                for k in 1..n {
                    if let (Some(a), Some(b)) = (pos[k - 1], pos[k]) {
                        ctx.draw(&CanvasLine::new(x_of(k - 1), a, x_of(k), b, color));
                    }
                }
            }
        })
        .render(plot, buf);
    // Axis names under their axes.
    let width = names.width.max(1) as usize;
    let mut row = vec![' '; width];
    for (k, axis) in p.axes.iter().enumerate() {
        let x = (x_of(k) * (width - 1) as f64).round() as usize;
        let start = x
            .saturating_sub(axis.name.len() / 2)
            .min(width.saturating_sub(axis.name.len()));
        for (i, c) in axis.name.chars().enumerate() {
            if let Some(slot) = row.get_mut(start + i) {
                *slot = c;
            }
        }
    }
    Paragraph::new(row.into_iter().collect::<String>()).render(names, buf);
}
