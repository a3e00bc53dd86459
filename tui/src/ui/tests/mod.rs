//! Drawing the whole screen into a `TestBackend` and reading the text back.
//!
//! Layout: this file holds the fixtures (runs A–C, metrics, logs, events, telemetry, a
//! comparison) and the screen readers, for the tests of every view and dialog, which sit at the
//! end of their `draw.rs` (`use crate::ui::tests::*`); `screens` tests every view and dialog at
//! once (footer, sizes, `NO_COLOR`).

mod screens;
mod sweep;

pub(crate) use std::collections::BTreeMap;
pub(crate) use std::path::PathBuf;

pub(crate) use crossterm::event::{KeyCode, KeyEvent};
pub(crate) use ddp_workspaces::engine::devices::telemetry::{
    ProcessOwners, Telemetry, TelemetrySampler,
};
pub(crate) use ddp_workspaces::follow::run_list::{MetricDigest, RunEntry, RunListEvent};
pub(crate) use ddp_workspaces::metrics::{MetricKind, MetricRecord};
pub(crate) use ddp_workspaces::present::analysis::{ComparedRun, Comparison};
pub(crate) use ddp_workspaces::runs::run::{EventRecord, ProcessId};
pub(crate) use ddp_workspaces::runs::workspace::Unreadable;
pub(crate) use ddp_workspaces::test_util;
pub(crate) use ddp_workspaces::{RunEvent, RunStatus, Summary, SupervisorEvent};
pub(crate) use ratatui::Terminal;
pub(crate) use ratatui::backend::TestBackend;
pub(crate) use ratatui::buffer::Buffer;
pub(crate) use ratatui::style::Color;
pub(crate) use unicode_width::UnicodeWidthStr;

pub(crate) use crate::app::{App, Msg, Outcome, View};
pub(crate) use crate::theme::Theme;
pub(crate) use crate::views::runs::tests::entry;

pub(crate) const NOW: f64 = 1_795_000_100.0;
pub(crate) const A: &str = "20261104-120000-aaaaaa";
pub(crate) const B: &str = "20261103-120000-bbbbbb";
pub(crate) const C: &str = "20261102-120000-cccccc";

pub(crate) fn draw(app: &App, w: u16, h: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| f.render_widget(app, f.area())).unwrap();
    terminal.backend().buffer().clone()
}

/// The rows of a buffer as text (cells hidden by a wide character skipped), right-trimmed.
pub(crate) fn rows(buf: &Buffer) -> Vec<String> {
    let area = buf.area;
    (area.top()..area.bottom())
        .map(|y| {
            let mut s = String::new();
            let mut skip = 0;
            for x in area.left()..area.right() {
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                let sym = buf[(x, y)].symbol();
                skip = sym.width().saturating_sub(1);
                s.push_str(sym);
            }
            s.trim_end().to_string()
        })
        .collect()
}

pub(crate) fn screen(app: &App, w: u16, h: u16) -> Vec<String> {
    rows(&draw(app, w, h))
}

pub(crate) fn text(lines: &[String]) -> String {
    lines.join("\n")
}

pub(crate) fn app_sized(w: u16, h: u16) -> App {
    App::new(PathBuf::from("/ws"), Theme { color: false }, NOW, (w, h))
}

pub(crate) fn key(app: &mut App, code: KeyCode) {
    app.update(Msg::Key(KeyEvent::from(code)));
}

pub(crate) fn keys(app: &mut App, s: &str) {
    for c in s.chars() {
        key(app, KeyCode::Char(c));
    }
}

pub(crate) fn dir(exp: &str, id: &str) -> PathBuf {
    PathBuf::from(format!("/ws/experiments/{exp}/runs/{id}"))
}

/// A running mnist run 2/3 epochs in, with 96.5% best val and tags; a completed cifar run; a
/// failed mnist run; an unreadable folder.
pub(crate) fn entries() -> Vec<RunEntry> {
    let mut a = entry(A, "mnist", RunStatus::Running);
    a.metrics.epochs_done = 2;
    a.metrics.best_val_accuracy = Some(0.965);
    a.metrics.last_train_loss = Some(0.1234);
    a.metrics.recent_train_loss = vec![0.5, 0.3, 0.2, 0.1234];
    a.tags = vec!["baseline".into(), "lr-sweep".into()];
    let mut b = entry(B, "cifar", RunStatus::Completed);
    b.metrics.epochs_done = 3;
    b.metrics.best_val_accuracy = Some(0.5);
    b.metrics.test_accuracy = Some(0.49);
    b.run.record.ended = Some(1_795_000_061.0);
    b.run.record.name = Some("wide".into());
    let mut c = entry(C, "mnist", RunStatus::Failed);
    c.run.record.ended = Some(1_795_000_031.0);
    c.run.record.error = Some("rank 1 exited with code 1".into());
    vec![a, b, c]
}

pub(crate) fn unreadable() -> Unreadable {
    Unreadable {
        dir: dir("broken", "20261101-000000-zzzzzz"),
        error: "run.json: not a valid run record".into(),
    }
}

pub(crate) fn app_with_runs(w: u16, h: u16) -> App {
    let mut app = app_sized(w, h);
    app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: entries(),
        unreadable: vec![unreadable()],
    }));
    app
}

/// The run view of A, its record filled in.
pub(crate) fn run_app(w: u16, h: u16) -> App {
    let mut app = app_with_runs(w, h);
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.view, View::Run);
    let mut record = entries()[0].run.record.clone();
    record.replica_pids = BTreeMap::from([(0, 4242), (1, 4243)]);
    record.supervisor = Some(ProcessId {
        pid: 4240,
        start_ticks: 1,
    });
    record.restarts = 1;
    record.spec_hash = "0123456789abcdef0123".into();
    record.error = Some("rank 1 exited with code 1 (attempt 1)".into());
    run_event(&mut app, RunEvent::Status(record));
    app
}

pub(crate) fn run_event(app: &mut App, event: RunEvent) {
    app.update(Msg::Run {
        dir: dir("mnist", A),
        event,
    });
}

pub(crate) fn metric(
    kind: MetricKind,
    epoch: usize,
    step: u64,
    loss: f64,
    acc: Option<f64>,
) -> MetricRecord {
    test_util::metric(kind, epoch, step, loss, acc).time(NOW + step as f64)
}

pub(crate) fn add_metrics(app: &mut App) {
    for step in 1..=20u64 {
        let loss = 2.0 / step as f64;
        run_event(
            app,
            RunEvent::Metric(metric(
                MetricKind::Train,
                1 + (step as usize - 1) / 10,
                step,
                loss,
                None,
            )),
        );
    }
    run_event(
        app,
        RunEvent::Metric(metric(MetricKind::Val, 1, 10, 0.4, Some(0.9))),
    );
    run_event(
        app,
        RunEvent::Metric(metric(MetricKind::Val, 2, 20, 0.2, Some(0.965))),
    );
}

pub(crate) fn add_logs(app: &mut App) {
    for (rank, line) in [
        (None, "supervisor: starting 2 replicas"),
        (Some(0), "rank 0/2 launcher local"),
        (Some(1), "rank 1/2 launcher local"),
        (Some(1), "epoch 1 loss 0.6"),
    ] {
        run_event(
            app,
            RunEvent::Log {
                rank,
                line: line.into(),
            },
        );
    }
}

pub(crate) fn add_events(app: &mut App) {
    for (dt, event) in [
        (
            0.0,
            SupervisorEvent::Started {
                attempt: 1,
                devices: "cpu".into(),
                resume: false,
            },
        ),
        (
            5.0,
            SupervisorEvent::ReplicaExited {
                rank: 1,
                code: Some(1),
                signal: None,
            },
        ),
        (
            5.5,
            SupervisorEvent::Restarting {
                attempt: 2,
                after_s: 1.5,
                reason: "rank 1 exited with code 1".into(),
            },
        ),
    ] {
        run_event(
            app,
            RunEvent::Supervisor(EventRecord {
                time: NOW + dt,
                event,
            }),
        );
    }
}

pub(crate) fn cpu_telemetry() -> Telemetry {
    let note = "no NVIDIA driver (libnvidia-ml.so.1 not found)";
    let mut t = Telemetry::sample().time(NOW).gpu_note(Some(note.into()));
    t.processes[0].owner.run_id = A.into();
    t
}

pub(crate) fn gpu_telemetry() -> Telemetry {
    let mut t = TelemetrySampler::new(None)
        .with_simulated_gpus(2)
        .sample(&ProcessOwners::new());
    let cpu = cpu_telemetry();
    t.time = cpu.time;
    t.interval_s = cpu.interval_s;
    t.cpu = cpu.cpu;
    t.memory = cpu.memory;
    t.processes = cpu.processes;
    t.notes = vec![];
    t.gpus[0].held_by = Some(A.into());
    t
}

pub(crate) fn compare_app(w: u16, h: u16) -> App {
    let mut app = app_with_runs(w, h);
    keys(&mut app, "  c");
    assert_eq!(app.view, View::Compare);
    let compared = |e: &RunEntry, cells: [&str; 2]| ComparedRun {
        id: e.run.record.id.clone(),
        experiment: e.run.record.experiment.clone(),
        name: e.run.record.name.clone(),
        sweep: None,
        status: e.run.record.status,
        error: None,
        dir: e.run.dir.clone(),
        keys: BTreeMap::new(),
        summary: Summary::default(),
        cells: cells.iter().map(|s| s.to_string()).collect(),
    };
    let e = entries();
    app.update(Msg::CompareSpecs(Ok(Comparison {
        sweep: None,
        differing_keys: vec!["model.hidden".into(), "train.lr".into()],
        runs: vec![
            compared(&e[0], ["128", "0.01"]),
            compared(&e[1], ["256", "-"]),
        ],
    })));
    app
}

/// `lines[start..]` begin with `want`, row for row.
#[track_caller]
pub(crate) fn assert_rows(lines: &[String], start: usize, want: &[&str]) {
    let got: Vec<&str> = lines[start..start + want.len()]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(got, want, "screen:\n{}", text(lines));
}

#[track_caller]
pub(crate) fn assert_has(lines: &[String], needle: &str) {
    assert!(
        lines.iter().any(|l| l.contains(needle)),
        "{needle:?} not on screen:\n{}",
        text(lines)
    );
}

#[track_caller]
pub(crate) fn assert_lacks(lines: &[String], needle: &str) {
    assert!(
        !lines.iter().any(|l| l.contains(needle)),
        "{needle:?} on screen:\n{}",
        text(lines)
    );
}
