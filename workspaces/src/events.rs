//! Following one run live as typed events: log lines by rank, metric records, status changes and
//! supervisor events, from the run folder alone (any process may be the one writing it).
//!
//! [`Workspace::watch`] returns a [`RunWatch`]: a [`Stream`] of [`RunEvent`]s that also offers
//! `next().await`, [`RunWatch::try_next`] (non-blocking, for a render loop) and
//! [`RunWatch::blocking_next`] (for a plain thread). Behind it, one [`crate::watch::watch_dir`]
//! task follows `logs/rank-R.log`, `logs/supervisor.log`, `metrics/rank-R.jsonl` and
//! `events.jsonl` (notify, with the polling fallback, saved offsets, partial lines, truncation,
//! replacement and late files all handled there), and one owner task maps each line to a typed
//! event by its path and merges in [`RunEvent::Status`]: `run.json` is pretty-printed and
//! replaced atomically, so it is re-read every [`RunWatchOptions::status_interval`] instead of
//! being tailed, and reported when it differs from the last record reported.
//!
//! Guarantees, per watch (several watches of one run are independent and each gets all of them):
//! - the first event is always a `Status` with the run's current record (in both [`WatchFrom`]
//!   modes), so a front end has the state before anything else;
//! - every complete line of a followed file is delivered exactly once, in file order; files are
//!   not ordered against each other (nor against `Status`);
//! - `Status` events are in the order observed and each differs from the previous one; changes
//!   of `run.json` closer together than the poll interval may be coalesced (`events.jsonl` is the
//!   complete history);
//! - a line that does not parse (metrics, events) is a [`RunEvent::Unparsed`], never fatal;
//! - the stream does not end when the run does (a stopped or failed run can be resumed, and the
//!   last lines of other files may still be on their way): it ends when the [`RunWatch`] is
//!   closed or dropped, which stops both tasks (and the `notify` watcher).
//!
//! Layout:
//! - [`RunEvent`], [`WatchFrom`], [`RunWatchOptions`], [`TryNext`]: the API types.
//! - [`Workspace::watch`] / [`Workspace::watch_with`] and [`RunWatch`]: starting and consuming.
//! - `FileKind` / `classify`: which followed file a path is; `to_event`: one line → one event
//!   (both pure).
//! - `StatusPoller`: re-reads `run.json` and says whether it changed.
//! - `pump`: the owner task merging file lines and status polls into the event channel.
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::metrics::MetricRecord;
use crate::run::{EVENTS, EventRecord, Run, RunRecord};
use crate::tail::TailFrom;
use crate::watch::{FileLine, WatchOptions, watch_dir_starting};
use crate::{Error, Workspace};

/// One thing that happened in a run folder.
// `Status` is the big variant (~350 bytes) but rare; unboxed, it matches like the others.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A line of `logs/rank-R.log` (`rank: Some(R)`) or of `logs/supervisor.log` (`rank: None`),
    /// without its line ending.
    Log { rank: Option<usize>, line: String },
    /// A record of `metrics/rank-R.jsonl` (the record carries its rank).
    Metric(MetricRecord),
    /// The run's record (`run.json`): the current one first, then every observed change.
    Status(RunRecord),
    /// A line of `events.jsonl`: what the supervisor did.
    Supervisor(EventRecord),
    /// A line of `metrics/rank-R.jsonl` or `events.jsonl` that does not parse, or a `run.json`
    /// that does not (then `line` is empty; reported once per distinct error). Never fatal.
    Unparsed {
        path: PathBuf,
        line: String,
        error: String,
    },
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// The full history: every line already in the files, then what follows.
    Start,
    /// Only lines written after [`Workspace::watch`] returns (a file that appears later is read
    /// from its start). The current `Status` is still delivered first.
    Now,
}

/// Tuning of [`Workspace::watch_with`]; the defaults suit run folders.
#[derive(Debug, Clone)]
pub struct RunWatchOptions {
    /// How often `run.json` is re-read.
    pub status_interval: Duration,
    /// The file watcher's tuning (`use_notify: false` for pure polling, e.g. network file systems).
    pub files: WatchOptions,
    /// Events buffered for the consumer before the tasks wait for it.
    pub channel_capacity: usize,
    /// With [`WatchFrom::Start`]: deliver only the last N lines already in each log file (read
    /// backwards from the end, so a huge log opens at once), while metrics and supervisor events
    /// are still delivered in full. `None`: logs in full too.
    pub log_backlog: Option<usize>,
}

impl Default for RunWatchOptions {
    fn default() -> Self {
        RunWatchOptions {
            status_interval: Duration::from_millis(150),
            files: WatchOptions::default(),
            channel_capacity: 4096,
            log_backlog: None,
        }
    }
}

/// What [`RunWatch::try_next`] found.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum TryNext {
    /// The next event.
    Event(RunEvent),
    /// Nothing right now; try again later.
    Empty,
    /// The watch is over (closed, or its tasks ended) and every buffered event has been taken.
    Ended,
}

impl Workspace {
    /// Follows `run` with [`RunWatchOptions::default`]. See [`Workspace::watch_with`].
    pub fn watch(&self, run: &Run, from: WatchFrom) -> RunWatch {
        self.watch_with(run, from, RunWatchOptions::default())
    }

    /// Follows `run` as a stream of [`RunEvent`]s (see the module docs for the guarantees).
    ///
    /// The positions for [`WatchFrom::Now`] and the first `Status` are taken before this returns
    /// (a short blocking read of the run folder). Must be called inside a tokio runtime (it spawns
    /// the tasks; from sync code, `let _guard = runtime.enter();` first, with a multi-thread
    /// runtime kept alive while watching). Like [`Run::load_checked`], reading a live run whose
    /// supervisor is gone marks it failed on disk, so a watch sees a killed run end.
    pub fn watch_with(&self, run: &Run, from: WatchFrom, options: RunWatchOptions) -> RunWatch {
        start(run, from, options, Arc::new(()))
    }
}

/// Starts the tasks; `alive` is held by both of them until they end (tests observe it).
fn start(run: &Run, from: WatchFrom, options: RunWatchOptions, alive: Arc<()>) -> RunWatch {
    let dir = run.dir.clone();
    let cancel = CancellationToken::new();
    let mut poller = StatusPoller::new(dir.clone());
    let mut first = Vec::new();
    first.extend(poller.poll());
    if poller.last.is_none() {
        // `run.json` unreadable right now: the caller's record is the best current state.
        poller.last = Some(run.record.clone());
        first.insert(0, RunEvent::Status(run.record.clone()));
    }
    let filter = {
        let (dir, alive) = (dir.clone(), alive.clone());
        move |path: &Path| {
            let _ = &alive;
            path.strip_prefix(&dir).ok().and_then(classify).is_some()
        }
    };
    let log_backlog = options.log_backlog;
    let start = {
        let dir = dir.clone();
        move |path: &Path| match from {
            WatchFrom::Now => TailFrom::End,
            WatchFrom::Start => {
                match (log_backlog, path.strip_prefix(&dir).ok().and_then(classify)) {
                    (Some(n), Some(FileKind::RankLog(_) | FileKind::SupervisorLog)) => {
                        TailFrom::LastLines(n)
                    }
                    _ => TailFrom::Start,
                }
            }
        }
    };
    let lines = watch_dir_starting(
        dir.clone(),
        filter,
        start,
        cancel.child_token(),
        options.files.clone(),
    );
    let (tx, rx) = mpsc::channel(options.channel_capacity.max(1));
    let pump = Pump {
        dir: dir.clone(),
        lines,
        poller,
        tx,
        cancel: cancel.clone(),
        status_interval: options.status_interval.max(Duration::from_millis(1)),
        _alive: alive,
    };
    tokio::spawn(pump.run(first));
    RunWatch {
        events: rx,
        cancel,
        dir,
    }
}

/// A live watch of one run: a [`Stream`] of [`RunEvent`]s. Dropping it (or [`RunWatch::close`])
/// stops the tasks behind it.
#[derive(Debug)]
pub struct RunWatch {
    events: mpsc::Receiver<RunEvent>,
    cancel: CancellationToken,
    dir: PathBuf,
}

impl RunWatch {
    /// The next event; `None` once the watch is over (closed) and drained.
    pub async fn next(&mut self) -> Option<RunEvent> {
        self.events.recv().await
    }

    /// The next event if one is ready, without waiting (for a render loop).
    pub fn try_next(&mut self) -> TryNext {
        match self.events.try_recv() {
            Ok(event) => TryNext::Event(event),
            Err(TryRecvError::Empty) => TryNext::Empty,
            Err(TryRecvError::Disconnected) => TryNext::Ended,
        }
    }

    /// The next event, blocking the current thread (for a plain thread, not async code: it
    /// panics inside a runtime). `None` once the watch is over and drained.
    pub fn blocking_next(&mut self) -> Option<RunEvent> {
        self.events.blocking_recv()
    }

    /// Stops the tasks. Events already buffered can still be taken; then the stream ends.
    pub fn close(&mut self) {
        self.cancel.cancel();
        self.events.close();
    }

    /// The watched run folder.
    pub fn run_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RunWatch {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Stream for RunWatch {
    type Item = RunEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        self.get_mut().events.poll_recv(cx)
    }
}

/// A followed file of a run folder, by its path inside the folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    RankLog(usize),
    SupervisorLog,
    Metrics(usize),
    Events,
}

/// Which followed file `rel` (a path inside the run folder) is, if any.
fn classify(rel: &Path) -> Option<FileKind> {
    let parts: Vec<&str> = rel.iter().map(|c| c.to_str()).collect::<Option<Vec<_>>>()?;
    match parts.as_slice() {
        [EVENTS] => Some(FileKind::Events),
        ["logs", "supervisor.log"] => Some(FileKind::SupervisorLog),
        ["logs", name] => rank_of(name, ".log").map(FileKind::RankLog),
        ["metrics", name] => rank_of(name, ".jsonl").map(FileKind::Metrics),
        _ => None,
    }
}

/// R in `rank-R<ext>` (decimal digits only).
fn rank_of(name: &str, ext: &str) -> Option<usize> {
    let digits = name.strip_prefix("rank-")?.strip_suffix(ext)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The event for one line of a followed file; `None` for a blank line of a JSON-lines file.
fn to_event(kind: FileKind, line: FileLine) -> Option<RunEvent> {
    match kind {
        FileKind::RankLog(rank) => Some(RunEvent::Log {
            rank: Some(rank),
            line: line.line,
        }),
        FileKind::SupervisorLog => Some(RunEvent::Log {
            rank: None,
            line: line.line,
        }),
        FileKind::Metrics(_) => parse_line(line, RunEvent::Metric),
        FileKind::Events => parse_line(line, RunEvent::Supervisor),
    }
}

fn parse_line<T: DeserializeOwned>(line: FileLine, wrap: fn(T) -> RunEvent) -> Option<RunEvent> {
    if line.line.trim().is_empty() {
        return None;
    }
    Some(match serde_json::from_str(&line.line) {
        Ok(value) => wrap(value),
        Err(e) => RunEvent::Unparsed {
            path: line.path,
            line: line.line,
            error: e.to_string(),
        },
    })
}

/// Re-reads `run.json` and reports what changed since the last report.
#[derive(Debug)]
struct StatusPoller {
    dir: PathBuf,
    /// The last record reported.
    last: Option<RunRecord>,
    /// The last `run.json` parse error reported (reported again only when it changes).
    last_error: Option<String>,
}

impl StatusPoller {
    fn new(dir: PathBuf) -> Self {
        StatusPoller {
            dir,
            last: None,
            last_error: None,
        }
    }

    /// One read (blocking): a `Status` if the record differs from the last one reported, an
    /// `Unparsed` for a new parse error, else nothing (a missing or unreadable file included:
    /// it is read again next time).
    fn poll(&mut self) -> Option<RunEvent> {
        match Run::load_checked(&self.dir) {
            Ok(run) => {
                self.last_error = None;
                if self.last.as_ref() == Some(&run.record) {
                    return None;
                }
                self.last = Some(run.record.clone());
                Some(RunEvent::Status(run.record))
            }
            Err(Error::Corrupt { path, msg }) => {
                if self.last_error.as_deref() == Some(msg.as_str()) {
                    return None;
                }
                self.last_error = Some(msg.clone());
                Some(RunEvent::Unparsed {
                    path,
                    line: String::new(),
                    error: msg,
                })
            }
            Err(_) => None,
        }
    }
}

/// The owner task of one watch: maps file lines to events and polls `run.json`.
struct Pump {
    dir: PathBuf,
    lines: mpsc::Receiver<FileLine>,
    poller: StatusPoller,
    tx: mpsc::Sender<RunEvent>,
    cancel: CancellationToken,
    status_interval: Duration,
    /// Released when the task ends (tests observe it).
    _alive: Arc<()>,
}

impl Pump {
    /// Sends `first`, then loops until cancelled, the consumer is gone or the file watcher ends;
    /// on the way out it cancels the file watcher's token too.
    async fn run(mut self, first: Vec<RunEvent>) {
        self.forward(first).await;
        self.cancel.cancel();
    }

    async fn forward(&mut self, first: Vec<RunEvent>) {
        for event in first {
            if !self.send(event).await {
                return;
            }
        }
        let start = tokio::time::Instant::now() + self.status_interval;
        let mut tick = tokio::time::interval_at(start, self.status_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            // Biased: the tick before the lines, so a flood of lines cannot starve `Status`.
            let event = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return,
                _ = self.tx.closed() => return,
                _ = tick.tick() => match self.poll_status().await {
                    Some(event) => event,
                    None => continue,
                },
                line = self.lines.recv() => {
                    let Some(line) = line else { return };
                    let kind = line.path.strip_prefix(&self.dir).ok().and_then(classify);
                    match kind.and_then(|kind| to_event(kind, line)) {
                        Some(event) => event,
                        None => continue,
                    }
                }
            };
            if !self.send(event).await {
                return;
            }
        }
    }

    /// Polls `run.json` on the blocking pool (file systems can be slow).
    async fn poll_status(&mut self) -> Option<RunEvent> {
        let mut poller = std::mem::replace(&mut self.poller, StatusPoller::new(self.dir.clone()));
        let polled = tokio::task::spawn_blocking(move || {
            let event = poller.poll();
            (poller, event)
        });
        let (poller, event) = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return None,
            done = polled => done.ok()?,
        };
        self.poller = poller;
        event
    }

    /// Sends one event; `false` when the watch is over.
    async fn send(&self, event: RunEvent) -> bool {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => false,
            sent = self.tx.send(event) => sent.is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricKind;
    use crate::run::{RunStatus, SupervisorEvent};
    use crate::watch::tests::{latency_summary, paced_writers};
    use std::collections::BTreeMap;
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

    fn record(id: &str) -> RunRecord {
        RunRecord {
            id: id.into(),
            experiment: "mnist".into(),
            name: None,
            sweep: None,
            status: RunStatus::Running,
            spec_hash: "h".into(),
            command: vec!["ddp".into(), "run".into()],
            host: "h".into(),
            replicas: 2,
            devices: "cpu".into(),
            supervisor: None,
            replica_pids: BTreeMap::new(),
            created: 1.0,
            started: Some(2.0),
            ended: None,
            exit_codes: BTreeMap::new(),
            restarts: 0,
            trainer: None,
            error: None,
        }
    }

    /// A run folder with `run.json` (status running) and a `logs/` folder.
    fn run_folder() -> (tempfile::TempDir, Run, Workspace) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("experiments/mnist/runs/r1");
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let run = Run {
            dir,
            record: record("r1"),
        };
        run.save().unwrap();
        let ws = Workspace {
            root: tmp.path().to_path_buf(),
        };
        (tmp, run, ws)
    }

    fn metric(rank: usize, step: u64) -> MetricRecord {
        MetricRecord {
            time: 10.0 + step as f64,
            rank,
            kind: MetricKind::Train,
            epoch: 1,
            step,
            loss: 2.5 - step as f64 / 100.0,
            accuracy: None,
            lr: 0.001,
            samples_per_sec: 100.0,
            samples: Some(32),
            world_size: 2,
        }
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

    /// Latency from `write` to the `RunEvent::Log` being delivered, at 10,000 lines/s spread
    /// over 8 ranks' log files, printed as p50/p99/max.
    async fn latency_benchmark(use_notify: bool) {
        const RANKS: usize = 8;
        const RATE_PER_RANK: u64 = 1250;
        const SECONDS: u64 = 5;
        let (_tmp, run, ws) = run_folder();
        let options = RunWatchOptions {
            files: WatchOptions {
                use_notify,
                ..WatchOptions::default()
            },
            ..RunWatchOptions::default()
        };
        let mut watch = ws.watch_with(&run, WatchFrom::Now, options);
        next(&mut watch).await;
        let base = Instant::now();
        let paths = (0..RANKS).map(|rank| run.log_path(rank)).collect();
        let writers = paced_writers(paths, RATE_PER_RANK, SECONDS, base, |seq, nanos| {
            format!("seq {seq} t {nanos} epoch 1 step {seq} loss 2.3\n")
        });
        let expected = RANKS * (RATE_PER_RANK * SECONDS) as usize;
        let mut latencies = Vec::with_capacity(expected);
        let mut next_seq = [0u128; RANKS];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(SECONDS + 10);
        while latencies.len() < expected {
            let got = tokio::time::timeout_at(deadline, watch.next()).await;
            let Ok(Some(event)) = got else {
                panic!("got {} of {expected} lines", latencies.len());
            };
            let now = base.elapsed().as_nanos();
            let RunEvent::Log {
                rank: Some(rank),
                line,
            } = event
            else {
                continue; // a status change
            };
            let fields: Vec<u128> = line.split(' ').filter_map(|s| s.parse().ok()).collect();
            assert_eq!(fields[0], next_seq[rank], "out of order for rank {rank}");
            next_seq[rank] += 1;
            latencies.push((now - fields[1]) as f64 / 1e6);
        }
        for w in writers {
            w.join().unwrap();
        }
        println!(
            "RunEvent latency (notify: {use_notify}), {expected} lines over {RANKS} rank logs in \
             {SECONDS} s: {}",
            latency_summary(&mut latencies)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark: cargo test -p ddp-workspaces --lib -- --ignored --nocapture run_event_latency"]
    async fn run_event_latency_notify() {
        latency_benchmark(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark: cargo test -p ddp-workspaces --lib -- --ignored --nocapture run_event_latency"]
    async fn run_event_latency_polling() {
        latency_benchmark(false).await;
    }
}
