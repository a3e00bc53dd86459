//! Drawing every view and dialog into a `TestBackend` and reading the text back.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent};
use ddp_workspaces::analysis::{ComparedRun, Comparison};
use ddp_workspaces::devices::telemetry::{
    CpuSample, MemorySample, Owner, ProcessOwners, ProcessSample, Telemetry, TelemetrySampler,
};
use ddp_workspaces::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::run::{EventRecord, ProcessId};
use ddp_workspaces::run_list::{RunEntry, RunListEvent};
use ddp_workspaces::workspace::Unreadable;
use ddp_workspaces::{RunEvent, RunStatus, Summary, SupervisorEvent};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use unicode_width::UnicodeWidthStr;

use crate::app::{App, Msg, Outcome, View};
use crate::runs::tests::entry;
use crate::theme::Theme;

const NOW: f64 = 1_795_000_100.0;
const A: &str = "20261104-120000-aaaaaa";
const B: &str = "20261103-120000-bbbbbb";
const C: &str = "20261102-120000-cccccc";

fn draw(app: &App, w: u16, h: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| f.render_widget(app, f.area())).unwrap();
    terminal.backend().buffer().clone()
}

/// The rows of a buffer as text (cells hidden by a wide character skipped), right-trimmed.
fn rows(buf: &Buffer) -> Vec<String> {
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

fn screen(app: &App, w: u16, h: u16) -> Vec<String> {
    rows(&draw(app, w, h))
}

fn text(lines: &[String]) -> String {
    lines.join("\n")
}

fn app_sized(w: u16, h: u16) -> App {
    App::new(PathBuf::from("/ws"), Theme { color: false }, NOW, (w, h))
}

fn key(app: &mut App, code: KeyCode) {
    app.update(Msg::Key(KeyEvent::from(code)));
}

fn keys(app: &mut App, s: &str) {
    for c in s.chars() {
        key(app, KeyCode::Char(c));
    }
}

fn dir(exp: &str, id: &str) -> PathBuf {
    PathBuf::from(format!("/ws/experiments/{exp}/runs/{id}"))
}

/// A running mnist run 2/3 epochs in, with 96.5% best val and tags; a completed cifar run; a
/// failed mnist run; an unreadable folder.
fn entries() -> Vec<RunEntry> {
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

fn unreadable() -> Unreadable {
    Unreadable {
        dir: dir("broken", "20261101-000000-zzzzzz"),
        error: "run.json: not a valid run record".into(),
    }
}

fn app_with_runs(w: u16, h: u16) -> App {
    let mut app = app_sized(w, h);
    app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: entries(),
        unreadable: vec![unreadable()],
    }));
    app
}

/// The run view of A, its record filled in.
fn run_app(w: u16, h: u16) -> App {
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

fn run_event(app: &mut App, event: RunEvent) {
    app.update(Msg::Run {
        dir: dir("mnist", A),
        event,
    });
}

fn metric(kind: MetricKind, epoch: usize, step: u64, loss: f64, acc: Option<f64>) -> MetricRecord {
    MetricRecord {
        time: NOW + step as f64,
        rank: 0,
        kind,
        epoch,
        step,
        loss,
        accuracy: acc,
        lr: 0.01,
        samples_per_sec: 100.0,
        samples: None,
        world_size: 2,
    }
}

fn add_metrics(app: &mut App) {
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

fn add_logs(app: &mut App) {
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

fn add_events(app: &mut App) {
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

fn cpu_telemetry() -> Telemetry {
    Telemetry {
        time: NOW,
        interval_s: 1.0,
        gpus: vec![],
        gpu_note: Some("no NVIDIA driver (libnvidia-ml.so.1 not found)".into()),
        cpu: CpuSample {
            per_core_pct: vec![10.0, 50.0, 90.0, 30.0],
            total_pct: 45.0,
        },
        memory: MemorySample {
            total_bytes: 16 << 30,
            available_bytes: 12 << 30,
        },
        processes: vec![ProcessSample {
            pid: 4242,
            owner: Owner {
                run_id: A.into(),
                experiment: "mnist".into(),
                rank: Some(0),
            },
            cpu_pct: Some(97.0),
            rss_bytes: Some(512 << 20),
            command: "ddp-trainer --rank 0".into(),
        }],
        notes: vec![],
    }
}

fn gpu_telemetry() -> Telemetry {
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

fn compare_app(w: u16, h: u16) -> App {
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
fn assert_rows(lines: &[String], start: usize, want: &[&str]) {
    let got: Vec<&str> = lines[start..start + want.len()]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(got, want, "screen:\n{}", text(lines));
}

#[track_caller]
fn assert_has(lines: &[String], needle: &str) {
    assert!(
        lines.iter().any(|l| l.contains(needle)),
        "{needle:?} not on screen:\n{}",
        text(lines)
    );
}

#[track_caller]
fn assert_lacks(lines: &[String], needle: &str) {
    assert!(
        !lines.iter().any(|l| l.contains(needle)),
        "{needle:?} on screen:\n{}",
        text(lines)
    );
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

#[test]
fn devices_without_gpus() {
    let mut app = app_with_runs(100, 30);
    keys(&mut app, "D");
    let s = screen(&app, 100, 30);
    assert_eq!(s[1], format!(" Devices {}", "─".repeat(91)));
    assert_eq!(s[2], " Sampling devices …");
    app.update(Msg::Telemetry(cpu_telemetry()));
    let s = screen(&app, 100, 30);
    assert_rows(
        &s,
        2,
        &[
            " cpu  █████████···········  45.0% 4 cores ▄",
            " mem  █████···············  25.0% 4.0 GiB/16.0 GiB ▄",
            " no GPU: no NVIDIA driver (libnvidia-ml.so.1 not found)",
            "   0  ███···························  10.0%      1  ███████████████···············  50.0%",
            "   2  ███████████████████████████···  90.0%      3  █████████·····················  30.0%",
            &format!(" Processes of live runs {}", "─".repeat(76)),
            "PID      RUN                      ROLE       CPU   RSS        COMMAND",
            "4242     mnist 120000-aaaaaa      rank 0     97%   512.0 MiB  ddp-trainer --rank 0",
            "",
        ],
    );
    assert_eq!(s[29], " ? help  Esc back  q quit (runs keep running)");
    // Narrow: one core a row; no live runs.
    let mut t = cpu_telemetry();
    t.processes.clear();
    app.update(Msg::Telemetry(t));
    let s = screen(&app, 80, 24);
    assert_has(&s, "   3  ");
    assert_has(&s, " No live runs.");
    assert_lacks(&s, "      1  ");
}

#[test]
fn devices_with_two_simulated_gpus() {
    let mut app = app_with_runs(100, 30);
    keys(&mut app, "D");
    app.update(Msg::Telemetry(gpu_telemetry()));
    let s = screen(&app, 100, 30);
    assert_rows(
        &s,
        2,
        &[
            " simulated: 2 GPU(s) from DDP_SIMULATED_GPUS (NVML not used)",
            &format!(" GPU 0 Simulated GPU  58°C  360/700 W  run {A}"),
        ],
    );
    assert!(s[4].starts_with("  util "), "{}", s[4]);
    assert!(s[4].contains("50.0%"), "{}", s[4]);
    assert!(s[4].ends_with(" 40.0 GiB/80.0 GiB"), "{}", s[4]);
    assert_eq!(s[5], " GPU 1 Simulated GPU  77°C  618/700 W  free");
    assert!(s[6].ends_with("75.8% 60.6 GiB/80.0 GiB"), "{}", s[6]);
    assert_has(&s, " cpu  █████████···········  45.0% 4 cores");
    // With GPUs, no per-core bars and no "no GPU" note.
    assert_lacks(&s, "no GPU");
    assert_lacks(&s, "  90.0%");
    assert_has(&s, "4242     mnist 120000-aaaaaa      rank 0");
}

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
            event: RunEvent::Metric(metric(MetricKind::Train, 1, step, 1.0 / step as f64, None)),
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
fn help_lists_the_keys() {
    let mut app = app_with_runs(120, 40);
    keys(&mut app, "?");
    let s = screen(&app, 120, 40);
    assert_has(&s, "┌ Keys (any key closes) ─");
    for (k, what) in [
        ("?", "help"),
        ("Esc", "back"),
        ("q", "quit (runs keep running)"),
        ("Enter", "open run"),
        ("/", "filter"),
        ("Space", "mark for compare"),
        ("s", "stop (asks)"),
        ("D", "devices"),
        ("Tab", "next pane"),
        ("f", "follow"),
        ("n N", "next / previous match"),
    ] {
        assert_has(&s, &format!("{k:<13}{what}"));
    }
    for section in ["Runs", "Run: charts", "Run: logs", "Compare"] {
        assert!(
            s.iter().any(|l| l.contains(&format!(" {section} ")) || l.contains(&format!("│{section} "))),
            "{section}:\n{}",
            text(&s)
        );
    }
    assert_has(&s, "Events, Spec: ↑ ↓ PgUp PgDn scroll");
    // At 80×24 the common keys are still there.
    let s = screen(&app, 80, 24);
    for k in [
        "│?            help",
        "│Esc          back",
        "│q            quit",
        "│Enter        open run",
    ] {
        assert_has(&s, k);
    }
}

#[test]
fn confirm_dialogs_ask_the_question() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "s");
    let s = screen(&app, 80, 24);
    assert_has(&s, "┌ Confirm ─");
    assert_has(&s, &format!("│ Stop run {A} (mnist)? The replicas    │"));
    assert_has(
        &s,
        "│ finish their step and exit.                              │",
    );
    assert_has(
        &s,
        "│ y yes   n no                                             │",
    );
    key(&mut app, KeyCode::Char('n'));
    assert_lacks(&screen(&app, 80, 24), "Confirm");
    keys(&mut app, "jd");
    let s = screen(&app, 120, 30);
    assert_has(&s, &format!("│ Delete run {B} (cifar) and its folder │"));
    assert_has(&s, &format!("│ /ws/experiments/cifar/runs/{B}?       │"));
}

#[test]
fn new_run_dialog_idle_busy_and_refused() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "n");
    let s = screen(&app, 80, 24);
    assert_has(&s, "┌ New run ─");
    assert_has(
        &s,
        "│ ddp run SPEC.toml [--set key=value]... [--name NAME] [--replicas N]",
    );
    assert_has(&s, "│ Tab completes paths   Enter starts   Esc cancels");
    keys(&mut app, "examples/m");
    key(&mut app, KeyCode::Tab);
    app.update(Msg::Completions {
        typed: "examples/m".into(),
        options: vec!["examples/mlp.toml".into(), "examples/mnist.toml".into()],
    });
    let s = screen(&app, 80, 24);
    assert_has(&s, "│ > examples/m ");
    assert_has(&s, "│ mlp.toml  mnist.toml ");
    keys(&mut app, "nist.toml");
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 80, 24);
    assert_has(&s, "│ > examples/mnist.toml ");
    assert_has(&s, "│ checking the spec and starting … ");
    app.update(Msg::Done(Outcome::StartRefused(
        "spec examples/mnist.toml: no such file".into(),
    )));
    let s = screen(&app, 80, 24);
    assert_has(&s, "│ spec examples/mnist.toml: no such file ");
    assert_has(&s, "│ nothing was created ");
    assert_lacks(&s, "checking the spec");
}

#[test]
fn tags_filter_and_search_lines() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "t");
    let s = screen(&app, 80, 24);
    assert_has(&s, "┌ Tags ─");
    assert_has(&s, &format!("│ Tags of run {A} (separated by spaces):"));
    assert_has(&s, "│ > baseline lr-sweep ");
    assert_has(&s, "│ Enter saves   Esc cancels ");
    key(&mut app, KeyCode::Esc);
    // The filter line replaces the footer and narrows as typed.
    keys(&mut app, "/cif");
    let s = screen(&app, 80, 24);
    assert_eq!(s[23], "filter /cif");
    assert!(s[1].contains("filter /cif"), "{}", s[1]);
    assert_eq!(
        s[3],
        "  completed  cifar/wide   120000-bbbbbb  3/3  ██████ -                50.00%"
    );
    assert_eq!(s[4], "");
    key(&mut app, KeyCode::Enter);
    assert_eq!(
        screen(&app, 80, 24)[23],
        " Enter open run  / filter  c compare marked runs  n new run  ? help"
    );
    // The search line of the Logs pane.
    let mut app = run_app(80, 24);
    keys(&mut app, "2/rank 1");
    assert_eq!(screen(&app, 80, 24)[23], "search /rank 1");
}

#[test]
fn footer_shows_the_keys_or_a_notice() {
    let mut app = app_with_runs(120, 30);
    let s = screen(&app, 120, 30);
    assert_eq!(
        s[29],
        " Enter open run  / filter  c compare marked runs  n new run  s stop (asks)  r resume  ? help  Esc back"
    );
    app.update(Msg::Done(Outcome::Deleted(B.into())));
    assert_eq!(screen(&app, 120, 30)[29], format!(" deleted run {B}"));
    app.update(Msg::Tick(NOW + 7.0));
    assert!(screen(&app, 120, 30)[29].starts_with(" Enter open run"));
    // Very narrow: `? help` still.
    assert_eq!(screen(&app, 12, 10)[9], " ? help");
}

/// Every view, pane and dialog, by name, with the text that says which it is.
fn every_screen(w: u16, h: u16) -> Vec<(&'static str, App, String)> {
    let mut out = Vec::new();
    let mut empty = app_sized(w, h);
    out.push(("reading", app_sized(w, h), "Reading /ws".to_string()));
    empty.update(Msg::RunList(RunListEvent::Snapshot {
        entries: vec![],
        unreadable: vec![],
    }));
    out.push(("empty", empty, " Runs sorted by created".into()));
    out.push((
        "runs",
        app_with_runs(w, h),
        " Runs sorted by created".into(),
    ));
    for (p, tab) in ["1", "2", "3", "4"]
        .into_iter()
        .zip(["Charts", "Logs", "Events", "Spec"])
    {
        let mut app = run_app(w, h);
        add_metrics(&mut app);
        add_logs(&mut app);
        add_events(&mut app);
        app.update(Msg::Spec {
            dir: dir("mnist", A),
            text: Ok("[train]\nepochs = 3\n".into()),
        });
        keys(&mut app, p);
        assert_eq!(app.run.as_ref().unwrap().pane.name(), tab);
        out.push((tab, app, format!(" Run {A}")));
    }
    let mut devices = app_with_runs(w, h);
    keys(&mut devices, "D");
    devices.update(Msg::Telemetry(cpu_telemetry()));
    out.push(("devices", devices, " Devices ".into()));
    let mut gpus = app_with_runs(w, h);
    keys(&mut gpus, "D");
    gpus.update(Msg::Telemetry(gpu_telemetry()));
    out.push(("gpus", gpus, " Devices ".into()));
    out.push(("compare", compare_app(w, h), " Compare 2 runs ".into()));
    for (name, typed, title) in [
        ("help", "?", "Keys (any key closes)"),
        ("confirm", "s", " Confirm "),
        ("new run", "n", " New run "),
        ("tags", "t", " Tags "),
        ("filter", "/mn", "filter /mn"),
    ] {
        let mut app = app_with_runs(w, h);
        keys(&mut app, typed);
        out.push((name, app, title.into()));
    }
    let mut search = run_app(w, h);
    keys(&mut search, "2/x");
    out.push(("search", search, "search /x".into()));
    out
}

#[test]
fn every_view_and_dialog_is_usable_at_80x24() {
    for (name, app, title) in every_screen(80, 24) {
        let s = screen(&app, 80, 24);
        assert_has(&s, &title);
        if !matches!(name, "help" | "confirm" | "new run" | "tags") {
            assert!(s[0].starts_with(" ddp  Runs "), "{name}: {}", s[0]);
        }
        if !matches!(name, "filter" | "search") {
            assert!(
                s[23].contains("? help") || name == "help",
                "{name}: {}",
                s[23]
            );
        }
        if let "Charts" | "Logs" | "Events" | "Spec" = name {
            assert_has(&s, " 1 Charts  2 Logs  3 Events  4 Spec");
            assert_has(&s, "running    epoch 2/3");
        }
    }
}

#[test]
fn odd_sizes_never_panic() {
    for (w, h) in [
        (1, 1),
        (2, 2),
        (10, 3),
        (20, 5),
        (40, 10),
        (79, 23),
        (250, 80),
    ] {
        for (name, app, _) in every_screen(w, h) {
            let buf = draw(&app, w, h);
            assert_eq!(buf.area.width, w, "{name}");
        }
    }
}

/// Cells with a foreground or background colour.
fn coloured_cells(buf: &Buffer) -> Vec<(u16, u16, Color, Color)> {
    let a = buf.area;
    let mut out = Vec::new();
    for y in a.top()..a.bottom() {
        for x in a.left()..a.right() {
            let c = &buf[(x, y)];
            if c.fg != Color::Reset || c.bg != Color::Reset {
                out.push((x, y, c.fg, c.bg));
            }
        }
    }
    out
}

#[test]
fn no_color_leaves_every_cell_uncoloured() {
    let mut app = app_with_runs(120, 30);
    keys(&mut app, " ");
    app.notify("a notice", true);
    let buf = draw(&app, 120, 30);
    assert_eq!(coloured_cells(&buf), []);
    // The selection and the mark stay visible without colour.
    let s = rows(&buf);
    let selected = s.iter().position(|l| l.contains("120000-bbbbbb")).unwrap();
    assert!(
        buf[(5, selected as u16)]
            .modifier
            .contains(ratatui::style::Modifier::REVERSED)
    );
    assert!(s.iter().any(|l| l.starts_with("● running")), "{}", text(&s));
    // And in every other view and dialog.
    for (name, app, _) in every_screen(100, 30) {
        let buf = draw(&app, 100, 30);
        assert_eq!(coloured_cells(&buf), [], "{name}:\n{}", text(&rows(&buf)));
    }
    // With colour there is some.
    let mut app = app_with_runs(120, 30);
    app.theme = Theme { color: true };
    assert_ne!(coloured_cells(&draw(&app, 120, 30)), []);
}
