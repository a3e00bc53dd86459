//! The Runs view: one row per run, columns chosen by priority to fit the width.

use std::path::Path;

use ddp_workspaces::follow::run_list::RunEntry;
use ddp_workspaces::present::format;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{
    Block, Borders, Cell, Paragraph, Row as TableRow, StatefulWidget, Table, TableState, Widget,
    Wrap,
};

use super::{Row, RunsState, duration, progress};
use crate::theme::Theme;
use crate::views::text::{bar, sparkline, truncate};

/// A column: its header, width, and priority (lower stays longer when space runs out).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Col {
    Mark,
    Status,
    Experiment,
    Id,
    Progress,
    Replicas,
    Restarts,
    Loss,
    BestVal,
    Test,
    Created,
    Duration,
    Tags,
}

impl Col {
    fn header(self) -> &'static str {
        match self {
            Col::Mark => "",
            Col::Status => "STATUS",
            Col::Experiment => "EXPERIMENT",
            Col::Id => "RUN",
            Col::Progress => "PROGRESS",
            Col::Replicas => "REPLICAS",
            Col::Restarts => "RST",
            Col::Loss => "TRAIN LOSS",
            Col::BestVal => "BEST",
            Col::Test => "TEST",
            Col::Created => "CREATED",
            Col::Duration => "TIME",
            Col::Tags => "TAGS",
        }
    }

    fn width(self, wide_ids: bool) -> u16 {
        match self {
            Col::Mark => 1,
            Col::Status => 10,
            Col::Experiment => 12,
            Col::Id if wide_ids => 22,
            Col::Id => 13,
            Col::Progress => 12,
            Col::Replicas => 12,
            Col::Restarts => 3,
            Col::Loss => 16,
            Col::BestVal => 7,
            Col::Test => 7,
            Col::Created => 19,
            Col::Duration => 7,
            Col::Tags => 16,
        }
    }

    fn priority(self) -> u8 {
        match self {
            Col::Mark | Col::Status | Col::Id => 0,
            Col::Progress | Col::Experiment => 1,
            Col::Loss | Col::BestVal => 2,
            Col::Test | Col::Duration => 3,
            Col::Replicas | Col::Tags => 4,
            Col::Restarts => 5,
            Col::Created => 6,
        }
    }
}

const ORDER: [Col; 13] = [
    Col::Mark,
    Col::Status,
    Col::Experiment,
    Col::Id,
    Col::Progress,
    Col::Replicas,
    Col::Restarts,
    Col::Loss,
    Col::BestVal,
    Col::Test,
    Col::Created,
    Col::Duration,
    Col::Tags,
];

/// The columns that fit `width` (dropping the lowest priorities first), in display order.
fn columns(width: u16) -> (Vec<Col>, bool) {
    let wide_ids = width >= 170;
    for max_priority in (0..=6).rev() {
        let cols: Vec<Col> = ORDER
            .iter()
            .copied()
            .filter(|c| c.priority() <= max_priority)
            .collect();
        let need: u16 = cols.iter().map(|c| c.width(wide_ids) + 1).sum();
        if need <= width {
            return (cols, wide_ids);
        }
    }
    (vec![Col::Mark, Col::Status, Col::Id], false)
}

/// The list of `runs` in `workspace`, with live runs' durations up to `now`.
pub fn render(
    t: Theme,
    runs: &RunsState,
    workspace: &Path,
    now: f64,
    area: Rect,
    buf: &mut Buffer,
) {
    let mut title = vec![Span::styled(" Runs ", t.title())];
    title.push(Span::styled(
        format!(
            "sorted by {}{}{} ",
            runs.sort.name(),
            if runs.reversed { " (reversed)" } else { "" },
            if runs.group {
                ", grouped by experiment"
            } else {
                ""
            }
        ),
        t.dim(),
    ));
    if !runs.filter.is_empty() {
        title.push(Span::styled(format!("filter /{} ", runs.filter), t.key()));
    }
    if !runs.marked.is_empty() {
        title.push(Span::styled(
            format!("{} marked (c compares) ", runs.marked.len()),
            t.marked(),
        ));
    }
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Line::from(title));
    let inner = block.inner(area);
    block.render(area, buf);
    if !runs.loaded {
        Paragraph::new(format!("Reading {} …", workspace.display()))
            .style(t.dim())
            .render(inner, buf);
        return;
    }
    if runs.entries.is_empty() && runs.unreadable.is_empty() {
        render_empty(t, workspace, inner, buf);
        return;
    }
    let rows = runs.rows();
    if rows.is_empty() {
        Paragraph::new(format!(
            "No run matches the filter /{} (Esc clears it).",
            runs.filter
        ))
        .style(t.dim())
        .render(inner, buf);
        return;
    }
    let (cols, wide_ids) = columns(inner.width);
    let header = TableRow::new(cols.iter().map(|c| Cell::from(c.header())))
        .style(Style::new().add_modifier(Modifier::BOLD));
    // Only the rows on screen are built: the window that keeps the selection visible.
    let height = inner.height.saturating_sub(1).max(1) as usize;
    let selected = runs.selected_index(&rows);
    let offset = selected.map_or(0, |s| (s + 1).saturating_sub(height));
    let body: Vec<TableRow> = rows
        .iter()
        .skip(offset)
        .take(height)
        .map(|r| table_row(t, runs, now, r, &cols, wide_ids))
        .collect();
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|c| {
            if *c == Col::Tags {
                Constraint::Min(c.width(wide_ids))
            } else {
                Constraint::Length(c.width(wide_ids))
            }
        })
        .collect();
    let table = Table::new(body, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(t.selected());
    let mut state = TableState::default().with_selected(selected.map(|s| s - offset));
    StatefulWidget::render(table, inner, buf, &mut state);
}

fn render_empty(t: Theme, workspace: &Path, area: Rect, buf: &mut Buffer) {
    let text = Text::from(vec![
        Line::from(""),
        Line::from(Span::styled(
            format!("  No runs in {} yet.", workspace.display()),
            Style::new().add_modifier(Modifier::BOLD),
        )),
        Line::from(""),
        Line::from(vec![
            Span::raw("  Press "),
            Span::styled("n", t.key()),
            Span::raw(" to start one from a spec, or in another terminal:"),
        ]),
        Line::from(""),
        Line::from(Span::styled("      ddp run examples/mnist.toml", t.title())),
        Line::from(""),
        Line::from(
            "  Runs started anywhere (the ddp CLI, a notebook, this dashboard) appear here by themselves.",
        ),
    ]);
    Paragraph::new(text)
        .wrap(Wrap { trim: false })
        .render(area, buf);
}

fn table_row<'a>(
    t: Theme,
    runs: &RunsState,
    now: f64,
    row: &Row<'a>,
    cols: &[Col],
    wide_ids: bool,
) -> TableRow<'a> {
    match row {
        Row::Group(exp, n) => TableRow::new(cols.iter().map(|c| match c {
            Col::Status => Cell::from(Span::styled(format!("▾ {exp}"), t.title())),
            Col::Experiment => Cell::from(Span::styled(format!("{n} runs"), t.dim())),
            _ => Cell::from(""),
        })),
        Row::Unreadable(u) => {
            let name = u
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let exp = u
                .dir
                .parent()
                .and_then(|p| p.parent())
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            TableRow::new(cols.iter().map(|c| match c {
                Col::Status => Cell::from(Span::styled("unreadable", t.warning())),
                Col::Experiment => Cell::from(exp.clone()),
                Col::Id => Cell::from(name.clone()),
                Col::Progress => Cell::from(Span::styled(u.error.clone(), t.warning())),
                _ => Cell::from(""),
            }))
        }
        Row::Run(e) => TableRow::new(
            cols.iter()
                .map(|c| run_cell(t, runs, now, e, *c, wide_ids))
                .collect::<Vec<_>>(),
        ),
    }
}

fn run_cell(
    t: Theme,
    runs: &RunsState,
    now: f64,
    e: &RunEntry,
    col: Col,
    wide_ids: bool,
) -> Cell<'static> {
    let r = &e.run.record;
    let m = &e.metrics;
    match col {
        Col::Mark => {
            if runs.marked.contains(&e.run.dir) {
                Cell::from(Span::styled("●", t.marked()))
            } else {
                Cell::from(" ")
            }
        }
        Col::Status => Cell::from(Span::styled(r.status.as_str(), t.status(r.status))),
        Col::Experiment => {
            let name = match &r.name {
                Some(n) => format!("{}/{n}", r.experiment),
                None => r.experiment.clone(),
            };
            Cell::from(truncate(&name, col.width(wide_ids) as usize))
        }
        Col::Id => {
            let id = if wide_ids {
                r.id.clone()
            } else {
                r.id.get(9..).unwrap_or(&r.id).to_string()
            };
            if e.warnings.is_empty() {
                Cell::from(id)
            } else {
                Cell::from(Line::from(vec![
                    Span::raw(id),
                    Span::styled("!", t.warning()),
                ]))
            }
        }
        Col::Progress if e.steps_total.is_some() => {
            // A run counted in steps: the percentage of its steps.
            let frac = progress(e).unwrap_or(0.0);
            Cell::from(Line::from(vec![
                Span::raw(format!("{:>4.0}% ", frac * 100.0)),
                Span::styled(bar(frac, 6), t.status(r.status)),
            ]))
        }
        Col::Progress => {
            let done = if r.status == ddp_workspaces::RunStatus::Completed {
                e.epochs_total.unwrap_or(m.epochs_done)
            } else {
                m.epochs_done
            };
            let total = e.epochs_total.map_or("?".into(), |n| n.to_string());
            let frac = progress(e).unwrap_or(0.0);
            Cell::from(Line::from(vec![
                Span::raw(format!("{done:>2}/{total:<2} ")),
                Span::styled(bar(frac, 6), t.status(r.status)),
            ]))
        }
        // a run on Slurm or Spark says so (its job or application is in the run view)
        Col::Replicas => Cell::from(r.runs_on().replicas_text(r.replicas, &r.devices)),
        Col::Restarts => Cell::from(r.restarts.to_string()),
        Col::Loss => {
            let loss = m.last_train_loss.map_or("-".into(), |l| format!("{l:.4}"));
            Cell::from(Line::from(vec![
                Span::raw(format!("{loss:<7} ")),
                Span::styled(sparkline(&m.recent_train_loss, 8), t.dim()),
            ]))
        }
        Col::BestVal => Cell::from(format::percent(m.best_val_accuracy)),
        Col::Test => Cell::from(format::percent(m.test_accuracy)),
        Col::Created => Cell::from(format::timestamp(r.created)),
        Col::Duration => Cell::from(format::opt_duration(duration(e, Some(now)))),
        Col::Tags => Cell::from(Span::styled(e.tags.join(" "), t.marked())),
    }
}

#[cfg(test)]
mod tests {
    //! The Runs view: the table, its columns, title, filter, groups and marks.

    use super::*;
    use crate::ui::tests::*;

    #[test]
    fn columns_fit_the_width() {
        let (c, wide) = columns(80);
        assert!(!wide);
        let need: u16 = c.iter().map(|c| c.width(false) + 1).sum();
        assert!(need <= 80, "{c:?}");
        for must in [
            Col::Status,
            Col::Id,
            Col::Progress,
            Col::Experiment,
            Col::Loss,
        ] {
            assert!(c.contains(&must), "{must:?} missing at 80 columns: {c:?}");
        }
        let (c, wide) = columns(200);
        assert!(wide);
        assert_eq!(c.len(), ORDER.len());
        let (c, _) = columns(20);
        assert_eq!(c, [Col::Mark, Col::Status, Col::Id]);
    }

    #[test]
    fn empty_workspace_explains_how_to_start_a_run() {
        let mut app = app_sized(80, 24);
        app.update(Msg::RunList(RunListEvent::Snapshot {
            entries: vec![],
            unreadable: vec![],
        }));
        let s = screen(&app, 80, 24);
        assert_rows(
            &s,
            0,
            &[
                " ddp  Runs Devices  0 runs, 0 live  /ws",
                &format!(" Runs sorted by created {}", "─".repeat(56)),
                "",
                "  No runs in /ws yet.",
                "",
                "  Press n to start one from a spec, or in another terminal:",
                "",
                "      ddp run examples/mnist.toml",
                "",
            ],
        );
        assert_has(
            &s,
            "Runs started anywhere (the ddp CLI, a notebook, this dashboard)",
        );
    }

    #[test]
    fn reading_until_the_first_snapshot() {
        let app = app_sized(80, 24);
        let s = screen(&app, 80, 24);
        assert_eq!(s[2], "Reading /ws …");
        assert_lacks(&s, "No runs");
        assert_lacks(&s, "STATUS");
    }

    #[test]
    fn runs_table_at_80x24() {
        let app = app_with_runs(80, 24);
        let s = screen(&app, 80, 24);
        assert_rows(
            &s,
            0,
            &[
                " ddp  Runs Devices  3 runs, 1 live  /ws",
                &format!(" Runs sorted by created {}", "─".repeat(56)),
                "  STATUS     EXPERIMENT   RUN           PROGRESS     TRAIN LOSS       BEST",
                "  running    mnist        120000-aaaaaa  2/3  ████·· 0.1234  █▄▂▁     96.50%",
                "  completed  cifar/wide   120000-bbbbbb  3/3  ██████ -                50.00%",
                "  failed     mnist        120000-cccccc  0/3  ······ -                -",
                "  unreadable broken       20261101-0000 run.json: no",
                "",
            ],
        );
        // Nothing wider than the screen was drawn past it, and the footer fits.
        assert_eq!(
            s[23],
            " Enter open run  / filter  c compare marked runs  n new run  ? help"
        );
    }

    #[test]
    fn runs_table_at_200x60_shows_every_column() {
        let app = app_with_runs(200, 60);
        let s = screen(&app, 200, 60);
        assert_rows(
            &s,
            2,
            &[
                "  STATUS     EXPERIMENT   RUN                    PROGRESS     REPLICAS     RST TRAIN LOSS       BEST    TEST    CREATED             TIME    TAGS",
                "  running    mnist        20261104-120000-aaaaaa  2/3  ████·· 2× cpu       0   0.1234  █▄▂▁     96.50%  -       2026-11-18 11:06:40 1m39s   baseline lr-sweep",
                "  completed  cifar/wide   20261103-120000-bbbbbb  3/3  ██████ 2× cpu       0   -                50.00%  49.00%  2026-11-18 11:06:40 1m00s",
                "  failed     mnist        20261102-120000-cccccc  0/3  ······ 2× cpu       0   -                -       -       2026-11-18 11:06:40 30.0s",
                "  unreadable broken       20261101-000000-zzzzzz run.json: no",
                "",
            ],
        );
        assert_eq!(
            s[59],
            " Enter open run  / filter  c compare marked runs  n new run  s stop (asks)  r resume  ? help  Esc back  q quit (runs keep running)"
        );
    }

    #[test]
    fn runs_title_filter_grouping_and_marks() {
        let mut app = app_with_runs(80, 24);
        keys(&mut app, "/mni");
        key(&mut app, KeyCode::Enter);
        keys(&mut app, "x ");
        let s = screen(&app, 80, 24);
        assert_rows(
            &s,
            1,
            &[
                " Runs sorted by created, grouped by experiment filter /mni 1 marked (c compares)",
                "  STATUS     EXPERIMENT   RUN           PROGRESS     TRAIN LOSS       BEST",
                "  ▾ mnist    2 runs",
                "● running    mnist        120000-aaaaaa  2/3  ████·· 0.1234  █▄▂▁     96.50%",
                "  failed     mnist        120000-cccccc  0/3  ······ -                -",
                "",
            ],
        );
        // Sorting shows in the title; `/` edits the filter; a filter nothing matches says so.
        keys(&mut app, "oO/zzz");
        key(&mut app, KeyCode::Enter);
        let s = screen(&app, 80, 24);
        assert!(
            s[1].starts_with(
                " Runs sorted by status (reversed), grouped by experiment filter /mnizzz 1 marked"
            ),
            "{}",
            s[1]
        );
        assert_eq!(s[2], "No run matches the filter /mnizzz (Esc clears it).");
    }
}
