//! The Run view: a header (status, processes, devices, where the steps' time goes, errors) and
//! the Charts (drawn by
//! `charts`), Logs, Events and Spec panes (the Sample pane is `sample`'s). A language model's run ([`is_language_model`])
//! counts steps, with its tokens/s and learning rate in the header, and charts its loss and
//! perplexity instead of the accuracy.

use ddp_workspaces::follow::run_list::RunEntry;
use ddp_workspaces::metrics::{MetricKind, StepBreakdown, is_language_model};
use ddp_workspaces::present::format;
use ddp_workspaces::runs::run::{EventRecord, SupervisorEvent};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget, Wrap};

use super::{LogTab, Pane, RunView};
use crate::theme::Theme;
use crate::views::run::charts::render_charts;
use crate::views::run::sample;
use crate::widgets::logview::{LogPane, LogViewState};

/// The open run `v`; `listed`: its entry in the runs list (the totals of its spec), `now`: the
/// clock its duration runs to while it is live.
pub fn render(
    t: Theme,
    v: &RunView,
    listed: Option<&RunEntry>,
    now: f64,
    area: Rect,
    buf: &mut Buffer,
) {
    let header_lines = header(t, v, listed, now);
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
        Pane::Sample => sample::draw::render(t, &v.sample, body, buf),
    }
}

/// Status, epoch, processes, devices, restarts, spec hash; then the error and warnings.
fn header(t: Theme, v: &RunView, listed: Option<&RunEntry>, now: f64) -> Vec<Line<'static>> {
    let r = &v.record;
    let label = |s: &str| Span::styled(format!("{s} "), t.dim());
    // The epoch in progress (the latest record's), of the spec's total.
    let current = v
        .metrics
        .get(&0)
        .and_then(|m| m.last())
        .map_or(0, |m| m.epoch);
    let epochs = listed
        .map(|e| {
            let total = e.epochs_total.map_or("?".into(), |n| n.to_string());
            format!("{}/{total}", current.max(e.metrics.epochs_done))
        })
        .unwrap_or_else(|| "-".into());
    let steps_total = listed.and_then(|e| e.steps_total);
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
        .map(|s| r.ended.unwrap_or(now) - s)
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
    if let Some((on, text)) = r.runs_on().line() {
        lines.push(Line::from(vec![label(on), Span::raw(text)]));
    }
    lines.push(Line::from(vec![
        label("pids"),
        Span::raw(format!("{pids}  ")),
        label("supervisor"),
        Span::raw(format!("{supervisor}  ")),
        label("spec"),
        Span::raw(r.spec_hash.chars().take(12).collect::<String>()),
    ]));
    let last_train = v
        .metrics
        .get(&0)
        .and_then(|records| records.iter().rev().find(|m| m.kind == MetricKind::Train));
    if let Some(b) = last_train.and_then(|m| m.breakdown) {
        lines.push(step_line(t, &b));
    }
    if let Some(p) = last_train.and_then(|m| m.precision.as_ref()) {
        lines.push(Line::from(vec![
            label("precision"),
            Span::raw(format::precision(p)),
        ]));
    }
    if let Some((m, s)) = last_train.and_then(|m| m.sync.as_ref().map(|s| (m, s))) {
        lines.push(Line::from(vec![
            label("sync"),
            Span::raw(format::sync(s, m.step)),
        ]));
    }
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

/// Cells of the step-time bar.
const STEP_BAR: usize = 24;

/// Where rank 0's steps go: a stacked bar of [`STEP_BAR`] cells (compute, exposed
/// communication, data, optimizer; a glyph and a colour each) and the figures.
fn step_line(t: Theme, b: &StepBreakdown) -> Line<'static> {
    let parts = [
        (b.compute_s, '█', "compute"),
        (b.comm_exposed_s, '▓', "comm"),
        (b.data_s, '▒', "data"),
        (b.optimizer_s, '░', "optimizer"),
    ];
    let mut spans = vec![Span::styled("step ", t.dim())];
    let mut used = 0;
    let mut legend = Vec::new();
    for (i, (secs, glyph, name)) in parts.iter().enumerate() {
        let share = if b.step_s > 0.0 { secs / b.step_s } else { 0.0 };
        let cells = ((share * STEP_BAR as f64).round() as usize).min(STEP_BAR - used);
        used += cells;
        spans.push(Span::styled(
            glyph.to_string().repeat(cells),
            Style::new().fg(t.series(i)),
        ));
        legend.push(format!("{glyph}{name} {:.0}%", 100.0 * share));
    }
    spans.push(Span::raw(" ".repeat(STEP_BAR - used)));
    let sent = b
        .bytes_sent
        .map(|x| format!("  {} sent", format::bytes(x)))
        .unwrap_or_default();
    spans.push(Span::raw(format!(
        " {:.3}s  {}{sent}  {}-bound",
        b.step_s,
        legend.join(" "),
        b.bound()
    )));
    Line::from(spans)
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
    let default_state = LogViewState::default();
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
        e @ SupervisorEvent::Paused { .. } => ("paused".into(), e.pause_text().unwrap_or_default()),
        SupervisorEvent::Failed { reason } => ("failed".into(), reason.clone()),
        e @ SupervisorEvent::Membership { .. } => {
            ("membership".into(), e.membership_text().unwrap_or_default())
        }
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
                SupervisorEvent::ReplicaExited { .. }
                | SupervisorEvent::Restarting { .. }
                | SupervisorEvent::Membership { .. } => t.warning(),
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

#[cfg(test)]
mod tests {
    //! The Run view: its header and its charts, logs, events and spec panes.

    use crate::ui::tests::*;

    #[test]
    fn run_view_header() {
        let app = run_app(100, 30);
        let s = screen(&app, 100, 30);
        assert_rows(
            &s,
            0,
            &[
                " ddp  Runs Run Devices  3 runs, 1 live  /ws",
                &format!(" Run {A} mnist {}", "─".repeat(66)),
                "running    epoch 2/3  step -  time 1m39s  restarts 1  name -",
                "host box  devices 2 × cpu (1 thread per replica)",
                "pids 0:4242 1:4243  supervisor 4240  spec 0123456789ab",
                "error: rank 1 exited with code 1 (attempt 1)",
                " 1 Charts  2 Logs  3 Events  4 Spec",
            ],
        );
        // Warnings and a deleted folder are said too.
        let mut app = run_app(100, 30);
        run_event(
            &mut app,
            RunEvent::Unparsed {
                path: "metrics/rank-0.jsonl".into(),
                line: "{oops".into(),
                error: "EOF while parsing".into(),
            },
        );
        let s = screen(&app, 100, 30);
        assert_eq!(
            s[6],
            "warning: metrics/rank-0.jsonl: a line does not parse (EOF while parsing)"
        );
        assert_eq!(s[7], " 1 Charts  2 Logs  3 Events  4 Spec");
    }

    #[test]
    fn the_header_shows_where_the_steps_time_goes() {
        let mut app = run_app(120, 30);
        let b = ddp_workspaces::metrics::StepBreakdown {
            step_s: 0.5,
            compute_s: 0.25,
            comm_exposed_s: 0.125,
            data_s: 0.0,
            optimizer_s: 0.125,
            comm_s: 0.3,
            bytes_sent: Some(44.7e6),
        };
        let m = metric(MetricKind::Train, 1, 5, 1.0, None).breakdown(Some(b));
        run_event(&mut app, RunEvent::Metric(m));
        let s = screen(&app, 120, 30);
        assert_eq!(
            s[5],
            format!(
                "step {}{}{} 0.500s  █compute 50% ▓comm 25% ▒data 0% ░optimizer 25%  44.7 MB sent  compute-bound",
                "█".repeat(12),
                "▓".repeat(6),
                "░".repeat(6)
            )
        );
    }

    #[test]
    fn the_header_shows_a_mixed_precision_runs_loss_scale() {
        let mut app = run_app(120, 30);
        let p = ddp_workspaces::metrics::PrecisionFigures {
            name: "fp16".into(),
            loss_scale: Some(1024.0),
            skipped_steps: Some(7),
        };
        let m = metric(MetricKind::Train, 1, 5, 1.0, None).precision(Some(p));
        run_event(&mut app, RunEvent::Metric(m));
        let s = screen(&app, 120, 30);
        assert!(
            s.iter()
                .any(|l| l.starts_with("precision fp16, loss scale 1024, 7 steps skipped")),
            "{s:#?}"
        );
    }

    #[test]
    fn the_header_shows_where_local_steps_syncs_stand() {
        let mut app = run_app(120, 30);
        let s = ddp_workspaces::metrics::SyncFigures {
            method: "diloco".into(),
            every: 50,
            encoding: "int4".into(),
            last_sync: 100,
            drift: vec![0.5, 0.25],
        };
        let m = metric(MetricKind::Train, 1, 104, 1.0, None).sync(Some(s));
        run_event(&mut app, RunEvent::Metric(m));
        let s = screen(&app, 120, 30);
        assert!(
            s.iter().any(|l| l.starts_with(
                "sync diloco every 50 steps (int4), last sync at step 100, 4 steps ago, drift 0.500 0.250"
            )),
            "{s:#?}"
        );
    }

    #[test]
    fn charts_pane_with_and_without_records() {
        let app = run_app(100, 30);
        let s = screen(&app, 100, 30);
        assert_eq!(s.iter().filter(|l| l.contains("no data yet")).count(), 2);
        assert_has(&s, "┌ loss smoothing 0.60 ─");
        assert_has(&s, "┌ accuracy smoothing 0.60 ─");

        let mut app = run_app(100, 30);
        add_metrics(&mut app);
        let s = screen(&app, 100, 30);
        assert_lacks(&s, "no data yet");
        assert_eq!(
            s[2],
            "running    epoch 2/3  step 20  time 1m39s  restarts 1  name -"
        );
        // Legends: train and val in the loss chart (latest values), val in the accuracy chart.
        assert_has(&s, "• train 0.1098│");
        assert_has(&s, "+ val 0.2     │");
        assert_has(&s, "• val 0.965");
        assert_has(&s, "── step ┘");
        // Wide: side by side.
        let s = screen(&app, 160, 30);
        let titles = s.iter().find(|l| l.contains("┌ loss")).unwrap();
        assert!(titles.contains("┌ accuracy"), "{titles}");
        // Log scale and x axis settings show.
        keys(&mut app, "lX");
        let s = screen(&app, 100, 30);
        assert_has(&s, "── epoch ┘");
    }

    #[test]
    fn logs_pane_merged_per_rank_and_search() {
        let mut app = run_app(100, 30);
        key(&mut app, KeyCode::Char('2'));
        let s = screen(&app, 100, 30);
        assert_eq!(
            s[7],
            " all  rank 0  rank 1  supervisor  │ follow on  wrap off"
        );
        assert!(s[8..29].iter().all(String::is_empty), "{}", text(&s));
        // A rank that has not logged yet.
        key(&mut app, KeyCode::Char(']'));
        assert_eq!(screen(&app, 100, 30)[8], "No lines from rank 0 yet.");
        key(&mut app, KeyCode::Char('['));

        add_logs(&mut app);
        let s = screen(&app, 100, 30);
        // Merged, newest at the bottom, each line with its source.
        assert_rows(
            &s,
            25,
            &[
                "[supervisor] supervisor: starting 2 replicas",
                "[rank 0] rank 0/2 launcher local",
                "[rank 1] rank 1/2 launcher local",
                "[rank 1] epoch 1 loss 0.6",
            ],
        );
        assert_eq!(
            s[29],
            " Tab next pane  [ ] ← → previous / next log  f follow  w wrap  / search  s stop (asks)  ? help"
        );
        // Rank 1's own log, without prefixes.
        keys(&mut app, "]]");
        let s = screen(&app, 100, 30);
        assert_rows(&s, 27, &["rank 1/2 launcher local", "epoch 1 loss 0.6"]);
        assert!(s[8..27].iter().all(String::is_empty), "{}", text(&s));
        assert_lacks(&s, "[rank");
        assert_lacks(&s, "supervisor: starting");
        // Follow off, wrap on.
        keys(&mut app, "fw");
        assert_eq!(
            screen(&app, 100, 30)[7],
            " all  rank 0  rank 1  supervisor  │ follow off  wrap on"
        );
        keys(&mut app, "fw");
        // A search: the line at the bottom while typing, then its status.
        keys(&mut app, "/epoch");
        let s = screen(&app, 100, 30);
        assert_eq!(s[29], "search /epoch");
        key(&mut app, KeyCode::Enter);
        let s = screen(&app, 100, 30);
        assert_eq!(
            s[7],
            " all  rank 0  rank 1  supervisor  │ follow off  wrap off  /epoch  1 of 1"
        );
        assert_has(&s, "epoch 1 loss 0.6");
    }

    #[test]
    fn events_pane_lists_what_the_supervisor_did() {
        let mut app = run_app(100, 30);
        key(&mut app, KeyCode::Char('3'));
        assert_eq!(screen(&app, 100, 30)[7], " No supervisor events yet.");
        add_events(&mut app);
        let s = screen(&app, 100, 30);
        assert_rows(
            &s,
            7,
            &[
                " 2026-11-18 11:08:20 +0.0s    started    attempt 1 on cpu",
                " 2026-11-18 11:08:25 +5.0s    exited     rank 1 exited with code 1",
                " 2026-11-18 11:08:25 +5.5s    restarting attempt 2 in 1.5s: rank 1 exited with code 1",
                "",
            ],
        );
        key(&mut app, KeyCode::Char('j'));
        assert_eq!(
            screen(&app, 100, 30)[7],
            " 2026-11-18 11:08:25 +5.0s    exited     rank 1 exited with code 1"
        );
    }

    #[test]
    fn spec_pane_shows_the_frozen_spec() {
        let mut app = run_app(100, 30);
        key(&mut app, KeyCode::Char('4'));
        assert_eq!(screen(&app, 100, 30)[7], " Reading spec.toml …");
        app.update(Msg::Spec {
            dir: dir("mnist", A),
            text: Ok("[train]\nepochs = 3\nlr = 0.01\n".into()),
        });
        assert_rows(
            &screen(&app, 100, 30),
            7,
            &[" [train]", " epochs = 3", " lr = 0.01", ""],
        );
        app.update(Msg::Spec {
            dir: dir("mnist", A),
            text: Err("spec.toml: permission denied".into()),
        });
        assert_eq!(screen(&app, 100, 30)[7], " spec.toml: permission denied");
    }

    /// The run view of A as a language model's run of 2000 steps (the run list's plan), its records
    /// those of the language-model fixture, stopped at step 1200.
    fn lm_app(w: u16, h: u16) -> App {
        let mut app = app_sized(w, h);
        let mut e = entries();
        e[0].epochs_total = None;
        e[0].steps_total = Some(2000);
        e[0].metrics = MetricDigest::of(&test_util::lm_metrics());
        app.update(Msg::RunList(RunListEvent::Snapshot {
            entries: e,
            unreadable: vec![],
        }));
        key(&mut app, KeyCode::Enter);
        for m in test_util::lm_metrics() {
            run_event(&mut app, RunEvent::Metric(m));
        }
        app
    }

    #[test]
    fn a_language_models_run_view_counts_steps_and_charts_perplexity() {
        let app = lm_app(100, 30);
        let s = screen(&app, 100, 30);
        assert_eq!(
            s[2],
            "running    step 1200/2000  tokens/s 16640  lr 0.0005  time 1m39s  restarts 0  name -"
        );
        assert_has(&s, "┌ loss smoothing 0.60 ─");
        assert_has(&s, "┌ perplexity smoothing 0.60 ─");
        assert_lacks(&s, "accuracy");
        // Legends: the latest train (smoothed) and val loss, the latest val perplexity.
        assert_has(&s, "• train 1.59│");
        assert_has(&s, "+ val 1.45");
        assert_has(&s, "• val 4.263");
    }

    #[test]
    fn a_run_on_slurm_shows_its_job_in_the_list_and_the_run_view() {
        let job = ddp_workspaces::engine::slurm::SlurmJob {
            node_list: Some("ddp-n[1-2]".into()),
            requeues: 1,
            ..ddp_workspaces::engine::slurm::SlurmJob::sample()
        };
        let mut on_slurm = entries();
        on_slurm[0].run.record.slurm = Some(job.clone());
        on_slurm[0].run.record.devices = "ddp-n[1-2] (Slurm)".into();
        let mut app = app_sized(100, 30);
        app.update(Msg::RunList(RunListEvent::Snapshot {
            entries: on_slurm.clone(),
            unreadable: vec![],
        }));
        let s = screen(&app, 200, 30);
        assert_eq!(
            s[3],
            "  running    mnist        20261104-120000-aaaaaa  2/3  ████·· 2× slurm     0   0.1234  █▄▂▁     96.50%  -       2026-11-18 11:06:40 1m39s   baseline lr-sweep"
        );
        key(&mut app, KeyCode::Enter);
        run_event(&mut app, RunEvent::Status(on_slurm[0].run.record.clone()));
        let s = screen(&app, 100, 30);
        assert_rows(
            &s,
            2,
            &[
                "running    epoch 2/3  step -  time 1m39s  restarts 0  name -",
                "host box  devices 2 × ddp-n[1-2] (Slurm)",
                "slurm job 42 RUNNING on ddp-n[1-2], requeued 1 time",
            ],
        );
    }

    #[test]
    fn a_run_on_spark_shows_its_application_in_the_list_and_the_run_view() {
        let mut on_spark = entries();
        on_spark[0].run.record.spark = Some(ddp_workspaces::runs::run::SparkApp {
            master: "spark://h:7077".into(),
            tasks: 2,
            app_id: Some("app-20261129-0001".into()),
            ui: Some("http://h:4040".into()),
            ..Default::default()
        });
        let mut app = app_sized(100, 30);
        app.update(Msg::RunList(RunListEvent::Snapshot {
            entries: on_spark.clone(),
            unreadable: vec![],
        }));
        let s = screen(&app, 200, 30);
        assert!(s[3].contains(" 2× spark "), "{}", s[3]);
        key(&mut app, KeyCode::Enter);
        run_event(&mut app, RunEvent::Status(on_spark[0].run.record.clone()));
        let s = screen(&app, 100, 30);
        assert_eq!(
            s[4].trim_end(),
            "spark app-20261129-0001 on spark://h:7077 (2 tasks), UI http://h:4040"
        );
    }
}
