//! A run's fields by the names filters and sorts use ([`crate::filter::FIELDS`], `spec.KEY`),
//! read from its folder as they are first asked for: the record, then its tags, its metrics'
//! summary and its frozen spec (with every default) only when a field needs them.

use std::cell::OnceCell;

use ddp_trainer::spec::Spec;

use crate::Run;
use crate::filter::Value;
use crate::summary::Summary;

/// One run's fields, each source read once.
pub struct RunFields<'a> {
    run: &'a Run,
    tags: OnceCell<Vec<String>>,
    summary: OnceCell<Summary>,
    spec: OnceCell<Option<toml::Table>>,
}

impl<'a> RunFields<'a> {
    pub fn new(run: &'a Run) -> RunFields<'a> {
        RunFields {
            run,
            tags: OnceCell::new(),
            summary: OnceCell::new(),
            spec: OnceCell::new(),
        }
    }

    /// Field `name`'s value; `None` where the run has none (a metric not recorded yet, a spec
    /// that no longer loads).
    pub fn get(&self, name: &str) -> Option<Value> {
        let r = &self.run.record;
        let num = |x: Option<f64>| x.map(Value::Num);
        let summary = || self.summary.get_or_init(|| Summary::of(self.run));
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
            "tags" => Some(Value::List(
                self.tags.get_or_init(|| self.run.tags()).clone(),
            )),
            "val_loss" => num(summary().final_val_loss),
            "val_accuracy" => num(summary().final_val_accuracy),
            "test_loss" => num(summary().test_loss),
            "test_accuracy" => num(summary().test_accuracy),
            "perplexity" => num(summary().final_val_perplexity),
            "samples_per_sec" => num(summary().samples_per_sec),
            "epoch" => Some(Value::Num(summary().epochs_done as f64)),
            "step" => Some(Value::Num(summary().steps as f64)),
            other => other
                .strip_prefix("spec.")
                .and_then(|key| self.spec_value(key)),
        }
    }

    /// The frozen spec's value of `key` (dotted), defaults included.
    fn spec_value(&self, key: &str) -> Option<Value> {
        let table = self
            .spec
            .get_or_init(|| {
                let spec = Spec::load(&self.run.spec_path(), &[]).ok()?;
                spec.to_toml().parse::<toml::Table>().ok()
            })
            .as_ref()?;
        let mut parts = key.split('.');
        let mut v = table.get(parts.next()?)?;
        for part in parts {
            v = v.as_table()?.get(part)?;
        }
        Some(match v {
            toml::Value::Integer(i) => Value::Num(*i as f64),
            toml::Value::Float(f) => Value::Num(*f),
            toml::Value::Boolean(b) => Value::Bool(*b),
            toml::Value::String(s) => Value::Str(s.clone()),
            other => Value::Str(other.to_string()),
        })
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
