//! `Workspace::watch` end to end: a real run started with the `ddp` binary (`--detach`), followed
//! by two concurrent watchers from the start; what each delivered is compared with the files.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{TestSpec, ok, run_ddp};

use ddp_workspaces::follow::events::{RunEvent, RunWatch, WatchFrom};
use ddp_workspaces::metrics::{MetricRecord, read_metrics};
use ddp_workspaces::runs::run::EventRecord;
use ddp_workspaces::{Run, RunStatus, SupervisorEvent, Workspace};

/// Everything (start, training, following) must fit in this.
const LIMIT: Duration = Duration::from_secs(25);
/// Silence after the run has ended that counts as "everything delivered".
const QUIET: Duration = Duration::from_millis(1000);

/// The small MNIST CNN: 3 epochs on 2 replicas, checkpointed every epoch.
fn spec(dir: &Path) -> PathBuf {
    TestSpec::small_mnist_cnn()
        .name("mnist-watch")
        .set("train.epochs", 3)
        .set("ddp.replicas", 2)
        .set("checkpoint.every_epochs", 1)
        .set("checkpoint.keep_last", 5)
        .write(dir)
}

/// `ddp --workspace WS run SPEC --detach`, returning once the supervisor is started.
fn start_detached(ws: &Path, spec: &Path) {
    ok(run_ddp(
        ws,
        &["run", &spec.display().to_string(), "--detach"],
        LIMIT,
    ));
}

fn supervisor_gone(dir: &Path) -> bool {
    Run::load(dir)
        .unwrap()
        .record
        .supervisor
        .is_none_or(|p| !p.is_alive())
}

/// Follows until the run has ended (terminal status and supervisor event seen, supervisor
/// process gone) and the watch has then been quiet for [`QUIET`].
async fn follow(mut watch: RunWatch, started: Instant) -> Vec<RunEvent> {
    let dir = watch.run_dir().to_path_buf();
    let mut got = Vec::new();
    let (mut status_ended, mut events_ended) = (false, false);
    let mut last_event = Instant::now();
    let mut ended_at: Option<Instant> = None;
    loop {
        assert!(
            started.elapsed() < LIMIT,
            "the run or the watch did not end; got {got:#?}"
        );
        match tokio::time::timeout(Duration::from_millis(100), watch.next()).await {
            Ok(Some(event)) => {
                match &event {
                    RunEvent::Status(r) => status_ended = r.status.is_terminal(),
                    RunEvent::Supervisor(e) => {
                        events_ended = matches!(
                            e.event,
                            SupervisorEvent::Completed
                                | SupervisorEvent::Failed { .. }
                                | SupervisorEvent::Stopped
                        )
                    }
                    _ => {}
                }
                got.push(event);
                last_event = Instant::now();
            }
            Ok(None) => panic!("the watch ended by itself"),
            Err(_) => {}
        }
        if ended_at.is_none() && status_ended && events_ended && supervisor_gone(&dir) {
            ended_at = Some(Instant::now());
        }
        if ended_at.is_some_and(|t| t.elapsed() > QUIET) && last_event.elapsed() > QUIET {
            return got;
        }
    }
}

/// The complete lines of a file, as the watcher delivers them.
fn file_lines(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<String> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
        .collect();
    lines.pop(); // after the last '\n': empty, or a line still being written
    lines
}

fn logs_of(got: &[RunEvent], rank: Option<usize>) -> Vec<String> {
    got.iter()
        .filter_map(|e| match e {
            RunEvent::Log { rank: r, line } if *r == rank => Some(line.clone()),
            _ => None,
        })
        .collect()
}

/// Metric records compared as JSON (a NaN loss is `null` on both sides).
fn json(records: &[MetricRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect()
}

fn check(name: &str, got: &[RunEvent], run: &Run) {
    // Nothing unparsable in a healthy run.
    let unparsed: Vec<&RunEvent> = got
        .iter()
        .filter(|e| matches!(e, RunEvent::Unparsed { .. }))
        .collect();
    assert!(unparsed.is_empty(), "{name}: {unparsed:#?}");
    // The current status first, then changes only, ending in completed.
    let statuses: Vec<&ddp_workspaces::RunRecord> = got
        .iter()
        .filter_map(|e| match e {
            RunEvent::Status(r) => Some(r),
            _ => None,
        })
        .collect();
    assert!(
        matches!(got[0], RunEvent::Status(_)),
        "{name}: {:?}",
        got[0]
    );
    assert!(
        !statuses[0].status.is_terminal(),
        "{name}: attached after the run ended, nothing was followed live"
    );
    assert!(
        statuses.windows(2).all(|w| w[0] != w[1]),
        "{name}: a status repeated"
    );
    assert_eq!(
        statuses.last().unwrap().status,
        RunStatus::Completed,
        "{name}"
    );
    assert!(
        statuses.iter().all(|r| matches!(
            r.status,
            RunStatus::Queued | RunStatus::Running | RunStatus::Completed
        )),
        "{name}: {statuses:#?}"
    );
    // Supervisor events: exactly events.jsonl, started … completed.
    let events: Vec<EventRecord> = got
        .iter()
        .filter_map(|e| match e {
            RunEvent::Supervisor(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(events, run.events().unwrap(), "{name}: events.jsonl");
    assert!(
        matches!(
            events.first().map(|e| &e.event),
            Some(SupervisorEvent::Started {
                attempt: 0,
                resume: false,
                ..
            })
        ),
        "{name}: {events:#?}"
    );
    assert_eq!(
        events.last().map(|e| &e.event),
        Some(&SupervisorEvent::Completed)
    );
    // Every log line and metric record exactly once, in file order.
    let mut total_lines = 0;
    for rank in 0..run.record.replicas {
        let want = file_lines(&run.log_path(rank));
        total_lines += want.len();
        assert_eq!(logs_of(got, Some(rank)), want, "{name}: rank {rank}'s log");
        let want = read_metrics(run.metrics_path(rank)).unwrap();
        assert!(!want.is_empty(), "rank {rank} wrote no metrics");
        let metrics: Vec<MetricRecord> = got
            .iter()
            .filter_map(|e| match e {
                RunEvent::Metric(m) if m.rank == rank => Some(m.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(json(&metrics), json(&want), "{name}: rank {rank}'s metrics");
    }
    assert!(total_lines > 0, "the replicas logged nothing");
    assert_eq!(
        logs_of(got, None),
        file_lines(&run.supervisor_log()),
        "{name}: supervisor.log"
    );
    let ranks_seen = got
        .iter()
        .filter_map(|e| match e {
            RunEvent::Log { rank: Some(r), .. } => Some(*r),
            RunEvent::Metric(m) => Some(m.rank),
            _ => None,
        })
        .max();
    assert!(
        ranks_seen < Some(run.record.replicas),
        "{name}: unknown rank"
    );
    println!(
        "{name}: {} events, {total_lines} replica log lines, statuses {:?}",
        got.len(),
        statuses.iter().map(|r| r.status).collect::<Vec<_>>()
    );
}

#[test]
fn two_watchers_from_start_see_a_real_run_exactly_once_and_now_skips_history() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let ws_root = dir.path().join("ws");
    start_detached(&ws_root, &spec(dir.path()));
    let ws = Workspace::open(&ws_root).unwrap();
    let (runs, bad) = ws.runs().unwrap();
    assert!(bad.is_empty() && runs.len() == 1);
    let run = runs.into_iter().next().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = rt.block_on(async {
        let a = ws.watch(&run, WatchFrom::Start);
        let b = ws.watch(&run, WatchFrom::Start);
        tokio::join!(follow(a, started), follow(b, started))
    });
    let run = Run::load(&run.dir).unwrap();
    println!(
        "followed for {:.1} s; the run took {:.1} s",
        started.elapsed().as_secs_f64(),
        run.record.ended.unwrap_or(0.0) - run.record.created
    );
    assert_eq!(run.record.status, RunStatus::Completed);
    check("watcher a", &a, &run);
    check("watcher b", &b, &run);
    // From now, on the finished run: its current status and nothing else.
    let rest = rt.block_on(async {
        let mut watch = ws.watch(&run, WatchFrom::Now);
        let first = watch.next().await;
        let more = tokio::time::timeout(QUIET, watch.next()).await;
        (first, more)
    });
    assert_eq!(rest.0, Some(RunEvent::Status(run.record.clone())));
    assert!(rest.1.is_err(), "history delivered from now: {:?}", rest.1);
    assert!(started.elapsed() < Duration::from_secs(30));
}
