//! A run's fields by the names filters and sorts use ([`crate::index::filter::FIELDS`], `spec.KEY`),
//! read from its folder as they are first asked for: the record, then its tags, its metrics'
//! summary and its frozen spec (with every default) only when a field needs them.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use ddp_trainer::spec::Spec;

use crate::Run;
use crate::index::entry::RunEntry;
use crate::index::filter::Value;
use crate::index::summary::Summary;

/// A spec as `dotted.key → value` (tables flattened, arrays kept whole).
pub type FlatSpec = BTreeMap<String, toml::Value>;

/// `{train: {lr: 0.1, scheduler: {kind: "step"}}}` → `train.lr = 0.1`, `train.scheduler.kind =
/// "step"`.
pub fn flatten(table: &toml::Table) -> FlatSpec {
    fn walk(prefix: &str, table: &toml::Table, out: &mut FlatSpec) {
        for (k, v) in table {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => walk(&key, t, out),
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

/// A frozen spec as a table of its keys (defaults included), what `spec.KEY` fields read.
pub type SpecTable = toml::Table;

/// `run`'s frozen spec as a [`SpecTable`]; `None` when it no longer loads.
pub fn spec_table(run: &Run) -> Option<SpecTable> {
    let spec = Spec::load(&run.spec_path(), &[]).ok()?;
    spec.to_toml().parse::<toml::Table>().ok()
}

/// A spec value as a field's [`Value`].
fn spec_value_of(v: &toml::Value) -> Value {
    match v {
        toml::Value::Integer(i) => Value::Num(*i as f64),
        toml::Value::Float(f) => Value::Num(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::String(s) => Value::Str(s.clone()),
        other => Value::Str(other.to_string()),
    }
}

/// Every leaf of a frozen spec as `(dotted key, value)`: the `spec.KEY` fields a run has.
pub fn spec_fields(table: &SpecTable) -> Vec<(String, Value)> {
    flatten(table)
        .into_iter()
        .map(|(k, v)| {
            let value = spec_value_of(&v);
            (k, value)
        })
        .collect()
}

/// One run's fields, each source read once.
pub struct RunFields<'a> {
    run: &'a Run,
    /// A run list's entry: its tags and metric digest, already read.
    entry: Option<&'a RunEntry>,
    tags: OnceCell<Vec<String>>,
    summary: OnceCell<Summary>,
    spec: OnceCell<Option<toml::Table>>,
}

impl<'a> RunFields<'a> {
    pub fn new(run: &'a Run) -> RunFields<'a> {
        RunFields {
            run,
            entry: None,
            tags: OnceCell::new(),
            summary: OnceCell::new(),
            spec: OnceCell::new(),
        }
    }

    /// The fields of a run list's entry (a dashboard's list): its tags and metrics as the
    /// entry has them, and its frozen spec as `spec` gives it (a cache of the caller's: frozen
    /// specs never change).
    pub fn of_entry(entry: &'a RunEntry, spec: Option<&toml::Table>) -> RunFields<'a> {
        let fields = RunFields {
            entry: Some(entry),
            ..RunFields::new(&entry.run)
        };
        let _ = fields.spec.set(spec.cloned());
        fields
    }

    /// The fields of `run` whose tags, summary and frozen spec are already read.
    pub fn known(
        run: &'a Run,
        tags: Vec<String>,
        summary: Summary,
        spec: Option<SpecTable>,
    ) -> RunFields<'a> {
        let fields = RunFields::new(run);
        let _ = fields.tags.set(tags);
        let _ = fields.summary.set(summary);
        let _ = fields.spec.set(spec);
        fields
    }

    /// A metric field from the entry's digest, or the run's summary.
    fn metric(&self, name: &str) -> Option<f64> {
        if let Some(e) = self.entry {
            let d = &e.metrics;
            return match name {
                "val_loss" => d.last_val_loss,
                "val_accuracy" => d.last_val_accuracy,
                "test_loss" => d.test_loss,
                "test_accuracy" => d.test_accuracy,
                "perplexity" => d.last_val_perplexity,
                "samples_per_sec" => d.samples_per_sec,
                "epoch" => Some(d.epochs_done as f64),
                "step" => Some(d.steps as f64),
                _ => None,
            };
        }
        let s = self.summary.get_or_init(|| Summary::of(self.run));
        match name {
            "val_loss" => s.final_val_loss,
            "val_accuracy" => s.final_val_accuracy,
            "test_loss" => s.test_loss,
            "test_accuracy" => s.test_accuracy,
            "perplexity" => s.final_val_perplexity,
            "samples_per_sec" => s.samples_per_sec,
            "epoch" => Some(s.epochs_done as f64),
            "step" => Some(s.steps as f64),
            _ => None,
        }
    }

    /// Field `name`'s value; `None` where the run has none (a metric not recorded yet, a spec
    /// that no longer loads).
    pub fn get(&self, name: &str) -> Option<Value> {
        let r = &self.run.record;
        let num = |x: Option<f64>| x.map(Value::Num);
        match name {
            "id" => Some(Value::Str(r.id.clone())),
            "experiment" => Some(Value::Str(r.experiment.clone())),
            "name" => r.name.clone().map(Value::Str),
            "status" => Some(Value::Str(r.status.to_string())),
            "sweep" => r.sweep.clone().map(Value::Str),
            "host" => Some(Value::Str(r.host.clone())),
            "replicas" => Some(Value::Num(r.replicas as f64)),
            "restarts" => Some(Value::Num(r.restarts as f64)),
            "created" => Some(Value::Num(r.created)),
            "tags" => Some(Value::List(match self.entry {
                Some(e) => e.tags.clone(),
                None => self.tags.get_or_init(|| self.run.tags()).clone(),
            })),
            "val_loss" | "val_accuracy" | "test_loss" | "test_accuracy" | "perplexity"
            | "samples_per_sec" | "epoch" | "step" => num(self.metric(name)),
            other => other
                .strip_prefix("spec.")
                .and_then(|key| self.spec_value(key)),
        }
    }

    /// The frozen spec's value of `key` (dotted), defaults included.
    fn spec_value(&self, key: &str) -> Option<Value> {
        let table = self.spec.get_or_init(|| spec_table(self.run)).as_ref()?;
        let mut parts = key.split('.');
        let mut v = table.get(parts.next()?)?;
        for part in parts {
            v = v.as_table()?.get(part)?;
        }
        Some(spec_value_of(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{MLP_SPEC, completed_run};

    #[test]
    fn fields_come_from_the_record_the_tags_and_the_frozen_spec() {
        let dir = tempfile::tempdir().unwrap();
        let run = completed_run(
            dir.path(),
            &MLP_SPEC.replace("epochs = 1", "epochs = 3\nlr = 0.02"),
        );
        std::fs::write(run.dir.join("tags"), "keep\nbest\n").unwrap();
        let f = RunFields::new(&run);
        assert_eq!(f.get("status"), Some(Value::Str("completed".into())));
        assert_eq!(f.get("spec.train.lr"), Some(Value::Num(0.02)));
        assert_eq!(f.get("spec.train.epochs"), Some(Value::Num(3.0)));
        // A default the spec file does not write.
        assert_eq!(f.get("spec.ddp.replicas"), Some(Value::Num(1.0)));
        assert_eq!(f.get("spec.model.name"), Some(Value::Str("mlp".into())));
        assert_eq!(
            f.get("tags"),
            Some(Value::List(vec!["keep".into(), "best".into()]))
        );
        // Nothing trained: no metric.
        assert_eq!(f.get("val_loss"), None);
        assert_eq!(f.get("spec.train.no_such"), None);
    }
}
