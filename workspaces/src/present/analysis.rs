//! Comparing and exporting runs (`ddp compare`, `ddp export`, the TUI's Compare view): choosing
//! runs by address or sweep ([`select_runs`]), a run's frozen `spec.toml` as dotted keys (with
//! the defaults filled in, [`read_resolved_flat_spec`]), the keys that differ between runs with
//! each run's values and figures ([`comparison`]), and metric records as CSV.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use toml::{Table, Value};

use crate::index::fields::{FlatSpec, flatten};
use crate::index::summary::Summary;
use crate::metrics::{MetricKind, MetricRecord};
use crate::runs::run::{Run, RunStatus};
use crate::runs::workspace::{Unreadable, Workspace, resolve_address};
use crate::{Error, Result, sweep};

/// The runs named by `addresses` (ids, prefixes, `latest`, `<experiment>@latest`) then those of
/// the sweep `sweep` (id, prefix, name, `latest`), each once, in that order; at least one run.
/// An address that is a sweep id (not a run) says so. The run folders that could not be read
/// are returned too, for the caller to report.
pub fn select_runs(
    ws: &Workspace,
    addresses: &[String],
    sweep: Option<&str>,
) -> Result<(Vec<Run>, Vec<Unreadable>)> {
    let (all, bad) = ws.runs()?;
    let mut out: Vec<Run> = Vec::new();
    let mut push = |r: &Run| {
        if !out.iter().any(|o| o.record.id == r.record.id) {
            out.push(r.clone());
        }
    };
    for a in addresses {
        match resolve_address(&all, a) {
            Ok(r) => push(r),
            Err(Error::NotFound(msg)) => {
                // `ddp compare <sweep id>` is an easy slip: point at --sweep.
                if sweep::resolve(&ws.root, sweep::sweeps_of(&all), a).is_ok_and(|id| id == *a) {
                    return Err(Error::NotFound(format!(
                        "no run `{a}`: that is a sweep; use --sweep {a}"
                    )));
                }
                return Err(Error::NotFound(msg));
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(s) = sweep {
        let id = sweep::resolve(&ws.root, sweep::sweeps_of(&all), s)?;
        let members = sweep::members(&ws.root, &all, &id);
        if members.is_empty() {
            return Err(Error::NotFound(format!("sweep {id} has no runs left")));
        }
        for r in members {
            push(r);
        }
    }
    if out.is_empty() {
        return Err(Error::Invalid(
            "name at least one run (or --sweep ID)".into(),
        ));
    }
    Ok((out, bad))
}

/// Runs side by side: what `ddp compare --json` prints (and `ddp sweep --json` at the end).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    /// The spec keys whose values differ between the runs, sorted.
    pub differing_keys: Vec<String>,
    pub runs: Vec<ComparedRun>,
}

/// One run of a [`Comparison`].
#[derive(Debug, Clone, Serialize)]
pub struct ComparedRun {
    pub id: String,
    pub experiment: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub dir: PathBuf,
    /// This run's value of each differing key (absent: the run's spec does not set it).
    pub keys: BTreeMap<String, serde_json::Value>,
    pub summary: Summary,
    /// This run's value of each differing key as table text ([`display_value`]), in the order
    /// of [`Comparison::differing_keys`]; `-` where the spec does not set it. Not in the JSON.
    #[serde(skip)]
    pub cells: Vec<String>,
}

/// Reads each run's frozen spec (defaults filled in, so a key one spec leaves out and another
/// sets to its default is no difference) and figures; `sweep` is recorded as given.
pub fn comparison(runs: &[Run], sweep: Option<String>) -> Result<Comparison> {
    let specs: Vec<FlatSpec> = runs
        .iter()
        .map(|r| read_resolved_flat_spec(&r.spec_path()))
        .collect::<Result<_>>()?;
    let differing_keys = differing_keys(&specs);
    let runs = runs
        .iter()
        .zip(&specs)
        .map(|(r, spec)| {
            let rec = &r.record;
            ComparedRun {
                id: rec.id.clone(),
                experiment: rec.experiment.clone(),
                name: rec.name.clone(),
                sweep: rec.sweep.clone(),
                status: rec.status,
                error: rec.error.clone(),
                dir: r.dir.clone(),
                keys: differing_keys
                    .iter()
                    .filter_map(|k| Some((k.clone(), json_value(spec.get(k)?))))
                    .collect(),
                cells: differing_keys
                    .iter()
                    .map(|k| spec.get(k).map(display_value).unwrap_or_else(|| "-".into()))
                    .collect(),
                summary: Summary::of(r),
            }
        })
        .collect();
    Ok(Comparison {
        sweep,
        differing_keys,
        runs,
    })
}

/// Reads and flattens a spec file (a run's `spec.toml`) as written; errors name the file.
pub fn read_flat_spec(path: &Path) -> Result<FlatSpec> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    flat_spec_text(&text, path)
}

/// Reads a spec file as the trainer resolves it, every default filled in, and flattens it; a
/// spec the trainer does not accept (an older format, a custom trainer's keys) is flattened as
/// written. Errors name the file.
pub fn read_resolved_flat_spec(path: &Path) -> Result<FlatSpec> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    match crate::spec::Spec::parse(&text, path, &[]) {
        Ok(spec) => flat_spec_text(&spec.to_toml(), path),
        Err(_) => flat_spec_text(&text, path),
    }
}

fn flat_spec_text(text: &str, path: &Path) -> Result<FlatSpec> {
    let table: Table = text.parse().map_err(|e: toml::de::Error| Error::Corrupt {
        path: path.to_path_buf(),
        msg: format!("not a valid spec ({})", e.message().trim()),
    })?;
    Ok(flatten(&table))
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
        let m = MetricRecord::sample()
            .time(1.5)
            .rank(1)
            .at(MetricKind::Val, 2, 40)
            .loss(f64::NAN)
            .accuracy(Some(0.25))
            .lr(0.001);
        assert_eq!(csv_row(&m), "1.5,1,val,2,40,NaN,0.25,0.001,100,,2");
        let mut out = Vec::new();
        write_csv(&[m.clone(), m], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert_eq!(text.lines().next().unwrap(), CSV_HEADER);
    }

    #[test]
    fn select_and_compare_runs() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open_or_create(dir.path()).unwrap();
        let spec = |lr: &str| {
            crate::spec::Spec::parse(
                "name='m'\n[model]\nname='mlp'\n[data]\nname='synthetic'\n",
                Path::new("s.toml"),
                &[format!("train.lr={lr}")],
            )
            .unwrap()
        };
        let a = ws.create_run(&spec("0.1"), vec![], None, None).unwrap();
        let b = ws.create_run(&spec("0.01"), vec![], None, None).unwrap();
        let ids = [
            a.record.id.clone(),
            b.record.id.clone(),
            a.record.id.clone(),
        ];
        let (runs, bad) = select_runs(&ws, &ids, None).unwrap();
        assert!(bad.is_empty());
        assert_eq!(runs.len(), 2, "each run once");
        assert_eq!(runs[0].record.id, a.record.id);
        let c = comparison(&runs, None).unwrap();
        assert_eq!(c.differing_keys, ["train.lr"]);
        assert_eq!(c.runs[0].cells, ["0.1"]);
        assert_eq!(c.runs[1].keys["train.lr"], serde_json::json!(0.01));
        let v = serde_json::to_value(&c).unwrap();
        assert!(
            v.get("sweep").is_none() && v["runs"][0].get("cells").is_none(),
            "{v}"
        );
        assert_eq!(v["runs"][0]["status"], "queued");
        // A key one spec leaves out compares as its default.
        let dir = tempfile::tempdir().unwrap();
        let written = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let base = "name='m'\n[model]\nname='mlp'\n[data]\nname='synthetic'\n";
        let bare = written("bare.toml", base);
        let lr = |v: &str| format!("{base}[train]\nlr = {v}\n");
        let default = written("default.toml", &lr("0.01"));
        let other = written("other.toml", &lr("0.1"));
        let read = |p: &Path| read_resolved_flat_spec(p).unwrap();
        assert_eq!(read(&bare)["train.lr"], Value::Float(0.01));
        assert!(differing_keys(&[read(&bare), read(&default)]).is_empty());
        assert_eq!(differing_keys(&[read(&bare), read(&other)]), ["train.lr"]);
        let as_written = |p: &Path| read_flat_spec(p).unwrap();
        assert_eq!(
            differing_keys(&[as_written(&bare), as_written(&default)]),
            ["train.lr"],
            "as written, the left-out key would differ"
        );
        // A spec the trainer does not accept is compared as written.
        let custom = written("custom.toml", &format!("{base}[extra]\nknob = 3\n"));
        assert_eq!(read(&custom)["extra.knob"], Value::Integer(3));

        let e = select_runs(&ws, &[], None).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        let e = select_runs(&ws, &["nope".into()], None).unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
    }
}
