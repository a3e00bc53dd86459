//! Following one run live as typed events: log lines by rank, metric records, status changes and
//! supervisor events, from the run folder alone (any process may be the one writing it).
//!
//! [`Workspace::watch`] returns a [`RunWatch`]: a [`Stream`] of [`RunEvent`]s that also offers
//! `next().await`, [`RunWatch::try_next`] (non-blocking, for a render loop) and
//! [`RunWatch::blocking_next`] (for a plain thread). Behind it, one [`crate::files::watch::watch_dir`]
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
//! - the stream does not end when the run does (a stopped, failed or paused run can be resumed, and the
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
//! - `blocking`: [`blocking::BlockingRunWatch`], the same watch for plain code (`ddp run`, `ddp logs -f`).
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

use crate::files::tail::TailFrom;
use crate::files::watch::{FileLine, WatchOptions, watch_dir_starting};
use crate::metrics::MetricRecord;
use crate::runs::run::{EVENTS, EventRecord, Run, RunRecord};
use crate::{Error, Workspace};

pub mod blocking;

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
mod tests;
