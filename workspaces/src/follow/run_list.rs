//! Following the whole run list of a workspace live: runs that appear (created by any front end),
//! change (status, tags, metrics) or disappear, as typed events, from the run folders alone.
//!
//! [`Workspace::watch_runs`] returns a [`RunListWatch`]: its first event is always a
//! [`RunListEvent::Snapshot`] of every run (newest first: records, tags, `train.epochs`), then
//! one [`RunListEvent::Changed`] per run whose metric digest the snapshot does not have (newest
//! first; deferred so that a workspace of thousands of runs is listed at once), then one event
//! per change. Behind it
//! one thread (the watch's owner: dropping the watch stops it) keeps, per run folder, the
//! `run.json` and `tags` it last read and a [`LineTailer`] on rank 0's metrics folded into a
//! [`MetricDigest`], and re-reads only what changed:
//! - `notify` watches (not recursive) on `experiments/`, each `experiments/<exp>/runs/` and each
//!   run folder wake it at once when a run is created, removed or its `run.json`/`tags` replaced;
//! - live runs (not terminal) are re-checked every [`RunListOptions::live_interval`] (their
//!   metrics grow in a subfolder no watch covers; their supervisor may die);
//! - a full rescan every [`RunListOptions::rescan_interval`] is the safety net (and the only
//!   trigger where no `notify` watch can be set up: then every `live_interval`).
//!
//! A `run.json` that does not parse is a [`RunListEvent::Unreadable`] (never fatal; the folder
//! is retried and comes back as `Changed` once it reads again); a metric line that does not parse
//! is counted in [`MetricDigest::bad_lines`] and named in [`RunEntry::warnings`]. Like
//! [`crate::Run::load_checked`], a live run whose supervisor is gone is marked failed on disk.
//!
//! The first snapshot comes from the run index ([`crate::index`]) where it holds runs: brought
//! up to date with the folders that changed, with the digests of finished runs, each folder then
//! tracked as the index read it (the scan that follows reports only what changed since, and
//! reads only live runs' metrics). Else it comes from reading every folder, and the index is
//! built beside it for the next start.
//!
//! Layout:
//! - [`RunEntry`], [`MetricDigest`] (re-exported from `crate::index::entry`): what a list shows per run.
//! - [`RunListEvent`], [`RunListOptions`], [`RunListWatch`]: the API.
//! - `Tracked`, `Scanner`: per-folder state and the rounds (blocking, on the owner thread).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use crate::metrics::metrics_path;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use crate::Workspace;
use crate::files::tail::{LineTailer, TailFrom};
use crate::index::Index;
use crate::runs::plan::Plan;
use crate::runs::run::{RUN_JSON, Run, SPEC, TAGS};
use crate::runs::workspace::Unreadable;

use crate::index::entry::fold_metrics;
pub use crate::index::entry::{MetricDigest, RECENT_LOSSES, RunEntry};

/// One change of the run list.
// `Snapshot` is large but sent once; boxing would only add a hop for every reader.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum RunListEvent {
    /// Every run (newest first) and every unreadable run folder, as of the first scan: always the
    /// first event. The entries' metric digests are empty: each run with metrics follows as a
    /// `Changed` event right after.
    Snapshot {
        entries: Vec<RunEntry>,
        unreadable: Vec<Unreadable>,
    },
    /// A run appeared, or something shown about it changed.
    Changed(RunEntry),
    /// A run folder (listed or unreadable before) no longer exists.
    Removed { dir: PathBuf },
    /// A run folder whose `run.json` cannot be read (newly created half-way, or corrupt).
    Unreadable(Unreadable),
}

/// Tuning of [`Workspace::watch_runs_with`]; the defaults suit a dashboard.
#[derive(Debug, Clone)]
pub struct RunListOptions {
    /// How often live runs (metrics, supervisor liveness) are re-checked.
    pub live_interval: Duration,
    /// Period of the full rescan while `notify` works.
    pub rescan_interval: Duration,
    /// Use `notify` at all (`false`: full rescans every `live_interval`).
    pub use_notify: bool,
}

impl Default for RunListOptions {
    fn default() -> Self {
        RunListOptions {
            live_interval: Duration::from_millis(100),
            rescan_interval: Duration::from_secs(5),
            use_notify: true,
        }
    }
}

impl Workspace {
    /// Follows the run list with [`RunListOptions::default`]. See [`Workspace::watch_runs_with`].
    pub fn watch_runs(&self) -> RunListWatch {
        self.watch_runs_with(RunListOptions::default())
    }

    /// Follows the run list of this workspace (see the module docs). The workspace folder need
    /// not exist yet: the snapshot is then empty and runs appear once it is created. Needs no
    /// async runtime: the events can be taken with [`RunListWatch::blocking_next`],
    /// [`RunListWatch::try_next`] or, inside tokio, [`RunListWatch::next`].
    pub fn watch_runs_with(&self, options: RunListOptions) -> RunListWatch {
        let (tx, rx) = mpsc::channel(1024);
        let stop = Arc::new(AtomicBool::new(false));
        let root = self.root.clone();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("ddp-run-list".into())
                .spawn(move || Scanner::new(root, options).run(tx, stop))
                .expect("the OS can start a thread")
        };
        RunListWatch {
            events: rx,
            stop,
            thread: Some(thread),
        }
    }
}

/// A live watch of a workspace's run list. Dropping it stops (and joins) its thread.
#[derive(Debug)]
pub struct RunListWatch {
    events: mpsc::Receiver<RunListEvent>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunListWatch {
    /// The next event; `None` once the watch has ended.
    pub async fn next(&mut self) -> Option<RunListEvent> {
        self.events.recv().await
    }

    /// The next event if one is ready (`Ok(None)`: nothing now; `Err(())`: the watch ended).
    #[allow(clippy::result_unit_err)]
    pub fn try_next(&mut self) -> Result<Option<RunListEvent>, ()> {
        match self.events.try_recv() {
            Ok(e) => Ok(Some(e)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(()),
        }
    }

    /// The next event, blocking this thread (not inside an async runtime); `None` once ended.
    pub fn blocking_next(&mut self) -> Option<RunListEvent> {
        self.events.blocking_recv()
    }

    /// The next event within `timeout`, blocking this thread (for tests and simple tools).
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<RunListEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.try_next() {
                Ok(Some(e)) => return Some(e),
                Err(()) => return None,
                Ok(None) if Instant::now() >= deadline => return None,
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

impl Drop for RunListWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.events.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What identifies a version of a file: modification time, length, inode.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// [`stamp`] of metadata already looked up (by [`Index::refresh_seeing`]): the same value.
fn stamp_of(st: Option<&libc::stat>) -> Stamp {
    let st = st?;
    let modified = std::time::UNIX_EPOCH
        + Duration::new(u64::try_from(st.st_mtime).ok()?, st.st_mtime_nsec as u32);
    Some((modified, st.st_size as u64, st.st_ino))
}

/// One run folder as last read.
struct Tracked {
    run_json: Stamp,
    tags: Stamp,
    /// Rank 0's metrics, followed while the run is live; closed once a finished run's file has
    /// been read (a workspace of thousands of runs must not hold a file open per run), opened
    /// again from the start if the run is resumed.
    metrics: Option<LineTailer>,
    /// Whether the metrics were read since the run was last seen live (or first seen).
    metrics_read: bool,
    /// The entry last sent (`None` while `run.json` is unreadable).
    entry: Option<RunEntry>,
    /// The last error sent for an unreadable `run.json`.
    unreadable: Option<String>,
}

/// The owner thread's state.
struct Scanner {
    root: PathBuf,
    options: RunListOptions,
    tracked: BTreeMap<PathBuf, Tracked>,
    /// Folders `notify` reported something in since the last round.
    dirty: BTreeSet<PathBuf>,
    watcher: Option<RecommendedWatcher>,
    watched: BTreeSet<PathBuf>,
    events: std_mpsc::Receiver<PathBuf>,
    /// The first scan leaves the metrics for after the snapshot.
    defer_metrics: bool,
}

impl Scanner {
    fn new(root: PathBuf, options: RunListOptions) -> Scanner {
        let (tx, events) = std_mpsc::channel();
        let watcher = if options.use_notify {
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if let Ok(event) = event {
                    if matches!(event.kind, notify::EventKind::Access(_)) {
                        return;
                    }
                    for p in event.paths {
                        let _ = tx.send(p);
                    }
                } else {
                    let _ = tx.send(PathBuf::new());
                }
            })
            .ok()
        } else {
            None
        };
        Scanner {
            root,
            options,
            tracked: BTreeMap::new(),
            dirty: BTreeSet::new(),
            watcher,
            watched: BTreeSet::new(),
            events,
            defer_metrics: false,
        }
    }

    /// The first snapshot from the run index, brought up to date with the folders that changed
    /// (records, tags, plans and the metric digests of finished runs), each folder then tracked as read
    /// with the stamps taken before the refresh (a change after them is seen by the next
    /// check): `None` where the index holds no run (never built: reading the folders is faster
    /// than building it) or cannot be read.
    fn snapshot_from_index(&mut self) -> Option<RunListEvent> {
        let mut index = Index::open_or_memory(&self.root);
        if index.is_empty().ok()? {
            return None;
        }
        let ws = Workspace {
            root: self.root.clone(),
        };
        // Each folder's stamps as the refresh looks them up, before it reads anything.
        let mut stamps: HashMap<OsString, (Stamp, Stamp)> = HashMap::new();
        let refreshed = index
            .refresh_seeing(&ws, |dir, [run_json, tags]| {
                let s = (stamp_of(run_json), stamp_of(tags));
                stamps.insert(dir.as_os_str().to_owned(), s);
            })
            .ok()?;
        let runs = index.all().ok()?;
        let mut entries = Vec::with_capacity(runs.len());
        for r in runs {
            let (metrics, warnings) = r.digest();
            let entry = RunEntry {
                epochs_total: r.plan.epochs,
                steps_total: r.plan.steps,
                tags: r.tags,
                metrics,
                warnings,
                run: r.run,
            };
            if let Some((run_json, tags)) = stamps.remove(entry.run.dir.as_os_str()) {
                let tracked = Tracked {
                    run_json,
                    tags,
                    metrics: None,
                    // A finished run's digest is the index's; a live one's is read again.
                    metrics_read: entry.run.record.status.is_terminal(),
                    entry: Some(entry.clone()),
                    unreadable: None,
                };
                self.tracked.insert(entry.run.dir.clone(), tracked);
            }
            entries.push(entry);
        }
        Some(RunListEvent::Snapshot {
            entries,
            unreadable: refreshed.unreadable,
        })
    }

    fn experiments(&self) -> PathBuf {
        self.root.join("experiments")
    }

    fn run(mut self, tx: mpsc::Sender<RunListEvent>, stop: Arc<AtomicBool>) {
        let mut out = Vec::new();
        // The snapshot from the run index where it holds runs (the folders then seeded as
        // read: the scan below re-reads only those changed since); else from the folders.
        let indexed = match self.snapshot_from_index() {
            Some(snapshot) => {
                if tx.blocking_send(snapshot).is_err() {
                    return;
                }
                true
            }
            None => false,
        };
        self.defer_metrics = true;
        self.full_scan(&mut out);
        self.defer_metrics = false;
        if indexed {
            for event in out.drain(..) {
                if tx.blocking_send(event).is_err() {
                    return;
                }
            }
        } else {
            let mut entries = Vec::new();
            let mut unreadable = Vec::new();
            for event in out.drain(..) {
                match event {
                    RunListEvent::Changed(e) => entries.push(e),
                    RunListEvent::Unreadable(u) => unreadable.push(u),
                    RunListEvent::Removed { .. } | RunListEvent::Snapshot { .. } => {}
                }
            }
            entries.sort_by(|a, b| b.run.record.id.cmp(&a.run.record.id));
            let snapshot = RunListEvent::Snapshot {
                entries,
                unreadable,
            };
            if tx.blocking_send(snapshot).is_err() {
                return;
            }
            // No index yet: build it beside the list, for the next look.
            let root = self.root.clone();
            std::thread::spawn(move || {
                let ws = Workspace { root };
                let _ = Index::open(&ws.root).and_then(|mut i| i.refresh(&ws));
            });
        }
        // The metrics, newest runs first (the top of a list).
        let mut dirs: Vec<PathBuf> = self.tracked.keys().cloned().collect();
        dirs.sort_by(|a, b| b.file_name().cmp(&a.file_name()));
        for (i, dir) in dirs.into_iter().enumerate() {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            // A run created meanwhile is listed at once, not after every digest.
            if i % 64 == 0 {
                while let Ok(p) = self.events.try_recv() {
                    self.note(p);
                }
                let new: Vec<PathBuf> = self
                    .dirty
                    .iter()
                    .filter(|d| !self.tracked.contains_key(*d) && d.is_dir())
                    .filter(|d| d.parent().is_some_and(|p| p.ends_with("runs")))
                    .cloned()
                    .collect();
                for d in new {
                    self.check(&d, &mut out);
                }
            }
            self.check(&dir, &mut out);
            for event in out.drain(..) {
                if tx.blocking_send(event).is_err() {
                    return;
                }
            }
        }
        let mut last_full = Instant::now();
        loop {
            let wait = if self.any_live() || !self.notified() {
                self.options.live_interval
            } else {
                self.options
                    .rescan_interval
                    .saturating_sub(last_full.elapsed())
            };
            // Wake on a notify event (or the stop flag, checked at least every 100 ms).
            let deadline = Instant::now() + wait;
            loop {
                if stop.load(Ordering::SeqCst) || tx.is_closed() {
                    return;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match self
                    .events
                    .recv_timeout(left.min(Duration::from_millis(100)))
                {
                    Ok(p) => {
                        self.note(p);
                        // Take what else arrived together, then do the round.
                        while let Ok(p) = self.events.try_recv() {
                            self.note(p);
                        }
                        break;
                    }
                    Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let period = if self.notified() {
                self.options.rescan_interval
            } else {
                self.options.live_interval
            };
            if last_full.elapsed() >= period || self.dirty.remove(&PathBuf::new()) {
                last_full = Instant::now();
                self.dirty.clear();
                self.full_scan(&mut out);
            } else {
                self.partial_scan(&mut out);
            }
            for event in out.drain(..) {
                if tx.blocking_send(event).is_err() {
                    return;
                }
            }
        }
    }

    /// Marks the run folder `p` is in (or `p` itself, a structural change) for the next round.
    fn note(&mut self, p: PathBuf) {
        if p.as_os_str().is_empty() {
            self.dirty.insert(p);
            return;
        }
        let exp = self.experiments();
        let Ok(rel) = p.strip_prefix(&exp) else {
            // The workspace or experiments folder itself appeared or went: rescan all.
            self.dirty.insert(PathBuf::new());
            return;
        };
        let parts: Vec<_> = rel.iter().collect();
        match parts.len() {
            // <exp> or <exp>/runs: the set of runs may have changed.
            0..=2 => {
                self.dirty.insert(PathBuf::new());
            }
            // <exp>/runs/<id>[/...]: that run.
            _ => {
                self.dirty
                    .insert(exp.join(parts[0]).join(parts[1]).join(parts[2]));
            }
        }
    }

    /// Whether `notify` covers the run list (the experiments folder is watched): until the
    /// workspace exists, or without a watcher, rescans are the only trigger.
    fn notified(&self) -> bool {
        self.watcher.is_some() && self.watched.contains(&self.experiments())
    }

    fn any_live(&self) -> bool {
        self.tracked.values().any(|t| {
            t.entry
                .as_ref()
                .is_some_and(|e| !e.run.record.status.is_terminal())
                || t.unreadable.is_some()
        })
    }

    /// Lists every run folder, adds new ones, reports vanished ones, re-checks all.
    fn full_scan(&mut self, out: &mut Vec<RunListEvent>) {
        let exp_root = self.experiments();
        self.watch(&self.root.clone());
        self.watch(&exp_root);
        let mut found = BTreeSet::new();
        for exp in read_dirs(&exp_root) {
            let runs = exp.join("runs");
            self.watch(&exp);
            self.watch(&runs);
            found.extend(read_dirs(&runs));
        }
        let gone: Vec<PathBuf> = self
            .tracked
            .keys()
            .filter(|d| !found.contains(*d))
            .cloned()
            .collect();
        for dir in gone {
            self.forget(&dir, out);
        }
        for dir in found {
            self.check(&dir, out);
        }
        let runs = self
            .tracked
            .values()
            .filter_map(|t| t.entry.as_ref().map(|e| &e.run));
        // Best effort: a watcher that cannot start leaves the runs as they are.
        let _ = crate::engine::slurm::watcher::adopt(&self.root, runs);
    }

    /// The folders notify named, and every live run.
    fn partial_scan(&mut self, out: &mut Vec<RunListEvent>) {
        let mut dirs = std::mem::take(&mut self.dirty);
        for (dir, t) in &self.tracked {
            let live = t
                .entry
                .as_ref()
                .is_some_and(|e| !e.run.record.status.is_terminal());
            if live || t.unreadable.is_some() {
                dirs.insert(dir.clone());
            }
        }
        for dir in dirs {
            if dir.is_dir() {
                self.check(&dir, out);
            } else {
                self.forget(&dir, out);
            }
        }
    }

    fn forget(&mut self, dir: &Path, out: &mut Vec<RunListEvent>) {
        if self.tracked.remove(dir).is_some() {
            out.push(RunListEvent::Removed {
                dir: dir.to_path_buf(),
            });
        }
        if self.watched.remove(dir)
            && let Some(w) = self.watcher.as_mut()
        {
            let _ = w.unwatch(dir);
        }
    }

    fn watch(&mut self, dir: &Path) {
        if self.watched.contains(dir) || !dir.is_dir() {
            return;
        }
        if let Some(w) = self.watcher.as_mut() {
            match w.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir.to_path_buf());
                }
                // inotify limits: fall back to polling for everything.
                Err(_) => self.watcher = None,
            }
        }
    }

    /// Re-reads what changed in one run folder and reports it.
    fn check(&mut self, dir: &Path, out: &mut Vec<RunListEvent>) {
        self.watch(dir);
        let defer_metrics = self.defer_metrics;
        let t = self
            .tracked
            .entry(dir.to_path_buf())
            .or_insert_with(|| Tracked {
                run_json: None,
                tags: None,
                metrics: None,
                metrics_read: false,
                entry: None,
                unreadable: None,
            });
        let run_json = stamp(&dir.join(RUN_JSON));
        let tags = stamp(&dir.join(TAGS));
        let mut changed = false;
        let live = t
            .entry
            .as_ref()
            .is_some_and(|e| !e.run.record.status.is_terminal());
        if run_json != t.run_json || t.entry.is_none() || live {
            match Run::load_checked(dir) {
                Ok(run) => {
                    t.run_json = stamp(&dir.join(RUN_JSON));
                    // Readable again: front ends have it as unreadable, so it is news.
                    changed |= t.unreadable.take().is_some();
                    match &mut t.entry {
                        Some(e) if e.run.record == run.record => {}
                        Some(e) => {
                            e.run = run;
                            changed = true;
                        }
                        None => {
                            let plan = Plan::read(&dir.join(SPEC));
                            t.entry = Some(RunEntry {
                                epochs_total: plan.epochs,
                                steps_total: plan.steps,
                                tags: Vec::new(),
                                metrics: MetricDigest::default(),
                                warnings: Vec::new(),
                                run,
                            });
                            changed = true;
                        }
                    }
                }
                Err(e) => {
                    let error = e.to_string();
                    if t.unreadable.as_ref() != Some(&error) {
                        t.unreadable = Some(error.clone());
                        out.push(RunListEvent::Unreadable(Unreadable {
                            dir: dir.to_path_buf(),
                            error,
                        }));
                    }
                    return;
                }
            }
        }
        let Some(entry) = t.entry.as_mut() else {
            return;
        };
        if tags != t.tags || changed {
            t.tags = tags;
            let now = entry.run.tags();
            if now != entry.tags {
                entry.tags = now;
                changed = true;
            }
        }
        let live = !entry.run.record.status.is_terminal();
        if defer_metrics {
            if changed {
                out.push(RunListEvent::Changed(entry.clone()));
            }
            return;
        }
        if t.metrics.is_none() && (live || !t.metrics_read) {
            t.metrics = Some(LineTailer::new(metrics_path(dir, 0), TailFrom::Start));
            t.metrics_read = true;
            if entry.metrics != MetricDigest::default() {
                entry.metrics = MetricDigest::default();
                entry.warnings.clear();
                changed = true;
            }
        }
        if let Some(tailer) = t.metrics.as_mut() {
            changed |= fold_metrics(tailer, &mut entry.metrics, &mut entry.warnings);
            if !live && tailer.caught_up() {
                t.metrics = None;
            }
        }
        if changed {
            out.push(RunListEvent::Changed(entry.clone()));
        }
    }
}

/// The sub-folders of `dir`, sorted (none if it cannot be read).
fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stamps the index hands over are the stamps a check takes: a folder seeded from the
    /// index is not read again for nothing.
    #[test]
    fn a_stamp_from_metadata_looked_up_relative_to_a_folder_is_the_same() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("run.json"), "{}").unwrap();
        let folder = crate::files::fsutil::Folder::open(dir.path()).unwrap();
        let st = folder.stat(b"run.json");
        assert!(stamp(&dir.path().join("run.json")).is_some());
        assert_eq!(stamp_of(st.as_ref()), stamp(&dir.path().join("run.json")));
        assert_eq!(stamp_of(folder.stat(b"tags").as_ref()), None);
    }
}
