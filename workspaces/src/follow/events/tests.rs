//! Tests of following a run as events: file kinds, line mapping, status polling, watch lifetimes.
use super::*;
use crate::runs::run::{RunStatus, SupervisorEvent};
use std::fs::OpenOptions;
use std::io::Write;
use std::time::Instant;

const DEADLINE: Duration = Duration::from_secs(10);

fn append(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A run folder with `run.json` (status running) and a `logs/` folder.
fn run_folder() -> (tempfile::TempDir, Run, Workspace) {
    let tmp = tempfile::tempdir().unwrap();
    let run = RunRecord::sample()
        .id("r1")
        .started(Some(2.0))
        .in_workspace(tmp.path());
    std::fs::create_dir_all(run.dir.join("logs")).unwrap();
    run.save().unwrap();
    let ws = Workspace {
        root: tmp.path().to_path_buf(),
    };
    (tmp, run, ws)
}

fn metric(rank: usize, step: u64) -> MetricRecord {
    MetricRecord::sample()
        .time(10.0 + step as f64)
        .rank(rank)
        .step(step)
        .loss(2.5 - step as f64 / 100.0)
        .lr(0.001)
        .samples(Some(32))
}

fn metric_line(rank: usize, step: u64) -> String {
    format!("{}\n", serde_json::to_string(&metric(rank, step)).unwrap())
}

fn event_line(event: SupervisorEvent) -> String {
    let record = EventRecord { time: 5.0, event };
    format!("{}\n", serde_json::to_string(&record).unwrap())
}

fn log(rank: Option<usize>, line: &str) -> RunEvent {
    RunEvent::Log {
        rank,
        line: line.into(),
    }
}

async fn next(watch: &mut RunWatch) -> RunEvent {
    match tokio::time::timeout(DEADLINE, watch.next()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the watch ended"),
        Err(_) => panic!("no event within {DEADLINE:?}"),
    }
}

/// The next `n` events, then checks that nothing else arrives for a while.
async fn collect(watch: &mut RunWatch, n: usize) -> Vec<RunEvent> {
    let mut got = Vec::new();
    while got.len() < n {
        got.push(next(watch).await);
    }
    let extra = tokio::time::timeout(Duration::from_millis(400), watch.next()).await;
    assert!(
        extra.is_err(),
        "unexpected extra event {extra:?} after {got:?}"
    );
    got
}

fn logs_of(got: &[RunEvent], rank: Option<usize>) -> Vec<&str> {
    got.iter()
        .filter_map(|e| match e {
            RunEvent::Log { rank: r, line } if *r == rank => Some(line.as_str()),
            _ => None,
        })
        .collect()
}

fn status_of(event: &RunEvent) -> RunStatus {
    match event {
        RunEvent::Status(r) => r.status,
        other => panic!("expected a status, got {other:?}"),
    }
}

fn set_status(run: &mut Run, status: RunStatus) {
    run.update(|r| r.status = status).unwrap();
}

#[test]
fn paths_are_classified_by_their_place_in_the_run_folder() {
    let c = |p: &str| classify(Path::new(p));
    assert_eq!(c("logs/rank-0.log"), Some(FileKind::RankLog(0)));
    assert_eq!(c("logs/rank-12.log"), Some(FileKind::RankLog(12)));
    assert_eq!(c("logs/supervisor.log"), Some(FileKind::SupervisorLog));
    assert_eq!(c("metrics/rank-3.jsonl"), Some(FileKind::Metrics(3)));
    assert_eq!(c("events.jsonl"), Some(FileKind::Events));
    for other in [
        "run.json",
        "spec.toml",
        "logs/rank-.log",
        "logs/rank-+1.log",
        "logs/rank-1.log.1",
        "logs/other.log",
        "metrics/rank-1.log",
        "metrics/deep/rank-1.jsonl",
        "tb/events.jsonl",
        "checkpoints/epoch-0001.safetensors",
    ] {
        assert_eq!(c(other), None, "{other}");
    }
}

#[test]
fn lines_map_to_typed_events_and_bad_json_is_unparsed() {
    let line = |path: &str, text: &str| FileLine {
        path: PathBuf::from(path),
        line: text.into(),
    };
    assert_eq!(
        to_event(FileKind::RankLog(1), line("/r/logs/rank-1.log", "hi")),
        Some(log(Some(1), "hi"))
    );
    assert_eq!(
        to_event(FileKind::SupervisorLog, line("/r/logs/supervisor.log", "")),
        Some(log(None, ""))
    );
    let m = metric_line(1, 7);
    assert_eq!(
        to_event(FileKind::Metrics(1), line("/r/m", m.trim_end())),
        Some(RunEvent::Metric(metric(1, 7)))
    );
    let e = event_line(SupervisorEvent::Completed);
    assert_eq!(
        to_event(FileKind::Events, line("/r/events.jsonl", e.trim_end())),
        Some(RunEvent::Supervisor(EventRecord {
            time: 5.0,
            event: SupervisorEvent::Completed
        }))
    );
    assert_eq!(to_event(FileKind::Events, line("/r/e", "  ")), None);
    match to_event(FileKind::Metrics(0), line("/r/m", "{\"loss\":")) {
        Some(RunEvent::Unparsed { path, line, error }) => {
            assert_eq!(path, Path::new("/r/m"));
            assert_eq!(line, "{\"loss\":");
            assert!(!error.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn start_gives_status_first_then_history_then_live_events() {
    let (_tmp, mut run, ws) = run_folder();
    append(&run.log_path(0), "r0 a\nr0 b\n");
    append(&run.supervisor_log(), "sup 1\n");
    append(&run.metrics_path(1), &metric_line(1, 1));
    run.event(SupervisorEvent::Started {
        attempt: 0,
        devices: "cpu".into(),
        resume: false,
    })
    .unwrap();
    let mut watch = ws.watch(&run, WatchFrom::Start);
    assert_eq!(watch.run_dir(), run.dir);
    assert_eq!(next(&mut watch).await, RunEvent::Status(run.record.clone()));
    let history = collect(&mut watch, 5).await;
    assert_eq!(logs_of(&history, Some(0)), ["r0 a", "r0 b"]);
    assert_eq!(logs_of(&history, None), ["sup 1"]);
    assert!(history.contains(&RunEvent::Metric(metric(1, 1))));
    assert!(history.iter().any(|e| matches!(
        e,
        RunEvent::Supervisor(EventRecord {
            event: SupervisorEvent::Started { attempt: 0, .. },
            ..
        })
    )));
    // Live: a line per file and a status change.
    append(&run.log_path(1), "r1 live\n");
    append(&run.metrics_path(1), &metric_line(1, 2));
    set_status(&mut run, RunStatus::Completed);
    run.event(SupervisorEvent::Completed).unwrap();
    let live = collect(&mut watch, 4).await;
    assert_eq!(logs_of(&live, Some(1)), ["r1 live"]);
    assert!(live.contains(&RunEvent::Metric(metric(1, 2))));
    assert!(live.contains(&RunEvent::Status(run.record.clone())));
    assert!(live.iter().any(|e| matches!(
        e,
        RunEvent::Supervisor(EventRecord {
            event: SupervisorEvent::Completed,
            ..
        })
    )));
}

#[tokio::test]
async fn log_backlog_limits_history_of_logs_only() {
    let (_tmp, run, ws) = run_folder();
    append(&run.log_path(0), "a\nb\nc\n");
    append(&run.log_path(1), "x\n");
    append(&run.supervisor_log(), "s1\ns2\ns3\n");
    append(
        &run.metrics_path(0),
        &(metric_line(0, 1) + &metric_line(0, 2)),
    );
    let options = RunWatchOptions {
        log_backlog: Some(2),
        ..Default::default()
    };
    let mut watch = ws.watch_with(&run, WatchFrom::Start, options);
    assert_eq!(status_of(&next(&mut watch).await), RunStatus::Running);
    let history = collect(&mut watch, 7).await;
    assert_eq!(logs_of(&history, Some(0)), ["b", "c"]);
    assert_eq!(logs_of(&history, Some(1)), ["x"]);
    assert_eq!(logs_of(&history, None), ["s2", "s3"]);
    assert!(history.contains(&RunEvent::Metric(metric(0, 1))));
    assert!(history.contains(&RunEvent::Metric(metric(0, 2))));
    append(&run.log_path(0), "d\n");
    assert_eq!(logs_of(&collect(&mut watch, 1).await, Some(0)), ["d"]);
}

#[tokio::test]
async fn now_skips_history_but_still_gives_the_current_status() {
    let (_tmp, run, ws) = run_folder();
    append(&run.log_path(0), "old 1\nold 2\nhalf of an old li");
    append(&run.metrics_path(0), &metric_line(0, 1));
    run.event(SupervisorEvent::Completed).unwrap();
    let mut watch = ws.watch(&run, WatchFrom::Now);
    assert_eq!(status_of(&next(&mut watch).await), RunStatus::Running);
    append(&run.log_path(0), "ne\nnew 1\n");
    append(&run.metrics_path(0), &metric_line(0, 2));
    let got = collect(&mut watch, 2).await;
    assert_eq!(logs_of(&got, Some(0)), ["new 1"]);
    assert!(got.contains(&RunEvent::Metric(metric(0, 2))));
}

#[tokio::test]
async fn status_is_reported_only_when_run_json_changes() {
    let (_tmp, mut run, ws) = run_folder();
    let mut watch = ws.watch(&run, WatchFrom::Now);
    assert_eq!(status_of(&next(&mut watch).await), RunStatus::Running);
    // Rewritten unchanged (a new inode, same record): nothing.
    run.save().unwrap();
    assert!(collect(&mut watch, 0).await.is_empty());
    for status in [RunStatus::Restarting, RunStatus::Running, RunStatus::Failed] {
        set_status(&mut run, status);
        assert_eq!(next(&mut watch).await, RunEvent::Status(run.record.clone()));
    }
    run.update(|r| r.error = Some("boom".into())).unwrap();
    let got = collect(&mut watch, 1).await;
    assert_eq!(got, [RunEvent::Status(run.record.clone())]);
    // A corrupt run.json is reported once, then the next good record as usual.
    let tmp = run.dir.join("run.json.tmp");
    std::fs::write(&tmp, "{ not json").unwrap();
    std::fs::rename(&tmp, run.dir.join("run.json")).unwrap();
    match next(&mut watch).await {
        RunEvent::Unparsed { path, line, .. } => {
            assert_eq!(path, run.dir.join("run.json"));
            assert_eq!(line, "");
        }
        other => panic!("{other:?}"),
    }
    assert!(collect(&mut watch, 0).await.is_empty());
    set_status(&mut run, RunStatus::Completed);
    assert_eq!(next(&mut watch).await, RunEvent::Status(run.record.clone()));
}

#[tokio::test]
async fn partial_lines_truncation_and_late_files() {
    let (_tmp, run, ws) = run_folder();
    append(&run.log_path(0), "a long first line\n");
    let mut watch = ws.watch(&run, WatchFrom::Start);
    next(&mut watch).await; // status
    assert_eq!(
        collect(&mut watch, 1).await,
        [log(Some(0), "a long first line")]
    );
    // A partial line waits for its end.
    append(&run.log_path(0), "par");
    assert!(collect(&mut watch, 0).await.is_empty());
    append(&run.log_path(0), "tial\r\n");
    assert_eq!(collect(&mut watch, 1).await, [log(Some(0), "partial")]);
    // Truncated in place, then rewritten shorter: read again from its start.
    OpenOptions::new()
        .write(true)
        .open(run.log_path(0))
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&run.log_path(0), "short\n");
    assert_eq!(collect(&mut watch, 1).await, [log(Some(0), "short")]);
    // Files (and the metrics folder) that appear late are read from their start.
    append(&run.log_path(3), "late rank\n");
    append(&run.metrics_path(3), &metric_line(3, 1));
    append(&run.dir.join(EVENTS), &event_line(SupervisorEvent::Stopped));
    let got = collect(&mut watch, 3).await;
    assert_eq!(logs_of(&got, Some(3)), ["late rank"]);
    assert!(got.contains(&RunEvent::Metric(metric(3, 1))));
    assert!(got.contains(&RunEvent::Supervisor(EventRecord {
        time: 5.0,
        event: SupervisorEvent::Stopped
    })));
    // Files that are not followed are ignored.
    append(&run.dir.join("logs/other.log"), "no\n");
    append(&run.dir.join("tb/events.jsonl"), "no\n");
    assert!(collect(&mut watch, 0).await.is_empty());
}

#[tokio::test]
async fn unparsed_lines_are_reported_and_the_watch_goes_on() {
    let (_tmp, run, ws) = run_folder();
    let mut watch = ws.watch(&run, WatchFrom::Now);
    next(&mut watch).await;
    append(&run.metrics_path(0), "{\"broken\": \n\n");
    append(
        &run.dir.join(EVENTS),
        "{\"time\":1,\"event\":\"exploded\"}\n",
    );
    append(&run.metrics_path(0), &metric_line(0, 5));
    let got = collect(&mut watch, 3).await;
    let unparsed: Vec<&Path> = got
        .iter()
        .filter_map(|e| match e {
            RunEvent::Unparsed { path, .. } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    assert_eq!(unparsed.len(), 2);
    assert!(unparsed.contains(&run.metrics_path(0).as_path()));
    assert!(unparsed.contains(&run.dir.join(EVENTS).as_path()));
    assert!(got.contains(&RunEvent::Metric(metric(0, 5))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watchers_each_get_every_event_once_in_order() {
    let (_tmp, mut run, ws) = run_folder();
    append(&run.log_path(0), "history\n");
    let mut a = ws.watch(&run, WatchFrom::Start);
    let mut b = ws.watch(&run, WatchFrom::Start);
    let n = 500;
    for i in 0..n {
        append(&run.log_path(i % 2), &format!("line {i}\n"));
        append(&run.metrics_path(i % 2), &metric_line(i % 2, i as u64));
    }
    set_status(&mut run, RunStatus::Completed);
    // status + history + 2n lines + completed status
    let (got_a, got_b) = tokio::join!(collect(&mut a, 2 * n + 3), collect(&mut b, 2 * n + 3));
    for got in [&got_a, &got_b] {
        assert_eq!(status_of(&got[0]), RunStatus::Running);
        let want0: Vec<String> = std::iter::once("history".to_string())
            .chain((0..n).step_by(2).map(|i| format!("line {i}")))
            .collect();
        assert_eq!(logs_of(got, Some(0)), want0);
        let want1: Vec<String> = (1..n).step_by(2).map(|i| format!("line {i}")).collect();
        assert_eq!(logs_of(got, Some(1)), want1);
        for rank in 0..2 {
            let steps: Vec<u64> = got
                .iter()
                .filter_map(|e| match e {
                    RunEvent::Metric(m) if m.rank == rank => Some(m.step),
                    _ => None,
                })
                .collect();
            let want: Vec<u64> = (rank as u64..n as u64).step_by(2).collect();
            assert_eq!(steps, want);
        }
        let statuses: Vec<RunStatus> = got
            .iter()
            .filter(|e| matches!(e, RunEvent::Status(_)))
            .map(status_of)
            .collect();
        assert_eq!(statuses, [RunStatus::Running, RunStatus::Completed]);
    }
}

#[tokio::test]
async fn pure_polling_delivers_everything() {
    let (_tmp, mut run, ws) = run_folder();
    let options = RunWatchOptions {
        files: WatchOptions {
            use_notify: false,
            ..WatchOptions::default()
        },
        ..RunWatchOptions::default()
    };
    let mut watch = ws.watch_with(&run, WatchFrom::Now, options);
    next(&mut watch).await;
    for i in 0..100 {
        append(&run.log_path(0), &format!("p{i}\n"));
    }
    append(&run.log_path(1), "late\n");
    set_status(&mut run, RunStatus::Stopped);
    let got = collect(&mut watch, 102).await;
    let want: Vec<String> = (0..100).map(|i| format!("p{i}")).collect();
    assert_eq!(logs_of(&got, Some(0)), want);
    assert_eq!(logs_of(&got, Some(1)), ["late"]);
    assert!(got.contains(&RunEvent::Status(run.record.clone())));
}

#[tokio::test]
async fn stream_try_next_and_blocking_next() {
    use tokio_stream::StreamExt;
    let (_tmp, run, ws) = run_folder();
    let mut watch = ws.watch(&run, WatchFrom::Now);
    // As a `Stream`.
    let first = tokio::time::timeout(DEADLINE, StreamExt::next(&mut watch)).await;
    assert_eq!(
        first.unwrap().map(|e| status_of(&e)),
        Some(RunStatus::Running)
    );
    assert_eq!(watch.try_next(), TryNext::Empty);
    append(&run.log_path(0), "one\n");
    let start = Instant::now();
    let event = loop {
        match watch.try_next() {
            TryNext::Event(e) => break e,
            TryNext::Empty => {
                assert!(start.elapsed() < DEADLINE, "no event");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            TryNext::Ended => panic!("ended"),
        }
    };
    assert_eq!(event, log(Some(0), "one"));
    // From a plain thread.
    let log_path = run.log_path(0);
    let got = tokio::task::spawn_blocking(move || {
        append(&log_path, "two\n");
        let event = watch.blocking_next();
        (watch, event)
    })
    .await
    .unwrap();
    let (mut watch, event) = got;
    assert_eq!(event, Some(log(Some(0), "two")));
    watch.close();
    assert_eq!(watch.next().await, None);
    assert_eq!(watch.try_next(), TryNext::Ended);
}

/// The sync render loop of docs/watching.md: a runtime kept alive and entered to start the
/// watch, `try_next` between frames.
#[test]
fn sync_render_loop_with_an_entered_runtime() {
    let (_tmp, mut run, ws) = run_folder();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut watch = {
        let _guard = rt.enter();
        ws.watch(&run, WatchFrom::Now)
    };
    append(&run.log_path(0), "frame line\n");
    set_status(&mut run, RunStatus::Completed);
    let mut seen = Vec::new();
    let start = Instant::now();
    'frames: loop {
        loop {
            match watch.try_next() {
                TryNext::Event(event) => seen.push(event),
                TryNext::Empty => break,
                TryNext::Ended => break 'frames,
            }
        }
        let done = seen
            .iter()
            .any(|e| matches!(e, RunEvent::Status(r) if r.status == RunStatus::Completed));
        if done && seen.contains(&log(Some(0), "frame line")) {
            watch.close();
        }
        assert!(start.elapsed() < DEADLINE, "got only {seen:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(status_of(&seen[0]), RunStatus::Running);
    assert_eq!(seen.len(), 3, "{seen:?}");
}

/// Waits until both tasks have released `alive`.
async fn wait_until_released(alive: &Arc<()>) {
    let start = Instant::now();
    while Arc::strong_count(alive) > 1 {
        assert!(start.elapsed() < DEADLINE, "watch tasks still alive");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn dropping_or_closing_the_watch_ends_both_tasks() {
    for close in [false, true] {
        let (_tmp, run, _ws) = run_folder();
        let alive = Arc::new(());
        let mut watch = start(
            &run,
            WatchFrom::Start,
            RunWatchOptions::default(),
            alive.clone(),
        );
        next(&mut watch).await;
        append(&run.log_path(0), "x\n");
        assert_eq!(next(&mut watch).await, log(Some(0), "x"));
        assert!(Arc::strong_count(&alive) == 3, "both tasks hold it");
        if close {
            watch.close();
            wait_until_released(&alive).await;
            assert_eq!(watch.next().await, None);
        } else {
            drop(watch);
            wait_until_released(&alive).await;
        }
    }
}

#[tokio::test]
async fn a_missing_run_json_falls_back_to_the_callers_record() {
    let (_tmp, run, ws) = run_folder();
    std::fs::remove_file(run.dir.join("run.json")).unwrap();
    let mut watch = ws.watch(&run, WatchFrom::Now);
    assert_eq!(next(&mut watch).await, RunEvent::Status(run.record.clone()));
    // Written again later (unchanged): nothing new; changed: reported.
    run.save().unwrap();
    assert!(collect(&mut watch, 0).await.is_empty());
    let mut run = run;
    set_status(&mut run, RunStatus::Completed);
    assert_eq!(status_of(&next(&mut watch).await), RunStatus::Completed);
}
