//! The workspace's run index: `<ws>/index.sqlite` (SQLite, WAL) caches what the views list and
//! filter — each run's record, tags, plan, metrics summary and digest, every filter field
//! ([`crate::index::filter::FIELDS`]) as a column and every key of its frozen spec as a row of `spec` —
//! keyed by the run's folder, with the modification times of the folder, its record and its tags
//! when it was read.
//!
//! The folders stay the truth and the index is never the only copy of anything.
//! [`Index::refresh`] lists the run folders, reads again every run whose folder, record or tags
//! changed since (rewritten by a rename or edited in place) or that was live when read (its
//! metrics grow), and forgets the folders that are gone. Whoever reads the index refreshes it
//! first, so a run written anywhere — a supervisor, another front end, a Slurm node, an older
//! `ddp` — is listed at the next look, and a deleted, missing, corrupt or older index is rebuilt
//! from the folders. Many processes refresh at once safely: each refresh writes in one immediate
//! transaction (SQLite serialises the writers; a writer waits up to [`BUSY_TIMEOUT`]), every
//! write is an upsert of what the folder says, and a run read while it changes keeps the stamp
//! from before, so the next refresh reads it again.
//!
//! Layout:
//! - this file: [`Index`] (open, create, refresh), the stamps, the rows written.
//! - `query`: [`Index::select`] (a [`crate::index::selection::RunSelection`] answered from the columns and
//!   only the spec keys it names; only the runs shown are parsed) and [`Index::all`].
//! - `entry`: what a run list shows per run (`RunEntry`; `MetricDigest`, metric records
//!   folded).
//! - `fields`: a run's fields by the names filters and sorts use, read as first asked for;
//!   a frozen spec as dotted keys.
//! - `summary`: a run's figures (`Summary`) and its `--json` form (`RunOverview`).
//! - `selection`: which runs a listing picks (`RunSelection`: experiment, status, sweep,
//!   `--where`, sort, limit), from run folders or the index.
//! - `filter`: run filters (`--where` expressions over a run's fields), parsed and
//!   evaluated; pure.

pub mod entry;
pub mod fields;
pub mod filter;
mod query;
pub mod selection;
pub mod summary;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, TransactionBehavior, params_from_iter};

pub use query::IndexedRun;

use crate::files::fsutil::Folder;
use crate::index::entry::MetricDigest;
use crate::index::fields::{RunFields, spec_fields, spec_table};
use crate::index::filter::{FIELDS, Value};
use crate::index::summary::Summary;
use crate::runs::plan::Plan;
use crate::runs::run::Run;
use crate::runs::workspace::{Unreadable, Workspace};
use crate::{Error, Result};

/// The index's file in a workspace.
pub const INDEX_FILE: &str = "index.sqlite";
/// How long a refresh waits for another process's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(20);
/// The layout of the tables; an index of another version is rebuilt.
const VERSION: i64 = 5;

/// An open index.
pub struct Index {
    conn: Connection,
    path: PathBuf,
    /// The workspace's folder: rows name their run folder relative to it (an index stays good
    /// for the workspace moved, or reached by another path).
    root: PathBuf,
}

/// What [`Index::refresh`] found.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// Run folders in the workspace.
    pub runs: usize,
    /// Runs read again (new, changed or live).
    pub read: usize,
    /// Folders forgotten (gone, or their record unreadable).
    pub removed: usize,
    /// The folders whose record cannot be read (never fatal).
    pub unreadable: Vec<Unreadable>,
}

/// A filter field's column name (quoted: `name`, `status`... are also SQL words).
fn column(field: &str) -> String {
    format!("\"{field}\"")
}

impl Index {
    /// Opens (creating it if need be) the index of workspace `root`. An index that cannot be
    /// read (corrupt, another version) is removed and made anew: it holds nothing the folders
    /// do not.
    pub fn open(root: &Path) -> Result<Index> {
        let path = root.join(INDEX_FILE);
        match Index::open_at(&path, root) {
            Ok(i) => Ok(i),
            // Only a file that is no database (or a damaged one) is made anew: an index that is
            // busy, locked or unwritable is another process's or the workspace's business.
            Err(e) if is_damaged(&e) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
                Index::open_at(&path, root).map_err(|e| sql(&path, e))
            }
            Err(e) => Err(sql(&path, e)),
        }
    }

    /// [`Index::open`], or, where the workspace's index cannot be written (a read-only
    /// workspace), an index in memory: every refresh reads every run, but the answer is the same.
    pub fn open_or_memory(root: &Path) -> Index {
        Index::open(root).unwrap_or_else(|_| {
            let conn = Connection::open_in_memory().expect("SQLite opens a database in memory");
            let index = Index {
                conn,
                path: PathBuf::from(":memory:"),
                root: root.to_path_buf(),
            };
            index.create().expect("the tables are made in memory");
            index
        })
    }

    /// The runs of workspace `ws` that `filter` picks, from its index brought up to date first,
    /// and the folders whose record cannot be read: what `ls` lists.
    pub fn list(
        ws: &Workspace,
        filter: &crate::index::selection::RunSelection,
    ) -> Result<(Vec<IndexedRun>, Vec<Unreadable>)> {
        let mut index = Index::open_or_memory(&ws.root);
        let refreshed = index.refresh(ws)?;
        Ok((index.select(&ws.root, filter)?, refreshed.unreadable))
    }

    fn open_at(path: &Path, root: &Path) -> rusqlite::Result<Index> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let index = Index {
            conn,
            path: path.to_path_buf(),
            root: root.to_path_buf(),
        };
        index.create()?;
        Ok(index)
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        sql(&self.path, e)
    }

    /// Makes the tables unless they are there, of this version: in one immediate transaction,
    /// so that processes opening a new index at once make it once.
    fn create(&self) -> rusqlite::Result<()> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version != VERSION {
            // No type on the field columns: each value keeps its own (a number, a text, a flag).
            let fields: Vec<String> = FIELDS.iter().map(|f| column(f)).collect();
            tx.execute_batch(&format!(
                "DROP TABLE IF EXISTS spec;
                 DROP TABLE IF EXISTS runs;
                 CREATE TABLE runs (
                     key INTEGER PRIMARY KEY,
                     dir TEXT NOT NULL UNIQUE,
                     stamp INTEGER NOT NULL,
                     live INTEGER NOT NULL,
                     record TEXT NOT NULL,
                     summary TEXT NOT NULL,
                     plan TEXT NOT NULL,
                     digest TEXT NOT NULL,
                     {}
                 );
                 CREATE INDEX runs_id ON runs (\"id\");
                 CREATE TABLE spec (
                     key TEXT NOT NULL,
                     run INTEGER NOT NULL,
                     value,
                     PRIMARY KEY (key, run)
                 ) WITHOUT ROWID;
                 CREATE INDEX spec_run ON spec (run);
                 PRAGMA user_version = {VERSION};",
                fields.join(",\n")
            ))?;
        }
        // A quick look that the tables are what this version writes.
        for look in [
            "SELECT key, dir, plan, digest FROM runs LIMIT 1",
            "SELECT key, run, value FROM spec LIMIT 1",
        ] {
            tx.prepare(look)?.query([])?.next()?;
        }
        tx.commit()
    }

    /// Brings the index up to date with the folders of `ws` (see the module's docs).
    pub fn refresh(&mut self, ws: &Workspace) -> Result<Refreshed> {
        self.refresh_seeing(ws, |_, _| {})
    }

    /// [`Index::refresh`], handing `seen` each run folder's metadata of `run.json` and `tags`
    /// as looked up before anything is read (a caller that tracks the folders itself).
    pub fn refresh_seeing(
        &mut self,
        ws: &Workspace,
        seen: impl FnMut(&Path, [Option<&libc::stat>; 2]),
    ) -> Result<Refreshed> {
        let stamped = stamps(ws, seen);
        let known: HashMap<String, (i64, bool)> = {
            let mut stmt = self
                .conn
                .prepare_cached("SELECT dir, stamp, live FROM runs")
                .map_err(|e| sql(&self.path, e))?;
            stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
                .map_err(|e| sql(&self.path, e))?
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| sql(&self.path, e))?
        };
        let mut seen = HashSet::with_capacity(stamped.len());
        let mut stale = Vec::new();
        let key_of = |dir: &Path| relative(&ws.root, dir);
        for (dir, stamp) in &stamped {
            let key = key_of(dir);
            match known.get(&key) {
                Some(&(s, live)) if s == *stamp && !live => {}
                found => stale.push((dir.clone(), *stamp, found.is_none())),
            }
            seen.insert(key);
        }
        let mut refreshed = Refreshed {
            runs: stamped.len(),
            read: stale.len(),
            ..Refreshed::default()
        };
        // Read the folders outside the transaction, write inside it (one short lock).
        let mut rows = Vec::with_capacity(stale.len());
        for (dir, stamp, new) in stale {
            match Run::load_checked(&dir) {
                Ok(run) => rows.push(Row::of(&run, key_of(&dir), stamp, new)),
                Err(e) => refreshed.unreadable.push(Unreadable {
                    dir,
                    error: e.to_string(),
                }),
            }
        }
        let mut gone: Vec<String> = known.into_keys().filter(|k| !seen.contains(k)).collect();
        refreshed.removed = gone.len();
        gone.extend(refreshed.unreadable.iter().map(|b| key_of(&b.dir)));
        if !rows.is_empty() || !gone.is_empty() {
            self.write(&rows, &gone)?;
        }
        Ok(refreshed)
    }

    /// Upserts `rows` and forgets the folders `gone`, in one transaction.
    fn write(&mut self, rows: &[Row], gone: &[String]) -> Result<()> {
        let path = self.path.clone();
        let e = |e| sql(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        {
            let names: Vec<String> = FIELDS.iter().map(|f| column(f)).collect();
            let marks: Vec<String> = (0..FIELDS.len()).map(|i| format!("?{}", i + 8)).collect();
            let updates: Vec<String> = ["stamp", "live", "record", "summary", "plan", "digest"]
                .iter()
                .map(|c| c.to_string())
                .chain(names.iter().cloned())
                .map(|c| format!("{c} = excluded.{c}"))
                .collect();
            let mut put = tx
                .prepare_cached(&format!(
                    "INSERT INTO runs (dir, stamp, live, record, summary, plan, digest, {})
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, {})
                     ON CONFLICT (dir) DO UPDATE SET {}
                     RETURNING key",
                    names.join(", "),
                    marks.join(", "),
                    updates.join(", ")
                ))
                .map_err(e)?;
            let mut put_spec = tx
                .prepare_cached("INSERT OR REPLACE INTO spec (key, run, value) VALUES (?1, ?2, ?3)")
                .map_err(e)?;
            for r in rows {
                let head: [SqlValue; 7] = [
                    SqlValue::Text(r.dir.clone()),
                    SqlValue::Integer(r.stamp),
                    SqlValue::Integer(r.live as i64),
                    SqlValue::Text(r.record.clone()),
                    SqlValue::Text(r.summary.clone()),
                    SqlValue::Text(r.plan.clone()),
                    SqlValue::Text(r.digest.clone()),
                ];
                let values = head
                    .into_iter()
                    .chain(r.fields.iter().map(|v| to_sql(v.as_ref())));
                let key: i64 = put
                    .query_row(params_from_iter(values), |row| row.get(0))
                    .map_err(e)?;
                // A frozen spec never changes: written when the run is first indexed.
                for (k, v) in r.spec.iter().flatten() {
                    put_spec
                        .execute(rusqlite::params![k, key, to_sql(Some(v))])
                        .map_err(e)?;
                }
            }
            let mut del_spec = tx
                .prepare_cached(
                    "DELETE FROM spec WHERE run IN (SELECT key FROM runs WHERE dir = ?1)",
                )
                .map_err(e)?;
            let mut del = tx
                .prepare_cached("DELETE FROM runs WHERE dir = ?1")
                .map_err(e)?;
            for d in gone {
                del_spec.execute([d]).map_err(e)?;
                del.execute([d]).map_err(e)?;
            }
        }
        tx.commit().map_err(e)
    }

    /// How many runs the index holds.
    pub fn len(&self) -> Result<usize> {
        self.conn
            .query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0))
            .map(|n| n as usize)
            .map_err(|e| self.err(e))
    }

    /// The index holds no run.
    pub fn is_empty(&self) -> Result<bool> {
        self.conn
            .query_row("SELECT NOT EXISTS (SELECT 1 FROM runs)", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}

/// Run folder `dir` as a row names it: relative to the workspace's folder `root`.
fn relative(root: &Path, dir: &Path) -> String {
    dir.strip_prefix(root)
        .unwrap_or(dir)
        .to_string_lossy()
        .into_owned()
}

/// Whether `e` says the file is no SQLite database, or a damaged one.
fn is_damaged(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    matches!(e.sqlite_error_code(), Some(NotADatabase | DatabaseCorrupt))
}

fn sql(path: &Path, e: rusqlite::Error) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        msg: format!("the run index: {e}"),
    }
}

/// A field's value as SQLite stores it: a number as a real, a flag as an integer, a list (tags)
/// as its JSON text.
fn to_sql(v: Option<&Value>) -> SqlValue {
    match v {
        None => SqlValue::Null,
        Some(Value::Num(x)) => SqlValue::Real(*x),
        Some(Value::Str(s)) => SqlValue::Text(s.clone()),
        Some(Value::Bool(b)) => SqlValue::Integer(*b as i64),
        Some(Value::List(l)) => {
            SqlValue::Text(serde_json::to_string(l).expect("a list of strings serialises"))
        }
    }
}

/// The value SQLite stored by [`to_sql`] for `field`.
fn from_sql(field: &str, v: rusqlite::types::ValueRef<'_>) -> Option<Value> {
    use rusqlite::types::ValueRef as V;
    match v {
        V::Null | V::Blob(_) => None,
        V::Real(x) => Some(Value::Num(x)),
        V::Integer(i) => Some(Value::Bool(i != 0)),
        V::Text(t) => {
            let t = String::from_utf8_lossy(t);
            Some(if field == "tags" {
                Value::List(serde_json::from_str(&t).unwrap_or_default())
            } else {
                Value::Str(t.into_owned())
            })
        }
    }
}

/// Every run folder (`experiments/*/runs/*`) with what says it changed: the modification times
/// (nanoseconds) of the folder (a file replaced by a rename: the record, the tags), of
/// `run.json` and of `tags` (either edited in place, as an editor may), folded into one number.
/// Each is looked up relative to its `runs` folder (`fstatat`), not by its whole path: at
/// 10,000 runs the path walks were most of a listing's time.
fn stamps(
    ws: &Workspace,
    mut seen: impl FnMut(&Path, [Option<&libc::stat>; 2]),
) -> Vec<(PathBuf, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    let Ok(experiments) = std::fs::read_dir(ws.experiments_dir()) else {
        return out;
    };
    let ns = |st: Option<&libc::stat>| -> i64 {
        st.map_or(0, |st| {
            st.st_mtime
                .wrapping_mul(1_000_000_000)
                .wrapping_add(st.st_mtime_nsec)
        })
    };
    for exp in experiments.flatten() {
        let runs = exp.path().join("runs");
        let (Ok(entries), Some(folder)) = (std::fs::read_dir(&runs), Folder::open(&runs)) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name();
            let bytes = name.as_bytes();
            let sub = |file: &str| folder.stat(&[bytes, b"/", file.as_bytes()].concat());
            let (record, tags) = (sub(crate::runs::run::RUN_JSON), sub(crate::runs::run::TAGS));
            let dir = runs.join(&name);
            seen(&dir, [record.as_ref(), tags.as_ref()]);
            let stamp = ns(folder.stat(bytes).as_ref())
                ^ ns(record.as_ref())
                    .rotate_left(21)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64)
                ^ ns(tags.as_ref()).rotate_left(42);
            out.push((dir, stamp));
        }
    }
    out
}

/// What one run's row holds.
struct Row {
    /// The run folder, relative to the workspace's.
    dir: String,
    stamp: i64,
    live: bool,
    record: String,
    summary: String,
    /// The run's [`Plan`] (JSON).
    plan: String,
    /// Rank 0's metrics folded, and what could not be read ([`MetricDigest::read`], JSON).
    digest: String,
    /// The value of each of [`FIELDS`], in order.
    fields: Vec<Option<Value>>,
    /// The frozen spec's keys, for a run new to the index.
    spec: Option<Vec<(String, Value)>>,
}

impl Row {
    fn of(run: &Run, dir: String, stamp: i64, new: bool) -> Row {
        let summary = Summary::of(run);
        let summary_json = serde_json::to_string(&summary).expect("a summary serialises");
        let spec = if new { spec_table(run) } else { None };
        let spec_rows = spec.as_ref().map(spec_fields);
        let f = RunFields::known(run, run.tags(), summary, spec);
        Row {
            dir,
            stamp,
            live: !run.record.status.is_terminal(),
            record: serde_json::to_string(&run.record).expect("a run record always serialises"),
            summary: summary_json,
            plan: serde_json::to_string(&Plan::read(&run.spec_path())).expect("a plan serialises"),
            digest: serde_json::to_string(&MetricDigest::read(&run.dir))
                .expect("a digest serialises"),
            fields: FIELDS.iter().map(|name| f.get(name)).collect(),
            spec: if new {
                Some(spec_rows.unwrap_or_default())
            } else {
                None
            },
        }
    }
}

#[cfg(test)]
mod tests;
