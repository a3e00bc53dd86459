//! The Compare view: the marked runs' curves overlaid (train loss and val/test per run, one
//! colour each; language models alone: their val perplexity instead of the accuracy) and the spec
//! keys that differ, with final figures (a language model's val loss, perplexity and tokens/s).

use ddp_workspaces::follow::run_list::MetricDigest;
use ddp_workspaces::present::curves::curves;
use ddp_workspaces::present::format;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Widget};

use super::CompareView;
use crate::theme::Theme;
use crate::views::run::charts::{Figure, eval_series, line, render_pair};
use crate::views::text::truncate;

pub fn render(t: Theme, c: &CompareView, area: Rect, buf: &mut Buffer) {
    let block = Block::default().borders(Borders::TOP).title(Span::styled(
        format!(" Compare {} runs ", c.runs.len()),
        t.title(),
    ));
    let inner = block.inner(area);
    block.render(area, buf);
    let empty = Vec::new();
    let all: Vec<_> = c
        .runs
        .iter()
        .map(|(dir, _)| curves(c.metrics.get(dir).unwrap_or(&empty), c.chart.x, None))
        .collect();
    let language_models = all.iter().any(|cv| cv.language_model);
    // Language models alone chart their perplexity; beside other runs, the accuracy.
    let figure = if language_models
        && all
            .iter()
            .all(|cv| cv.language_model || cv.train_loss.is_empty())
    {
        Figure::Perplexity
    } else {
        Figure::Accuracy
    };
    let shown = Shown {
        accuracy: figure == Figure::Accuracy,
        language_models,
    };
    let table_rows = match &c.table {
        // The border, the header, the figures, and a row a key (or "the specs are identical").
        Some(Ok(tab)) => tab.differing_keys.len().max(1) as u16 + 2 + shown.rows(),
        _ => 3,
    };
    let [charts, table] = Layout::vertical([
        Constraint::Min(8),
        Constraint::Length(table_rows.min(inner.height / 2)),
    ])
    .areas(inner);
    let mut loss = Vec::new();
    let mut acc = Vec::new();
    for (i, ((_, record), cv)) in c.runs.iter().zip(&all).enumerate() {
        let label = CompareView::label(record);
        loss.push(line(t, &label, i, cv.train_loss.clone()));
        let (l, a) = eval_series(t, cv, i, &format!("{label} "), figure);
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
    render_pair(t, &loss, (figure.title(), &acc), &c.chart, charts, buf);
    render_table(t, c, shown, table, buf);
}

/// Which figures the table shows besides the status and the train loss.
#[derive(Debug, Clone, Copy)]
struct Shown {
    /// Best val and test accuracy (unless every run is a language model).
    accuracy: bool,
    /// A language model's val loss, perplexity and tokens/s.
    language_models: bool,
}

impl Shown {
    /// Rows of figures: status, train loss and the shown ones.
    fn rows(self) -> u16 {
        2 + 2 * self.accuracy as u16 + 3 * self.language_models as u16
    }
}

/// The figures and the differing spec keys, a column per run.
fn render_table(t: Theme, c: &CompareView, shown: Shown, area: Rect, buf: &mut Buffer) {
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
    type Figure = (&'static str, fn(&MetricDigest) -> String);
    let accuracy: [Figure; 2] = [
        ("best val", |d| format::percent(d.best_val_accuracy)),
        ("test", |d| format::percent(d.test_accuracy)),
    ];
    let train: Figure = ("train loss", |d| format::loss(d.last_train_loss));
    let language_models: [Figure; 3] = [
        ("val loss", |d| format::loss(d.last_val_loss)),
        ("perplexity", |d| format::perplexity(d.last_val_perplexity)),
        ("tokens/s", |d| format::rate(d.tokens_per_sec)),
    ];
    let accuracy = accuracy.iter().filter(|_| shown.accuracy);
    let language_models = language_models.iter().filter(|_| shown.language_models);
    for (name, f) in accuracy.chain([&train]).chain(language_models) {
        rows.push(figure(name, &|i| f(&digests[i])));
    }
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

#[cfg(test)]
mod tests {
    //! The Compare view: the differing keys and the charts of the compared runs.

    use crate::ui::tests::*;

    #[test]
    fn compare_shows_the_differing_keys_and_values() {
        let mut app = app_with_runs(100, 30);
        keys(&mut app, "  c");
        let s = screen(&app, 100, 30);
        assert_has(&s, " Reading the specs …");
        app.update(Msg::CompareSpecs(Err("spec.toml of x: unreadable".into())));
        assert_has(&screen(&app, 100, 30), " spec.toml of x: unreadable");

        let app = compare_app(100, 30);
        let s = screen(&app, 100, 30);
        assert_eq!(s[0], " ddp  Runs Devices Compare  3 runs, 1 live  /ws");
        assert_eq!(s[1], format!(" Compare 2 runs {}", "─".repeat(84)));
        assert_rows(
            &s,
            21,
            &[
                &format!(" 2 differing spec keys {}", "─".repeat(77)),
                "             aaaaaa                   wide",
                "status       running                  completed",
                "best val     -                        -",
                "test         -                        -",
                "train loss   -                        -",
                "model.hidden 128                      256",
                "train.lr     0.01                     -",
            ],
        );
        // Identical specs are said to be.
        let mut app = compare_app(100, 30);
        app.update(Msg::CompareSpecs(Ok(Comparison {
            sweep: None,
            differing_keys: vec![],
            runs: vec![],
        })));
        let s = screen(&app, 100, 30);
        assert_has(&s, " 0 differing spec keys ");
        assert_has(&s, "the specs are identical");
    }

    #[test]
    fn compare_charts_follow_the_runs_metrics() {
        let mut app = compare_app(100, 40);
        for step in 1..=10u64 {
            app.update(Msg::Run {
                dir: dir("mnist", A),
                event: RunEvent::Metric(metric(
                    MetricKind::Train,
                    1,
                    step,
                    1.0 / step as f64,
                    None,
                )),
            });
        }
        app.update(Msg::Run {
            dir: dir("mnist", A),
            event: RunEvent::Metric(metric(MetricKind::Val, 1, 10, 0.3, Some(0.8))),
        });
        let s = screen(&app, 100, 40);
        // A legend entry per run, named by its label.
        assert_has(&s, "aaaaaa");
        assert_has(&s, "aaaaaa val");
        assert_has(&s, "best val     80.00%");
    }

    #[test]
    fn compared_language_models_chart_perplexity_with_their_figures() {
        let mut app = compare_app(100, 40);
        for dir in [dir("mnist", A), dir("cifar", B)] {
            for m in test_util::lm_metrics() {
                app.update(Msg::Run {
                    dir: dir.clone(),
                    event: RunEvent::Metric(m),
                });
            }
        }
        let s = screen(&app, 100, 40);
        assert_has(&s, "┌ perplexity smoothing 0.60 ─");
        assert_lacks(&s, "accuracy");
        assert_has(&s, "aaaaaa val 4.263");
        // No accuracy rows: language models have none.
        assert_rows(
            &s,
            30,
            &[
                &format!(" 2 differing spec keys {}", "─".repeat(77)),
                "             aaaaaa                   wide",
                "status       running                  completed",
                "train loss   1.4000                   1.4000",
                "val loss     1.4500                   1.4500",
                "perplexity   4.26                     4.26",
                "tokens/s     16640                    16640",
                "model.hidden 128                      256",
                "train.lr     0.01                     -",
            ],
        );
    }
}
