//! The run index against the folders: rebuilt from them it matches a full scan, it follows
//! changes and deletions, a corrupt index is rebuilt, and processes refreshing at once while runs
//! change lose no update.

use super::*;
use crate::RunStatus;
use crate::commands::RunFilter;
use crate::test_util::{MLP_SPEC, completed_run, metric};
use ddp_trainer::metrics::MetricKind;

/// `n` completed runs with metrics (run i's val loss is i), every third tagged.
fn workspace(n: usize) -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        let spec = MLP_SPEC.replace("epochs = 1", &format!("epochs = 1\nlr = 0.0{}", i + 1));
        let run = completed_run(dir.path(), &spec);
        let m = metric(MetricKind::Val, 1, 10, i as f64, Some(0.5));
        std::fs::create_dir_all(run.dir.join("metrics")).unwrap();
        std::fs::write(
            run.metrics_path(0),
            format!("{}\n", serde_json::to_string(&m).unwrap()),
        )
        .unwrap();
        if i % 3 == 0 {
            run.set_tags(&["keep".into()]).unwrap();
        }
    }
    let ws = Workspace::open(dir.path()).unwrap();
    (dir, ws)
}

/// What a test compares of a run: id, status, tags, val loss, lr.
type Seen = (String, RunStatus, Vec<String>, Option<f64>, String);

/// What a full scan of the folders says of every run: id, status, tags, val loss, lr.
fn scan(ws: &Workspace) -> Vec<Seen> {
    let (runs, _) = ws.runs().unwrap();
    runs.iter()
        .map(|r| {
            let spec = ddp_trainer::spec::Spec::load(&r.spec_path(), &[]).unwrap();
            (
                r.record.id.clone(),
                r.record.status,
                r.tags(),
                Summary::of(r).final_val_loss,
                spec.train.lr.to_string(),
            )
        })
        .collect()
}

/// The same from the index (the lr from its spec table).
fn indexed(index: &Index) -> Vec<Seen> {
    let runs = index.all().unwrap();
    runs.iter()
        .map(|r| {
            let lr: f64 = index
                .conn
                .query_row(
                    "SELECT value FROM spec JOIN runs ON spec.run = runs.key
                     WHERE runs.\"id\" = ?1 AND spec.key = 'train.lr'",
                    [&r.run.record.id],
                    |row| row.get(0),
                )
                .unwrap();
            (
                r.run.record.id.clone(),
                r.run.record.status,
                r.tags.clone(),
                r.summary().final_val_loss,
                lr.to_string(),
            )
        })
        .collect()
}

/// Refreshes `index`; returns (runs read, removed, unreadable).
fn counts(index: &mut Index, ws: &Workspace) -> (usize, usize, usize, usize) {
    let r = index.refresh(ws).unwrap();
    (r.runs, r.read, r.removed, r.unreadable.len())
}

#[test]
fn an_index_rebuilt_from_the_folders_matches_a_full_scan() {
    let (_dir, ws) = workspace(7);
    let mut index = Index::open(&ws.root).unwrap();
    assert_eq!(counts(&mut index, &ws), (7, 7, 0, 0));
    assert_eq!(indexed(&index), scan(&ws));
    // Nothing changed: nothing is read again.
    assert_eq!(counts(&mut index, &ws), (7, 0, 0, 0));
    // Nor when the workspace is reached by another path (a link, a relative path, a mount
    // elsewhere): rows name their folders relative to it.
    let link = tempfile::tempdir().unwrap();
    let other = Workspace {
        root: link.path().join("ws"),
    };
    std::os::unix::fs::symlink(&ws.root, &other.root).unwrap();
    let mut by_link = Index::open(&other.root).unwrap();
    assert_eq!(counts(&mut by_link, &other), (7, 0, 0, 0));
    assert!(
        by_link
            .all()
            .unwrap()
            .iter()
            .all(|r| r.run.dir.starts_with(&other.root))
    );
    drop(by_link);
    // Deleted, the index is made again from the folders; corrupt, too.
    drop(index);
    std::fs::remove_file(ws.root.join(INDEX_FILE)).unwrap();
    let mut index = Index::open(&ws.root).unwrap();
    index.refresh(&ws).unwrap();
    assert_eq!(indexed(&index), scan(&ws));
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", ws.root.join(INDEX_FILE).display()));
    }
    std::fs::write(
        ws.root.join(INDEX_FILE),
        b"not a database at all, just bytes",
    )
    .unwrap();
    let mut index = Index::open(&ws.root).unwrap();
    index.refresh(&ws).unwrap();
    assert_eq!(indexed(&index), scan(&ws));
}

#[test]
fn changes_and_deletions_are_followed() {
    let (_dir, ws) = workspace(4);
    let mut index = Index::open(&ws.root).unwrap();
    index.refresh(&ws).unwrap();
    let (runs, _) = ws.runs().unwrap();
    // A record and tags rewritten (both by rename): that run alone is read again.
    let mut changed = runs[1].clone();
    changed.update(|r| r.status = RunStatus::Stopped).unwrap();
    runs[2].set_tags(&["new".into()]).unwrap();
    std::fs::remove_dir_all(&runs[3].dir).unwrap();
    assert_eq!(counts(&mut index, &ws), (3, 2, 1, 0));
    assert_eq!(indexed(&index), scan(&ws));
    // A live run is read every time (its metrics grow).
    changed.update(|r| r.status = RunStatus::Running).unwrap();
    index.refresh(&ws).unwrap();
    assert_eq!(counts(&mut index, &ws), (3, 1, 0, 0));
    // A record edited in place (not renamed) is seen too.
    let text = std::fs::read_to_string(changed.dir.join("run.json")).unwrap();
    std::fs::write(
        changed.dir.join("run.json"),
        text.replace("\"running\"", "\"failed\""),
    )
    .unwrap();
    index.refresh(&ws).unwrap();
    assert_eq!(indexed(&index), scan(&ws));
    // An unreadable record is reported, not indexed.
    std::fs::write(runs[0].dir.join("run.json"), b"{").unwrap();
    assert_eq!(counts(&mut index, &ws).3, 1);
    assert_eq!(index.len().unwrap(), 2);
}

#[test]
fn processes_refreshing_at_once_while_runs_change_lose_no_update() {
    let (_dir, ws) = workspace(12);
    let (runs, _) = ws.runs().unwrap();
    let writer = {
        let runs = runs.clone();
        std::thread::spawn(move || {
            for round in 0..5 {
                for r in &runs {
                    r.set_tags(&[format!("round-{round}")]).unwrap();
                }
            }
        })
    };
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let ws = ws.clone();
            std::thread::spawn(move || {
                let mut index = Index::open(&ws.root).unwrap();
                for _ in 0..10 {
                    index.refresh(&ws).unwrap();
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    // Every reader's last write is older than the last change or equal to it: a fresh refresh
    // sees the folders as they are.
    let mut index = Index::open(&ws.root).unwrap();
    index.refresh(&ws).unwrap();
    assert_eq!(indexed(&index), scan(&ws));
    let now = index.all().unwrap();
    assert!(
        now.iter().all(|r| r.tags == ["round-4"]),
        "{:?}",
        now.iter().map(|r| &r.tags).collect::<Vec<_>>()
    );
}

#[test]
fn the_index_picks_what_a_scan_of_the_folders_picks() {
    let (_dir, ws) = workspace(9);
    let (runs, _) = ws.runs().unwrap();
    runs[2]
        .clone()
        .update(|r| r.status = RunStatus::Stopped)
        .unwrap();
    runs[5]
        .clone()
        .update(|r| r.status = RunStatus::Failed)
        .unwrap();
    let mut index = Index::open(&ws.root).unwrap();
    index.refresh(&ws).unwrap();
    let (runs, _) = ws.runs().unwrap();
    let filter = |args: &[&str]| -> RunFilter {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Ls {
            #[command(flatten)]
            filter: RunFilter,
        }
        Ls::try_parse_from(std::iter::once("ls").chain(args.iter().copied()))
            .unwrap()
            .filter
    };
    let cases: &[&[&str]] = &[
        &[],
        &["--limit", "3"],
        &["--status", "stopped"],
        &["--experiment", "no-such"],
        &[
            "--where",
            "spec.train.lr < 0.05 and status = \"completed\"",
            "--sort",
            "-val_loss",
            "--limit",
            "2",
        ],
        &["--where", "tags = \"keep\""],
        &["--where", "not tags = \"keep\" or val_loss >= 7"],
        &["--sort", "val_loss"],
        &["--sort", "-spec.train.lr", "--limit", "4"],
        &["--where", "spec.ddp.overlap = true"],
        &["--where", "spec.ddp.overlap = false"],
        &[
            "--where",
            "spec.model.name = \"mlp\" and replicas = 1",
            "--sort",
            "status",
        ],
    ];
    let mut matched = 0;
    for args in cases {
        let f = filter(args).selection();
        let want: Vec<&str> = f
            .select(&ws.root, &runs)
            .unwrap()
            .iter()
            .map(|r| r.record.id.as_str())
            .collect();
        let got = index.select(&ws.root, &f).unwrap();
        let got: Vec<&str> = got.iter().map(|r| r.run.record.id.as_str()).collect();
        assert_eq!(got, want, "{args:?}");
        matched += usize::from(!want.is_empty());
    }
    assert!(matched >= 9, "most cases pick some run: {matched}");
    // Every filter field is a column of the index.
    for field in FIELDS {
        index
            .conn
            .prepare(&format!("SELECT {} FROM runs", column(field)))
            .unwrap();
    }
}
