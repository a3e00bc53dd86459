//! `Workspace::watch_runs`: the live run list, on real folders written the way supervisors and
//! replicas write them (atomic run.json, appended metrics), with and without `notify`, and with
//! its first snapshot from the run index.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use ddp_trainer::metrics::{MetricKind, MetricRecord, MetricsWriter};
use ddp_trainer::spec::Spec;
use ddp_workspaces::follow::run_list::{MetricDigest, RunListEvent, RunListOptions, RunListWatch};
use ddp_workspaces::index::Index;
use ddp_workspaces::test_util::metric;
use ddp_workspaces::{Run, RunStatus, Workspace};

const DEADLINE: Duration = Duration::from_secs(5);

fn spec(name: &str) -> Spec {
    Spec::parse(
        &format!(
            "name='{name}'\n[model]\nname='mlp'\n[data]\nname='synthetic'\n[train]\nepochs=7\n"
        ),
        Path::new("s.toml"),
        &[],
    )
    .unwrap()
}

fn record(kind: MetricKind, epoch: usize, step: u64, loss: f64, acc: Option<f64>) -> MetricRecord {
    metric(kind, epoch, step, loss, acc)
        .time(1.0 + step as f64)
        .lr(0.1)
}

/// The next event that `pick` accepts (others are skipped), or a panic naming what was waited for.
fn wait_for<T>(
    watch: &mut RunListWatch,
    what: &str,
    mut pick: impl FnMut(RunListEvent) -> Option<T>,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(e) = watch.next_timeout(left) else {
            panic!("no event for {what} within {DEADLINE:?}");
        };
        if let Some(t) = pick(e) {
            return t;
        }
    }
}

fn snapshot(watch: &mut RunListWatch) -> (Vec<ddp_workspaces::follow::run_list::RunEntry>, usize) {
    wait_for(watch, "the snapshot", |e| match e {
        RunListEvent::Snapshot {
            entries,
            unreadable,
        } => Some((entries, unreadable.len())),
        other => panic!("first event is not the snapshot: {other:?}"),
    })
}

fn changed_with(
    watch: &mut RunListWatch,
    id: &str,
    what: &str,
    ok: impl Fn(&ddp_workspaces::follow::run_list::RunEntry) -> bool,
) -> ddp_workspaces::follow::run_list::RunEntry {
    wait_for(watch, what, |e| match e {
        RunListEvent::Changed(entry) if entry.run.record.id == id && ok(&entry) => Some(entry),
        _ => None,
    })
}

#[test]
fn snapshot_lists_runs_newest_first_with_digests_and_unreadable_folders() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open_or_create(&dir.path().join("ws")).unwrap();
    let a = ws.create_run(&spec("exp-a"), vec![], None, None).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let mut b = ws.create_run(&spec("exp-b"), vec![], None, None).unwrap();
    b.update(|r| r.status = RunStatus::Completed).unwrap();
    b.set_tags(&["baseline".into()]).unwrap();
    let mut w = MetricsWriter::create(&b.dir, 0).unwrap();
    let recs = [
        record(MetricKind::Train, 1, 1, 2.0, None),
        record(MetricKind::Train, 1, 2, 1.5, None),
        record(MetricKind::Val, 1, 2, 1.4, Some(0.5)),
        record(MetricKind::Val, 2, 4, 1.2, Some(0.4)),
        record(MetricKind::Test, 2, 4, 1.1, Some(0.45)),
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    drop(w);
    let bad = ws
        .experiments_dir()
        .join("exp-a/runs/20200101-000000-badbad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("run.json"), "{").unwrap();

    let mut watch = ws.watch_runs();
    let (entries, unreadable) = snapshot(&mut watch);
    assert_eq!(unreadable, 1);
    let ids: Vec<&str> = entries.iter().map(|e| e.run.record.id.as_str()).collect();
    assert_eq!(ids, [b.record.id.as_str(), a.record.id.as_str()]);
    assert_eq!(entries[0].tags, ["baseline"]);
    assert_eq!(entries[0].epochs_total, Some(7));
    // The digests follow the snapshot (so a big workspace is listed at once).
    assert_eq!(entries[0].metrics, MetricDigest::default());
    let eb = changed_with(&mut watch, &b.record.id, "b's metrics", |e| {
        e.metrics != MetricDigest::default()
    });
    assert_eq!(eb.tags, ["baseline"]);
    assert_eq!(eb.metrics, MetricDigest::of(&recs));
    assert_eq!(eb.metrics.epochs_done, 2);
    assert_eq!(eb.metrics.steps, 4);
    assert_eq!(eb.metrics.recent_train_loss, [2.0, 1.5]);
    assert_eq!(eb.metrics.best_val_accuracy, Some(0.5));
    assert_eq!(eb.metrics.test_accuracy, Some(0.45));
    assert_eq!(eb.metrics.samples_per_sec, Some(200.0));
    assert!(eb.warnings.is_empty());
    // A run without metrics has nothing to follow: no event for it.
    assert!(watch.next_timeout(Duration::from_millis(300)).is_none());
}

#[test]
fn the_snapshot_comes_from_the_run_index_with_digests_and_changes_since() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open_or_create(&dir.path().join("ws")).unwrap();
    let a = ws.create_run(&spec("exp-a"), vec![], None, None).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let mut b = ws.create_run(&spec("exp-b"), vec![], None, None).unwrap();
    b.update(|r| r.status = RunStatus::Completed).unwrap();
    let mut w = MetricsWriter::create(&b.dir, 0).unwrap();
    let recs = [
        record(MetricKind::Train, 1, 1, 2.0, None),
        record(MetricKind::Val, 1, 2, 1.4, Some(0.5)),
        record(MetricKind::Test, 1, 2, 1.1, Some(0.45)),
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    drop(w);
    let mut index = Index::open(&ws.root).unwrap();
    assert_eq!(index.refresh(&ws).unwrap().read, 2);
    // Changed after the index last read it: the snapshot has it as it is now.
    b.set_tags(&["baseline".into()]).unwrap();

    let mut watch = ws.watch_runs();
    let (entries, unreadable) = snapshot(&mut watch);
    assert_eq!(unreadable, 0);
    let ids: Vec<&str> = entries.iter().map(|e| e.run.record.id.as_str()).collect();
    assert_eq!(ids, [b.record.id.as_str(), a.record.id.as_str()]);
    assert_eq!(entries[0].tags, ["baseline"]);
    assert_eq!(entries[0].epochs_total, Some(7));
    // The finished run's digest is in the snapshot, not read again after it.
    assert_eq!(entries[0].metrics, MetricDigest::of(&recs));
    assert!(
        watch.next_timeout(Duration::from_millis(500)).is_none(),
        "nothing changed since the snapshot"
    );
    // What changes afterwards is followed as without an index.
    b.set_tags(&["best".into()]).unwrap();
    changed_with(&mut watch, &b.record.id, "b's new tags", |e| {
        e.tags == ["best"] && e.metrics == MetricDigest::of(&recs)
    });
    let c = ws.create_run(&spec("exp-c"), vec![], None, None).unwrap();
    changed_with(&mut watch, &c.record.id, "a new run", |_| true);
    std::fs::remove_dir_all(&a.dir).unwrap();
    let gone = wait_for(&mut watch, "a's removal", |e| match e {
        RunListEvent::Removed { dir } => Some(dir),
        _ => None,
    });
    assert_eq!(gone, a.dir);
}

/// Everything a dashboard must see without a keypress, with notify and by polling alone.
fn live_changes(options: RunListOptions) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    // The workspace does not exist yet: an empty list, then runs appear once it does.
    let mut watch = Workspace { root: root.clone() }.watch_runs_with(options);
    let (entries, _) = snapshot(&mut watch);
    assert!(entries.is_empty());
    let ws = Workspace::open_or_create(&root).unwrap();
    let mut run = ws.create_run(&spec("live"), vec![], None, None).unwrap();
    let id = run.record.id.clone();
    changed_with(&mut watch, &id, "the new run", |e| {
        e.run.record.status == RunStatus::Queued
    });
    // Status changes and metrics of a live run.
    run.update(|r| r.status = RunStatus::Running).unwrap();
    changed_with(&mut watch, &id, "running", |e| {
        e.run.record.status == RunStatus::Running
    });
    let mut w = MetricsWriter::create(&run.dir, 0).unwrap();
    w.write(&record(MetricKind::Train, 1, 1, 0.9, None))
        .unwrap();
    changed_with(&mut watch, &id, "a metric", |e| {
        e.metrics.last_train_loss == Some(0.9)
    });
    // A corrupt metric line is a warning on the run, and later lines still count.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(run.metrics_path(0))
        .unwrap();
    f.write_all(b"{not json\n").unwrap();
    w.write(&record(MetricKind::Val, 1, 1, 0.8, Some(0.7)))
        .unwrap();
    let e = changed_with(&mut watch, &id, "val after a bad line", |e| {
        e.metrics.best_val_accuracy == Some(0.7)
    });
    assert_eq!(e.metrics.bad_lines, 1);
    assert!(e.warnings[0].contains("rank-0.jsonl: a line does not parse"));
    // Tags and the end of the run.
    run.set_tags(&["fast".into()]).unwrap();
    changed_with(&mut watch, &id, "tags", |e| e.tags == ["fast"]);
    run.update(|r| r.status = RunStatus::Stopped).unwrap();
    changed_with(&mut watch, &id, "stopped", |e| {
        e.run.record.status == RunStatus::Stopped
    });
    // A finished run that changes (resumed elsewhere) is seen too.
    run.update(|r| r.status = RunStatus::Queued).unwrap();
    changed_with(&mut watch, &id, "queued again", |e| {
        e.run.record.status == RunStatus::Queued
    });
    // A corrupt run.json is reported, then the run comes back once it reads again.
    let good = std::fs::read(run.dir.join("run.json")).unwrap();
    std::fs::write(run.dir.join("run.json"), "{").unwrap();
    let u = wait_for(&mut watch, "unreadable", |e| match e {
        RunListEvent::Unreadable(u) => Some(u),
        _ => None,
    });
    assert_eq!(u.dir, run.dir);
    assert!(u.error.contains("not a valid run record"), "{}", u.error);
    std::fs::write(run.dir.join("run.json"), good).unwrap();
    changed_with(&mut watch, &id, "readable again", |_| true);
    // Deleted: removed.
    std::fs::remove_dir_all(&run.dir).unwrap();
    let gone = wait_for(&mut watch, "removal", |e| match e {
        RunListEvent::Removed { dir } => Some(dir),
        _ => None,
    });
    assert_eq!(gone, run.dir);
    let _ = Run::load(&gone).unwrap_err();
}

#[test]
fn live_changes_with_notify() {
    // A long rescan period: only notify (and the live-run checks) can be this quick.
    live_changes(RunListOptions {
        rescan_interval: Duration::from_secs(60),
        ..Default::default()
    });
}

#[test]
fn live_changes_by_polling() {
    live_changes(RunListOptions {
        use_notify: false,
        ..Default::default()
    });
}
