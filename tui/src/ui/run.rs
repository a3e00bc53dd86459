//! The Run view: a header (status, processes, devices, errors) and the Charts, Logs, Events and
//! Spec panes (the Sample pane is `sample`'s). A language model's run ([`is_language_model`])
//! counts steps, with its tokens/s and learning rate in the header, and charts its loss and
//! perplexity instead of the accuracy.

use ddp_workspaces::curves::{Curves, XAxis, curves};
use ddp_workspaces::format;
use ddp_workspaces::metrics::{MetricKind, MetricRecord, is_language_model};
use ddp_workspaces::run::{EventRecord, SupervisorEvent};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget, Wrap};

use crate::app::App;
use crate::run_view::{ChartSettings, LogTab, Pane, RunView};
use crate::theme::Theme;
use crate::widgets::chart::{LineChart, Scale, Series, SeriesStyle};
use crate::widgets::logview::LogPane;

pub fn render(app: &App, v: &RunView, area: Rect, buf: &mut Buffer) {
    let t = app.theme;
    let header_lines = header(app, v);
    let [head, tabs, body] = Layout::vertical([
        Constraint::Length(header_lines.len() as u16 + 1),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(area);
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Line::from(vec![
            Span::styled(" Run ", t.title()),
            Span::styled(
                format!("{} ", v.record.id),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::styled(format!("{} ", v.record.experiment), t.dim()),
        ]));
    let inner = block.inner(head);
    block.render(head, buf);
    Paragraph::new(header_lines).render(inner, buf);
    let mut spans = vec![Span::raw(" ")];
    for (i, p) in v.panes().iter().enumerate() {
        spans.push(Span::styled(
            format!("{} {}", i + 1, p.name()),
            t.tab(v.pane == *p),
        ));
        spans.push(Span::styled("  ", t.dim()));
    }
    Line::from(spans).render(tabs, buf);
    match v.pane {
        Pane::Charts => render_charts(t, &v.metrics, &v.chart, body, buf),
        Pane::Logs => render_logs(t, v, body, buf),
        Pane::Events => render_events(t, v, body, buf),
        Pane::Spec => render_spec(t, v, body, buf),
        Pane::Sample => super::sample::render(t, &v.sample, body, buf),
    }
}

/// Status, epoch, processes, devices, restarts, spec hash; then the error and warnings.
fn header(app: &App, v: &RunView) -> Vec<Line<'static>> {
    let t = app.theme;
    let r = &v.record;
    let label = |s: &str| Span::styled(format!("{s} "), t.dim());
    // The epoch in progress (the latest record's), of the spec's total.
    let current = v
        .metrics
        .get(&0)
        .and_then(|m| m.last())
        .map_or(0, |m| m.epoch);
    let epochs = app
        .runs
        .entry(&v.dir)
        .map(|e| {
            let total = e.epochs_total.map_or("?".into(), |n| n.to_string());
            format!("{}/{total}", current.max(e.metrics.epochs_done))
        })
        .unwrap_or_else(|| "-".into());
    let steps_total = app.runs.entry(&v.dir).and_then(|e| e.steps_total);
    let step = v
        .metrics
        .get(&0)
        .and_then(|m| m.last())
        .map_or("-".to_string(), |m| m.step.to_string());
    // A run counted in steps has no epochs to show: its step is of the spec's total.
    let (epochs, step) = match steps_total {
        Some(total) => ("-".to_string(), format!("{step}/{total}")),
        None => (epochs, step),
    };
    let duration = r
        .started
        .map(|s| r.ended.unwrap_or(app.now) - s)
        .map_or("-".into(), format::duration);
    let mut first = vec![Span::styled(
        format!("{:<10} ", r.status.as_str()),
        t.status(r.status),
    )];
    match language_model_rates(v) {
        // A language model: its steps, throughput in tokens and learning rate, no epochs.
        Some((tokens_per_sec, lr)) => first.extend([
            label("step"),
            Span::raw(format!("{step}  ")),
            label("tokens/s"),
            Span::raw(format!("{tokens_per_sec}  ")),
            label("lr"),
            Span::raw(format!("{lr}  ")),
        ]),
        None => first.extend([
            label("epoch"),
            Span::raw(format!("{epochs}  ")),
            label("step"),
            Span::raw(format!("{step}  ")),
        ]),
    }
    first.extend([
        label("time"),
        Span::raw(format!("{duration}  ")),
        label("restarts"),
        Span::raw(format!("{}  ", r.restarts)),
        label("name"),
        Span::raw(r.name.clone().unwrap_or_else(|| "-".into())),
    ]);
    let mut lines = vec![Line::from(first)];
    let pids = if r.replica_pids.is_empty() {
        "-".to_string()
    } else {
        r.replica_pids
            .iter()
            .map(|(rank, pid)| format!("{rank}:{pid}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let supervisor = r
        .supervisor
        .as_ref()
        .map_or("-".to_string(), |p| p.pid.to_string());
    lines.push(Line::from(vec![
        label("host"),
        Span::raw(format!("{}  ", r.host)),
        label("devices"),
        Span::raw(format!(
            "{} × {}  ",
            r.replicas,
            if r.devices.is_empty() {
                "-"
            } else {
                &r.devices
            }
        )),
    ]));
    if let Some(job) = &r.slurm {
        lines.push(Line::from(vec![label("slurm"), Span::raw(job.text())]));
    }
    lines.push(Line::from(vec![
        label("pids"),
        Span::raw(format!("{pids}  ")),
        label("supervisor"),
        Span::raw(format!("{supervisor}  ")),
        label("spec"),
        Span::raw(r.spec_hash.chars().take(12).collect::<String>()),
    ]));
    if let Some(e) = &r.error {
        lines.push(Line::from(Span::styled(format!("error: {e}"), t.error())));
    }
    for w in v.warnings.iter().take(2) {
        lines.push(Line::from(Span::styled(
            format!("warning: {w}"),
            t.warning(),
        )));
    }
    if v.gone {
        lines.push(Line::from(Span::styled(
            "the run folder was deleted",
            t.error(),
        )));
    }
    lines
}

/// A language model's (tokens/s of all replicas, learning rate) at rank 0's last train record,
/// as the header shows them; `None` for any other run (its latest record says).
fn language_model_rates(v: &RunView) -> Option<(String, String)> {
    let records = v.metrics.get(&0)?;
    if !records.last().is_some_and(is_language_model) {
        return None;
    }
    let train = records.iter().rev().find(|m| m.kind == MetricKind::Train);
    let rate = train.and_then(|m| Some(m.tokens_per_sec? * m.world_size as f64));
    Some((
        format::rate(rate),
        train.map_or("-".into(), |m| format::lr(m.lr)),
    ))
}

/// The loss and accuracy (a language model: perplexity) charts of a run's records (every
/// rank's).
pub(super) fn render_charts(
    t: Theme,
    metrics: &std::collections::BTreeMap<usize, Vec<MetricRecord>>,
    settings: &ChartSettings,
    area: Rect,
    buf: &mut Buffer,
) {
    let (loss, second, figure) = run_series(t, metrics, settings.x);
    render_pair(t, &loss, (figure.title(), &second), settings, area, buf);
}

/// What the second chart shows: the accuracy, or a language model's perplexity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Figure {
    Accuracy,
    Perplexity,
}

impl Figure {
    pub(super) fn title(self) -> &'static str {
        match self {
            Figure::Accuracy => "accuracy",
            Figure::Perplexity => "perplexity",
        }
    }

    /// The perplexity for curves of a language model, else the accuracy.
    pub(super) fn of(c: &Curves) -> Figure {
        if c.language_model {
            Figure::Perplexity
        } else {
            Figure::Accuracy
        }
    }
}

/// The loss chart and a second one (its title and series) side by side (wide) or stacked
/// (narrow).
pub(super) fn render_pair(
    t: Theme,
    loss: &[Series],
    (title, second): (&'static str, &[Series]),
    settings: &ChartSettings,
    area: Rect,
    buf: &mut Buffer,
) {
    let [a, b] = if area.width >= 110 {
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area)
    } else {
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area)
    };
    let x_title = x_title(settings.x);
    LineChart {
        title: "loss",
        x_title,
        series: loss,
        scale: if settings.log_loss {
            Scale::Log10
        } else {
            Scale::Linear
        },
        smoothing: settings.smoothing_weight(),
        color: t.color,
    }
    .render(a, buf);
    LineChart {
        title,
        x_title,
        series: second,
        scale: Scale::Linear,
        smoothing: settings.smoothing_weight(),
        color: t.color,
    }
    .render(b, buf);
}

pub(super) fn x_title(x: XAxis) -> &'static str {
    match x {
        XAxis::Step => "step",
        XAxis::Epoch => "epoch",
        XAxis::Time => "time (s)",
    }
}

/// The series of one run: train loss per rank where the ranks differ (else rank 0's), val and
/// test loss; val and test accuracy, or a language model's val perplexity.
fn run_series(
    t: Theme,
    metrics: &std::collections::BTreeMap<usize, Vec<MetricRecord>>,
    x: XAxis,
) -> (Vec<Series>, Vec<Series>, Figure) {
    let empty = Vec::new();
    let rank0 = metrics.get(&0).unwrap_or(&empty);
    let main = curves(rank0, x, Some(0));
    let mut per_rank: Vec<(usize, Vec<(f64, f64)>)> = metrics
        .iter()
        .filter(|(r, _)| **r != 0)
        .map(|(r, recs)| (*r, curves(recs, x, Some(*r)).train_loss))
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    let differ = per_rank.iter().any(|(_, pts)| *pts != main.train_loss);
    let mut loss = Vec::new();
    if differ {
        loss.push(line(t, "train r0", 0, main.train_loss.clone()));
        for (r, pts) in per_rank.drain(..) {
            loss.push(line(t, &format!("train r{r}"), r + 3, pts));
        }
    } else {
        loss.push(line(t, "train", 0, main.train_loss.clone()));
    }
    let figure = Figure::of(&main);
    let (loss_eval, second) = eval_series(t, &main, 1, "", figure);
    loss.extend(loss_eval);
    (loss, second, figure)
}

/// Val and test series of one run's curves (loss; accuracy or perplexity as `figure` says),
/// coloured from `color`.
pub(super) fn eval_series(
    t: Theme,
    c: &Curves,
    color: usize,
    prefix: &str,
    figure: Figure,
) -> (Vec<Series>, Vec<Series>) {
    let mut loss = vec![Series {
        label: format!("{prefix}val"),
        color: t.series(color),
        points: c.val_loss.clone(),
        style: SeriesStyle::Dots,
    }];
    let mut acc = vec![Series {
        label: format!("{prefix}val"),
        color: t.series(color),
        points: match figure {
            Figure::Accuracy => c.val_acc.clone(),
            Figure::Perplexity => c.val_perplexity.clone(),
        },
        style: SeriesStyle::Dots,
    }];
    if let Some(p) = c.test_loss {
        loss.push(Series {
            label: format!("{prefix}test"),
            color: t.series(color + 1),
            points: vec![p],
            style: SeriesStyle::Dots,
        });
    }
    if let Some(p) = c.test_acc.filter(|_| figure == Figure::Accuracy) {
        acc.push(Series {
            label: format!("{prefix}test"),
            color: t.series(color + 1),
            points: vec![p],
            style: SeriesStyle::Dots,
        });
    }
    (loss, acc)
}

pub(super) fn line(t: Theme, label: &str, color: usize, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.to_string(),
        color: t.series(color),
        points,
        style: SeriesStyle::Line,
    }
}

fn render_logs(t: Theme, v: &RunView, area: Rect, buf: &mut Buffer) {
    let [tabs, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    let logs = &v.logs;
    let state = logs.view(logs.tab);
    let mut spans = vec![Span::raw(" ")];
    for tab in logs.tabs(v.record.replicas) {
        spans.push(Span::styled(tab.label(), t.tab(tab == logs.tab)));
        spans.push(Span::raw("  "));
    }
    let follow = state.is_none_or(|s| s.follow);
    let wrap = state.is_some_and(|s| s.wrap);
    spans.push(Span::styled(
        format!(
            "│ follow {}  wrap {}",
            if follow { "on" } else { "off" },
            if wrap { "on" } else { "off" }
        ),
        t.dim(),
    ));
    if let Some(s) = state.and_then(|s| s.search_status()) {
        spans.push(Span::styled(format!("  {s}"), t.key()));
    }
    Line::from(spans).render(tabs, buf);
    let Some(buffer) = logs.buffer(logs.tab) else {
        let what = match logs.tab {
            LogTab::Merged => "No log lines yet.".to_string(),
            tab => format!("No lines from {} yet.", tab.label()),
        };
        Paragraph::new(what).style(t.dim()).render(body, buf);
        return;
    };
    let default_state = crate::widgets::logview::LogViewState::default();
    LogPane {
        buf: buffer,
        state: state.unwrap_or(&default_state),
        prefix_ranks: logs.tab == LogTab::Merged,
        color: t.color,
        highlight: state.and_then(|s| s.search_query()),
    }
    .render(body, buf);
}

fn event_text(e: &SupervisorEvent) -> (String, String) {
    match e {
        SupervisorEvent::Queued { waiting_for } => {
            ("queued".into(), format!("waiting for {waiting_for}"))
        }
        SupervisorEvent::Started {
            attempt,
            devices,
            resume,
        } => (
            "started".into(),
            format!(
                "attempt {attempt} on {devices}{}",
                if *resume {
                    ", resuming from the newest checkpoint"
                } else {
                    ""
                }
            ),
        ),
        SupervisorEvent::ReplicaExited { rank, code, signal } => (
            "exited".into(),
            match (code, signal) {
                (Some(c), _) => format!("rank {rank} exited with code {c}"),
                (None, Some(s)) => format!("rank {rank} killed by signal {s}"),
                (None, None) => format!("rank {rank} exited"),
            },
        ),
        SupervisorEvent::Restarting {
            attempt,
            after_s,
            reason,
        } => (
            "restarting".into(),
            format!("attempt {attempt} in {after_s:.1}s: {reason}"),
        ),
        SupervisorEvent::Stopped => ("stopped".into(), "stopped on request".into()),
        SupervisorEvent::Completed => ("completed".into(), "all replicas finished".into()),
        SupervisorEvent::Failed { reason } => ("failed".into(), reason.clone()),
    }
}

fn render_events(t: Theme, v: &RunView, area: Rect, buf: &mut Buffer) {
    if v.events.is_empty() {
        Paragraph::new(" No supervisor events yet.")
            .style(t.dim())
            .render(area, buf);
        return;
    }
    let t0 = v.events.first().map_or(0.0, |e: &EventRecord| e.time);
    let lines: Vec<Line> = v
        .events
        .iter()
        .skip(v.events_scroll)
        .map(|e| {
            let (what, detail) = event_text(&e.event);
            let style = match &e.event {
                SupervisorEvent::Failed { .. } => t.error(),
                SupervisorEvent::ReplicaExited { code: Some(0), .. } => Style::new(),
                SupervisorEvent::ReplicaExited { .. } | SupervisorEvent::Restarting { .. } => {
                    t.warning()
                }
                SupervisorEvent::Completed | SupervisorEvent::Started { .. } => t.ok(),
                _ => Style::new(),
            };
            Line::from(vec![
                Span::styled(format!(" {} ", format::timestamp(e.time)), t.dim()),
                Span::styled(format!("+{:<8}", format::duration(e.time - t0)), t.dim()),
                Span::styled(format!("{what:<11}"), style.add_modifier(Modifier::BOLD)),
                Span::raw(detail),
            ])
        })
        .collect();
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .render(area, buf);
}

fn render_spec(t: Theme, v: &RunView, area: Rect, buf: &mut Buffer) {
    match &v.spec {
        None => Paragraph::new(" Reading spec.toml …")
            .style(t.dim())
            .render(area, buf),
        Some(Err(e)) => Paragraph::new(format!(" {e}"))
            .style(t.error())
            .render(area, buf),
        Some(Ok(text)) => {
            let lines: Vec<Line> = text
                .lines()
                .skip(v.spec_scroll)
                .map(|l| {
                    if l.trim_start().starts_with('[') {
                        Line::from(Span::styled(format!(" {l}"), t.title()))
                    } else if let Some((k, val)) = l.split_once('=') {
                        Line::from(vec![
                            Span::styled(format!(" {k}"), t.key()),
                            Span::raw(format!("={val}")),
                        ])
                    } else {
                        Line::from(format!(" {l}"))
                    }
                })
                .collect();
            Paragraph::new(lines).render(area, buf);
        }
    }
}
