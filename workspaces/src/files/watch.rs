//! Following every file under a folder live: each line once, in order, promptly.
//!
//! [`watch_dir`] returns a channel of [`FileLine`]s fed by one background task. The task owns a
//! [`LineTailer`] per file (files and subfolders that appear later included) and a `notify`
//! watcher whose events only *wake* it; what is delivered is always decided by reading the files
//! from the tailers' offsets, so a lost, merged or late event can delay a line but never lose or
//! repeat one. A periodic rescan (every [`WatchOptions::rescan_interval`]) is the safety net;
//! when no `notify` watch can be set up (e.g. inotify limits, folder missing) the task polls every
//! [`WatchOptions::poll_interval`] instead and keeps retrying the watch while the folder is missing.
//!
//! Layout:
//! - [`FileLine`], [`WatchOptions`], [`watch_dir`] / [`watch_dir_with`] / [`watch_dir_starting`]:
//!   the API.
//! - `Files`: the tailers and the folder walk (blocking, run on tokio's blocking pool).
//! - `Waker`: the `notify` watcher feeding a `tokio::sync::Notify` and a "rescan" flag.
//! - `run`: the task loop (read, send, then wait for an event, the next rescan time,
//!   cancellation or a dropped receiver).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use notify::event::{EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::files::tail::{DEFAULT_MAX_LINE, LineTailer, TailFrom};

/// One complete line of a followed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLine {
    /// The file's path: `dir` joined with its path inside `dir`.
    pub path: PathBuf,
    /// The line without its '\n' / "\r\n" (invalid UTF-8 replaced).
    pub line: String,
}

/// Tuning of [`watch_dir_with`]; the defaults suit run folders.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Period of the safety-net rescan (folder walk + read every file) while `notify` works.
    pub rescan_interval: Duration,
    /// Period of the rescan when no `notify` watch is active (pure polling).
    pub poll_interval: Duration,
    /// Use `notify` at all (`false`: pure polling, e.g. on network file systems).
    pub use_notify: bool,
    /// Lines buffered in the channel before the task waits for the consumer.
    pub channel_capacity: usize,
    /// Bytes read from one file per round, so a huge backlog is delivered in bounded pieces.
    pub read_per_file: usize,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            rescan_interval: Duration::from_millis(250),
            poll_interval: Duration::from_millis(50),
            use_notify: true,
            channel_capacity: 4096,
            read_per_file: 1024 * 1024,
        }
    }
}

/// Follows every file under `dir` (recursively, including files and subfolders created later)
/// whose full path passes `filter`, with [`WatchOptions::default`]. See [`watch_dir_with`].
pub fn watch_dir(
    dir: PathBuf,
    filter: impl Fn(&Path) -> bool + Send + 'static,
    from: TailFrom,
    cancel: CancellationToken,
) -> mpsc::Receiver<FileLine> {
    watch_dir_with(dir, filter, from, cancel, WatchOptions::default())
}

/// Follows every file under `dir` whose full path passes `filter`, and sends each complete line
/// once, in file order per file, to the returned receiver.
///
/// `from` applies to the files present now (their positions are recorded before this returns,
/// by a short blocking walk of `dir`); files that appear later are read from their start. `dir` itself may not exist yet. Must be
/// called inside a tokio runtime. The background task ends (and drops its `notify` watcher)
/// when `cancel` is cancelled or the receiver is dropped; the receiver then yields `None`.
/// A file that cannot be read (e.g. permissions) is retried on every round, silently.
pub fn watch_dir_with(
    dir: PathBuf,
    filter: impl Fn(&Path) -> bool + Send + 'static,
    from: TailFrom,
    cancel: CancellationToken,
    options: WatchOptions,
) -> mpsc::Receiver<FileLine> {
    watch_dir_starting(dir, filter, move |_| from, cancel, options)
}

/// [`watch_dir_with`] where each file present now starts where `start` says for its path (e.g.
/// the last lines of logs but the whole of metric files); files that appear later are read from
/// their start.
pub fn watch_dir_starting(
    dir: PathBuf,
    filter: impl Fn(&Path) -> bool + Send + 'static,
    start: impl Fn(&Path) -> TailFrom,
    cancel: CancellationToken,
    options: WatchOptions,
) -> mpsc::Receiver<FileLine> {
    let (tx, rx) = mpsc::channel(options.channel_capacity.max(1));
    // Watch before the first walk: a file created in between is found by the walk or an event.
    let waker = Waker::new(&dir, options.use_notify);
    let mut files = Files {
        dir,
        filter: Box::new(filter),
        tailers: BTreeMap::new(),
        gone: BTreeSet::new(),
        read_per_file: options.read_per_file.max(1),
    };
    files.rescan(&start);
    tokio::spawn(run(files, waker, tx, cancel, options));
    rx
}

/// The task: each round reads every file (on the blocking pool) and sends the lines, then it
/// waits for a `notify` event, the next rescan time, cancellation or a dropped receiver.
async fn run(
    mut files: Files,
    mut waker: Waker,
    tx: mpsc::Sender<FileLine>,
    cancel: CancellationToken,
    options: WatchOptions,
) {
    // `watch_dir_with` has just walked the folder.
    let mut last_full = Instant::now();
    'rounds: loop {
        if cancel.is_cancelled() || tx.is_closed() {
            break;
        }
        // Time-based, not a tick raced against events: a steady flood of events or a backlog
        // (rounds without waiting) must not starve the safety-net rescan.
        let period = rescan_period(waker.active(), &options);
        let full = waker.rescan.swap(false, Ordering::AcqRel) || last_full.elapsed() >= period;
        if full {
            last_full = Instant::now();
        }
        let round = tokio::task::spawn_blocking(move || {
            if full {
                files.rescan(&|_| TailFrom::Start);
            }
            let (lines, caught_up) = files.poll_all();
            (files, lines, caught_up)
        });
        let (lines, caught_up);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            done = round => match done {
                Ok((f, l, c)) => (files, lines, caught_up) = (f, l, c),
                // A panic while reading: end the stream rather than spin on it.
                Err(_) => break,
            },
        }
        for line in lines {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break 'rounds,
                sent = tx.send(line) => if sent.is_err() { break 'rounds },
            }
        }
        if !caught_up {
            continue; // a backlog bigger than one round: keep reading without waiting
        }
        if full {
            waker.retry(&files.dir);
        }
        let next_full = last_full + rescan_period(waker.active(), &options);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            _ = tx.closed() => break,
            _ = tokio::time::sleep_until(next_full.into()) => {}
            _ = waker.wake.notified() => {}
        }
    }
    // Stop the notify watcher before the receiver can observe the end of the stream.
    drop(waker);
    drop(tx);
}

/// The period of the full rescan: the safety net with `notify`, the only trigger without it.
fn rescan_period(notify_active: bool, options: &WatchOptions) -> Duration {
    let period = if notify_active {
        options.rescan_interval
    } else {
        options.poll_interval
    };
    period.max(Duration::from_millis(1))
}

/// The followed files of one watch.
struct Files {
    dir: PathBuf,
    filter: Box<dyn Fn(&Path) -> bool + Send>,
    tailers: BTreeMap<PathBuf, LineTailer>,
    /// Tailers whose path has disappeared: dropped once drained (a file recreated at that path
    /// later gets a new tailer reading it from its start).
    gone: BTreeSet<PathBuf>,
    read_per_file: usize,
}

impl Files {
    /// Walks `dir` and adds a tailer (starting where `start` says) for each new file passing the
    /// filter.
    fn rescan(&mut self, start: &dyn Fn(&Path) -> TailFrom) {
        let mut found = BTreeSet::new();
        walk(&self.dir, &*self.filter, &mut found);
        for path in &found {
            if !self.tailers.contains_key(path) {
                let tailer = LineTailer::new(path.clone(), start(path))
                    .with_limits(self.read_per_file, DEFAULT_MAX_LINE);
                self.tailers.insert(path.clone(), tailer);
            }
        }
        // Not found by the walk is not proof (a folder may have failed to list): check the path.
        for path in self.tailers.keys() {
            if !found.contains(path) && matches!(path.try_exists(), Ok(false)) {
                self.gone.insert(path.clone());
            }
        }
    }

    /// One round: the new complete lines of every file, and whether every file was read to its
    /// end. A file that fails to read is retried next round.
    fn poll_all(&mut self) -> (Vec<FileLine>, bool) {
        let mut out = Vec::new();
        let mut caught_up = true;
        for (path, tailer) in &mut self.tailers {
            match tailer.poll() {
                Ok(lines) => out.extend(lines.into_iter().map(|line| FileLine {
                    path: path.clone(),
                    line,
                })),
                Err(_) => continue,
            }
            caught_up &= tailer.caught_up();
        }
        // Drop drained tailers of deleted files, checking again after the poll: a file
        // recreated before it has been read by the old tailer, so that tailer must stay.
        let gone = std::mem::take(&mut self.gone);
        for path in gone {
            let drained = self.tailers.get(&path).is_none_or(|t| t.caught_up());
            if drained && matches!(path.try_exists(), Ok(false)) {
                self.tailers.remove(&path);
            } else if !drained {
                self.gone.insert(path);
            }
        }
        (out, caught_up)
    }
}

/// Adds every file under `dir` (recursively; symlinked folders are not entered) passing `filter`.
fn walk(dir: &Path, filter: &dyn Fn(&Path) -> bool, found: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&path, filter, found);
        } else if (kind.is_file() || (kind.is_symlink() && path.is_file())) && filter(&path) {
            found.insert(path);
        }
    }
}

/// The `notify` side: events wake the task and flag a rescan when the folder tree changed.
struct Waker {
    wake: Arc<Notify>,
    rescan: Arc<AtomicBool>,
    /// `None` when notify is disabled or its watcher could not be created (pure polling).
    watcher: Option<RecommendedWatcher>,
    /// Whether `watcher` watches `dir`.
    watching: bool,
}

impl Waker {
    fn new(dir: &Path, use_notify: bool) -> Self {
        let wake = Arc::new(Notify::new());
        let rescan = Arc::new(AtomicBool::new(false));
        let watcher = if use_notify {
            let (wake, rescan) = (wake.clone(), rescan.clone());
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let structural = match &event {
                    // Opens and closes (ours included) say nothing about new data.
                    Ok(event) if matches!(event.kind, EventKind::Access(_)) => return,
                    Ok(event) => {
                        event.need_rescan()
                            || !matches!(
                                event.kind,
                                EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Metadata(_))
                            )
                    }
                    Err(_) => true,
                };
                if structural {
                    rescan.store(true, Ordering::Release);
                }
                wake.notify_one();
            })
            .ok()
        } else {
            None
        };
        let mut waker = Waker {
            wake,
            rescan,
            watcher,
            watching: false,
        };
        waker.retry(dir);
        waker
    }

    fn active(&self) -> bool {
        self.watching
    }

    /// Starts watching `dir` if there is a watcher, it is not watching yet and `dir` exists (a
    /// watch that failed on an existing folder, e.g. inotify limits, is not retried: polling).
    fn retry(&mut self, dir: &Path) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        if self.watching || !dir.is_dir() {
            return;
        }
        match watcher.watch(dir, RecursiveMode::Recursive) {
            Ok(()) => {
                self.watching = true;
                // Files may have appeared before the watch: walk again on the next round.
                self.rescan.store(true, Ordering::Release);
            }
            Err(_) => self.watcher = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs::OpenOptions;
    use std::io::Write;

    const DEADLINE: Duration = Duration::from_secs(4);

    fn append(path: &Path, text: &str) {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Receives until `n` lines arrived (panics after `DEADLINE`), then checks that nothing more
    /// arrives for a little longer than a rescan period (no duplicates).
    async fn collect(rx: &mut mpsc::Receiver<FileLine>, n: usize) -> Vec<FileLine> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while got.len() < n {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(line)) => got.push(line),
                Ok(None) => panic!("stream ended after {} of {n} lines: {got:?}", got.len()),
                Err(_) => panic!("timed out after {} of {n} lines: {got:?}", got.len()),
            }
        }
        let extra = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
        assert!(extra.is_err(), "unexpected extra line: {extra:?}");
        got
    }

    fn lines_of<'a>(got: &'a [FileLine], path: &Path) -> Vec<&'a str> {
        got.iter()
            .filter(|l| l.path == path)
            .map(|l| l.line.as_str())
            .collect()
    }

    fn numbered(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix} {i}")).collect()
    }

    fn run_folder() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::create_dir(dir.path().join("metrics")).unwrap();
        let log = dir.path().join("logs/rank-0.log");
        let metrics = dir.path().join("metrics/rank-0.jsonl");
        (dir, log, metrics)
    }

    #[tokio::test]
    async fn new_lines_arrive_once_in_order_and_history_is_skipped_with_end() {
        let (dir, log, metrics) = run_folder();
        append(&log, "old log\n");
        append(&metrics, "{\"old\":1}\n");
        let cancel = CancellationToken::new();
        let mut rx = watch_dir(dir.path().into(), |_| true, TailFrom::End, cancel.clone());
        let logs = numbered("log", 300);
        let metric_lines = numbered("metric", 300);
        for (l, m) in logs.iter().zip(&metric_lines) {
            append(&log, &format!("{l}\n"));
            append(&metrics, &format!("{m}\n"));
        }
        let got = collect(&mut rx, 600).await;
        assert_eq!(lines_of(&got, &log), logs);
        assert_eq!(lines_of(&got, &metrics), metric_lines);
        cancel.cancel();
    }

    #[tokio::test]
    async fn start_gives_history_and_partial_lines_wait_for_newline() {
        let (dir, log, _) = run_folder();
        append(&log, "h1\nh2\n");
        let cancel = CancellationToken::new();
        let mut rx = watch_dir(dir.path().into(), |_| true, TailFrom::Start, cancel.clone());
        append(&log, "live 1\nlive");
        let got = collect(&mut rx, 3).await;
        assert_eq!(lines_of(&got, &log), ["h1", "h2", "live 1"]);
        append(&log, " 2\r\n");
        let got = collect(&mut rx, 1).await;
        assert_eq!(lines_of(&got, &log), ["live 2"]);
        cancel.cancel();
    }

    #[tokio::test]
    async fn two_watchers_each_get_every_line() {
        let (dir, log, metrics) = run_folder();
        let cancel = CancellationToken::new();
        let mut a = watch_dir(dir.path().into(), |_| true, TailFrom::End, cancel.clone());
        let mut b = watch_dir(dir.path().into(), |_| true, TailFrom::Start, cancel.clone());
        let logs = numbered("log", 200);
        for l in &logs {
            append(&log, &format!("{l}\n"));
            append(&metrics, &format!("m {l}\n"));
        }
        let (got_a, got_b) = tokio::join!(collect(&mut a, 400), collect(&mut b, 400));
        for got in [&got_a, &got_b] {
            assert_eq!(lines_of(got, &log), logs);
            assert_eq!(lines_of(got, &metrics).len(), 200);
        }
        cancel.cancel();
    }

    #[tokio::test]
    async fn later_files_and_subfolders_are_read_from_their_start() {
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let mut rx = watch_dir(dir.path().into(), |_| true, TailFrom::End, cancel.clone());
        let top = dir.path().join("events.jsonl");
        append(&top, "e1\n");
        std::fs::create_dir_all(dir.path().join("metrics/deep")).unwrap();
        let deep = dir.path().join("metrics/deep/rank-3.jsonl");
        append(&deep, "d1\nd2\n");
        let got = collect(&mut rx, 3).await;
        assert_eq!(lines_of(&got, &top), ["e1"]);
        assert_eq!(lines_of(&got, &deep), ["d1", "d2"]);
        append(&deep, "d3\n");
        let got = collect(&mut rx, 1).await;
        assert_eq!(lines_of(&got, &deep), ["d3"]);
        cancel.cancel();
    }

    #[tokio::test]
    async fn missing_folder_is_followed_once_it_appears() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("runs/r1");
        let cancel = CancellationToken::new();
        let mut rx = watch_dir(dir.clone(), |_| true, TailFrom::End, cancel.clone());
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let log = dir.join("logs/supervisor.log");
        append(&log, "up\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &log), ["up"]);
        append(&log, "again\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &log), ["again"]);
        cancel.cancel();
    }

    #[tokio::test]
    async fn filter_selects_files() {
        let (dir, log, metrics) = run_folder();
        let cancel = CancellationToken::new();
        let only_metrics = |p: &Path| p.extension().is_some_and(|e| e == "jsonl");
        let mut rx = watch_dir(
            dir.path().into(),
            only_metrics,
            TailFrom::End,
            cancel.clone(),
        );
        append(&log, "not me\n");
        append(&metrics, "me\n");
        let got = collect(&mut rx, 1).await;
        assert_eq!(got[0].path, metrics);
        assert_eq!(got[0].line, "me");
        cancel.cancel();
    }

    #[tokio::test]
    async fn truncation_and_replacement_restart_the_file() {
        let (dir, log, _) = run_folder();
        append(&log, "a long first line\n");
        let cancel = CancellationToken::new();
        let mut rx = watch_dir(dir.path().into(), |_| true, TailFrom::Start, cancel.clone());
        assert_eq!(
            lines_of(&collect(&mut rx, 1).await, &log),
            ["a long first line"]
        );
        OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(0)
            .unwrap();
        append(&log, "short\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &log), ["short"]);
        // Atomic replacement, as for run.json.
        let tmp = dir.path().join("tmp-new");
        append(&tmp, "replaced 1\nreplaced 2, a longer line\n");
        std::fs::rename(&tmp, &log).unwrap();
        let got = collect(&mut rx, 2).await;
        assert_eq!(
            lines_of(&got, &log),
            ["replaced 1", "replaced 2, a longer line"]
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn pure_polling_without_notify_delivers_everything() {
        let (dir, log, _) = run_folder();
        let cancel = CancellationToken::new();
        let options = WatchOptions {
            use_notify: false,
            ..WatchOptions::default()
        };
        let mut rx = watch_dir_with(
            dir.path().into(),
            |_| true,
            TailFrom::End,
            cancel.clone(),
            options,
        );
        let logs = numbered("poll", 100);
        for l in &logs {
            append(&log, &format!("{l}\n"));
        }
        std::fs::create_dir(dir.path().join("later")).unwrap();
        let later = dir.path().join("later/x.log");
        append(&later, "x\n");
        let got = collect(&mut rx, 101).await;
        assert_eq!(lines_of(&got, &log), logs);
        assert_eq!(lines_of(&got, &later), ["x"]);
        cancel.cancel();
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn notify_alone_wakes_for_data_new_files_and_new_folders() {
        let (dir, log, _) = run_folder();
        let cancel = CancellationToken::new();
        // No safety-net rescan during the test: only inotify events can trigger a round.
        let options = WatchOptions {
            rescan_interval: Duration::from_secs(3600),
            ..WatchOptions::default()
        };
        let mut rx = watch_dir_with(
            dir.path().into(),
            |_| true,
            TailFrom::End,
            cancel.clone(),
            options,
        );
        append(&log, "data\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &log), ["data"]);
        let new_file = dir.path().join("events.jsonl");
        append(&new_file, "created\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &new_file), ["created"]);
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        let nested = dir.path().join("a/b/c.log");
        append(&nested, "nested\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &nested), ["nested"]);
        append(&nested, "nested again\n");
        assert_eq!(
            lines_of(&collect(&mut rx, 1).await, &nested),
            ["nested again"]
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn backlog_larger_than_one_round_is_delivered_in_order() {
        let (dir, log, _) = run_folder();
        let text: String = (0..5000).map(|i| format!("backlog line {i}\n")).collect();
        append(&log, &text);
        let cancel = CancellationToken::new();
        let options = WatchOptions {
            read_per_file: 1000,
            channel_capacity: 16,
            ..WatchOptions::default()
        };
        let mut rx = watch_dir_with(
            dir.path().into(),
            |_| true,
            TailFrom::Start,
            cancel.clone(),
            options,
        );
        let got = collect(&mut rx, 5000).await;
        assert_eq!(lines_of(&got, &log), numbered("backlog line", 5000));
        cancel.cancel();
    }

    /// Waits until the task has dropped its filter (so the task, and its watcher, are gone).
    async fn wait_until_dropped(alive: &Arc<()>) {
        let start = Instant::now();
        while Arc::strong_count(alive) > 1 {
            assert!(start.elapsed() < DEADLINE, "watch task still alive");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn cancel_ends_the_stream_and_the_task() {
        let (dir, log, _) = run_folder();
        let cancel = CancellationToken::new();
        let alive = Arc::new(());
        let held = alive.clone();
        let filter = move |_: &Path| {
            let _ = &held;
            true
        };
        let mut rx = watch_dir(dir.path().into(), filter, TailFrom::End, cancel.clone());
        append(&log, "before\n");
        assert_eq!(lines_of(&collect(&mut rx, 1).await, &log), ["before"]);
        cancel.cancel();
        let end = tokio::time::timeout(DEADLINE, rx.recv()).await;
        assert_eq!(end, Ok(None));
        wait_until_dropped(&alive).await;
    }

    #[tokio::test]
    async fn dropping_the_receiver_ends_the_task() {
        let (dir, log, _) = run_folder();
        let alive = Arc::new(());
        let held = alive.clone();
        let filter = move |_: &Path| {
            let _ = &held;
            true
        };
        let rx = watch_dir(
            dir.path().into(),
            filter,
            TailFrom::End,
            CancellationToken::new(),
        );
        append(&log, "x\n");
        drop(rx);
        wait_until_dropped(&alive).await;
    }
}
