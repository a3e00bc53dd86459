//! Answering a run filter from the index: the conditions on experiment, status and sweep in
//! SQL, the `--where` expression and the sort in Rust over only the columns and spec keys they
//! name, and only the runs listed read whole (record, tags, summary).

use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::Path;

use rusqlite::params_from_iter;
use rusqlite::types::Value as SqlValue;

use super::{Index, column, from_sql};
use crate::Result;
use crate::index::entry::MetricDigest;
use crate::index::filter::{FIELDS, Value};
use crate::index::selection::RunSelection;
use crate::index::summary::{RunOverview, Summary};
use crate::runs::plan::Plan;
use crate::runs::run::Run;

/// One run as the index holds it: its record, tags, plan and metrics summary as they were when
/// the index last read its folder (the summary parsed when first asked for: a dashboard's list
/// of 10,000 runs does not need it).
#[derive(Debug, Clone)]
pub struct IndexedRun {
    pub run: Run,
    pub tags: Vec<String>,
    /// How long it trains, as its frozen spec says.
    pub plan: Plan,
    summary_json: String,
    summary: OnceCell<Summary>,
    digest_json: String,
}

impl IndexedRun {
    /// `run` with its tags, plan and summary read from its folder now (no index).
    pub fn read(run: Run) -> IndexedRun {
        IndexedRun {
            tags: run.tags(),
            plan: Plan::read(&run.spec_path()),
            summary_json: String::new(),
            summary: OnceCell::from(Summary::of(&run)),
            digest_json: serde_json::to_string(&MetricDigest::read(&run.dir)).unwrap_or_default(),
            run,
        }
    }

    /// The run's figures from its metrics (as last indexed).
    pub fn summary(&self) -> &Summary {
        self.summary.get_or_init(|| {
            serde_json::from_str(&self.summary_json).unwrap_or_else(|_| Summary::of(&self.run))
        })
    }

    /// Rank 0's metrics folded as a dashboard's list shows them, and what could not be read
    /// (as last indexed).
    pub fn digest(&self) -> (MetricDigest, Vec<String>) {
        serde_json::from_str(&self.digest_json).unwrap_or_default()
    }

    /// The run as `ddp ls --json` prints it.
    pub fn overview(&self) -> RunOverview<'_> {
        RunOverview {
            record: &self.run.record,
            dir: &self.run.dir,
            tags: self.tags.clone(),
            summary: self.summary().clone(),
        }
    }
}

/// The candidates of a selection: each run's key and the values of the columns asked for.
type Candidates = Vec<(i64, Vec<Option<Value>>)>;

impl Index {
    /// The runs `filter` picks (in the workspace at `ws_root`), newest first or in its sort
    /// order, as [`RunSelection::select`] picks them from the folders. An unknown
    /// sweep is an error ([`crate::sweep::resolve`]).
    pub fn select(&self, ws_root: &Path, filter: &RunSelection) -> Result<Vec<IndexedRun>> {
        let sweep = match filter.sweep.as_deref() {
            Some(address) => {
                let known = self.sweeps()?;
                Some(crate::sweep::resolve(
                    ws_root,
                    known.iter().map(String::as_str),
                    address,
                )?)
            }
            None => None,
        };
        let mut named: Vec<&str> = Vec::new();
        if let Some(w) = &filter.where_ {
            named.extend(w.expr.fields());
        }
        if let Some(s) = &filter.sort {
            named.push(&s.field);
        }
        named.sort_unstable();
        named.dedup();
        let cols: Vec<&str> = named
            .iter()
            .copied()
            .filter(|f| FIELDS.contains(f))
            .collect();
        let spec_keys: Vec<&str> = named
            .iter()
            .filter_map(|f| f.strip_prefix("spec."))
            .collect();

        let mut conds = Vec::new();
        let mut args = Vec::new();
        for (field, value) in [
            ("experiment", filter.experiment.clone()),
            ("status", filter.status.map(|s| s.to_string())),
            ("sweep", sweep),
        ] {
            if let Some(v) = value {
                conds.push(format!("{} = ?", column(field)));
                args.push(SqlValue::Text(v));
            }
        }
        let mut query = format!(
            "SELECT key{} FROM runs",
            cols.iter()
                .map(|c| format!(", {}", column(c)))
                .collect::<String>()
        );
        if !conds.is_empty() {
            query.push_str(&format!(" WHERE {}", conds.join(" AND ")));
        }
        query.push_str(" ORDER BY \"id\" DESC");
        if filter.where_.is_none()
            && filter.sort.is_none()
            && let Some(n) = filter.limit
        {
            query.push_str(&format!(" LIMIT {n}"));
        }
        let mut rows = self.candidates(&query, args, &cols)?;

        let spec: Vec<HashMap<i64, Value>> = spec_keys
            .iter()
            .map(|k| self.spec_values(k))
            .collect::<Result<_>>()?;
        let get = |key: i64, values: &[Option<Value>], name: &str| -> Option<Value> {
            if let Some(i) = cols.iter().position(|c| *c == name) {
                return values[i].clone();
            }
            let k = name.strip_prefix("spec.")?;
            let i = spec_keys.iter().position(|s| *s == k)?;
            spec[i].get(&key).cloned()
        };
        if let Some(w) = &filter.where_ {
            rows.retain(|(key, values)| w.expr.matches(&|name| get(*key, values, name)));
        }
        let mut keys: Vec<i64> = match &filter.sort {
            Some(s) => {
                let mut keyed: Vec<(Option<Value>, i64)> = rows
                    .iter()
                    .map(|(key, values)| (get(*key, values, &s.field), *key))
                    .collect();
                // Stable: runs with equal values stay newest first.
                keyed.sort_by(|a, b| s.order(a.0.as_ref(), b.0.as_ref()));
                keyed.into_iter().map(|(_, k)| k).collect()
            }
            None => rows.into_iter().map(|(k, _)| k).collect(),
        };
        keys.truncate(filter.limit.unwrap_or(usize::MAX));
        self.read(&keys)
    }

    /// Every indexed run, newest first.
    pub fn all(&self) -> Result<Vec<IndexedRun>> {
        self.runs_where("1")
    }

    /// The runs that were live (not ended) when last read.
    pub fn live(&self) -> Result<Vec<IndexedRun>> {
        self.runs_where("live")
    }

    /// The runs for which the SQL condition `cond` holds, newest first.
    fn runs_where(&self, cond: &str) -> Result<Vec<IndexedRun>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT dir, record, summary, \"tags\", plan, digest FROM runs
                 WHERE {cond} ORDER BY \"id\" DESC"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| parse_row(&self.root, r))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(rows.into_iter().flatten().collect())
    }

    /// Spec key `key`'s value in every run that has it, by run folder (its path as text; a
    /// dashboard's filter).
    pub fn spec_by_dir(&self, key: &str) -> Result<HashMap<String, Value>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT runs.dir, spec.value FROM spec JOIN runs ON runs.key = spec.run
                 WHERE spec.key = ?1",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([key], |r| {
                Ok((r.get::<_, String>(0)?, from_sql(key, r.get_ref(1)?)))
            })
            .map_err(|e| self.err(e))?;
        let mut out = HashMap::new();
        for row in rows {
            let (dir, value) = row.map_err(|e| self.err(e))?;
            if let Some(v) = value {
                out.insert(self.root.join(dir).to_string_lossy().into_owned(), v);
            }
        }
        Ok(out)
    }

    /// The sweeps the indexed runs belong to.
    fn sweeps(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT \"sweep\" FROM runs WHERE \"sweep\" IS NOT NULL")
            .map_err(|e| self.err(e))?;
        stmt.query_map([], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e))
    }

    fn candidates(&self, query: &str, args: Vec<SqlValue>, cols: &[&str]) -> Result<Candidates> {
        let mut stmt = self.conn.prepare(query).map_err(|e| self.err(e))?;
        stmt.query_map(params_from_iter(args), |r| {
            let mut values = Vec::with_capacity(cols.len());
            for (i, c) in cols.iter().enumerate() {
                values.push(from_sql(c, r.get_ref(i + 1)?));
            }
            Ok((r.get(0)?, values))
        })
        .map_err(|e| self.err(e))?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| self.err(e))
    }

    /// Spec key `key`'s value in every run that has it.
    fn spec_values(&self, key: &str) -> Result<HashMap<i64, Value>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT run, value FROM spec WHERE key = ?1")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([key], |r| Ok((r.get(0)?, from_sql(key, r.get_ref(1)?))))
            .map_err(|e| self.err(e))?;
        let mut out = HashMap::new();
        for row in rows {
            let (run, value) = row.map_err(|e| self.err(e))?;
            if let Some(v) = value {
                out.insert(run, v);
            }
        }
        Ok(out)
    }

    /// The runs of `keys`, in that order.
    fn read(&self, keys: &[i64]) -> Result<Vec<IndexedRun>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT dir, record, summary, \"tags\", plan, digest FROM runs WHERE key = ?1",
            )
            .map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let run = stmt.query_row([key], |r| parse_row(&self.root, r));
            if let Some(run) = run.map_err(|e| self.err(e))? {
                out.push(run);
            }
        }
        Ok(out)
    }
}

/// A run's row; `None` for a record this version does not read.
fn parse_row(root: &Path, r: &rusqlite::Row<'_>) -> rusqlite::Result<Option<IndexedRun>> {
    let dir: String = r.get(0)?;
    let record: String = r.get(1)?;
    let summary: String = r.get(2)?;
    let tags: String = r.get(3)?;
    let plan: String = r.get(4)?;
    let digest_json: String = r.get(5)?;
    let Ok(record) = serde_json::from_str(&record) else {
        return Ok(None);
    };
    Ok(Some(IndexedRun {
        run: Run {
            dir: root.join(dir),
            record,
        },
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        summary_json: summary,
        summary: OnceCell::new(),
        digest_json,
        plan: serde_json::from_str(&plan).unwrap_or_default(),
    }))
}
