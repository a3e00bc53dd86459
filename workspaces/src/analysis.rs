//! Comparing and exporting runs (`ddp compare`, `ddp export`): a run's frozen `spec.toml` as
//! dotted keys, the keys that differ between runs, and metric records as CSV.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use toml::{Table, Value};

use crate::metrics::{MetricKind, MetricRecord};
use crate::{Error, Result};

/// A spec as `dotted.key → value` (tables flattened, arrays kept whole).
pub type FlatSpec = BTreeMap<String, Value>;

/// Reads and flattens a spec file (a run's `spec.toml`); errors name the file.
pub fn read_flat_spec(path: &Path) -> Result<FlatSpec> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let table: Table = text.parse().map_err(|e: toml::de::Error| Error::Corrupt {
        path: path.to_path_buf(),
        msg: format!("not a valid spec ({})", e.message().trim()),
    })?;
    Ok(flatten(&table))
}

/// `{train: {lr: 0.1, scheduler: {kind: "step"}}}` → `train.lr = 0.1`, `train.scheduler.kind =
/// "step"`.
pub fn flatten(table: &Table) -> FlatSpec {
    fn walk(prefix: &str, table: &Table, out: &mut FlatSpec) {
        for (k, v) in table {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Table(t) => walk(&key, t, out),
                v => {
                    out.insert(key, v.clone());
                }
            }
        }
    }
    let mut out = FlatSpec::new();
    walk("", table, &mut out);
    out
}

/// The keys whose value is not the same in every spec (a key missing from some but not all
/// counts as differing), sorted.
pub fn differing_keys(specs: &[FlatSpec]) -> Vec<String> {
    let all: BTreeSet<&String> = specs.iter().flat_map(|s| s.keys()).collect();
    all.into_iter()
        .filter(|k| {
            let first = specs.first().and_then(|s| s.get(*k));
            specs.iter().any(|s| s.get(*k) != first)
        })
        .cloned()
        .collect()
}

/// A value for a table cell: strings without quotes, the rest as TOML (`0.001`, `[0, 1]`).
pub fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// A TOML value as JSON (for `--json`).
pub fn json_value(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// The header of [`write_csv`]'s output (the fields of a metric record, in order).
pub const CSV_HEADER: &str =
    "time,rank,kind,epoch,step,loss,accuracy,lr,samples_per_sec,samples,world_size";

/// One record as a CSV line (no newline): absent figures are empty, non-finite ones `NaN`,
/// `inf`, `-inf`; `kind` is `train`, `val` or `test`.
pub fn csv_row(m: &MetricRecord) -> String {
    let kind = match m.kind {
        MetricKind::Train => "train",
        MetricKind::Val => "val",
        MetricKind::Test => "test",
    };
    let opt_f = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    format!(
        "{},{},{kind},{},{},{},{},{},{},{},{}",
        m.time,
        m.rank,
        m.epoch,
        m.step,
        m.loss,
        opt_f(m.accuracy),
        m.lr,
        m.samples_per_sec,
        m.samples.map(|s| s.to_string()).unwrap_or_default(),
        m.world_size
    )
}

/// [`CSV_HEADER`] then one line per record.
pub fn write_csv(records: &[MetricRecord], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    for m in records {
        writeln!(out, "{}", csv_row(m))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(text: &str) -> FlatSpec {
        flatten(&text.parse::<Table>().unwrap())
    }

    #[test]
    fn flattens_and_finds_differences() {
        let a = flat(
            "name='a'\n[train]\nlr=0.1\nbatch_size=32\n[train.scheduler]\nkind='step'\n[ddp]\ndevices=[0,1]\n",
        );
        assert_eq!(a["train.scheduler.kind"], Value::String("step".into()));
        assert_eq!(display_value(&a["ddp.devices"]), "[0, 1]");
        assert_eq!(display_value(&a["train.scheduler.kind"]), "step");
        assert_eq!(display_value(&a["train.lr"]), "0.1");
        let b = flat(
            "name='a'\n[train]\nlr=0.01\nbatch_size=32\nmax_steps=3\n[train.scheduler]\nkind='step'\n[ddp]\ndevices=[0,1]\n",
        );
        assert_eq!(
            differing_keys(&[a.clone(), b.clone()]),
            ["train.lr", "train.max_steps"]
        );
        assert!(differing_keys(&[a.clone(), a.clone()]).is_empty());
        assert!(differing_keys(&[a]).is_empty());
        assert!(differing_keys(&[]).is_empty());
        assert_eq!(json_value(&b["train.max_steps"]), serde_json::json!(3));
    }

    #[test]
    fn csv_rows() {
        let m = MetricRecord {
            time: 1.5,
            rank: 1,
            kind: MetricKind::Val,
            epoch: 2,
            step: 40,
            loss: f64::NAN,
            accuracy: Some(0.25),
            lr: 0.001,
            samples_per_sec: 100.0,
            samples: None,
            world_size: 2,
        };
        assert_eq!(csv_row(&m), "1.5,1,val,2,40,NaN,0.25,0.001,100,,2");
        let mut out = Vec::new();
        write_csv(&[m.clone(), m], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert_eq!(text.lines().next().unwrap(), CSV_HEADER);
    }
}
