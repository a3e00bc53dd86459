//! The Run view: its header and its charts, logs, events and spec panes.

use super::*;

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
    let job = ddp_workspaces::slurm::SlurmJob {
        node_list: Some("ddp-n[1-2]".into()),
        requeues: 1,
        ..ddp_workspaces::slurm::SlurmJob::sample()
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
